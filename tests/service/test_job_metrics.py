"""The job series at GET /metrics: counters moved once per committed move, wait and run
times, and the database's gauges from housekeeping's reading (never from a scrape)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

import pytest
from prometheus_client.parser import text_string_to_metric_families
from service_support import claim, submit
from test_metrics import Samples, _get, sample, scrape, scrape_until
from watch_support import complete, fail

from jobwire.domain.transitions import Move

T = TypeVar("T")
FRAMES = {"queue": "default", "job_type": "frames"}
QUEUE = {"tenant": "default", "queue": "default"}
COUNTERS = {f"jobwire_jobs_{m.value}_total": FRAMES for m in Move} | {
    "jobwire_jobs_failed_total": {**FRAMES, "category": "INPUT_INVALID"}
}


@pytest.fixture
async def metered(serve):  # type: ignore[no-untyped-def]
    # Housekeeping (so the gauges' reading) every 0.1 s, where a server's default is 5 s.
    return await serve(metrics_listen="127.0.0.1:0", reaper_interval_seconds=0.1)


def moves(samples: Samples) -> dict[str, float]:
    return {name: sample(samples, name, **labels) for name, labels in COUNTERS.items()}


async def moved_by_one(served, step: Awaitable[T], name: str) -> T:  # type: ignore[no-untyped-def]
    """Run `step`; it must move counter `name` by exactly one and no other."""
    before = moves(await scrape(served))
    result = await step
    # Counted when the transaction committed, before the reply: no waiting.
    assert moves(await scrape(served)) == {**before, name: before[name] + 1}
    return result


async def test_each_move_counts_once_and_the_gauges_match_the_database(metered) -> None:  # type: ignore[no-untyped-def]
    await moved_by_one(metered, submit(metered), "jobwire_jobs_submitted_total")
    await moved_by_one(metered, submit(metered), "jobwire_jobs_submitted_total")
    for _ in range(3):
        await submit(metered, "later")  # these stay queued
    (first,) = await moved_by_one(metered, claim(metered), "jobwire_jobs_claimed_total")
    await moved_by_one(metered, complete(metered, first), "jobwire_jobs_completed_total")
    (second,) = await moved_by_one(metered, claim(metered), "jobwire_jobs_claimed_total")
    await moved_by_one(metered, fail(metered, second), "jobwire_jobs_failed_total")

    samples = await scrape_until(metered, 1, "jobwire_jobs", **QUEUE, status="FAILED")
    assert sample(samples, "jobwire_queue_depth", **QUEUE) == 3
    by_status = {
        status: sample(samples, "jobwire_jobs", **QUEUE, status=status) for status in ("QUEUED", "READY", "FAILED")
    }
    assert by_status == {"QUEUED": 3, "READY": 1, "FAILED": 1}
    assert sample(samples, "jobwire_queue_oldest_runnable_seconds", **QUEUE) >= 0
    assert sample(samples, "jobwire_workers_live", tenant="default") == 1  # w1 claimed
    assert sample(samples, "jobwire_queue_no_worker", **QUEUE) == 3  # for frames, never for later
    assert sample(samples, "jobwire_job_queue_wait_seconds_count", job_type="frames") == 2
    assert sample(samples, "jobwire_job_run_seconds_count", job_type="frames") == 2
    assert sample(samples, "jobwire_jobs_submitted_total", queue="default", job_type="later") == 3

    _, _, body = await asyncio.to_thread(_get, metered.runtime.host.metrics_port, "/metrics")
    families = {f.name: f.type for f in text_string_to_metric_families(body)}
    assert families["jobwire_jobs_failed"] == "counter"
    assert families["jobwire_job_run_seconds"] == "histogram"
    assert families["jobwire_queue_depth"] == "gauge"


async def test_a_queue_emptied_shows_zero_not_its_last_depth(metered) -> None:  # type: ignore[no-untyped-def]
    await submit(metered)
    await scrape_until(metered, 1, "jobwire_queue_depth", **QUEUE)
    await claim(metered)
    samples = await scrape_until(metered, 0, "jobwire_jobs", **QUEUE, status="QUEUED")
    assert ("jobwire_jobs", frozenset({**QUEUE, "status": "QUEUED"}.items())) in samples  # shown as 0, not dropped
    assert sample(samples, "jobwire_queue_depth", **QUEUE) == 0
    assert sample(samples, "jobwire_jobs", **QUEUE, status="RUNNING") == 1
