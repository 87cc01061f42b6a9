"""The write side of the database: connections on the event loop, transactions that retry.

Every state change is one `transact(fn)`: `fn` gets a `Wire` in a fresh transaction and
commits through it. Deadlocks (1213), lock-wait timeouts (1205), lost connections, a busy
SQLite and optimistic-concurrency conflicts rerun `fn` whole, so no caller ever sees half
a change; what escapes the retries becomes a canonical error.

MySQL: a small pool of asyncmy connections, the most recently used first (a warm socket
and buffers). SQLite: one connection; its transactions run without yielding to the loop,
and a lock held by another process is waited for with an asynchronous backoff, never by
blocking the loop in busy_timeout.
"""

from __future__ import annotations

import asyncio
import logging
import random
import sqlite3
import ssl
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy as sa

from jobwire.db import commit_markers
from jobwire.db.sql import Statements
from jobwire.db.wire import MySQLWire, SQLiteWire, Wire
from jobwire.domain.errors import CommitUnknown, Conflict, InvalidArgument, StoreUnavailable

log = logging.getLogger("jobwire.db.engine")
T = TypeVar("T")

RETRYABLE_MYSQL = {1205, 1213}  # lock wait timeout, deadlock
DISCONNECT_MYSQL = {2003, 2006, 2013, 2055, 1927, 4031}
CANNOT_CONNECT = 2003  # the connection was refused: the database is not running there
MAX_TRIES = 6
CONFIRM_BUDGET_S = 15.0  # how long a lost COMMIT reply is looked into before "unknown"
CONFIRM_PAUSE_S = 0.25
BUSY_BUDGET_S = 10.0  # how long a write waits for another SQLite writer before giving up
SESSION_SQL = (
    "SET SESSION sql_mode = 'STRICT_ALL_TABLES,NO_ZERO_DATE,NO_ZERO_IN_DATE,ERROR_FOR_DIVISION_BY_ZERO,"
    "NO_ENGINE_SUBSTITUTION', time_zone = '+00:00', innodb_lock_wait_timeout = 5;"
    # gap locks under REPEATABLE READ deadlock claims against inserts
    " SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED"
)


class RetryTransaction(Exception):
    """Raised inside a transaction when an optimistic guard lost: run it again."""


class Connections(ABC):
    """Where write transactions get a connection, and what its driver's errors mean."""

    integrity_error: type[Exception]

    @abstractmethod
    async def acquire(self) -> Wire: ...

    @abstractmethod
    def release(self, wire: Wire, *, broken: bool) -> None: ...

    @abstractmethod
    def broken(self, exc: BaseException) -> bool:
        """The connection cannot be used again."""

    @abstractmethod
    def retryable(self, exc: BaseException) -> bool:
        """The transaction may simply run again."""

    @abstractmethod
    def translate(self, exc: BaseException) -> Exception:
        """The canonical error for what escaped the retries."""

    @abstractmethod
    async def close(self) -> None: ...


async def transact(connections: Connections, fn: Callable[[Wire], Awaitable[T]]) -> T:
    """Run `fn` in one transaction, rerunning it whole when that is safe (see the module doc)."""
    started = time.monotonic()
    attempt = 0
    while True:
        attempt += 1
        try:
            wire = await connections.acquire()
        except Exception as exc:  # no connection, or (SQLite) another writer holds the lock
            if not _again(connections, exc, attempt, started):
                raise connections.translate(exc) from exc
            await _pause(attempt)
            continue
        broken = False
        try:
            result = await fn(wire)
            await wire.rollback_open()
            broken = wire.lost
            return result
        except RetryTransaction:
            broken = await _end(wire, connections)
            if attempt >= MAX_TRIES:
                raise Conflict() from None
        except Exception as exc:
            broken = connections.broken(exc) or await _end(wire, connections)
            if not _again(connections, exc, attempt, started):
                raise connections.translate(exc) from exc
            log.info("retrying transaction after %s", _code(exc) or type(exc).__name__)
        except BaseException:
            broken = True  # cancelled mid-transaction: the connection's state is unknown
            raise
        finally:
            connections.release(wire, broken=broken)
        await _pause(attempt)


def _again(connections: Connections, exc: Exception, attempt: int, started: float) -> bool:
    """Run the transaction again? A busy SQLite is waited for up to BUSY_BUDGET_S."""
    if not connections.retryable(exc):
        return False
    busy = isinstance(exc, sqlite3.OperationalError) and time.monotonic() - started < BUSY_BUDGET_S
    return attempt < MAX_TRIES or busy


async def _end(wire: Wire, connections: Connections) -> bool:
    """Roll back a failed transaction; True if the connection broke doing it."""
    try:
        await wire.rollback()
        return False
    except Exception as exc:  # noqa: BLE001 - whatever broke, the connection is not reused
        log.debug("rollback failed: %s", exc)
        return True


async def _pause(attempt: int) -> None:
    await asyncio.sleep(min(0.2, 0.005 * 2 ** min(attempt, 6)) * random.uniform(0.5, 1.0))


def _code(exc: BaseException | None) -> int | None:
    args = getattr(exc, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


class MySQLConnections(Connections):
    def __init__(self, url: sa.URL, statements: Statements, size: int) -> None:
        import asyncmy.errors

        self._errors = asyncmy.errors
        self.integrity_error = asyncmy.errors.IntegrityError
        self._url, self._statements, self._size = url, statements, size
        self._idle: list[Any] = []
        self._slots: asyncio.Semaphore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def acquire(self) -> Wire:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # connections belong to the loop that opened them
            self._loop, self._idle, self._slots = loop, [], asyncio.Semaphore(self._size)
        assert self._slots is not None
        await self._slots.acquire()
        try:
            connection = self._idle.pop() if self._idle else await self._connect()
        except BaseException:
            self._slots.release()
            raise
        return MySQLWire(connection, self._statements, self._committed)

    async def _connect(self) -> Any:
        import asyncmy
        from asyncmy.constants import CLIENT

        url, query = self._url, dict(self._url.query)
        connection = await asyncmy.connect(
            host=url.host or "127.0.0.1", port=url.port or 3306, user=url.username or "",
            password=url.password or "", database=url.database, charset="utf8mb4",  # what `literal` assumes
            unix_socket=query.get("unix_socket"), ssl=_ssl(query), connect_timeout=5, autocommit=False,
            # FOUND_ROWS: rowcount counts matched rows. MULTI_STATEMENTS: a change in one round trip.
            client_flag=CLIENT.FOUND_ROWS | CLIENT.MULTI_STATEMENTS,
        )  # fmt: skip
        cursor = connection.cursor()
        await cursor.execute(SESSION_SQL)
        while await cursor.nextset():
            pass
        return connection

    async def _committed(self, exc: BaseException, marker: str) -> bool:
        """After `exc` broke a COMMIT: did it take effect? (jobwire.db.commit_markers)

        A statement's own error stops MySQL before the COMMIT, so only a lost connection
        leaves the answer open; it is asked on a new connection until CONFIRM_BUDGET_S runs
        out or the database refuses connections, and then the caller is told the truth:
        nobody knows yet.
        """
        if not self.broken(exc):
            return False
        deadline = time.monotonic() + CONFIRM_BUDGET_S
        while True:
            try:
                connection = await self._connect()
                try:
                    cursor = connection.cursor()
                    await cursor.execute(commit_markers.lookup_sql(marker))
                    found = bool(await cursor.fetchall())
                    await connection.rollback()
                finally:
                    connection.close()
            except Exception as again:  # noqa: BLE001 - any failure here leaves the answer open
                # Refused: no database is there to ask. Waiting for it would hold this write
                # lane, and every write of the process queued behind it, for the whole budget.
                if _code(again) == CANNOT_CONNECT or time.monotonic() > deadline:
                    log.error("a COMMIT's reply was lost and the database cannot say whether it happened: %s", again)
                    raise CommitUnknown() from exc
                await asyncio.sleep(CONFIRM_PAUSE_S)
                continue
            log.warning("a COMMIT's reply was lost (%s); the transaction %s", _code(exc) or type(exc).__name__,
                        "committed" if found else "did not commit and runs again")  # fmt: skip
            return found

    def release(self, wire: Wire, *, broken: bool) -> None:
        if broken:
            wire.connection.close()
        else:
            self._idle.append(wire.connection)
        if self._slots is not None:
            self._slots.release()

    def broken(self, exc: BaseException) -> bool:
        code = _code(exc)
        return code in DISCONNECT_MYSQL or isinstance(exc, self._errors.InterfaceError | OSError | EOFError)

    def retryable(self, exc: BaseException) -> bool:
        return _code(exc) in RETRYABLE_MYSQL or self.broken(exc)

    def translate(self, exc: BaseException) -> Exception:
        errors = self._errors
        if _code(exc) in RETRYABLE_MYSQL or isinstance(exc, errors.IntegrityError):
            return Conflict()
        if self.broken(exc) or isinstance(exc, errors.OperationalError):
            return StoreUnavailable()
        if isinstance(exc, errors.DataError):
            # Inputs are validated before they reach SQL; a value the column still refuses
            # is too large for the store, which is the caller's to fix, not a server fault.
            return InvalidArgument("request", "a value is too large to store")
        return exc if isinstance(exc, Exception) else RuntimeError(str(exc))

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()


def _ssl(query: dict[str, Any]) -> ssl.SSLContext | None:
    """TLS to MySQL from the URL's ssl_ca / ssl_cert / ssl_key, as PyMySQL reads them."""
    if not any(k in query for k in ("ssl_ca", "ssl_cert", "ssl_key")):
        return None
    context = ssl.create_default_context(cafile=query.get("ssl_ca"))
    if "ssl_cert" in query:
        context.load_cert_chain(query["ssl_cert"], query.get("ssl_key"))
    return context


class SQLiteConnections(Connections):
    integrity_error = sqlite3.IntegrityError

    def __init__(self, path: Path | None, statements: Statements) -> None:
        self._path, self._statements = path, statements
        self._connection: sqlite3.Connection | None = None
        self._lock: asyncio.Lock | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def acquire(self) -> Wire:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._loop, self._lock = loop, asyncio.Lock()
        assert self._lock is not None
        await self._lock.acquire()
        try:
            if self._connection is None:
                self._connection = self._open()
            wire = SQLiteWire(self._connection, self._statements)
            await wire.begin()
        except BaseException:
            self._lock.release()
            raise
        return wire

    def _open(self) -> sqlite3.Connection:
        target = str(self._path) if self._path is not None else ":memory:"
        connection = sqlite3.connect(target, isolation_level=None, check_same_thread=False)
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=NORMAL")
        connection.execute("PRAGMA busy_timeout=0")  # waiting is transact's, asynchronously
        return connection

    def release(self, wire: Wire, *, broken: bool) -> None:
        if broken and self._connection is not None:
            self._connection.close()
            self._connection = None
        if self._lock is not None and self._lock.locked():
            self._lock.release()

    def broken(self, exc: BaseException) -> bool:
        return False

    def retryable(self, exc: BaseException) -> bool:
        return isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc)

    def translate(self, exc: BaseException) -> Exception:
        if isinstance(exc, sqlite3.IntegrityError):
            return Conflict()
        if isinstance(exc, sqlite3.OperationalError):
            return StoreUnavailable()
        if isinstance(exc, sqlite3.DataError):
            return InvalidArgument("request", "a value is too large to store")
        return exc if isinstance(exc, Exception) else RuntimeError(str(exc))

    async def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None
