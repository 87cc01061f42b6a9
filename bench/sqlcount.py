"""Exact per-process counts of what PyMySQL sends, kept in a small memory-mapped file.

MariaDB's Questions counter is global: on a shared machine other sessions' statements
land in it too. Counting at the driver instead gives the statements one process sent:
every COM_QUERY (SELECT, INSERT, UPDATE, COMMIT, ROLLBACK, BEGIN, SET ...: what Questions
counts) and, apart, COM_PING (pool pre-ping round trips, which Questions does not count).

`install(path)` patches `pymysql.connections.Connection._execute_command` in this
process (one increment per command), counting into `path.<pid>`; `read(path)` sums the
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


def install(path: Path) -> None:
    mine = path.with_name(f"{path.name}.{os.getpid()}")
    mine.write_bytes(b"\0" * _SIZE)
    f = open(mine, "r+b")  # noqa: SIM115 - lives as long as the process
    mem = mmap.mmap(f.fileno(), _SIZE)
    counts = [0] * len(FIELDS)
    lock = threading.Lock()
    original = pymysql.connections.Connection._execute_command

    def counted(self: Any, command: int, sql: Any) -> Any:
        if command == COMMAND.COM_QUERY:
            head = (sql[:8].decode(errors="replace") if isinstance(sql, bytes) else str(sql)[:8]).upper()
            bump = (0, _KINDS[head]) if head in _KINDS else (0,)
        elif command == COMMAND.COM_PING:
            bump = (1,)
        else:
            bump = ()
        if bump:
            with lock:
                for index in bump:
                    counts[index] += 1
                struct.pack_into(_FORMAT, mem, 0, *counts)
        return original(self, command, sql)

    pymysql.connections.Connection._execute_command = counted  # type: ignore[method-assign]
