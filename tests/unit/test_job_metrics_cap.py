"""Queues and job types are callers' names: each job metric shows at most MAX_SERIES of them,
the rest under `other` (security review, finding 10: 20,000 jobs of distinct kinds grew
/metrics from 508 lines to 80,508, 5.4 MB a scrape)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from jobwire.domain.census import Census, JobCount
from jobwire.domain.transitions import Move, Transition
from jobwire.rpc.job_metrics import MAX_SERIES, OTHER, JobMetrics

KINDS = MAX_SERIES + 300


def _series(registry: CollectorRegistry, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {
        tuple(sorted(s.labels.items())): s.value
        for family in registry.collect()
        for s in family.samples
        if s.name == name
    }


def test_counters_and_histograms_show_at_most_max_series_kinds_and_count_the_rest_as_other() -> None:
    registry = CollectorRegistry()
    metrics = JobMetrics(registry)
    for round_ in range(2):  # the second time round, each kind lands where it did the first
        metrics.moved([Transition(Move.SUBMITTED, f"queue-{n}", f"type-{n}") for n in range(KINDS)])
        metrics.moved([Transition(Move.CLAIMED, f"queue-{n}", f"type-{n}", waited_s=1.0) for n in range(KINDS)])
        metrics.moved([Transition(Move.FAILED, f"queue-{n}", f"type-{n}", "TIMEOUT") for n in range(KINDS)])

        submitted = _series(registry, "jobwire_jobs_submitted_total")
        assert len(submitted) == MAX_SERIES + 1
        assert submitted[(("job_type", OTHER), ("queue", OTHER))] == (KINDS - MAX_SERIES) * (round_ + 1)
        assert submitted[(("job_type", "type-0"), ("queue", "queue-0"))] == round_ + 1
        assert sum(submitted.values()) == KINDS * (round_ + 1)  # nothing lost, only folded
        failed = _series(registry, "jobwire_jobs_failed_total")
        assert len(failed) == MAX_SERIES + 1
        assert failed[(("category", "TIMEOUT"), ("job_type", OTHER), ("queue", OTHER))] == (KINDS - MAX_SERIES) * (
            round_ + 1
        )
        waits = _series(registry, "jobwire_job_queue_wait_seconds_count")
        assert len(waits) == MAX_SERIES + 1 and waits[(("job_type", OTHER),)] == (KINDS - MAX_SERIES) * (round_ + 1)


def test_gauges_show_at_most_max_series_queues_and_sum_the_rest_as_other() -> None:
    registry = CollectorRegistry()
    metrics = JobMetrics(registry)
    counts = [
        JobCount(tenant="acme", queue=f"queue-{n}", status="QUEUED", jobs=2, runnable=1, oldest_runnable_s=float(n))
        for n in range(KINDS)
    ]
    metrics.census(Census(counts=counts, live_workers={"acme": 1}))
    jobs = _series(registry, "jobwire_jobs")
    assert len(jobs) == MAX_SERIES + 1
    assert jobs[(("queue", OTHER), ("status", "QUEUED"), ("tenant", "acme"))] == 2 * (KINDS - MAX_SERIES)
    depth = _series(registry, "jobwire_queue_depth")
    assert len(depth) == MAX_SERIES + 1 and depth[(("queue", OTHER), ("tenant", "acme"))] == KINDS - MAX_SERIES
    oldest = _series(registry, "jobwire_queue_oldest_runnable_seconds")
    assert oldest[(("queue", OTHER), ("tenant", "acme"))] == KINDS - 1  # the oldest of those folded
