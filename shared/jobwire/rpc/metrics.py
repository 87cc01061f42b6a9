"""Prometheus metrics: RPC counts and latency of every handler (jobwire.rpc.handlers), at GET /metrics.

The exposition is Prometheus text format 0.0.4, written with the standard library: a few
counters and one histogram do not need a client library. Everything here runs on the
server's event loop, so the numbers need no locks; a scrape only formats them.

The handler wrapper records the status the caller sees, after the error mapping. A stream
is counted when it ends.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
CONNECTION_TIMEOUT_S = 5.0  # to send a request and read the answer
MAX_HEADER_LINES = 100


@dataclass(frozen=True, kw_only=True)
class Gauge:
    """A gauge a service provides: `read` is called on the event loop at each scrape, so it must be cheap."""

    name: str
    help: str
    read: Callable[[], float]


@dataclass(slots=True)
class _Histogram:
    buckets: list[int] = field(default_factory=lambda: [0] * len(BUCKETS))  # cumulative, as exposed
    total: float = 0.0
    count: int = 0

    def observe(self, seconds: float) -> None:
        for i in range(bisect.bisect_left(BUCKETS, seconds), len(BUCKETS)):
            self.buckets[i] += 1
        self.total += seconds
        self.count += 1


class Metrics:
    """The numbers of one server process, and their text exposition."""

    def __init__(self) -> None:
        self.calls: Counter[tuple[str, str]] = Counter()  # (method, code) -> calls ended
        self.latency: dict[str, _Histogram] = {}
        self.streams_open: Counter[str] = Counter()
        self.serving = False  # what grpc.health.v1 reports for this server
        self.database_up = False  # the last database ping succeeded
        self._gauges: dict[str, Gauge] = {}

    def add_gauge(self, name: str, help: str, read: Callable[[], float]) -> None:
        """Expose `read()` as gauge `name` (e.g. a service's open watch streams)."""
        self._gauges[name] = Gauge(name=name, help=help, read=read)

    def observe(self, method: str, code: str, seconds: float) -> None:
        self.calls[method, code] += 1
        self.latency.setdefault(method, _Histogram()).observe(seconds)

    def render(self) -> str:
        lines = _family("jobwire_rpc_total", "counter", "RPCs ended, by method and status code.")
        lines += [_sample("jobwire_rpc_total", v, method=m, code=c) for (m, c), v in sorted(self.calls.items())]
        lines += _family("jobwire_rpc_seconds", "histogram", "RPC duration in seconds (streams: until they end).")
        for method, hist in sorted(self.latency.items()):
            for bound, n in zip(BUCKETS, hist.buckets, strict=True):
                lines.append(_sample("jobwire_rpc_seconds_bucket", n, method=method, le=_number(bound)))
            lines.append(_sample("jobwire_rpc_seconds_bucket", hist.count, method=method, le="+Inf"))
            lines.append(_sample("jobwire_rpc_seconds_sum", hist.total, method=method))
            lines.append(_sample("jobwire_rpc_seconds_count", hist.count, method=method))
        lines += _family("jobwire_streams_open", "gauge", "Server streams in progress, by method.")
        lines += [_sample("jobwire_streams_open", n, method=m) for m, n in sorted(self.streams_open.items())]
        lines += _family("jobwire_up", "gauge", "1 while this server reports SERVING on grpc.health.v1.")
        lines.append(_sample("jobwire_up", int(self.serving)))
        lines += _family("jobwire_database_up", "gauge", "1 when the last database ping succeeded.")
        lines.append(_sample("jobwire_database_up", int(self.database_up)))
        for gauge in self._gauges.values():
            try:
                value = gauge.read()
            except Exception:  # one broken gauge must not fail the whole scrape
                log.exception("metrics gauge %s failed", gauge.name)
                continue
            lines += [*_family(gauge.name, "gauge", gauge.help), _sample(gauge.name, value)]
        return "\n".join(lines) + "\n"


def _family(name: str, kind: str, help: str) -> list[str]:
    return [f"# HELP {name} {help}", f"# TYPE {name} {kind}"]


def _sample(name: str, value: float, **labels: str) -> str:
    if not labels:
        return f"{name} {_number(value)}"
    pairs = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
    return f"{name}{{{pairs}}} {_number(value)}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


# -- GET /metrics -------------------------------------------------------------------------------


class MetricsEndpoint:
    """A minimal HTTP/1.1 server on the event loop: GET /metrics, 404 elsewhere, one request per connection."""

    def __init__(self, metrics: Metrics) -> None:
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
