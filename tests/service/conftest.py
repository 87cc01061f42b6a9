"""Real gRPC servers on port 0 over real databases (SQLite and MariaDB), plus stubs."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from served import Served, start_server


@pytest.fixture
async def served(database_url: str) -> AsyncIterator[Served]:
    """One server per test over a fresh database of each kind."""
    s = await start_server(database_url)
    try:
        yield s
    finally:
        await s.channel.close()
        await s.runtime.stop(grace=1.0)


@pytest.fixture
async def serve(database_url: str) -> AsyncIterator[Callable[..., Awaitable[Served]]]:
    """Start servers with chosen Settings over this test's database; all stop at the end."""
    started: list[Served] = []

    async def start(**settings: object) -> Served:
        s = await start_server(database_url, **settings)
        started.append(s)
        return s

    try:
        yield start
    finally:
        for s in started:
            await s.channel.close()
            await s.runtime.stop(grace=1.0)
