"""The database handle: engine setup per dialect and transactions that retry what is safe.

Two kinds of transaction, one retry discipline:

* `await transact(fn)` hands `fn` a `Wire` on the event loop (jobwire.db.writer): every
  state change goes this way, as prepared text in as few round trips as the dialect allows;
* `read(fn)` / `write(fn)` hand `fn` a SQLAlchemy connection, on a thread: queries built
  per call (filters, pages, the feed) and the housekeeping writes that are no state change.

Deadlocks (1213), lock-wait timeouts (1205), lost connections and optimistic-concurrency
conflicts retry the whole transaction, so no caller ever sees half a change.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.dialects.sqlite.base import SQLiteCompiler
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DataError, DBAPIError, IntegrityError, OperationalError

from jobwire.db.clock import Clock, DbClock, LocalClock
from jobwire.db.sql import Statements, statements_for
from jobwire.db.wire import Wire
from jobwire.db.writer import (
    DISCONNECT_MYSQL,
    MAX_TRIES,
    RETRYABLE_MYSQL,
    Connections,
    MySQLConnections,
    RetryTransaction,
    SQLiteConnections,
    transact,
)
from jobwire.domain.errors import Conflict, InvalidArgument, StoreUnavailable
from jobwire.observe import tracing

log = logging.getLogger(__name__)
T = TypeVar("T")

__all__ = ["Database", "RetryTransaction", "transaction_time"]

_TIME = "jobwire_time"  # the execution option that carries a transaction's time (`transaction_time`)


def transaction_time(conn: Connection) -> datetime:
    """The time of `conn`'s transaction: the store's clock, read once as it began (jobwire.db.clock)."""
    now = conn.get_execution_options()[_TIME]
    assert isinstance(now, datetime)
    return now


class Database:
    """One engine and the transaction discipline around it."""

    def __init__(self, url: str, *, pool_size: int = 8, echo: bool = False) -> None:
        self.url = sa.make_url(url)
        self.is_mysql = self.url.get_backend_name() in ("mysql", "mariadb")
        self._traced = {"db.system": "mysql" if self.is_mysql else "sqlite"}  # each transaction's span
        self.engine = _mysql_engine(url, pool_size, echo) if self.is_mysql else _sqlite_engine(url, echo)
        self.statements: Statements = statements_for("mysql" if self.is_mysql else "sqlite")
        # The one source of every time the store decides by (jobwire.db.clock); a test may put
        # a clock it moves in its place (tests/clocks.py) before the first transaction.
        self.clock: Clock = DbClock(self._read_clock) if self.is_mysql else LocalClock()
        self.writes: Connections = (
            MySQLConnections(self.url, self.statements, pool_size)
            if self.is_mysql
            else SQLiteConnections(Path(self.url.database) if self.url.database else None, self.statements)
        )
        self.reached_at = float("-inf")  # monotonic time of the last statement that worked

    def reached(self) -> None:
        """Note that the database just answered (a health check need not ask it again)."""
        self.reached_at = time.monotonic()

    async def transact(self, fn: Callable[[Wire], Awaitable[T]]) -> T:
        """Run `fn` in one write transaction on the event loop (jobwire.db.writer).

        Each run of `fn` (a rerun after a deadlock too) finds its time in `wire.now`.
        """

        async def timed(wire: Wire) -> T:
            wire.now = self.clock.now()
            return await fn(wire)

        with tracing.span("jobwire.db transact", self._traced):
            result = await transact(self.writes, timed)
        self.reached()
        return result

    @property
    def integrity_error(self) -> type[Exception]:
        """What the write driver raises when a unique index refuses a row."""
        return self.writes.integrity_error

    def _read_clock(self) -> datetime:
        """The database server's clock (MySQL): the one read that takes no time from `clock`, which it sets."""
        now = self._run(
            lambda conn: conn.execute(sa.text("SELECT UTC_TIMESTAMP(6)")).scalar_one(), immediate=False, timed=False
        )
        assert isinstance(now, datetime)
        return now

    def write(self, fn: Callable[[Connection], T]) -> T:
        """Run `fn` in one write transaction, retrying it whole when that is safe."""
        return self._run(fn, immediate=True, timed=True)

    def read(self, fn: Callable[[Connection], T]) -> T:
        """Run `fn` in one read transaction; `transaction_time(conn)` is its time."""
        return self._run(fn, immediate=False, timed=True)

    def ping(self, recent: float = 0.0) -> bool:
        """Reachable? True at once if it answered within `recent` seconds; else one round trip.

        On MySQL the round trip reads (and so calibrates) the database clock.
        """
        if time.monotonic() - self.reached_at < recent:
            return True
        try:
            if self.is_mysql:
                self.clock.calibrate()
            else:
                self.read(lambda conn: conn.execute(sa.text("SELECT 1")))
            return True
        except (DBAPIError, StoreUnavailable):
            return False

    def dispose(self) -> None:
        self.engine.dispose()

    async def close(self) -> None:
        """Close the write connections (on the loop that used them), then the engine."""
        await self.writes.close()
        self.dispose()

    def _run(self, fn: Callable[[Connection], T], *, immediate: bool, timed: bool) -> T:
        with tracing.span("jobwire.db write" if immediate else "jobwire.db read", self._traced):
            return self._run_untraced(fn, immediate=immediate, timed=timed)

    def _run_untraced(self, fn: Callable[[Connection], T], *, immediate: bool, timed: bool) -> T:
        for attempt in range(1, MAX_TRIES + 1):
            try:
                options: dict[str, Any] = {"jobwire_immediate": immediate}
                if timed:  # before connecting: on MySQL the clock may read the database, on a connection of its own
                    options[_TIME] = self.clock.now()
                with self.engine.connect() as conn:
                    conn = conn.execution_options(**options)
                    with conn.begin():
                        result = fn(conn)
                self.reached()
                return result
            except RetryTransaction:
                if attempt == MAX_TRIES:
                    raise Conflict() from None
            except DBAPIError as exc:
                if not self._retryable(exc) or attempt == MAX_TRIES:
                    raise self._translate(exc) from exc
                log.info("retrying transaction after %s", _code(exc))
            time.sleep(min(0.2, 0.005 * 2**attempt) * random.uniform(0.5, 1.0))
        raise AssertionError("unreachable")

    def _retryable(self, exc: DBAPIError) -> bool:
        if exc.connection_invalidated:
            return True
        code = _code(exc)
        if self.is_mysql:
            return code in RETRYABLE_MYSQL or code in DISCONNECT_MYSQL
        return isinstance(exc, OperationalError) and "locked" in str(exc.orig)

    def _translate(self, exc: DBAPIError) -> Exception:
        """A canonical error for what escaped the retries; the cause stays chained for logs."""
        # Lock conflicts first: PyMySQL raises deadlocks (1213) as OperationalError too.
        if _code(exc) in RETRYABLE_MYSQL or isinstance(exc, IntegrityError):
            return Conflict()
        if isinstance(exc, OperationalError) or exc.connection_invalidated:
            return StoreUnavailable()
        if isinstance(exc, DataError):
            # Inputs are validated before they reach SQL; a value the column still refuses
            # is too large for the store, which is the caller's to fix, not a server fault.
            return InvalidArgument("request", "a value is too large to store")
        return exc


def _code(exc: DBAPIError) -> int | None:
    args = getattr(exc.orig, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


def _mysql_engine(url: str, pool_size: int, echo: bool) -> Engine:
    # No ping on checkout and no ROLLBACK on return: every use is one `_run` transaction that
    # ends itself and reruns whole on a lost connection, so both would be a round trip each
    # per transaction (12 of 41 statements per job, measured by bench/throughput.py).
    engine = sa.create_engine(
        url,
        echo=echo,
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_pre_ping=False,
        pool_reset_on_return=None,
        pool_recycle=3600,
        pool_use_lifo=True,
        isolation_level="READ COMMITTED",  # gap locks under REPEATABLE READ deadlock claims
        connect_args={"charset": "utf8mb4", "connect_timeout": 5},
    )

    @event.listens_for(engine, "connect")
    def _session(dbapi_conn: Any, _record: Any) -> None:
        with dbapi_conn.cursor() as cur:
            cur.execute(
                "SET SESSION sql_mode = 'STRICT_ALL_TABLES,NO_ZERO_DATE,NO_ZERO_IN_DATE,"
                "ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION', time_zone = '+00:00',"
                " innodb_lock_wait_timeout = 5"
            )

    return engine


class _HintedSQLiteCompiler(SQLiteCompiler):
    """SQLite's compiler with the table hints a query names for SQLite (`INDEXED BY ix`), which
    SQLAlchemy's own drops: ListJobs reads down the index it names on both databases."""

    def get_from_hint_text(self, table: Any, text: str | None) -> str | None:
        return text


def _sqlite_engine(url: str, echo: bool) -> Engine:
    engine = sa.create_engine(url, echo=echo, connect_args={"check_same_thread": False, "timeout": 30})
    engine.dialect.statement_compiler = _HintedSQLiteCompiler

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we issue BEGIN ourselves, below
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA busy_timeout=30000")
        cur.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        # Writers take the write lock up front: a deferred BEGIN that upgrades later can
        # fail with SQLITE_BUSY without waiting, which would break "exactly one claim".
        immediate = conn.get_execution_options().get("jobwire_immediate", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine
