"""Fixtures every level shares: database URLs for SQLite and MariaDB/MySQL, in-process servers.

MySQL tests skip on a laptop without a server, but fail when JOBWIRE_REQUIRE_MYSQL=1
(CI sets it): a CI run that silently skipped them would prove nothing about MySQL.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from mysql_databases import fresh_mysql_database
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


@pytest.fixture(scope="session")
def mysql_server() -> str:
    problem = _mysql_reachable()
    if problem is not None:
        message = f"MariaDB/MySQL not reachable at {MYSQL_SERVER_URL}: {problem}"
        if REQUIRE_MYSQL:
            pytest.fail(message)
        pytest.skip(message)
    return MYSQL_SERVER_URL


@pytest.fixture(params=["sqlite", pytest.param("mysql", marks=pytest.mark.mysql)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database of each kind."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'jobwire.db'}"
    else:
        yield from fresh_mysql_database(request.getfixturevalue("mysql_server"))


@pytest.fixture
def mysql_url(mysql_server: str) -> Iterator[str]:
    """A fresh MySQL database, for tests that are about MySQL only."""
    yield from fresh_mysql_database(mysql_server)


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
_FOLDER_MARKS = {"e2e": "e2e", "fault": "fault", "soak": "slow", "fuzz": "slow"}
_TESTS = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        try:
            folder = item.path.resolve().relative_to(_TESTS).parts[0]
        except ValueError:  # not under tests/
            continue
        mark = _FOLDER_MARKS.get(folder)
        if mark is not None:
            item.add_marker(mark)


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
