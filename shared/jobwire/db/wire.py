"""One write transaction on one DBAPI connection, in as few round trips as the dialect allows.

MySQL: the connection is opened with CLIENT.MULTI_STATEMENTS, so `run` sends any number
of statements in one COM_QUERY and reads one result per statement (a rowcount each), and
`commit` sends its statements and the COMMIT together. A job's report is then two round
trips however many rows it writes: the guarded UPDATE (whose matched-rows count decides
what happens next), then the event rows with the COMMIT. Values are escaped by PyMySQL
(`mogrify`), exactly as a parameterised execute would escape them.

SQLite runs in the process: statements go one by one inside BEGIN IMMEDIATE ... COMMIT.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jobwire.db.sql import RowShape, Statements, sqlite_param

Params = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Many:
    """One single-row INSERT ... VALUES (...) for many rows: a multi-row INSERT on MySQL."""

    sql: str
    rows: Sequence[Params]


Statement = tuple[str, Params] | Many


class Wire(ABC):
    """A transaction in progress. Created by `Database.transact`, which commits or rolls back."""

    def __init__(self, dbapi_connection: Any, statements: Statements) -> None:
        self.connection = dbapi_connection
        self.sql = statements
        self.open = False  # a transaction is in progress on the connection

    def rollback_open(self) -> None:
        """Roll back what was begun and not committed (a read-only or refused transaction)."""
        if self.open:
            self.rollback()

    @abstractmethod
    def fetch(self, sql: str, params: Params, shape: RowShape) -> list[dict[str, Any]]:
        """Rows of one SELECT."""

    @abstractmethod
    def run(self, batch: Sequence[Statement]) -> list[int]:
        """Run every statement (one round trip on MySQL); the matched-row count of each."""

    @abstractmethod
    def commit(self, batch: Sequence[Statement] = ()) -> None:
        """Run `batch`, then COMMIT (one round trip on MySQL)."""

    @abstractmethod
    def rollback(self) -> None: ...

    def restart(self) -> None:
        """Roll back and begin again, on the same connection."""
        self.rollback()


class MySQLWire(Wire):
    def __init__(self, dbapi_connection: Any, statements: Statements) -> None:
        super().__init__(dbapi_connection, statements)
        self._cursor = dbapi_connection.cursor()

    def fetch(self, sql: str, params: Params, shape: RowShape) -> list[dict[str, Any]]:
        self.open = True
        self._cursor.execute(sql, params)
        return shape.rows(self._cursor.fetchall())

    def run(self, batch: Sequence[Statement]) -> list[int]:
        return self._send([self._render(s) for s in batch])

    def commit(self, batch: Sequence[Statement] = ()) -> None:
        self._send([*(self._render(s) for s in batch), "COMMIT"])
        self.open = False

    def rollback(self) -> None:
        self.open = False
        self.connection.rollback()

    def _send(self, texts: list[str]) -> list[int]:
        if not texts:
            return []
        self.open = True
        cursor = self._cursor
        cursor.execute(";\n".join(texts))
        counts = [cursor.rowcount]
        while cursor.nextset():
            counts.append(cursor.rowcount)
        return counts

    def _render(self, statement: Statement) -> str:
        mogrify = self._cursor.mogrify
        if isinstance(statement, Many):
            head, _, values = statement.sql.partition(" VALUES ")
            return f"{head} VALUES " + ",".join(mogrify(values, row) for row in statement.rows)
        sql, params = statement
        return str(mogrify(sql, params))


class SQLiteWire(Wire):
    def __init__(self, dbapi_connection: Any, statements: Statements) -> None:
        super().__init__(dbapi_connection, statements)
        # The write lock up front: a deferred BEGIN that upgrades later can fail with
        # SQLITE_BUSY without waiting, which would break "exactly one claim".
        dbapi_connection.execute("BEGIN IMMEDIATE")
        self.open = True

    def fetch(self, sql: str, params: Params, shape: RowShape) -> list[dict[str, Any]]:
        return shape.rows(self.connection.execute(sql, _bind(params)).fetchall())

    def run(self, batch: Sequence[Statement]) -> list[int]:
        counts = []
        for statement in batch:
            if isinstance(statement, Many):
                cursor = self.connection.executemany(statement.sql, [_bind(r) for r in statement.rows])
            else:
                cursor = self.connection.execute(statement[0], _bind(statement[1]))
            counts.append(cursor.rowcount)
        return counts

    def commit(self, batch: Sequence[Statement] = ()) -> None:
        self.run(batch)
        self.connection.execute("COMMIT")
        self.open = False

    def rollback(self) -> None:
        self.open = False
        if self.connection.in_transaction:
            self.connection.execute("ROLLBACK")

    def restart(self) -> None:
        self.rollback()
        self.connection.execute("BEGIN IMMEDIATE")
        self.open = True


def _bind(params: Params) -> dict[str, Any]:
    return {k: sqlite_param(v) for k, v in params.items()}
