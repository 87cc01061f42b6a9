"""The user view: labels per status, actions, detail line, locales."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from jobwire.domain.job import Artifact, ErrorCategory, JobFailure, JobRecord
from jobwire.domain.progress import Progress
from jobwire.domain.stages import DEFAULT_PLAN, StageDef
from jobwire.domain.states import Status
from jobwire.domain.view import (
    LOCALES,
    STATUS_LABELS,
    UserAction,
    actions_for,
    normalize_locale,
    render,
)

T0 = datetime(2026, 10, 8, 12, 0, tzinfo=UTC)
STAGE_INDEX = {s.code: i for i, s in enumerate(DEFAULT_PLAN, start=1)}
SHA = "ab" * 32


def make_job(status: Status = Status.RUNNING, **kw: Any) -> JobRecord:
    stage = kw.pop(
        "stage",
        "PROCESSING" if status in (Status.RUNNING, Status.CANCEL_REQUESTED) else None,
    )
    processed = kw.pop("processed", 0)
    total = kw.pop("total", None)
    stages = kw.get("stages", DEFAULT_PLAN)
    index = next((i for i, s in enumerate(stages, start=1) if s.code == stage), 0)
    fields: dict[str, Any] = {
        "job_no": "PT-20261008-001",
        "tenant": "acme",
        "job_type": "video.transcode",
        "queue": "default",
        "owner": "alice",
        "labels": {},
        "status": status,
        "priority": 0,
        "stage": stage,
        "progress": Progress(
            stage_index=index,
            stage_count=len(stages),
            processed_units=processed,
            total_units=total,
        ),
        "created_at": T0,
        "updated_at": T0,
        "attempt": 1 if status is not Status.QUEUED else 0,
        "max_attempts": 3,
    }
    fields.update(kw)
    return JobRecord(**fields)


def failure(retryable: bool, message: str = "The input file could not be read") -> JobFailure:
    return JobFailure(
        category=ErrorCategory.INPUT_INVALID,
        stage="PROCESSING",
        message=message,
        retryable=retryable,
    )


# ---------------------------------------------------------------- labels per status

LABELS = [
    (Status.QUEUED, "Queued", "排队中"),
    (Status.RUNNING, "Processing", "正在处理"),
    (Status.CANCEL_REQUESTED, "Stopping", "正在停止"),
    (Status.READY, "Done", "处理完成"),
    (Status.FAILED, "Not completed", "未完成"),
    (Status.CANCELLED, "Cancelled", "已取消"),
    (Status.WAITING, "Waiting for review", "等待审核"),
]


@pytest.mark.parametrize(("status", "en", "zh"), LABELS, ids=[s.value for s, *_ in LABELS])
def test_status_label_table(status: Status, en: str, zh: str) -> None:
    assert STATUS_LABELS[status] == {"en": en, "zh-CN": zh}


@pytest.mark.parametrize(("status", "en", "zh"), LABELS, ids=[s.value for s, *_ in LABELS])
def test_rendered_status_label(status: Status, en: str, zh: str) -> None:
    job = make_job(status)
    assert render(job, "en").status_label == en
    assert render(job, "zh-CN").status_label == zh
    assert render(job, "en").locale == "en"
    assert render(job, "zh-CN").locale == "zh-CN"


def test_every_status_has_both_locales() -> None:
    assert LOCALES == ("en", "zh-CN")
    assert set(STATUS_LABELS) == set(Status)
    for labels in STATUS_LABELS.values():
        assert set(labels) == set(LOCALES)


# ---------------------------------------------------------------- actions per status

V, C, P, D, RT, RS = (
    UserAction.VIEW,
    UserAction.CANCEL,
    UserAction.PREVIEW,
    UserAction.DOWNLOAD,
    UserAction.RETRY,
    UserAction.RESUBMIT,
)

ACTION_CASES = [
    ("queued", make_job(Status.QUEUED), {V, C}),
    ("queued-with-position", make_job(Status.QUEUED, queue_position=4), {V, C}),
    ("running-preparing", make_job(Status.RUNNING, stage="PREPARING"), {V, C}),
    ("running-processing", make_job(Status.RUNNING, stage="PROCESSING"), {V, C}),
    ("running-verifying", make_job(Status.RUNNING, stage="VERIFYING"), {V, C}),
    ("running-delivering", make_job(Status.RUNNING, stage="DELIVERING"), {V}),
    ("cancel-requested", make_job(Status.CANCEL_REQUESTED), {V}),
    (
        "cancel-requested-delivering",
        make_job(Status.CANCEL_REQUESTED, stage="DELIVERING"),
        {V},
    ),
    (
        "ready",
        make_job(Status.READY, result=Artifact(uri="s3://b/k", size_bytes=1, sha256=SHA)),
        {P, D},
    ),
    ("failed-retryable", make_job(Status.FAILED, error=failure(True)), {V, RT}),
    ("failed-not-retryable", make_job(Status.FAILED, error=failure(False)), {V}),
    ("failed-no-error", make_job(Status.FAILED), {V}),
    ("cancelled", make_job(Status.CANCELLED), {RS}),
]


@pytest.mark.parametrize(("job", "expected"), [c[1:] for c in ACTION_CASES], ids=[c[0] for c in ACTION_CASES])
def test_actions(job: JobRecord, expected: set[UserAction]) -> None:
    assert set(actions_for(job)) == expected
    assert len(actions_for(job)) == len(expected)  # no duplicates
    assert set(render(job, "en").actions) == expected


def test_custom_non_cancellable_stage_has_no_cancel() -> None:
    plan = (StageDef(code="FETCH"), StageDef(code="PUBLISH", cancellable=False))
    assert UserAction.CANCEL in actions_for(make_job(stage="FETCH", stages=plan))
    assert UserAction.CANCEL not in actions_for(make_job(stage="PUBLISH", stages=plan))


# ---------------------------------------------------------------- detail line


def test_running_verifying_detail_en() -> None:
    view = render(make_job(stage="VERIFYING"), "en")
    assert view.detail == "Verifying result, stage 3/4"
    assert view.stage_label == "Verifying result"
    assert view.status_label == "Processing"


def test_running_verifying_detail_zh() -> None:
    view = render(make_job(stage="VERIFYING"), "zh-CN")
    assert view.stage_label == "正在验证结果"
    assert "正在验证结果" in view.detail
    assert "3/4" in view.detail
    assert "Verifying" not in view.detail


@pytest.mark.parametrize("code", [s.code for s in DEFAULT_PLAN])
def test_stage_i_of_n_for_every_default_stage(code: str) -> None:
    stage = DEFAULT_PLAN[STAGE_INDEX[code] - 1]
    view = render(make_job(stage=code), "en")
    assert view.detail.startswith(f"{stage.labels['en']}, stage {STAGE_INDEX[code]}/4")


def test_percent_shown_with_known_total() -> None:
    view = render(make_job(stage="PROCESSING", processed=25, total=100), "en")
    assert view.detail.startswith("Processing, stage 2/4")
    assert "25/100" in view.detail
    assert "25%" in view.detail


def test_percent_floors() -> None:
    view = render(make_job(stage="PROCESSING", processed=2, total=3), "en")
    assert "66%" in view.detail
    assert "67%" not in view.detail


@pytest.mark.parametrize("processed", [0, 7])
def test_no_percent_with_unknown_total(processed: int) -> None:
    view = render(make_job(stage="PROCESSING", processed=processed, total=None), "en")
    assert "%" not in view.detail
    if processed:
        assert str(processed) in view.detail  # units when known


def test_no_percent_with_zero_total() -> None:
    view = render(make_job(stage="PROCESSING", processed=0, total=0), "en")
    assert "%" not in view.detail


def test_percent_in_zh() -> None:
    view = render(make_job(stage="PROCESSING", processed=1, total=4), "zh-CN")
    assert "25%" in view.detail
    assert "正在执行处理" in view.detail


def test_queued_detail_shows_position() -> None:
    assert render(make_job(Status.QUEUED), "en").detail == "Queued"
    ahead = render(make_job(Status.QUEUED, queue_position=3), "en")
    assert ahead.detail == "Queued · 3 jobs ahead"
    assert render(make_job(Status.QUEUED, queue_position=1), "en").detail == "Queued · 1 job ahead"
    nxt = render(make_job(Status.QUEUED, queue_position=0), "en")
    assert nxt.detail == "Queued · next in line"  # position 0 says something
    assert render(make_job(Status.QUEUED), "en").stage_label == ""


def test_queued_detail_zh() -> None:
    view = render(make_job(Status.QUEUED, queue_position=5), "zh-CN")
    assert view.detail == "排队中 · 前面还有 5 个任务"


def test_requeued_job_with_kept_stage_still_reads_queued() -> None:
    """A job requeued after a retryable failure or a Release keeps its checkpoint; a QUEUED
    job has no stage and reads "Queued (+ queue position)".
    Whatever stage the record still carries, a QUEUED job must not read as a running stage."""
    job = make_job(Status.QUEUED, stage="PROCESSING", processed=40, total=100, queue_position=2)
    view = render(job, "en")
    assert view.status_label == "Queued"
    assert view.stage_label == ""
    assert view.detail.startswith("Queued")
    assert "2" in view.detail
    assert "stage 2/4" not in view.detail


def test_cancel_requested_detail_shows_stopping_and_stage() -> None:
    view = render(make_job(Status.CANCEL_REQUESTED, stage="PROCESSING"), "en")
    assert view.detail.startswith("Stopping")
    assert "Processing, stage 2/4" in view.detail


def test_failed_detail_carries_plain_message() -> None:
    msg = "The input file could not be read"
    view = render(make_job(Status.FAILED, stage="PROCESSING", error=failure(True, msg)), "en")
    assert view.status_label == "Not completed"
    assert msg in view.detail
    assert view.detail.startswith("Not completed")
    assert view.stage_label == ""


def test_failed_detail_zh_keeps_message() -> None:
    view = render(make_job(Status.FAILED, error=failure(False, "输入文件无法读取")), "zh-CN")
    assert view.detail.startswith("未完成")
    assert "输入文件无法读取" in view.detail


def test_failed_with_empty_message() -> None:
    assert render(make_job(Status.FAILED, error=failure(False, "")), "en").detail == "Not completed"


@pytest.mark.parametrize("status", [Status.READY, Status.CANCELLED, Status.FAILED])
def test_terminal_job_has_no_stage_label(status: Status) -> None:
    job = make_job(status, stage="DELIVERING")
    assert render(job, "en").stage_label == ""


def test_ready_detail() -> None:
    assert render(make_job(Status.READY), "en").detail == "Done"
    assert render(make_job(Status.READY), "zh-CN").detail == "处理完成"


def test_cancelled_detail() -> None:
    assert render(make_job(Status.CANCELLED), "en").detail == "Cancelled"


@pytest.mark.parametrize("status", [Status.RUNNING, Status.CANCEL_REQUESTED])
def test_stalled_job_says_so(status: Status) -> None:
    fresh = render(make_job(status), "en").detail
    stalled = render(make_job(status, stalled=True), "en").detail
    assert stalled.startswith(fresh)
    assert len(stalled) > len(fresh)


@pytest.mark.parametrize("status", [Status.QUEUED, Status.READY, Status.FAILED, Status.CANCELLED])
def test_stalled_flag_ignored_outside_leased_states(status: Status) -> None:
    assert render(make_job(status, stalled=True), "en").detail == render(make_job(status), "en").detail


def test_custom_stage_label_falls_back() -> None:
    plan = (StageDef(code="FETCH", labels={"en": "Fetching"}), StageDef(code="STORE"))
    assert render(make_job(stage="FETCH", stages=plan), "zh-CN").stage_label == "Fetching"
    view = render(make_job(stage="STORE", stages=plan), "en")
    assert view.stage_label == "Store"
    assert view.detail == "Store, stage 2/2"


# ---------------------------------------------------------------- locales


@pytest.mark.parametrize(
    ("given", "normal"),
    [
        ("zh-CN", "zh-CN"),
        ("zh", "zh-CN"),
        ("zh_CN", "zh-CN"),
        ("zh-cn", "zh-CN"),
        ("ZH-CN", "zh-CN"),
        ("zh_cn", "zh-CN"),
        ("zh-Hans-CN", "zh-CN"),
        ("en", "en"),
        ("en-US", "en"),
        ("en_GB", "en"),
        ("fr", "en"),
        ("de-DE", "en"),
        ("", "en"),
        ("xx", "en"),
    ],
)
def test_normalize_locale(given: str, normal: str) -> None:
    assert normalize_locale(given) == normal


@pytest.mark.parametrize("given", ["zh", "zh_CN", "zh-cn"])
def test_render_normalises_locale(given: str) -> None:
    view = render(make_job(Status.QUEUED), given)
    assert view.locale == "zh-CN"
    assert view.status_label == "排队中"


@pytest.mark.parametrize("given", ["fr", "ja-JP", "nonsense"])
def test_render_unknown_locale_is_english(given: str) -> None:
    view = render(make_job(stage="VERIFYING"), given)
    assert view.locale == "en"
    assert view.detail == "Verifying result, stage 3/4"


def test_empty_locale_uses_the_jobs_locale() -> None:
    job = make_job(Status.RUNNING, stage="VERIFYING", locale="zh_CN")
    assert render(job, "").locale == "zh-CN"
    assert render(job, "").stage_label == "正在验证结果"
    assert render(job, "en").locale == "en"  # an explicit request wins


def test_view_is_frozen() -> None:
    view = render(make_job(), "en")
    with pytest.raises(AttributeError):
        view.detail = "x"  # type: ignore[misc]


def test_a_job_waiting_for_dependencies_names_them_instead_of_its_place() -> None:
    job = make_job(Status.QUEUED, depends_on=("PT-1", "PT-2"), waiting_for=("PT-2",))
    assert render(job, "en").detail == "Queued · Waiting for PT-2"
    assert render(job, "zh-CN").detail == "排队中 · 等待 PT-2 完成"
    assert "next in line" in render(make_job(Status.QUEUED, depends_on=("PT-1",), queue_position=0), "en").detail


def test_a_waiting_job_names_its_reviewer_and_items_in_both_locales() -> None:
    job = make_job(Status.WAITING, stage="PROCESSING", review_assignee="alice", review_items=("Totals", "Payee"))
    assert render(job, "en").detail == "Waiting for review by alice · Totals · Payee"
    assert render(job, "zh-CN").detail == "等待 alice 审核 · Totals · Payee"
    assert render(job, "en").stage_label == ""  # no stage runs while a person decides
    assert set(render(job, "en").actions) == {UserAction.VIEW, UserAction.CANCEL}


def test_a_queued_job_no_worker_serves_says_so_instead_of_its_place() -> None:
    job = make_job(Status.QUEUED, queue_position=0, no_worker=True)
    assert render(job, "en").detail == "Queued · No worker is serving this kind of job yet"
    assert render(job, "zh-CN").detail == "排队中 · 暂时没有可处理此类任务的处理程序"
    assert render(make_job(Status.QUEUED, queue_position=0), "en").detail == "Queued · next in line"
