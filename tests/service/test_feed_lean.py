"""The event tail's lean polls: no snapshot of a version that leaves its job leased (a progress
report's) unless a watch stream of this process decodes them; one that began before the first
stream did is read back for that stream."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from service_support import running

from jobwire.db.feed import FeedReader, FeedRow
from jobwire.jobapi.feed import ChangeFeed, Update
from jobwire.runtime.tail import EventTail
from jobwire.v1 import worker_pb2

pytestmark = pytest.mark.both_databases  # the CASE of the lean poll is SQL each dialect runs


async def _a_job_reported(served: Any, readers: int = 1) -> tuple[list[FeedReader], str]:
    """Readers started before a job was submitted, claimed and reported 7 units on."""
    started = [FeedReader(served.runtime.store.db) for _ in range(readers)]
    for reader in started:
        reader.start()
    job, lease = await running(served)
    report = worker_pb2.ReportStageRequest(
        job_no=lease.job_no, worker_token=lease.worker_token, stage=lease.stages[0].code, processed_units=7
    )
    await served.workers.ReportStage(report)
    return started, job.job_no


def _mine(rows: list[FeedRow], job_no: str) -> list[tuple[str, str, bool]]:
    return [(r.kind, r.to_status, r.snapshot is not None) for r in rows if r.job_no == job_no]


async def test_a_lean_poll_reads_no_snapshot_of_a_version_that_leaves_its_job_leased(served) -> None:  # type: ignore[no-untyped-def]
    (lean, full), job_no = await _a_job_reported(served, readers=2)
    try:
        assert _mine(lean.poll(full=False), job_no) == [
            ("SUBMITTED", "QUEUED", True), ("CLAIMED", "RUNNING", False), ("PROGRESS", "RUNNING", False),
        ]  # fmt: skip
        assert _mine(full.poll(), job_no) == [
            ("SUBMITTED", "QUEUED", True), ("CLAIMED", "RUNNING", True), ("PROGRESS", "RUNNING", True),
        ]  # fmt: skip
    finally:
        lean.close()
        full.close()


class Sink:
    def __init__(self) -> None:
        self.updates: list[Update] = []

    def offer(self, update: Update) -> None:
        self.updates.append(update)


async def test_a_stream_gets_the_versions_a_lean_poll_read_without_their_snapshot(served) -> None:  # type: ignore[no-untyped-def]
    (reader,), job_no = await _a_job_reported(served)
    rt = served.runtime
    feed = ChangeFeed(EventTail(reader, 0.05), rt.store, rt.blocking, no_worker_after=timedelta(minutes=5))
    try:
        rows = reader.poll(full=False)  # it began before the stream did
        sink = Sink()
        tenant = next(r.tenant for r in rows if r.job_no == job_no)
        feed.subscribe_job(tenant, job_no, sink)
        left = feed.dispatch(rows, 1)
        assert left is not None
        await left
        assert [(u.version, u.record.status.value) for u in sink.updates] == [
            (1, "QUEUED"), (2, "RUNNING"), (3, "RUNNING"),
        ]  # fmt: skip
        assert sink.updates[-1].record.progress.processed_units == 7
    finally:
        reader.close()
