"""NO_WORKER in the census: QUEUED jobs of a kind neither the tenant's workers nor a shared fleet claimed for."""

from __future__ import annotations

from jobwire.domain.census import Census, JobCount


def _queued(job_type: str, jobs: int, tenant: str = "acme") -> JobCount:
    return JobCount(tenant=tenant, queue="default", status="QUEUED", jobs=jobs, job_type=job_type)


def test_queued_jobs_of_a_kind_nobody_serves_are_unserved() -> None:
    census = Census(
        counts=[_queued("frames", 2), _queued("audio", 3), _queued("video", 4), _queued("frames", 5, tenant="globex")],
        live_workers={},
        served=frozenset({("acme", "default", "frames"), ("*", "default", "video")}),  # acme's own, a shared fleet
    )
    assert [census.unserved(c) for c in census.counts] == [0, 3, 0, 5]


def test_only_queued_jobs_count() -> None:
    running = JobCount(tenant="acme", queue="default", status="RUNNING", jobs=7)
    assert Census(counts=[running], live_workers={}).unserved(running) == 0
