"""One write transaction on one connection, in as few round trips as the dialect allows.

Writes run on the server's event loop: a thread hand-off around blocking database I/O
cost more CPU than the statements (measured: a grpc.aio handler whose two round trips ran
on a thread cost 0.94 ms of server CPU per call, the same round trips on the loop 0.57).

MySQL (asyncmy): the connection allows multi-statements, so `run` sends any number of
statements in one COM_QUERY and reads one result per statement (a rowcount each), and
`commit` sends its statements and the COMMIT together. A job's report is then two round
trips however many rows it writes: the guarded UPDATE (whose matched-rows count decides
what happens next), then the event rows with the COMMIT. Values are escaped by `literal`,
PyMySQL's rules.

SQLite runs in the process: statements go one by one inside BEGIN IMMEDIATE ... COMMIT,
synchronously (they take microseconds), so a transaction never yields to the loop half-way.
"""

from __future__ import annotations

import sqlite3
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from jobwire.db import commit_markers
from jobwire.db.sql import RowShape, Statements, sqlite_param

Params = Mapping[str, Any]
# After `exc` broke a COMMIT that wrote `marker`: did the transaction commit? (jobwire.db.commit_markers)
Committed = Callable[[BaseException, str], Awaitable[bool]]


@dataclass(frozen=True, slots=True)
class Many:
    """One single-row INSERT ... VALUES (...) for many rows: a multi-row INSERT on MySQL.

    `sql` ends at its VALUES (...); `tail` (an ON DUPLICATE KEY UPDATE clause) follows all
    the rows on MySQL, and each row's statement on SQLite.
    """

    sql: str
    rows: Sequence[Params]
    tail: str = ""


Statement = tuple[str, Params] | Many


class Wire(ABC):
    """A transaction in progress. Created by `Database.transact`, which commits or rolls back."""

    def __init__(self, connection: Any, statements: Statements) -> None:
        self.connection = connection
        self.sql = statements
        self.open = False  # a transaction is in progress on the connection
        self.lost = False  # committed, but the connection broke on the way: not to be reused
        # The transaction's time, from the store's one clock (jobwire.db.clock): what every
        # statement of it compares with and writes. `Database.transact` sets it on each run.
        self.now = datetime.min

    async def rollback_open(self) -> None:
        """Roll back what was begun and not committed (a read-only or refused transaction)."""
        if self.open:
            await self.rollback()

    @abstractmethod
    async def fetch(self, sql: str, params: Params, shape: RowShape) -> list[dict[str, Any]]:
        """Rows of one SELECT (those of a clocked shape with the transaction's time as `db_now`)."""

    @abstractmethod
    async def run(self, batch: Sequence[Statement]) -> list[int]:
        """Run every statement (one round trip on MySQL); the matched-row count of each."""

    @abstractmethod
    async def commit(self, batch: Sequence[Statement] = ()) -> None:
        """Run `batch`, then COMMIT (one round trip on MySQL)."""

    @abstractmethod
    async def rollback(self) -> None: ...

    async def restart(self) -> None:
        """Roll back and begin again, on the same connection."""
        await self.rollback()


class MySQLWire(Wire):
    def __init__(self, connection: Any, statements: Statements, committed: Committed) -> None:
        super().__init__(connection, statements)
        self._cursor = connection.cursor()
        self._committed = committed

    async def fetch(self, sql: str, params: Params, shape: RowShape) -> list[dict[str, Any]]:
        self.open = True
        await self._cursor.execute(render(sql, params))
        return shape.rows(await self._cursor.fetchall(), self.now)

    async def run(self, batch: Sequence[Statement]) -> list[int]:
        return await self._send([_render(s) for s in batch])

    async def commit(self, batch: Sequence[Statement] = ()) -> None:
        marker = commit_markers.new_marker()
        try:
            await self._send([*(_render(s) for s in batch), commit_markers.insert_sql(marker), "COMMIT"])
        except Exception as exc:
            if not await self._committed(exc, marker):
                raise  # nothing of it happened: the transaction may run again
            self.lost = True  # it did happen: its answers stand, the connection goes
        self.open = False

    async def rollback(self) -> None:
        self.open = False
        await self.connection.rollback()

    async def _send(self, texts: list[str]) -> list[int]:
        if not texts:
            return []
        self.open = True
        cursor = self._cursor
        await cursor.execute(";\n".join(texts))
        counts = [cursor.rowcount]
        while await cursor.nextset():
            counts.append(cursor.rowcount)
        return counts


def _render(statement: Statement) -> str:
    if isinstance(statement, Many):
        head, _, values = statement.sql.partition(" VALUES ")
        rows = ",".join(render(values, row) for row in statement.rows)
        return f"{head} VALUES {rows}{statement.tail}"
    return render(*statement)


def render(sql: str, params: Params) -> str:
    """`sql` (`%(name)s` placeholders) with every value escaped as a MySQL literal."""
    return sql % {name: literal(value) for name, value in params.items()} if params else sql


# One dispatch per value. Strings are quoted with the backslash escapes MySQL needs inside
# '...' (the session's sql_mode leaves NO_BACKSLASH_ESCAPES off; the connection is always
# utf8mb4, whose multi-byte characters never contain these ASCII bytes): the backslash, the
# quote, and NUL. Three C-speed replaces: str.translate with two-character replacements (as
# PyMySQL escapes) was a tenth of the server's CPU on event snapshots. Bytes go as hex.


def _str(value: str) -> str:
    if "\\" in value:
        value = value.replace("\\", "\\\\")
    if "'" in value:
        value = value.replace("'", "\\'")
    if "\0" in value:
        value = value.replace("\0", "\\0")
    return "'" + value + "'"


def _float(value: float) -> str:
    text = repr(value)
    if text in ("inf", "-inf", "nan"):
        raise ValueError(f"{text} cannot be stored")
    return text if "e" in text else text + "e0"


def _datetime(value: datetime) -> str:
    return "'" + value.isoformat(sep=" ", timespec="microseconds" if value.microsecond else "seconds") + "'"


_LITERALS: dict[type, Callable[[Any], str]] = {
    str: _str,
    int: int.__repr__,
    bool: lambda value: "1" if value else "0",
    type(None): lambda value: "NULL",
    float: _float,
    bytes: lambda value: "X'" + value.hex() + "'",
    bytearray: lambda value: "X'" + value.hex() + "'",
    datetime: _datetime,
}


def literal(value: Any) -> str:
    try:
        return _LITERALS[type(value)](value)
    except KeyError:
        raise TypeError(f"no SQL literal for {type(value).__name__}") from None


class SQLiteWire(Wire):
    async def begin(self) -> None:
        # The write lock up front: a deferred BEGIN that upgrades later can fail with
        # SQLITE_BUSY without waiting, which would break "exactly one claim".
        self.connection.execute("BEGIN IMMEDIATE")
        self.open = True

    async def fetch(self, sql: str, params: Params, shape: RowShape) -> list[dict[str, Any]]:
        return shape.rows(self.connection.execute(sql, params).fetchall(), self.now)

    async def run(self, batch: Sequence[Statement]) -> list[int]:
        counts = []
        for statement in batch:
            if isinstance(statement, Many):
                sql = statement.sql + statement.tail
                cursor = self.connection.executemany(sql, statement.rows)
            else:
                cursor = self.connection.execute(*statement)
            counts.append(cursor.rowcount)
        return counts

    async def commit(self, batch: Sequence[Statement] = ()) -> None:
        await self.run(batch)
        self.connection.execute("COMMIT")
        self.open = False

    async def rollback(self) -> None:
        self.open = False
        if self.connection.in_transaction:
            self.connection.execute("ROLLBACK")

    async def restart(self) -> None:
        await self.rollback()
        await self.begin()


# Times bound as the text SQLAlchemy stores on SQLite (always six fractional digits): sqlite3
# calls the adapter for each datetime parameter, where a pass of our own over every parameter
# of every statement was ~4% of a report's instructions in the store.
sqlite3.register_adapter(datetime, sqlite_param)
