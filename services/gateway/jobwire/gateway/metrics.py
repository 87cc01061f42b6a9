"""The gateway's numbers: the requests it answered, by route, method and status code, and
how long each took to start its answer; GET /metrics on JOBWIRE_GATEWAY_METRICS_LISTEN
(jobwire.observe.metrics, the servers' endpoint).

A route is its pattern (`/jobs/{job_no}`), never the path asked for, so a scrape stays the
same size however many jobs people open; a path no route serves counts as `unmatched`.
"""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics
from starlette.types import ASGIApp, Message, Receive, Scope, Send

disable_created_metrics()  # type: ignore[no-untyped-call]  # *_created series: noise for counters that start with the process

METHODS = frozenset({"GET", "HEAD", "POST"})  # what the pages use; any other method counts as `other`


class GatewayMetrics:
    """The numbers of one gateway (a registry of its own: tests run several in one process)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._requests = Counter(
            "jobwire_gateway_requests", "HTTP requests answered, by route, method and status code.",
            ["route", "method", "code"], registry=self.registry,
        )  # fmt: skip
        self._latency = Histogram(
            "jobwire_gateway_request_seconds",
            "Seconds until a request's answer started, by route (a live stream: its headers).",
            ["route"], registry=self.registry,
        )  # fmt: skip

    def answered(self, route: str, method: str, code: int, seconds: float) -> None:
        self._requests.labels(route, method if method in METHODS else "other", str(code)).inc()
        self._latency.labels(route).observe(seconds)


class CountRequests:
    """ASGI middleware: each HTTP request counted when its answer starts (a failure that left
    no answer: as the 500 the server answers for it)."""

    def __init__(self, app: ASGIApp, metrics: GatewayMetrics) -> None:
        self._app = app
        self._metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        began = time.monotonic()
        answered = False

        async def sending(message: Message) -> None:
            nonlocal answered
            if message["type"] == "http.response.start":
                answered = True
                self._count(scope, message["status"], began)
            await send(message)

        try:
            await self._app(scope, receive, sending)
        except Exception:
            if not answered:
                self._count(scope, 500, began)
            raise

    def _count(self, scope: Scope, code: int, began: float) -> None:
        # The router puts the route it matched into the scope (Starlette's Router).
        route = getattr(scope.get("route"), "path", "unmatched")
        self._metrics.answered(route, scope["method"], code, time.monotonic() - began)
