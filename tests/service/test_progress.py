"""Progress is a fact: it never goes back, shows a percent only with a known
total, refuses impossible numbers and unknown stages, and follows a handler's own stage plan."""

from __future__ import annotations

import grpc
from service_support import claim, db_rows, get, rpc_failure, running, submit

from jobwire.client.status import error_reason, field_violations
from jobwire.v1 import admin_pb2, job_pb2, worker_pb2

Job = job_pb2.Job
FP, INVALID = grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.INVALID_ARGUMENT


def _report(lease: worker_pb2.Lease, stage: str, processed: int = 0, total: int | None = None, **extra):  # type: ignore[no-untyped-def]
    request = worker_pb2.ReportStageRequest(
        job_no=lease.job_no, worker_token=lease.worker_token, stage=stage, processed_units=processed, **extra
    )
    if total is not None:
        request.total_units = total
    return request


async def _refused(served, lease, request, code, reason) -> None:  # type: ignore[no-untyped-def]
    """The report is refused with (code, reason) and leaves the job and every table untouched."""
    before, rows = await get(served, lease.job_no), await db_rows(served)
    exc = await rpc_failure(served.workers.ReportStage(request))
    assert (exc.code(), error_reason(exc)) == (code, reason), exc.details()
    assert await get(served, lease.job_no) == before
    assert await db_rows(served) == rows


async def test_progress_never_goes_back(served) -> None:  # type: ignore[no-untyped-def]
    _, lease = await running(served)
    await served.workers.ReportStage(_report(lease, "PROCESSING", 40, 100))
    await _refused(served, lease, _report(lease, "PROCESSING", 39, 100), FP, "PROGRESS_REGRESSION")
    await _refused(served, lease, _report(lease, "PREPARING", 100), FP, "PROGRESS_REGRESSION")
    # the same numbers again are not a regression; forward is fine
    await served.workers.ReportStage(_report(lease, "PROCESSING", 40))
    await served.workers.ReportStage(_report(lease, "VERIFYING", 0))
    await _refused(served, lease, _report(lease, "PROCESSING", 100, 100), FP, "PROGRESS_REGRESSION")
    seen = await get(served, lease.job_no)
    assert seen.stage == "VERIFYING" and seen.progress.stage_index == 3 and seen.progress.stage_count == 4
    assert seen.display.detail.startswith("Verifying result, stage 3/4")


async def test_percent_only_with_a_known_total(served) -> None:  # type: ignore[no-untyped-def]
    _, lease = await running(served)
    await served.workers.ReportStage(_report(lease, "PROCESSING", 7))
    seen = await get(served, lease.job_no)
    assert seen.progress.processed_units == 7
    assert not seen.progress.HasField("total_units") and not seen.progress.HasField("percent")
    assert "%" not in seen.display.detail and "7 done" in seen.display.detail

    await served.workers.ReportStage(_report(lease, "PROCESSING", 9, 12))  # the total becomes known once
    seen = await get(served, lease.job_no)
    assert (seen.progress.total_units, seen.progress.percent) == (12, 75)
    assert "9/12 (75%)" in seen.display.detail

    await served.workers.ReportStage(_report(lease, "PROCESSING", 12))  # omitting the total keeps it
    seen = await get(served, lease.job_no)
    assert (seen.progress.total_units, seen.progress.percent) == (12, 100)

    await served.workers.ReportStage(_report(lease, "VERIFYING", 0, 0))  # a zero total is no percent
    seen = await get(served, lease.job_no)
    assert seen.progress.total_units == 0 and not seen.progress.HasField("percent")

    await served.workers.ReportStage(_report(lease, "DELIVERING", 1, 3))  # a new stage starts its own total
    seen = await get(served, lease.job_no)
    assert (seen.progress.total_units, seen.progress.percent) == (3, 33)


async def test_a_total_once_known_cannot_change(served) -> None:  # type: ignore[no-untyped-def]
    _, lease = await running(served)
    await served.workers.ReportStage(_report(lease, "PROCESSING", 1, 10))
    await _refused(served, lease, _report(lease, "PROCESSING", 2, 11), FP, "TOTAL_CHANGED")
    await _refused(served, lease, _report(lease, "PROCESSING", 2, 9), FP, "TOTAL_CHANGED")
    await served.workers.ReportStage(_report(lease, "PROCESSING", 2, 10))


async def test_impossible_numbers_and_unknown_stages_are_invalid(served) -> None:  # type: ignore[no-untyped-def]
    _, lease = await running(served)
    await served.workers.ReportStage(_report(lease, "PROCESSING", 5, 10))
    cases = [
        (_report(lease, "PROCESSING", 11, 10), "INVALID_ARGUMENT", "processed_units"),
        (_report(lease, "PROCESSING", 11), "INVALID_ARGUMENT", "processed_units"),  # over the known total
        (_report(lease, "VERIFYING", 4, 3), "INVALID_ARGUMENT", "processed_units"),
        (_report(lease, "PROCESSING", -1), "INVALID_ARGUMENT", "processed_units"),
        (_report(lease, "VERIFYING", 0, -1), "INVALID_ARGUMENT", "total_units"),
        (_report(lease, "UPLOADING", 6), "UNKNOWN_STAGE", "stage"),
        (_report(lease, "processing", 6), "UNKNOWN_STAGE", "stage"),
        (_report(lease, "", 6), "UNKNOWN_STAGE", "stage"),
    ]
    for request, reason, field in cases:
        before, rows = await get(served, lease.job_no), await db_rows(served)
        exc = await rpc_failure(served.workers.ReportStage(request))
        assert (exc.code(), error_reason(exc)) == (INVALID, reason), (request, exc.details())
        assert field in [f for f, _ in field_violations(exc)]
        assert await get(served, lease.job_no) == before and await db_rows(served) == rows


async def test_every_report_updates_updated_at(served) -> None:  # type: ignore[no-untyped-def]
    """Even a report with no new numbers is news: a new version stamped with the report's time."""
    _, lease = await running(served)
    previous = await get(served, lease.job_no)
    for processed in (0, 0, 1):
        await served.workers.ReportStage(_report(lease, "PREPARING", processed))
        seen = await get(served, lease.job_no)
        events = await served.admin.ListEvents(admin_pb2.ListEventsRequest(job_no=lease.job_no))
        last = events.events[-1]
        assert seen.version == previous.version + 1 and last.version == seen.version
        assert seen.updated_at == last.created_at  # the report's own (database) time
        assert seen.updated_at.ToNanoseconds() >= previous.updated_at.ToNanoseconds()
        previous = seen


async def test_a_new_attempt_starts_at_the_first_stage(served) -> None:  # type: ignore[no-untyped-def]
    _, lease = await running(served)
    await served.workers.ReportStage(_report(lease, "VERIFYING", 3, 4))
    await served.workers.Release(worker_pb2.ReleaseRequest(job_no=lease.job_no, worker_token=lease.worker_token))
    queued = await get(served, lease.job_no)
    assert queued.stage == "" and queued.progress.stage_index == 0 and queued.progress.processed_units == 0
    (again,) = await claim(served)
    seen = await get(served, again.job_no)
    assert seen.attempt == 2 and seen.stage == "PREPARING" and seen.progress.stage_index == 1
    assert seen.progress.processed_units == 0 and not seen.progress.HasField("total_units")
    await served.workers.ReportStage(_report(again, "PREPARING", 1))  # no regression across attempts


FETCH = worker_pb2.StageDef(code="FETCH", labels={"en": "Fetching sources", "zh-CN": "正在获取素材"})
RENDER = worker_pb2.StageDef(code="RENDER", labels={"en": "Rendering", "zh-CN": "正在渲染"}, cancellable=True)
PUBLISH = worker_pb2.StageDef(code="PUBLISH", labels={"en": "Publishing", "zh-CN": "正在发布"}, cancellable=False)
PLAN = [FETCH, RENDER, PUBLISH]


async def test_a_custom_stage_plan_from_claim_is_honoured(served) -> None:  # type: ignore[no-untyped-def]
    job = await submit(served, "video")
    (lease,) = await claim(served, "video", stages=PLAN)
    assert list(lease.stages) == PLAN

    en, zh = await get(served, job.job_no, "en"), await get(served, job.job_no, "zh-CN")
    assert en.stage == "FETCH" and (en.progress.stage_index, en.progress.stage_count) == (1, 3)
    assert en.display.stage_label == "Fetching sources" and en.display.detail.startswith("Fetching sources, stage 1/3")
    assert zh.display.stage_label == "正在获取素材" and zh.display.locale == "zh-CN"
    assert zh.display.status_label == "正在处理"

    # the default plan's codes do not exist in this job
    exc = await rpc_failure(served.workers.ReportStage(_report(lease, "PROCESSING", 1)))
    assert (exc.code(), error_reason(exc)) == (INVALID, "UNKNOWN_STAGE")

    await served.workers.ReportStage(_report(lease, "RENDER", 5, 10))
    zh = await get(served, job.job_no, "zh-CN")
    assert zh.stage == "RENDER" and zh.display.stage_label == "正在渲染" and zh.progress.percent == 50
    assert "第 2/3 步" in zh.display.detail and zh.cancellable

    await served.workers.ReportStage(_report(lease, "PUBLISH", 0))
    en = await get(served, job.job_no)
    assert en.display.stage_label == "Publishing" and not en.cancellable
    assert list(en.display.actions) == [job_pb2.Display.VIEW]
    exc = await rpc_failure(served.jobs.Cancel(job_pb2.CancelRequest(job_no=job.job_no)))
    assert (exc.code(), error_reason(exc)) == (FP, "JOB_NOT_CANCELLABLE")
    assert await get(served, job.job_no) == en


async def test_the_plan_is_a_snapshot_taken_at_claim_time(served) -> None:  # type: ignore[no-untyped-def]
    """A later claim with another plan (a redeployed handler) does not change a running job."""
    first = await submit(served, "video")
    await submit(served, "video")
    (lease,) = await claim(served, "video", stages=PLAN)
    (other,) = await claim(served, "video", worker_id="w2", stages=[worker_pb2.StageDef(code="ONLY")])
    assert lease.job_no == first.job_no and [s.code for s in other.stages] == ["ONLY"]
    seen = await get(served, first.job_no)
    assert seen.stage == "FETCH" and seen.progress.stage_count == 3
    await served.workers.ReportStage(_report(lease, "PUBLISH", 1, 1))
    exc = await rpc_failure(served.workers.ReportStage(_report(other, "PUBLISH", 1, 1)))
    assert (exc.code(), error_reason(exc)) == (INVALID, "UNKNOWN_STAGE")


async def test_a_stage_without_labels_reads_as_its_code(served) -> None:  # type: ignore[no-untyped-def]
    job = await submit(served, "bare")
    await claim(served, "bare", stages=[worker_pb2.StageDef(code="CRUNCH_NUMBERS", cancellable=True)])
    zh = await get(served, job.job_no, "zh-CN")
    assert zh.stage == "CRUNCH_NUMBERS" and zh.display.stage_label  # some label, never empty
