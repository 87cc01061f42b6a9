"""The write path escapes values itself (jobwire.db.wire.literal): every value must come back
from MariaDB exactly as sent, whatever characters it holds (an escaping bug is an injection)."""

from __future__ import annotations

import random
from datetime import datetime

import pytest

from jobwire.db.engine import Database
from jobwire.db.sql import RowShape
from jobwire.db.wire import literal

pytestmark = pytest.mark.mysql

TRICKY = [
    "", "plain", "it's", "''", "\\", "\\'", "x\\\\'y", "nul\0byte", 'dq"', "back\\slash\\",
    "é中😀", "\n\r\t\x1a", "%s %(name)s %%", "'; DROP TABLE job; --", "\\0\\n", "\x7f\x80",
]  # fmt: skip


def _values() -> list[object]:
    chosen = random.Random(8)  # a fixed seed: a failure is repeatable
    alphabet = ["'", '"', "\\", "\0", "\n", "%", "é", "中", "😀", "a", " ", "\x1a", "`"]
    noise = ["".join(chosen.choice(alphabet) for _ in range(chosen.randint(1, 40))) for _ in range(300)]
    numbers = [0, -1, 2**63 - 1, -(2**63), 1.5, -0.25, 1e-7, True, False, None]
    blobs = [bytes(range(256)), b"", b"'\\\0"]
    times = [datetime(2026, 11, 30, 12, 0, 0), datetime(2026, 11, 30, 12, 0, 0, 123456), datetime(1, 1, 1)]
    return [*TRICKY, *noise, *numbers, *blobs, *times]


async def test_every_value_comes_back_as_sent(mysql_url: str) -> None:
    db = Database(mysql_url)
    shape = RowShape([], ["v"], db.statements.dialect)
    wrong = []

    async def check(wire):  # type: ignore[no-untyped-def]
        for value in _values():
            sql = literal(value)
            if isinstance(value, datetime):  # a quoted time is a string until the column makes it one
                sql = f"CAST({sql} AS DATETIME(6))"
            (row,) = await wire.fetch(f"SELECT {sql} AS v", {}, shape)
            got = row["v"]
            if isinstance(value, bool):
                got = bool(got)
            if got != value:
                wrong.append((value, got))

    await db.transact(check)
    await db.close()
    assert not wrong, wrong[:5]


def test_a_value_it_cannot_write_is_refused() -> None:
    for value in (float("nan"), float("inf"), object()):
        with pytest.raises((TypeError, ValueError)):
            literal(value)
