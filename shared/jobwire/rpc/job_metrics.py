"""The job numbers of jobwire's metrics: counted moves, wait and run times, and the database's gauges.

Counters and histograms count what this process committed (the store tells it,
jobwire.db.store `observe`): in a family each child counts its own and prometheus-client's
multiprocess mode sums them, so every move is counted once.

The gauges show the latest `Census` housekeeping read (one process of all replicas keeps
house, jobwire.runtime.leadership; it shows 0 once it hands over). They are
`livemostrecent`: the value of the latest reading, never a sum over processes (which would
double a count of rows), and a reader that dies takes its values with it. A series whose
rows are gone is set to 0, not removed: multiprocess files cannot forget a series.

Queues and job types are names callers choose, so each metric shows at most `MAX_SERIES`
of them (in this process); the ones beyond are counted under the label value `other`
(queue and job type both), so a scrape stays the same size however many kinds of job come
(20,000 jobs of distinct kinds once grew /metrics from 508 lines to 80,508).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics import MetricWrapperBase

from jobwire.domain.census import Census
from jobwire.domain.transitions import Move, Transition

MAX_SERIES = 500  # queue / job type label sets a metric shows; the rest are `other`
OTHER = "other"

# From a blink to a day: jobs run for milliseconds (thumbnails) or hours (imports).
JOB_BUCKETS = (0.01, 0.05, 0.25, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 86400.0)
_HELP = {
    Move.SUBMITTED: "Jobs created by Submit or SubmitBatch (a replayed idempotency key creates none).",
    Move.CLAIMED: "Leases granted: a job taken by a worker (each attempt counts).",
    Move.COMPLETED: "Jobs that ended READY.",
    Move.FAILED: "Jobs that ended FAILED, by error category.",
    Move.CANCELLED: "Jobs that ended CANCELLED.",
    Move.RETRIED: "Jobs put back in the queue for another attempt (retryable failure, revoked lease, Retry, Requeue).",
    Move.LEASE_EXPIRED: "Leases the reaper found past their expiry and marked stalled.",
}


class JobMetrics:
    """The job series of one server process, in its registry (jobwire.rpc.metrics.Metrics)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._moves = {move: Counter(f"jobwire_jobs_{move.value}", _HELP[move], _labels(move), registry=registry)
                       for move in Move}  # fmt: skip
        self._wait = Histogram(
            "jobwire_job_queue_wait_seconds", "Seconds from submit to a job's first claim, by job type.", ["job_type"],
            buckets=JOB_BUCKETS, registry=registry,
        )  # fmt: skip
        self._run = Histogram(
            "jobwire_job_run_seconds", "Seconds from a job's first claim to its end under a lease, by job type.",
            ["job_type"], buckets=JOB_BUCKETS, registry=registry,
        )  # fmt: skip
        self._jobs = _gauge(registry, "jobwire_jobs", "Jobs in the database by tenant, queue and status.", "status")
        self._depth = _gauge(registry, "jobwire_queue_depth", "Runnable jobs: QUEUED, due, waiting for no dependency.")
        self._oldest = _gauge(
            registry, "jobwire_queue_oldest_runnable_seconds", "Seconds the oldest runnable job has waited for a claim."
        )
        self._no_worker = _gauge(
            registry, "jobwire_queue_no_worker",
            "QUEUED jobs whose queue and job type no worker claimed for within JOBWIRE_NO_WORKER_AFTER (NO_WORKER).",
        )  # fmt: skip
        self._workers = Gauge(
            "jobwire_workers_live", "Workers seen (claim or heartbeat) within JOBWIRE_NO_WORKER_AFTER, by tenant.",
            ["tenant"], multiprocess_mode="livemostrecent", registry=registry,
        )  # fmt: skip
        # .labels() takes a lock and builds a key on every call: the hot path keeps the children
        # (of the series admitted under MAX_SERIES: a folded one is looked up each time).
        self._children: dict[tuple[Move, str, str, str], Any] = {}
        self._timers: dict[tuple[Histogram, str], Any] = {}
        self._shown: dict[Gauge, set[tuple[str, ...]]] = {}
        self._caps: dict[MetricWrapperBase, SeriesCap] = {}

    def moved(self, transitions: Sequence[Transition]) -> None:
        """Count the moves of one committed transaction (the store's observer)."""
        children = self._children
        for t in transitions:
            key = (t.move, t.queue, t.job_type, t.category)
            child = children.get(key)
            if child is None:
                counter = self._moves[t.move]
                kind = self._cap(counter).fold((t.queue, t.job_type))
                child = counter.labels(*kind, t.category) if t.move is Move.FAILED else counter.labels(*kind)
                if kind == (t.queue, t.job_type):  # admitted: kept for the hot path
                    children[key] = child
            child.inc()
            if t.waited_s is not None:
                self._timer(self._wait, t.job_type).observe(t.waited_s)
            if t.ran_s is not None:
                self._timer(self._run, t.job_type).observe(t.ran_s)

    def _timer(self, histogram: Histogram, job_type: str) -> Any:
        child = self._timers.get((histogram, job_type))
        if child is None:
            shown = self._cap(histogram).fold((job_type,))
            child = histogram.labels(*shown)
            if shown == (job_type,):
                self._timers[histogram, job_type] = child
        return child

    def _cap(self, metric: MetricWrapperBase) -> SeriesCap:
        cap = self._caps.get(metric)
        if cap is None:
            cap = self._caps[metric] = SeriesCap(MAX_SERIES)
        return cap

    def census(self, census: Census) -> None:
        """Show the latest reading of the database (housekeeping's, once a round)."""
        jobs: dict[tuple[str, ...], float] = {}
        depth: dict[tuple[str, ...], float] = {}
        oldest: dict[tuple[str, ...], float] = {}
        unserved: dict[tuple[str, ...], float] = {}
        cap = self._cap(self._jobs)  # one for the four: they show the same queues
        for c in census.counts:
            queue = cap.fold((c.tenant, c.queue), keep=1)
            jobs[(*queue, c.status)] = jobs.get((*queue, c.status), 0) + c.jobs
            depth[queue] = depth.get(queue, 0) + c.runnable
            oldest[queue] = max(oldest.get(queue, 0.0), c.oldest_runnable_s or 0.0)
            unserved[queue] = unserved.get(queue, 0) + census.unserved(c)
        self._show(self._jobs, jobs)
        self._show(self._depth, depth)
        self._show(self._oldest, oldest)
        self._show(self._no_worker, unserved)
        self._show(self._workers, {(tenant,): n for tenant, n in census.live_workers.items()})

    def _show(self, gauge: Gauge, values: dict[tuple[str, ...], float]) -> None:
        shown = self._shown.setdefault(gauge, set())
        for labels in shown - values.keys():
            gauge.labels(*labels).set(0)  # its rows are gone
        for labels, value in values.items():
            gauge.labels(*labels).set(value)
        shown.update(values)  # in place: `shown |= values.keys()` would bind a new set, not grow this one


class SeriesCap:
    """The label sets one metric has shown: the first `limit` are kept, later ones fold to `other`."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._admitted: set[tuple[str, ...]] = set()

    def fold(self, labels: tuple[str, ...], keep: int = 0) -> tuple[str, ...]:
        """`labels` if admitted (or room remains), else `other` for each value after the first `keep`."""
        if labels in self._admitted:
            return labels
        if len(self._admitted) < self._limit:
            self._admitted.add(labels)
            return labels
        return (*labels[:keep], *(OTHER for _ in labels[keep:]))


def _labels(move: Move) -> list[str]:
    return ["queue", "job_type", "category"] if move is Move.FAILED else ["queue", "job_type"]


def _gauge(registry: CollectorRegistry, name: str, documentation: str, *more: str) -> Gauge:
    return Gauge(name, documentation, ["tenant", "queue", *more], multiprocess_mode="livemostrecent", registry=registry)
