"""Reports coalesce per job (at most one per 250 ms, every stage entered, the latest last) and
every job of a worker goes in one BatchReportStage per interval."""

from __future__ import annotations

import asyncio
import itertools
import time

from sdk_support import FakeWorkerService, lease_lost, unavailable

from jobwire.worker.sdk._context import Snapshot, StopReason
from jobwire.worker.sdk._reporter import JobReporter, ReportSender

INTERVAL = 0.25
SLACK = 0.01  # timer granularity


def snap(
    processed: int, stage: str = "PROCESSING", *, total: int | None = 1000, cp: bytes | None = None, seq: int = 0
) -> Snapshot:
    return Snapshot(stage=stage, processed=processed, total=total, checkpoint=cp, checkpoint_seq=seq)


_senders: dict[int, ReportSender] = {}


def sender(fake: FakeWorkerService) -> ReportSender:
    """The worker's one sender for `fake`, running until the test's loop ends."""
    found = _senders.get(id(fake))
    if found is None:
        found = _senders[id(fake)] = ReportSender(fake, interval=INTERVAL)
        asyncio.get_running_loop().create_task(found.run())
    return found


def reporter(
    fake: FakeWorkerService, stops: list[StopReason], first_stage: str = "PROCESSING", job_no: str = "PT-1"
) -> JobReporter:
    return JobReporter(sender(fake), job_no=job_no, token="tok", first_stage=first_stage, on_stop=stops.append)


async def test_at_most_one_report_per_interval_and_the_latest_is_sent_last(fake: FakeWorkerService) -> None:
    r = reporter(fake, [])
    started = time.monotonic()
    for i in range(1, 401):
        r.update(snap(i))
        await asyncio.sleep(0.003)
    elapsed = time.monotonic() - started
    assert await r.flush(2.0)
    sends = [c for c in fake.calls if c.method == "ReportStage"]
    gaps = [b.at - a.at for a, b in itertools.pairwise(sends)]
    assert all(gap >= INTERVAL - SLACK for gap in gaps[:-1]), gaps  # the last one is the flush's: at once
    assert len(sends) <= elapsed / INTERVAL + 2
    assert len(sends) >= 3  # coalesced, not silenced
    assert sends[-1].request.processed_units == 400
    await r.close()


async def test_a_stage_change_is_sent_within_an_interval(fake: FakeWorkerService) -> None:
    r = reporter(fake, [])
    r.update(snap(1))
    await fake.wait_for("ReportStage", 1)
    r.update(snap(2))  # superseded before the next send
    r.update(snap(0, "VERIFYING", total=None))
    before = time.monotonic()
    requests = await fake.wait_for("ReportStage", 2)
    assert time.monotonic() - before < INTERVAL + 0.1
    assert (requests[1].stage, requests[1].processed_units) == ("VERIFYING", 0)
    assert not requests[1].HasField("total_units")
    await r.close()


async def test_every_job_of_a_worker_goes_in_one_call_per_interval(fake: FakeWorkerService) -> None:
    reporters = [reporter(fake, [], job_no=f"PT-{n}") for n in range(20)]
    started = time.monotonic()
    for i in range(1, 201):
        for r in reporters:
            r.update(snap(i))
        await asyncio.sleep(0.005)
    for r in reporters:
        assert await r.flush(2.0)
    elapsed = time.monotonic() - started
    batches = fake.of("BatchReportStage")
    assert len(batches) <= elapsed / INTERVAL + 3, (len(batches), elapsed)
    assert max(len(b.reports) for b in batches) == 20  # all the jobs in one call
    for n in range(20):
        assert fake.of("ReportStage", f"PT-{n}")[-1].processed_units == 200
    for r in reporters:
        await r.close()


async def test_a_flush_does_not_wait_for_the_interval(fake: FakeWorkerService) -> None:
    r = reporter(fake, [])
    r.update(snap(1))
    await fake.wait_for("ReportStage", 1)
    r.update(snap(2))
    before = time.monotonic()
    assert await r.flush(2.0)
    assert time.monotonic() - before < INTERVAL / 2
    assert fake.of("ReportStage")[-1].processed_units == 2
    await r.close()


async def test_updates_during_a_stage_change_send_wait_for_the_interval(fake: FakeWorkerService) -> None:
    fake.report_latency = 0.05  # so updates arrive while the stage change is in flight
    r = reporter(fake, [], first_stage="PREPARING")
    for i in range(1, 101):  # the first is a stage change; the rest race its send
        r.update(snap(i))
        await asyncio.sleep(0.004)
    assert await r.flush(2.0)
    sends = [c for c in fake.calls if c.method == "ReportStage"]
    assert sends[0].request.stage == "PROCESSING"
    gaps = [b.at - a.at for a, b in itertools.pairwise(sends)]
    assert all(gap >= INTERVAL - SLACK for gap in gaps[:-1]), gaps  # the last one is the flush's: at once
    assert sends[-1].request.processed_units == 100
    await r.close()


async def test_every_stage_is_reported_however_short(fake: FakeWorkerService) -> None:
    fake.report_latency = 0.05
    fake.fail_next("ReportStage", unavailable())
    r = reporter(fake, [], first_stage="PREPARING")
    r.update(snap(5, "PROCESSING"))
    await asyncio.sleep(0.01)  # that send is in flight (and will fail) while the job races ahead
    for stage in ("VERIFYING", "PACKING", "DELIVERING"):
        r.update(snap(0, stage, total=None))
        r.update(snap(1, stage, total=None))
    assert await r.flush(5.0)
    stages = [q.stage for q in fake.of("ReportStage")]
    assert stages == ["PROCESSING", "PROCESSING", "VERIFYING", "PACKING", "DELIVERING"]
    assert fake.of("ReportStage")[-1].processed_units == 1
    await r.close()


async def test_a_checkpoint_rides_on_a_report_once_and_is_never_dropped(fake: FakeWorkerService) -> None:
    r = reporter(fake, [])
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


async def test_unavailable_is_retried_with_the_latest_value(fake: FakeWorkerService) -> None:
    stops: list[StopReason] = []
    r = reporter(fake, stops)
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


async def test_lease_lost_stops_the_job_and_the_reports(fake: FakeWorkerService) -> None:
    stops: list[StopReason] = []
    r = reporter(fake, stops)
    fake.fail_next("ReportStage", lease_lost())
    r.update(snap(1))
    await fake.wait_for("ReportStage", 1)
    assert await r.flush(1.0)
    assert stops == [StopReason.LOST]
    r.update(snap(2, "VERIFYING"))
    await asyncio.sleep(0.05)
    assert len(fake.of("ReportStage")) == 1
    await r.close()


async def test_a_lease_timed_out_stops_the_job_as_timed_out(fake: FakeWorkerService) -> None:
    stops: list[StopReason] = []
    r = reporter(fake, stops)
    fake.fail_next("ReportStage", lease_lost(timed_out=True))
    r.update(snap(1))
    assert await r.flush(1.0)
    assert stops == [StopReason.TIMED_OUT]
    await r.close()


async def test_cancel_requested_in_a_reply_reaches_the_job(fake: FakeWorkerService) -> None:
    stops: list[StopReason] = []
    r = reporter(fake, stops)
    fake.cancel_in_reports.add("PT-1")
    r.update(snap(1))
    assert await r.flush(1.0)
    assert stops == [StopReason.CANCEL]
    await r.close()


async def test_a_refused_report_is_dropped_not_retried(fake: FakeWorkerService) -> None:
    import grpc
    from sdk_support import rpc_error

    r = reporter(fake, [])
    fake.fail_next("ReportStage", rpc_error(grpc.StatusCode.INVALID_ARGUMENT, "UNKNOWN_STAGE"))
    r.update(snap(1))
    assert await r.flush(1.0)
    await asyncio.sleep(0.05)
    assert len(fake.of("ReportStage")) == 1
    await r.close()
