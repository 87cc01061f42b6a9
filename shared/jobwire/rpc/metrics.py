"""Prometheus metrics: RPC counts and latency of every handler (jobwire.rpc.handlers), open
streams, health and waiting claims, at GET /metrics.

Values are kept by prometheus-client (text format 0.0.4); the endpoint is a small HTTP/1.1
server on the event loop, so a scrape never needs a thread and a slow client holds up
nothing.

The handler wrapper records the status the caller sees, after the error mapping. A stream
is counted when it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from http import HTTPStatus
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, multiprocess
from prometheus_client.exposition import generate_latest

log = logging.getLogger(__name__)
disable_created_metrics()  # type: ignore[no-untyped-call]  # *_created series: noise for counters that start with the process

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
CONNECTION_TIMEOUT_S = 5.0  # to send a request and read the answer
MAX_HEADER_LINES = 100


class Metrics:
    """The numbers of one server process.

    Each server has a registry of its own (tests run several servers in one process). In
    a family of processes (jobwire.runtime.family) prometheus-client writes every value to its
    multiprocess directory instead, and the parent serves the sum of all children.
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._calls = Counter(
            "jobwire_rpc", "RPCs ended, by method and status code.", ["method", "code"], registry=self.registry
        )
        self._latency = Histogram(
            "jobwire_rpc_seconds", "RPC duration in seconds (streams: until they end).", ["method"],
            buckets=BUCKETS, registry=self.registry,
        )  # fmt: skip
        self._streams = Gauge(
            "jobwire_streams_open", "Server streams in progress, by method.", ["method"],
            multiprocess_mode="livesum", registry=self.registry,
        )  # fmt: skip
        self._up = Gauge(
            "jobwire_up", "1 while this server (every process of it) reports SERVING on grpc.health.v1.",
            multiprocess_mode="livemin", registry=self.registry,
        )  # fmt: skip
        self._database_up = Gauge(
            "jobwire_database_up", "1 when the last database ping succeeded (in every process).",
            multiprocess_mode="livemin", registry=self.registry,
        )  # fmt: skip
        self._claims_waiting = Gauge(
            "jobwire_claims_waiting", "Claims waiting for work (long polls) in this server.",
            multiprocess_mode="livesum", registry=self.registry,
        )  # fmt: skip
        self._firings = Counter(
            "jobwire_schedule_firings", "Schedule fire times dealt with, by outcome.",
            ["outcome"], registry=self.registry,
        )  # fmt: skip
        # .labels() takes a lock and builds a key on every call: keep the children.
        self._by_call: dict[tuple[str, str], Any] = {}
        self._by_method: dict[str, tuple[Any, Any]] = {}

    def observe(self, method: str, code: str, seconds: float) -> None:
        counter = self._by_call.get((method, code))
        if counter is None:
            counter = self._by_call[method, code] = self._calls.labels(method, code)
        counter.inc()
        self._method(method)[0].observe(seconds)

    def stream_opened(self, method: str) -> None:
        self._method(method)[1].inc()

    def stream_closed(self, method: str) -> None:
        self._method(method)[1].dec()

    def _method(self, method: str) -> tuple[Any, Any]:
        found = self._by_method.get(method)
        if found is None:
            found = self._by_method[method] = (self._latency.labels(method), self._streams.labels(method))
        return found

    def set_health(self, *, serving: bool, database_up: bool) -> None:
        self._up.set(int(serving))
        self._database_up.set(int(database_up))

    @contextlib.contextmanager
    def claim_waiting(self) -> Iterator[None]:
        """Count one claim as waiting for work while the block runs."""
        self._claims_waiting.inc()
        try:
            yield
        finally:
            self._claims_waiting.dec()

    def claims_waiting(self) -> float:
        """Claims waiting for work now (this process)."""
        return float(self.registry.get_sample_value("jobwire_claims_waiting") or 0.0)

    def schedule_fired(self, outcome: str) -> None:
        self._firings.labels(outcome).inc()

    def firings(self, outcome: str) -> float:
        """Schedule fire times this process dealt with as `outcome`."""
        return float(self.registry.get_sample_value("jobwire_schedule_firings_total", {"outcome": outcome}) or 0.0)

    def count(self, method: str, code: str) -> float:
        """Calls of `method` that ended with `code` (this process)."""
        return float(self.registry.get_sample_value("jobwire_rpc_total", {"method": method, "code": code}) or 0.0)

    def open_streams(self, method: str) -> float:
        return float(self.registry.get_sample_value("jobwire_streams_open", {"method": method}) or 0.0)

    def render(self) -> str:
        return generate_latest(self.registry).decode()


class FamilyMetrics:
    """The sum of every process of a family, from prometheus-client's multiprocess directory."""

    def __init__(self, directory: str) -> None:
        self._registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(self._registry, path=directory)  # type: ignore[no-untyped-call]

    def render(self) -> str:
        return generate_latest(self._registry).decode()


class Rendering(Protocol):
    def render(self) -> str: ...


# -- GET /metrics -------------------------------------------------------------------------------


class MetricsEndpoint:
    """A minimal HTTP/1.1 server on the event loop: GET /metrics, 404 elsewhere, one request per connection."""

    def __init__(self, metrics: Rendering) -> None:
        self._metrics = metrics
        self._server: asyncio.Server | None = None

    async def start(self, listen: str) -> int:
        """Listen on `listen` (`host:port`, port 0 for any); returns the bound port."""
        host, _, port = listen.rpartition(":")
        self._server = await asyncio.start_server(self._serve, host.strip("[]") or None, int(port))
        return int(self._server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(CONNECTION_TIMEOUT_S):
                request = await reader.readline()
                for _ in range(MAX_HEADER_LINES):
                    if await reader.readline() in (b"\r\n", b"\n", b""):
                        break
                else:
                    request = b""  # too many headers: answer 400
                writer.write(self._answer(request))
                await writer.drain()
        except (TimeoutError, ConnectionError, ValueError):
            pass  # a slow, vanished or oversized client gets no answer
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    def _answer(self, request: bytes) -> bytes:
        parts = request.decode("latin-1").split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return _response(HTTPStatus.BAD_REQUEST)
        verb, path = parts[0], parts[1].split("?", 1)[0]
        if verb not in ("GET", "HEAD"):
            return _response(HTTPStatus.METHOD_NOT_ALLOWED, extra="Allow: GET, HEAD\r\n")
        if path != "/metrics":
            return _response(HTTPStatus.NOT_FOUND)
        body = self._metrics.render().encode()
        return _response(HTTPStatus.OK, body, content_type=CONTENT_TYPE, head_only=verb == "HEAD")


def _response(
    status: HTTPStatus,
    body: bytes | None = None,
    *,
    content_type: str = "text/plain; charset=utf-8",
    extra: str = "",
    head_only: bool = False,
) -> bytes:
    body = f"{status.value} {status.phrase}\n".encode() if body is None else body
    head = (
        f"HTTP/1.1 {status.value} {status.phrase}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n{extra}\r\n"
    )
    return head.encode("latin-1") + (b"" if head_only else body)
