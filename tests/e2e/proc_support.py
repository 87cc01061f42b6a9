"""Processes as Linux's /proc shows them: a process's children, whether one still runs."""

from __future__ import annotations

import os


def children(pid: int) -> list[int]:
    """The child processes of `pid`, oldest pid first; none once it is gone."""
    found: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children", encoding="ascii") as f:
                found += [int(child) for child in f.read().split()]
    except OSError:
        pass
    return sorted(found)


def alive(pid: int) -> bool:
    """True while `pid` runs (a zombie, exited but not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
