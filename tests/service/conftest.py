"""Real gRPC servers on port 0 over real databases (SQLite and MariaDB), plus stubs.

Both fixtures stand on tests/conftest.py's `servers`, bound to this test's database.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
from served import Served


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
    """One server per test over a fresh database of each kind."""
    return await serve()
