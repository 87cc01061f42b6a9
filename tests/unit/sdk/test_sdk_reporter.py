"""Reports coalesce per job (at most one per 250 ms, every stage entered, the latest last) and
every job of a worker goes in one BatchReportStage per interval."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import AsyncIterator

import pytest
from sdk_support import Call, FakeWorkerService, lease_lost, unavailable

from jobwire.domain.handler_evidence import MAX_ENTRIES_PER_CALL, Entry
from jobwire.worker.sdk._attempt import Snapshot, StopReason
from jobwire.worker.sdk._reporter import JobReporter, ReportSender

INTERVAL = 0.25
SLACK = 0.01  # timer granularity


class StampClock:
    """The sender's clock, remembering its last reading: the time the sender stamped its send.

    A call's arrival time at the fake would be a second reading, and the process can be put
    off the CPU between the two: a late first arrival makes the next gap look short. The
    sender reads its clock last just before it calls, so the gaps are its own decisions.
    """

    def __init__(self) -> None:
        self.last = time.monotonic()

    def __call__(self) -> float:
        self.last = time.monotonic()
        return self.last


def snap(
    processed: int, stage: str = "PROCESSING", *, total: int | None = 1000, cp: bytes | None = None, seq: int = 0
) -> Snapshot:
    return Snapshot(stage=stage, processed=processed, total=total, checkpoint=cp, checkpoint_seq=seq)


@contextlib.asynccontextmanager
async def running(sender: ReportSender) -> AsyncIterator[ReportSender]:
    """`sender` sending until the block ends."""
    task = asyncio.create_task(sender.run())
    try:
        yield sender
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@pytest.fixture
async def sender(fake: FakeWorkerService) -> AsyncIterator[ReportSender]:
    """The worker's one sender for `fake`, running until the test ends."""
    stamps = StampClock()
    fake.clock = lambda: stamps.last
    async with running(ReportSender(fake, interval=INTERVAL, clock=stamps)) as started:
        yield started


def reporter(
    sender: ReportSender, stops: list[StopReason], first_stage: str = "PROCESSING", job_no: str = "PT-1"
) -> JobReporter:
    return JobReporter(sender, job_no=job_no, token="tok", first_stage=first_stage, on_stop=stops.append)


def gaps(calls: list[Call]) -> list[float]:
    return [b.at - a.at for a, b in itertools.pairwise(calls)]


def sent(fake: FakeWorkerService, method: str) -> list[Call]:
    return [c for c in fake.calls if c.method == method]


async def another_jobs_flush(sender: ReportSender, fake: FakeWorkerService) -> None:
    """A report of another job, flushed: the sender has sent everything due by then, in that batch or before."""
    other = reporter(sender, [], job_no="PT-OTHER")
    other.update(snap(1))
    assert await other.flush(2.0)
    assert [q.processed_units for q in fake.of("ReportStage", "PT-OTHER")] == [1]
    await other.close()


async def test_at_most_one_report_per_interval_and_the_latest_is_sent_last(
    fake: FakeWorkerService, sender: ReportSender
) -> None:
    r = reporter(sender, [])
    for i in range(1, 401):
        r.update(snap(i))
        # The job makes progress over time (1.2 s at the least): time passing is what the
        # interval rule is about. No bound depends on how long this really takes.
        await asyncio.sleep(0.003)
    assert await r.flush(2.0)
    sends = sent(fake, "ReportStage")
    # A lower bound on each gap: no load can make a gap shorter.
    assert all(gap >= INTERVAL - SLACK for gap in gaps(sends)[:-1]), gaps(sends)  # the last is the flush's: at once
    units = [c.request.processed_units for c in sends]
    assert len(units) >= 3, units  # coalesced, not silenced
    assert units == sorted(set(units)), units  # never back, never twice
    assert units[-1] == 400
    await r.close()


async def test_a_stage_change_is_sent_with_the_next_interval(fake: FakeWorkerService, sender: ReportSender) -> None:
    r = reporter(sender, [])
    r.update(snap(1))
    await fake.wait_for("ReportStage", 1)
    r.update(snap(2))  # superseded before the next send
    r.update(snap(0, "VERIFYING", total=None))
    requests = await fake.wait_for("ReportStage", 2)  # no flush: the interval's own send
    assert [(q.stage, q.processed_units) for q in requests] == [("PROCESSING", 1), ("VERIFYING", 0)]
    assert not requests[1].HasField("total_units")
    assert gaps(sent(fake, "ReportStage"))[0] >= INTERVAL - SLACK
    await r.close()


async def test_every_job_of_a_worker_goes_in_one_call_per_interval(
    fake: FakeWorkerService, sender: ReportSender
) -> None:
    reporters = [reporter(sender, [], job_no=f"PT-{n}") for n in range(20)]
    for i in range(1, 201):
        for r in reporters:
            r.update(snap(i))
        await asyncio.sleep(0.005)  # the jobs make progress over time, as in the first test
    flushes_from = len(fake.calls)
    for r in reporters:
        assert await r.flush(2.0)
    paced = [c for c in fake.calls[:flushes_from] if c.method == "BatchReportStage"]
    assert len(paced) >= 2, paced
    assert all(gap >= INTERVAL - SLACK for gap in gaps(paced)), gaps(paced)  # one call per interval for them all
    assert max(len(b.reports) for b in fake.of("BatchReportStage")) == 20  # all the jobs in one call
    for n in range(20):
        assert fake.of("ReportStage", f"PT-{n}")[-1].processed_units == 200
    for r in reporters:
        await r.close()


async def test_a_flush_does_not_wait_for_the_interval(fake: FakeWorkerService) -> None:
    # An interval of an hour: a flush that waited for it would time out, whatever the machine's speed.
    async with running(ReportSender(fake, interval=3600.0)) as hourly:
        r = reporter(hourly, [])
        r.update(snap(1))
        await fake.wait_for("ReportStage", 1)  # the first report goes at once
        r.update(snap(2))
        assert await r.flush(5.0), "the flush waited for the interval"
        assert [q.processed_units for q in fake.of("ReportStage")] == [1, 2]
        await r.close()


async def test_updates_during_a_stage_change_send_wait_for_the_interval(
    fake: FakeWorkerService, sender: ReportSender
) -> None:
    fake.report_gate = asyncio.Event()  # holds the stage change's send in flight
    r = reporter(sender, [], first_stage="PREPARING")
    r.update(snap(1))  # a stage change
    await fake.wait_for("BatchReportStage", 1)
    for i in range(2, 101):  # they arrive while its send is in flight
        r.update(snap(i))
    fake.report_gate.set()
    requests = await fake.wait_for("ReportStage", 2)  # no flush: the interval's own send
    assert [(q.stage, q.processed_units) for q in requests] == [("PROCESSING", 1), ("PROCESSING", 100)]
    batches = sent(fake, "BatchReportStage")
    assert gaps(batches)[0] >= INTERVAL - SLACK, "the updates went out before the interval"
    assert await r.flush(2.0)
    assert len(fake.of("ReportStage")) == 2  # nothing left to send
    await r.close()


async def test_every_stage_is_reported_however_short(fake: FakeWorkerService, sender: ReportSender) -> None:
    fake.report_gate = asyncio.Event()
    fake.fail_next("ReportStage", unavailable())
    r = reporter(sender, [], first_stage="PREPARING")
    r.update(snap(5, "PROCESSING"))
    await fake.wait_for("BatchReportStage", 1)  # that send is in flight (and will fail) while the job races ahead
    for stage in ("VERIFYING", "PACKING", "DELIVERING"):
        r.update(snap(0, stage, total=None))
        r.update(snap(1, stage, total=None))
    fake.report_gate.set()
    assert await r.flush(5.0)
    stages = [q.stage for q in fake.of("ReportStage")]
    assert stages == ["PROCESSING", "PROCESSING", "VERIFYING", "PACKING", "DELIVERING"]
    assert fake.of("ReportStage")[-1].processed_units == 1
    await r.close()


async def test_a_checkpoint_rides_on_a_report_once_and_is_never_dropped(
    fake: FakeWorkerService, sender: ReportSender
) -> None:
    r = reporter(sender, [])
    r.update(snap(1, cp=b"A", seq=1))
    r.update(snap(2, cp=b"A", seq=1))  # supersedes the first before it is sent: the checkpoint rides along
    assert await r.flush(2.0)
    r.update(snap(3, cp=b"A", seq=1))
    assert await r.flush(2.0)
    r.update(snap(4, cp=b"B", seq=2))
    assert await r.flush(2.0)
    sent = [(q.processed_units, q.checkpoint if q.HasField("checkpoint") else None) for q in fake.of("ReportStage")]
    assert sent[-1] == (4, b"B")
    assert [cp for _, cp in sent].count(b"A") == 1
    assert (3, None) in sent
    await r.close()


async def test_unavailable_is_retried_with_the_latest_value(fake: FakeWorkerService, sender: ReportSender) -> None:
    stops: list[StopReason] = []
    r = reporter(sender, stops)
    fake.fail_next("ReportStage", unavailable(), unavailable())
    r.update(snap(1, cp=b"cp", seq=1))
    await fake.wait_for("ReportStage", 1)
    r.update(snap(2))  # arrives while the first is being retried
    assert await r.flush(5.0)
    requests = fake.of("ReportStage")
    assert len(requests) == 3
    assert requests[-1].processed_units == 2
    assert requests[-1].checkpoint == b"cp"  # the unsent checkpoint was kept
    assert stops == []
    await r.close()


async def test_lease_lost_stops_the_job_and_the_reports(fake: FakeWorkerService, sender: ReportSender) -> None:
    stops: list[StopReason] = []
    r = reporter(sender, stops)
    fake.fail_next("ReportStage", lease_lost())
    r.update(snap(1))
    await fake.wait_for("ReportStage", 1)
    assert await r.flush(1.0)
    assert stops == [StopReason.LOST]
    r.update(snap(2, "VERIFYING"))
    await another_jobs_flush(sender, fake)
    assert len(fake.of("ReportStage", "PT-1")) == 1
    await r.close()


async def test_a_lease_timed_out_stops_the_job_as_timed_out(fake: FakeWorkerService, sender: ReportSender) -> None:
    stops: list[StopReason] = []
    r = reporter(sender, stops)
    fake.fail_next("ReportStage", lease_lost(timed_out=True))
    r.update(snap(1))
    assert await r.flush(1.0)
    assert stops == [StopReason.TIMED_OUT]
    await r.close()


async def test_cancel_requested_in_a_reply_reaches_the_job(fake: FakeWorkerService, sender: ReportSender) -> None:
    stops: list[StopReason] = []
    r = reporter(sender, stops)
    fake.cancel_in_reports.add("PT-1")
    r.update(snap(1))
    assert await r.flush(1.0)
    assert stops == [StopReason.CANCEL]
    await r.close()


async def test_a_refused_report_is_dropped_not_retried(fake: FakeWorkerService, sender: ReportSender) -> None:
    import grpc
    from sdk_support import rpc_error

    r = reporter(sender, [])
    fake.fail_next("ReportStage", rpc_error(grpc.StatusCode.INVALID_ARGUMENT, "UNKNOWN_STAGE"))
    r.update(snap(1))
    assert await r.flush(1.0)
    await another_jobs_flush(sender, fake)
    assert len(fake.of("ReportStage", "PT-1")) == 1
    await r.close()


async def test_evidence_rides_the_reports_cadence_and_a_flush_waits_for_it(
    fake: FakeWorkerService, sender: ReportSender
) -> None:
    r = reporter(sender, [])
    r.update(snap(1))
    r.record(Entry("payment_request_id", "pi_1"))
    r.record(Entry("ocr.request", "req-2"))
    assert await r.flush(2.0)
    (call,) = fake.of("RecordEvidence")
    assert (call.job_no, call.worker_token) == ("PT-1", "tok")
    assert [(e.key, e.value) for e in call.entries] == [("payment_request_id", "pi_1"), ("ocr.request", "req-2")]
    assert [q.processed_units for q in fake.of("ReportStage")] == [1]  # in the same interval's send
    await r.close()


async def test_evidence_failing_in_transit_is_sent_again_and_never_more_than_a_call_allows(
    fake: FakeWorkerService, sender: ReportSender
) -> None:
    r = reporter(sender, [])
    fake.fail_next("RecordEvidence", unavailable())
    for i in range(MAX_ENTRIES_PER_CALL + 3):
        r.record(Entry("k", str(i)))
    assert await r.flush(5.0)
    calls = fake.of("RecordEvidence")
    assert [len(c.entries) for c in calls] == [MAX_ENTRIES_PER_CALL, MAX_ENTRIES_PER_CALL, 3]  # the first failed
    kept = [e.value for c in calls[1:] for e in c.entries]
    assert kept == [str(i) for i in range(MAX_ENTRIES_PER_CALL + 3)]  # in order, none lost
    await r.close()
