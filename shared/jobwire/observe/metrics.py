"""GET /metrics on a port of its own, for any process that counts in a prometheus-client
registry: the job service's servers (jobwire.rpc.metrics) and the web gateway.

prometheus-client comes with the servers' extra (`jobwire-shared[db]`) and with the gateway;
a fleet worker never imports this.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Protocol
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server


class Exposing(Protocol):
    registry: CollectorRegistry


class MetricsEndpoint:
    """GET /metrics from prometheus-client's own HTTP server, on a thread of its own.

    prometheus-client's server answers every path with the metrics (gzip when asked, `name[]`
    to select series) and any method; a scrape reads the registry under its lock, so the
    event loop never waits on a scraper and a slow scraper holds up only its own thread.
    """

    def __init__(self, metrics: Exposing) -> None:
        self._registry = metrics.registry
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    def start(self, listen: str) -> int:
        """Listen on `listen` (`host:port`, port 0 for any); returns the bound port. OSError when it cannot."""
        host, _, port = listen.rpartition(":")
        self._server, self._thread = start_http_server(int(port), host.strip("[]") or "0.0.0.0", self._registry)
        return int(self._server.server_port)

    def close(self) -> None:
        """Stop listening; returns once the thread has ended."""
        server, thread, self._server, self._thread = self._server, self._thread, None, None
        if server is not None and thread is not None:
            server.shutdown()  # waits for serve_forever to return
            server.server_close()
            thread.join()

    async def stop(self) -> None:
        """close() off the event loop."""
        await asyncio.to_thread(self.close)
