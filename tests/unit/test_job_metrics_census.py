"""The database's gauges show the latest census: a series whose rows are gone shows 0 (multiprocess
files cannot forget a series), and a process that stops keeping house shows 0 in all of them."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from jobwire.domain.census import Census, JobCount
from jobwire.rpc.job_metrics import JobMetrics
from jobwire.runtime.housekeeping import NO_CENSUS

QUEUED = (("queue", "default"), ("status", "QUEUED"), ("tenant", "acme"))
RUNNING = (("queue", "default"), ("status", "RUNNING"), ("tenant", "acme"))
DEPTH = (("queue", "default"), ("tenant", "acme"))


def _series(registry: CollectorRegistry, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {
        tuple(sorted(s.labels.items())): s.value
        for family in registry.collect()
        for s in family.samples
        if s.name == name
    }


def _census(*counts: JobCount) -> Census:
    return Census(counts=counts, live_workers={"acme": 1})


def test_a_status_whose_jobs_are_gone_shows_zero_and_no_census_shows_zero_everywhere() -> None:
    registry = CollectorRegistry()
    metrics = JobMetrics(registry)
    metrics.census(_census(JobCount(tenant="acme", queue="default", status="QUEUED", jobs=1, runnable=1)))
    assert _series(registry, "jobwire_jobs") == {QUEUED: 1}

    metrics.census(_census(JobCount(tenant="acme", queue="default", status="RUNNING", jobs=1)))  # claimed
    assert _series(registry, "jobwire_jobs") == {QUEUED: 0, RUNNING: 1}
    assert _series(registry, "jobwire_queue_depth") == {DEPTH: 0}

    metrics.census(NO_CENSUS)  # housekeeping handed over: the next leader shows the readings
    assert _series(registry, "jobwire_jobs") == {QUEUED: 0, RUNNING: 0}
    assert _series(registry, "jobwire_queue_depth") == {DEPTH: 0}
    assert _series(registry, "jobwire_workers_live") == {(("tenant", "acme"),): 0}
