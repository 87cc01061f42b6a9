"""Running a server until SIGTERM/SIGINT, then stopping it gracefully."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable
from typing import Protocol

from jobwire.rpc.server import ServerHost

STOP_GRACE_S = 10.0


class Hosted(Protocol):
    host: ServerHost

    async def stop(self, grace: float = ...) -> None: ...


def configure_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


async def serve_until_signalled(hosted: Hosted, *, on_ready: Callable[[int], None] | None = None) -> None:
    port = await hosted.host.start()
    if on_ready is not None:
        on_ready(port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    logging.getLogger(__name__).info("stopping: finishing calls in flight")
    await hosted.stop(STOP_GRACE_S)
