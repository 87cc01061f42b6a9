"""Fixtures every level shares: database URLs for SQLite and MariaDB/MySQL, in-process servers.

MySQL tests skip on a laptop without a server, but fail when JOBWIRE_REQUIRE_MYSQL=1
(CI sets it): a CI run that silently skipped them would prove nothing about MySQL.
"""

from __future__ import annotations

import gc
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from databases import MysqlTemplate, empty_mysql_database, migrated_sqlite_template, sqlite_copy
from served import Served, start_server

MYSQL_SERVER_URL = os.environ.get("JOBWIRE_TEST_MYSQL_URL", "mysql+pymysql://root@127.0.0.1:3306")
REQUIRE_MYSQL = os.environ.get("JOBWIRE_REQUIRE_MYSQL") == "1"


def _mysql_reachable() -> str | None:
    try:
        engine = sa.create_engine(MYSQL_SERVER_URL + "/", connect_args={"connect_timeout": 3})
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
        engine.dispose()
        return None
    except Exception as exc:  # noqa: BLE001 - any failure means "no server here"
        return f"{type(exc).__name__}: {exc}"


@pytest.fixture(autouse=True)
def _root_logger_as_it_was() -> Iterator[None]:
    """The root logger's handlers and level put back after each test. A test that runs a CLI's
    `main` in-process (logs.configure) leaves a handler writing to its captured stderr, closed
    once the test ends; every later line of the process printed a "Logging error" traceback
    instead, and Python 3.11 parses source to draw those tracebacks, which raced a test's own
    `ast.parse` in another thread (SystemError: AST constructor recursion depth mismatch)."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture(scope="session")
def mysql_server() -> str:
    problem = _mysql_reachable()
    if problem is not None:
        message = f"MariaDB/MySQL not reachable at {MYSQL_SERVER_URL}: {problem}"
        if REQUIRE_MYSQL:
            pytest.fail(message)
        pytest.skip(message)
    return MYSQL_SERVER_URL


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This pytest process's SQLite database at head, migrated once (tests/databases.py)."""
    return migrated_sqlite_template(tmp_path_factory.mktemp("template"))


@pytest.fixture(scope="session")
def mysql_template(mysql_server: str) -> Iterator[MysqlTemplate]:
    """This pytest process's MariaDB database at head, migrated once (tests/databases.py)."""
    template = MysqlTemplate(mysql_server)
    yield template
    template.close()


@pytest.fixture(params=["sqlite", pytest.param("mysql", marks=pytest.mark.mysql)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database of each kind for this test alone, at the schema's head and holding no jobs."""
    if request.param == "sqlite":
        yield sqlite_copy(request.getfixturevalue("sqlite_template"), tmp_path)
    else:
        yield from request.getfixturevalue("mysql_template").copy()


@pytest.fixture
def mysql_url(mysql_template: MysqlTemplate) -> Iterator[str]:
    """A MySQL database for this test alone at the schema's head, for tests about MySQL only."""
    yield from mysql_template.copy()


@pytest.fixture(params=["sqlite", pytest.param("mysql", marks=pytest.mark.mysql)])
def empty_database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database of each kind with no tables at all, for tests of migrating one."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'jobwire.db'}"
    else:
        yield from empty_mysql_database(request.getfixturevalue("mysql_server"))


@pytest.fixture
def empty_mysql_url(mysql_server: str) -> Iterator[str]:
    """A MySQL database with no tables at all, for tests of migrating one."""
    yield from empty_mysql_database(mysql_server)


@pytest.fixture
async def servers() -> AsyncIterator[Callable[..., Awaitable[Served]]]:
    """`await servers(url, **settings)` starts an all-in-one server (tests/served.py); all stop when the test ends.

    tests/service/conftest.py builds `serve` and `served` on it for this test's database.
    """
    started: list[Served] = []

    async def open_server(database_url: str, **settings: object) -> Served:
        s = await start_server(database_url, **settings)
        started.append(s)
        return s

    try:
        yield open_server
    finally:
        for s in reversed(started):
            await s.close()


# -- markers by folder: `pytest -m "not e2e and not fault and not slow"` runs the fast part ------
_FOLDER_MARKS = {"e2e": ("e2e",), "fault": ("fault",), "soak": ("slow", "alone"), "fuzz": ("slow",)}
_TESTS = Path(__file__).resolve().parent


# The folders whose tests take longest (real processes, wheels built, the fuzzers) go first,
# since a long test started last is the run's tail. `--dist worksteal` gives each process a
# contiguous slice of this order and an idle one steals the end of another's, so the files
# are dealt round the processes like cards (each to the hand with the fewest tests, a file's
# tests together to share their module's fixtures): each slice starts with its share of the
# slow tests and ends with quick ones to steal. (Sorted only, the first process held every
# slow test, the others stole them last, and the run ended with one running e2e tests alone.)
_SLOW_FIRST = {"e2e": 0, "fuzz": 0, "fault": 1, "soak": 1, "service": 2, "store": 3, "unit": 4}


def _folder(item: pytest.Item) -> str:
    try:
        return item.path.resolve().relative_to(_TESTS).parts[0]
    except ValueError:  # not under tests/
        return ""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for mark in _FOLDER_MARKS.get(_folder(item), ()):
            item.add_marker(mark)
    items.sort(key=lambda item: _SLOW_FIRST.get(_folder(item), 5))  # stable: file order kept inside a folder
    processes = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))  # set in each xdist process
    if processes > 1:
        items[:] = _dealt(items, processes)


def pytest_collection_finish(session: pytest.Session) -> None:
    # What is collected (modules, fixtures, test items) lives to the end of the run: frozen,
    # Python's collector stops walking it at each full collection, ~5 % of a test process's
    # CPU (four service test files: 14.0 s of user time against 13.2-13.5 s).
    gc.collect()
    gc.freeze()


def _dealt(items: list[pytest.Item], processes: int) -> list[pytest.Item]:
    files: dict[Path, list[pytest.Item]] = {}
    for item in items:
        files.setdefault(item.path, []).append(item)
    hands: list[list[pytest.Item]] = [[] for _ in range(processes)]
    for tests in files.values():
        min(hands, key=len).extend(tests)
    return [item for hand in hands for item in hand]


# -- CI guard: a run that requires MySQL must have passed at least one MySQL test -----------
_mysql_passed = 0


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    global _mysql_passed
    if report.when == "call" and report.passed and "mysql" in report.keywords:
        _mysql_passed += 1


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if REQUIRE_MYSQL and session.testscollected and not _mysql_passed:
        print("\nJOBWIRE_REQUIRE_MYSQL=1 but no MySQL test passed: failing the run")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    terminalreporter.write_line(f"MySQL/MariaDB tests passed: {_mysql_passed}")
