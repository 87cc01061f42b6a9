"""`make run`'s launcher (python -m jobwire.devrun) as real processes: it owns its two children.

Security review, finding 13: SIGTERM to the launcher left the example worker running, and
the launcher did not notice when its server died.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from proc_support import alive, children

pytestmark = pytest.mark.timeout(90)
READY = "Ctrl-C (or SIGTERM) stops both processes"


def _gone_within(pids: list[int], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(alive(p) for p in pids):
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def launcher(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], list[int]]]:
    """The launcher on port 0 and a fresh SQLite file, once it printed how to use it."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jobwire.devrun",
            "--listen",
            "127.0.0.1:0",
            "--database-url",
            f"sqlite:///{tmp_path}/j.db",
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "JOBWIRE_PROCESSES": "1"},
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if READY in line:
            break
    else:
        pytest.fail(f"the launcher ended early with code {proc.wait()}")
    server, worker = children(proc.pid)
    try:
        yield proc, [server, worker]
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in (server, worker):
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_sigterm_stops_the_server_and_the_example_worker(launcher: tuple[subprocess.Popen[str], list[int]]) -> None:
    proc, children = launcher
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0
    assert _gone_within(children, 5), "a child outlived the launcher"


def test_a_dead_server_stops_the_launcher_and_its_worker(launcher: tuple[subprocess.Popen[str], list[int]]) -> None:
    proc, (server, worker) = launcher
    os.kill(server, signal.SIGKILL)
    assert proc.wait(timeout=60) == 1
    assert proc.stdout is not None
    assert "the server exited (code -9); stopping" in proc.stdout.read()
    assert _gone_within([worker], 5), "the example worker outlived the launcher"
