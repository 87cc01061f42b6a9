"""Running a server until SIGTERM/SIGINT, then stopping it gracefully; SIGHUP re-reads the auth file."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Callable
from typing import Protocol

from jobwire.rpc.server import ServerHost

STOP_GRACE_S = 10.0
ORPHAN_CHECK_S = 1.0


class Hosted(Protocol):
    host: ServerHost

    async def stop(self, grace: float = ...) -> None: ...


async def serve_until_signalled(
    hosted: Hosted, *, on_ready: Callable[[int], None] | None = None, parent: int | None = None
) -> None:
    """Serve until SIGTERM or SIGINT (or, in a family, until the parent `parent` is gone).

    SIGHUP re-reads the auth file without dropping calls or streams (ServerHost.reload_auth).
    """
    port = await hosted.host.start()
    if on_ready is not None:
        on_ready(port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, hosted.host.reload_auth)
    orphaned = asyncio.ensure_future(_orphaned(parent, stop)) if parent is not None else None
    await stop.wait()
    if orphaned is not None:
        orphaned.cancel()
    logging.getLogger(__name__).info("stopping: finishing calls in flight")
    await hosted.stop(STOP_GRACE_S)


async def _orphaned(parent: int, stop: asyncio.Event) -> None:
    """Stop when the family's parent is gone (killed outright), rather than serve on alone."""
    while os.getppid() == parent:
        await asyncio.sleep(ORPHAN_CHECK_S)
    logging.getLogger(__name__).warning("the parent process %d is gone: stopping", parent)
    stop.set()
