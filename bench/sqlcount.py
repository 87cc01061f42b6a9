"""Exact per-process counts of what PyMySQL sends, kept in a small memory-mapped file.

MariaDB's Questions counter is global: on a shared machine other sessions' statements
land in it too. Counting at the driver instead gives the statements one process sent:
every COM_QUERY (SELECT, INSERT, UPDATE, COMMIT, ROLLBACK, BEGIN, SET ...: what Questions
counts) and, apart, COM_PING (pool pre-ping round trips, which Questions does not count).

`install(path)` patches `_execute_command` of PyMySQL's and asyncmy's connections in
this process (one increment per command), counting into `path.<pid>`; `read(path)` sums the
counts of every process that installed it (a jobwire family's children each count their own).
"""

from __future__ import annotations

import mmap
import os
import struct
import threading
from pathlib import Path
from typing import Any

import pymysql.connections
from pymysql.constants import COMMAND

FIELDS = ("query", "ping", "commit", "rollback", "begin")
_FORMAT = "<" + "q" * len(FIELDS)
_SIZE = struct.calcsize(_FORMAT)
_KINDS = {"COMMIT": 2, "ROLLBACK": 3, "BEGIN": 4}


def read(path: Path) -> dict[str, int]:
    total = dict.fromkeys(FIELDS, 0)
    for each in path.parent.glob(f"{path.name}.*"):
        data = each.read_bytes()[:_SIZE]
        if len(data) == _SIZE:
            for name, value in zip(FIELDS, struct.unpack(_FORMAT, data), strict=True):
                total[name] += value
    return total


def clear(path: Path) -> None:
    for each in path.parent.glob(f"{path.name}.*"):
        each.unlink(missing_ok=True)


def _bumps(command: int, sql: Any) -> tuple[int, ...]:
    """Which counters one command bumps: a query (and its kind, at its head or, for a
    multi-statement that ends a transaction, its COMMIT at the end), or a ping."""
    if command == COMMAND.COM_QUERY:
        # Only the ends are looked at: decoding a whole multi-statement costs the server it counts.
        head, tail = (
            (bytes(sql[:8]).decode(errors="replace"), bytes(sql[-8:]).decode(errors="replace"))
            if isinstance(sql, bytes | bytearray)
            else (str(sql)[:8], str(sql)[-8:])
        )
        if head.upper() in _KINDS:
            return (0, _KINDS[head.upper()])
        return (0, _KINDS["COMMIT"]) if tail.rstrip().upper().endswith("COMMIT") else (0,)
    return (1,) if command == COMMAND.COM_PING else ()


def install(path: Path) -> None:
    """Count what PyMySQL (reads) and asyncmy (the write path) send, in this process."""
    mine = path.with_name(f"{path.name}.{os.getpid()}")
    mine.write_bytes(b"\0" * _SIZE)
    f = open(mine, "r+b")  # noqa: SIM115 - lives as long as the process
    mem = mmap.mmap(f.fileno(), _SIZE)
    counts = [0] * len(FIELDS)
    lock = threading.Lock()

    def bump(command: int, sql: Any) -> None:
        indexes = _bumps(command, sql)
        if indexes:
            with lock:
                for index in indexes:
                    counts[index] += 1
                struct.pack_into(_FORMAT, mem, 0, *counts)

    original = pymysql.connections.Connection._execute_command

    def counted(self: Any, command: int, sql: Any) -> Any:
        bump(command, sql)
        return original(self, command, sql)

    pymysql.connections.Connection._execute_command = counted  # type: ignore[method-assign]
    try:
        import asyncmy.connection
    except ImportError:
        return
    original_async = asyncmy.connection.Connection._execute_command

    async def counted_async(self: Any, command: int, sql: Any) -> Any:
        bump(command, sql)
        return await original_async(self, command, sql)

    asyncmy.connection.Connection._execute_command = counted_async
