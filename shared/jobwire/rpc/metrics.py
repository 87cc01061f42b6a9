"""Prometheus metrics: RPC counts and latency of every handler (jobwire.rpc.handlers), open
streams, health and waiting claims, and the job numbers (jobwire.rpc.job_metrics), at GET /metrics
(jobwire.observe.metrics).

Values, their exposition and the HTTP endpoint are all prometheus-client's; jobwire only
says what to count and where.

The handler wrapper records the status the caller sees, after the error mapping. A stream
is counted when it ends.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, multiprocess
from prometheus_client.exposition import generate_latest

from jobwire.rpc.job_metrics import JobMetrics

log = logging.getLogger(__name__)
disable_created_metrics()  # type: ignore[no-untyped-call]  # *_created series: noise for counters that start with the process

BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


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
        self.jobs = JobMetrics(self.registry)  # the store's moves and housekeeping's census
        self._claims_held = Counter(
            "jobwire_claims_held_back", "Claim attempts a queue's limits held back, by why: PAUSED or AT_LIMIT.",
            ["reason"], registry=self.registry,
        )  # fmt: skip
        self._firings = Counter(
            "jobwire_schedule_firings", "Schedule fire times dealt with, by outcome.",
            ["outcome"], registry=self.registry,
        )  # fmt: skip
        self._schedule_lag = Gauge(
            "jobwire_schedule_lag_seconds",
            "How late the oldest due schedule was when this process's schedule loop last read them (0: none due).",
            multiprocess_mode="livemax", registry=self.registry,
        )  # fmt: skip
        self._chore_leader = Gauge(
            "jobwire_chore_leader",
            "1 while this process runs the chores named for all replicas (housekeeping, schedules), else 0.",
            ["chores"], multiprocess_mode="livesum", registry=self.registry,
        )  # fmt: skip
        self._pushes = Counter(
            "jobwire_session_pushes",
            "Frames a worker's Session was sent unasked, by kind: leased, cancel_requested, lease_lost.",
            ["push"], registry=self.registry,
        )  # fmt: skip
        self._disconnected = Counter(
            "jobwire_session_leases_disconnected",
            "Leases of Sessions that ended holding them, by step: marked (their end brought near), expired "
            "(handled as expired at the grace's end), untouched (named again in time, or taken care of elsewhere).",
            ["step"], registry=self.registry,
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

    def claim_held(self, reason: str) -> None:
        """A claim attempt found a queue it asked for paused or at a limit."""
        self._claims_held.labels(reason).inc()

    def claims_waiting(self) -> float:
        """Claims waiting for work now (this process)."""
        return float(self.registry.get_sample_value("jobwire_claims_waiting") or 0.0)

    def pushed(self, push: str) -> None:
        """A Session was sent a `push` frame of the server's own accord."""
        self._pushes.labels(push).inc()

    def pushes(self, push: str) -> float:
        return float(self.registry.get_sample_value("jobwire_session_pushes_total", {"push": push}) or 0.0)

    def disconnected(self, step: str, leases: int) -> None:
        """`leases` of ended Sessions went through `step` (marked, expired, untouched, silent;
        renewed: held by a live session of the same worker)."""
        if leases:
            self._disconnected.labels(step).inc(leases)

    def disconnected_leases(self, step: str) -> float:
        found = self.registry.get_sample_value("jobwire_session_leases_disconnected_total", {"step": step})
        return float(found or 0.0)

    def schedule_fired(self, outcome: str) -> None:
        self._firings.labels(outcome).inc()

    def chore_leader(self, chores: str, *, leading: bool) -> None:
        self._chore_leader.labels(chores).set(int(leading))

    def is_chore_leader(self, chores: str) -> bool:
        """Whether this process runs `chores` now (as the gauge shows it)."""
        return bool(self.registry.get_sample_value("jobwire_chore_leader", {"chores": chores}))

    def schedule_lag(self, seconds: float) -> None:
        self._schedule_lag.set(seconds)

    def schedule_lag_seconds(self) -> float:
        return float(self.registry.get_sample_value("jobwire_schedule_lag_seconds") or 0.0)

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
        self.registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(self.registry, path=directory)  # type: ignore[no-untyped-call]

    def render(self) -> str:
        return generate_latest(self.registry).decode()
