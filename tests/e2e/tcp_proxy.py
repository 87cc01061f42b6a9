"""A TCP proxy between a test's client process and a server: paused, it cuts the client off
without closing anything (a network that parts in silence); dropped, it closes every
connection at once (a connection that breaks); it can send new connections elsewhere.

It runs its own event loop in a thread, so a test's blocking calls never hold it up.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
_CHUNK = 65_536


class TcpProxy:
    """Forwards each connection made to `port` to 127.0.0.1:`upstream`, byte for byte, both ways."""

    def __init__(self, upstream: int) -> None:
        self.upstream = upstream  # where new connections go; a test may change it
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="tcp-proxy", daemon=True)
        self._thread.start()
        self._flowing = asyncio.Event()  # made here, used only on the proxy's loop
        self._links: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None
        self.port = self._run(self._listen())

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def pause(self) -> None:
        """Stop forwarding, both ways and on every connection, new ones too; close nothing.

        Bytes and ends (FIN) read meanwhile are held, and delivered on `resume`.
        """
        self._loop.call_soon_threadsafe(self._flowing.clear)

    def resume(self) -> None:
        self._loop.call_soon_threadsafe(self._flowing.set)

    def drop(self) -> None:
        """Close every connection open now, both of its sides (new ones are forwarded as before)."""
        self._run(self._drop())

    def close(self) -> None:
        self._run(self._close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    async def _listen(self) -> int:
        self._flowing.set()
        self._server = await asyncio.start_server(self._accepted, "127.0.0.1", 0)
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def _accepted(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._links.add(task)
        try:
            await self._flowing.wait()  # paused: accepted (the kernel does that anyway), never forwarded
            server_r, server_w = await asyncio.open_connection("127.0.0.1", self.upstream)
            try:
                pumps = [asyncio.create_task(self._pump(client_r, server_w)),
                         asyncio.create_task(self._pump(server_r, client_w))]  # fmt: skip
                try:
                    await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)  # one side ended: end both
                finally:
                    for pump in pumps:
                        pump.cancel()
                    await asyncio.gather(*pumps, return_exceptions=True)
            finally:
                server_w.transport.abort()
        except (OSError, asyncio.CancelledError):
            pass  # the upstream refused, or the link was dropped: the client sees its connection end
        finally:
            client_w.transport.abort()
            self._links.discard(task)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while True:
                data = await reader.read(_CHUNK)
                await self._flowing.wait()  # what was read while paused waits, its end too
                if not data:
                    return
                writer.write(data)
                await writer.drain()

    async def _drop(self) -> None:
        links = list(self._links)
        for link in links:
            link.cancel()
        await asyncio.gather(*links, return_exceptions=True)

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        await self._drop()
