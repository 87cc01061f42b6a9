"""The console pages' tests: each gets a server with the console's tokens and a gateway on it
(tests/service/console_support.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from console_support import console_server
from gateway_support import running_gateway
from served import Served


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    async with console_server(tmp_path) as s:
        yield s


@pytest.fixture
def gateway(served: Served) -> Iterator[str]:
    with running_gateway(served.target) as url:
        yield url
