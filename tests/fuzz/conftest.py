"""A live server for the fuzzer and the model test: real gRPC on port 0, its own loop thread."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from live_server import LiveServer


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    path: Path = tmp_path_factory.mktemp("fuzz") / "jobwire.db"
    # No housekeeping and no schedule firing: every row written is a call's own doing.
    server = LiveServer(f"sqlite:///{path}", reaper_interval_seconds=0, schedule_interval_seconds=0)
    try:
        yield server
    finally:
        server.close()
