"""Real gRPC servers on port 0 over real databases, plus stubs.

Both fixtures stand on tests/conftest.py's `servers`, bound to this test's database.

A service test shows what only the wire can (codes, metadata, auth, streams), so it runs on
SQLite: the store's own tests (tests/store) run every operation on SQLite and MariaDB. A test
whose subject is the database as well (replicas racing on one, locks, SQL plans, migrations)
is marked `both_databases` and runs on MariaDB too.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from served import Served


@pytest.hookimpl(tryfirst=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # A parametrize mark on the test takes the place of the fixture's own params (sqlite and
    # mysql), for this folder's tests only.
    test = metafunc.definition
    here = test.path.is_relative_to(Path(__file__).parent)
    if here and "database_url" in metafunc.fixturenames and not test.get_closest_marker("both_databases"):
        test.add_marker(pytest.mark.parametrize("database_url", ["sqlite"], indirect=True))


@pytest.fixture
def serve(database_url: str, servers: Callable[..., Awaitable[Served]]) -> Callable[..., Awaitable[Served]]:
    """Start servers with chosen Settings over this test's database; all stop at the end.

    The database comes first, so the servers stop before it is dropped.
    """

    async def start(**settings: object) -> Served:
        return await servers(database_url, **settings)

    return start


@pytest.fixture
async def served(serve: Callable[..., Awaitable[Served]]) -> Served:
    """One server per test over a fresh database."""
    return await serve()
