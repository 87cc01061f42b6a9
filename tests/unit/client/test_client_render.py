"""What jobctl prints: a percent only with a known total, readable tables, outcomes."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta

import pytest
from rich.console import Console, RenderableType

from jobwire.client import render
from jobwire.client.convert import timestamp
from jobwire.client.live import WatchView, live_line, progress_bar
from jobwire.v1 import admin_pb2, job_pb2

pytestmark = pytest.mark.timeout(10)
Job = job_pb2.Job


def running(processed: int, total: int | None = None, **extra: object) -> job_pb2.Job:
    progress = job_pb2.Progress(stage_index=2, stage_count=4, processed_units=processed)
    if total is not None:
        progress.total_units = total
        progress.percent = min(100, processed * 100 // total) if total else 0
    return Job(
        job_no="PT-20261008-001",
        status=Job.RUNNING,
        stage="PROCESSING",
        progress=progress,
        display=job_pb2.Display(status_label="Processing", stage_label="Processing"),
        version=5,
        **extra,  # type: ignore[arg-type]
    )


def text_of(renderable: RenderableType, *, width: int = 140) -> str:
    console = Console(file=io.StringIO(), width=width, record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


def test_percent_only_with_a_known_total() -> None:
    assert render.percent(running(30, 120).progress) == 25
    assert render.percent(running(30).progress) is None
    assert render.percent(running(0, 0).progress) is None


def test_units_show_the_total_only_when_known() -> None:
    assert render.units_text(running(1200, 5000).progress) == "1,200/5,000 units"
    assert render.units_text(running(1200).progress) == "1,200 units"
    assert render.units_text(running(0).progress) == ""


def test_summary_of_an_unknown_total_has_no_percent() -> None:
    line = render.progress_summary(running(42), "en")
    assert line == "Processing · stage 2/4 · 42 units"
    assert "%" not in line


def test_summary_of_a_known_total_has_the_percent() -> None:
    assert render.progress_summary(running(50, 200), "en") == ("Processing · stage 2/4 · 50/200 units · 25%")


def queued(detail: str, label: str = "Queued", **fields: object) -> job_pb2.Job:
    return Job(status=Job.QUEUED, display=job_pb2.Display(status_label=label, detail=detail), **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("job", "shown"),
    [
        (queued("Queued · 3 jobs ahead", queue_position=3), "3 jobs ahead"),
        (queued("Queued · next in line", queue_position=0), "next in line"),
        (queued("排队中 · 前面还有 3 个任务", "排队中", queue_position=3), "前面还有 3 个任务"),
        (
            queued("Queued · No worker is serving this kind of job yet", no_worker=True),
            "No worker is serving this kind of job yet",
        ),
        (queued("Queued: the queue is paused", queue_position=2), "Queued: the queue is paused"),
        (queued("Queued · Waiting for PT-1", depends_on=["PT-1"]), "Waiting for PT-1"),
        (queued("Queued"), ""),  # a stream message after the first: no place in line
    ],
)
def test_a_queued_job_shows_the_servers_line_not_one_of_its_own(job: job_pb2.Job, shown: str) -> None:
    """The same story as every other view of the job: the place in line, or why it has none."""
    assert render.progress_summary(job, "en") == shown


def test_stalled_job_says_so() -> None:
    assert "stalled" in render.progress_summary(running(1, stalled=True), "en")


def test_bar_pulses_without_a_total_and_fills_with_one() -> None:
    unknown = progress_bar(running(42))
    known = progress_bar(running(50, 200))
    assert unknown is not None and unknown.total is None
    assert known is not None and known.total == 200 and known.completed == 50
    assert progress_bar(Job(status=Job.QUEUED)) is None


def test_live_line_for_an_unknown_total_has_no_percent() -> None:
    text = text_of(live_line(running(42), "en"))
    assert "stage 2/4" in text and "42 units" in text
    assert "%" not in text


def test_live_line_for_a_known_total_has_the_percent() -> None:
    text = text_of(live_line(running(50, 200), "en"))
    assert "50/200 units" in text and "25%" in text


def test_ready_outcome_shows_uri_size_and_sha256() -> None:
    job = Job(
        job_no="PT-20261008-001",
        status=Job.READY,
        result=job_pb2.Artifact(uri="s3://out/v.mp4", size_bytes=3 * 1024 * 1024, sha256="ab" * 32),
    )
    rows = dict(render.outcome_rows(job))
    assert rows["result"] == "s3://out/v.mp4"
    assert rows["size"] == "3.0 MiB (3,145,728 bytes)"
    assert rows["sha256"] == "ab" * 32


def test_failed_outcome_shows_category_stage_and_retry_hint() -> None:
    error = job_pb2.JobError(
        category=job_pb2.JobError.DEPENDENCY_FAILED,
        stage="PROCESSING",
        message="the storage service did not answer",
        retryable=True,
    )
    rows = dict(render.outcome_rows(Job(job_no="PT-1", status=Job.FAILED, error=error)))
    assert rows["error"] == "DEPENDENCY_FAILED in stage PROCESSING"
    assert rows["message"] == "the storage service did not answer"
    assert rows["retry"] == "retryable: jobctl retry PT-1"


def test_sizes_are_human_and_exact() -> None:
    assert render.fmt_size(0) == "0 bytes"
    assert render.fmt_size(1023) == "1,023 bytes"
    assert render.fmt_size(1536) == "1.5 KiB (1,536 bytes)"


def test_plain_watch_output_prints_changes_once_and_the_outcome() -> None:
    out = Console(file=io.StringIO(), width=120, record=True, color_system=None)
    view = WatchView(out, locale="en")
    with view:
        view.update(running(10))
        view.update(running(10))  # a version bump with nothing visible: no new line
        view.update(running(20))
    view.finish(
        Job(
            job_no="PT-1",
            status=Job.CANCELLED,
            display=job_pb2.Display(status_label="Cancelled"),
        )
    )
    lines = out.export_text().splitlines()
    assert lines == [
        "PT-20261008-001 Processing · Processing · stage 2/4 · 10 units",
        "PT-20261008-001 Processing · Processing · stage 2/4 · 20 units",
        "PT-1 Cancelled",
    ]


def test_a_trail_keeps_each_run_of_progress_by_its_first_and_last() -> None:
    def event(version: int, kind: str) -> admin_pb2.JobEvent:
        return admin_pb2.JobEvent(version=version, kind=kind)

    kinds = ["CLAIMED", *["PROGRESS"] * 6, "WORKER_DISCONNECTED", "PROGRESS", "PROGRESS", "COMPLETED"]
    trail = [event(v, k) for v, k in enumerate(kinds, start=1)]
    folded = render.fold_progress(trail)
    shown = [e.version if isinstance(e, admin_pb2.JobEvent) else e for e in folded]
    assert shown == [1, 2, render.Folded(4), 7, 8, 9, 10, 11]  # a run of two stays whole
    table = text_of(render.events_table(folded))
    assert "4 more progress reports (--all shows them)" in table and "WORKER_DISCONNECTED" in table
    assert render.fold_progress(trail[:3]) == trail[:3]


def test_tables_have_readable_headers() -> None:
    finding = admin_pb2.Finding(
        kind=admin_pb2.Finding.STALLED,
        job_no="PT-1",
        status=Job.RUNNING,
        worker_id="w-7",
    )
    event = admin_pb2.JobEvent(version=3, kind="CLAIMED", from_status=Job.QUEUED, to_status=Job.RUNNING)
    worker = admin_pb2.WorkerInfo(worker_id="w-7", queues=["default"], leases_held=2)
    assert "STALLED" in text_of(render.findings_table([finding]))
    assert "QUEUED → RUNNING" in text_of(render.events_table([event]))
    workers = text_of(render.workers_table([worker]))
    assert "LAST SEEN" in workers and "w-7" in workers
    dead = admin_pb2.WorkerInfo(worker_id="w-8", leases_held=2, leases_stalled=2, live=True)
    assert "2 (2 stalled)" in text_of(render.workers_table([dead]))
    jobs = text_of(render.jobs_table([running(5, 10)], "en"))
    assert "PT-20261008-001" in jobs and "50%" in jobs


def test_workers_are_marked_live_or_gone() -> None:
    live = admin_pb2.WorkerInfo(worker_id="w-live", live=True)
    gone = admin_pb2.WorkerInfo(worker_id="w-gone", live=False)
    lines = text_of(render.workers_table([live, gone])).splitlines()
    assert "STATE" in lines[0]
    assert [line.split()[:2] for line in lines[1:]] == [["w-live", "live"], ["w-gone", "gone"]]


def test_a_shared_fleets_worker_says_so() -> None:
    fleet = admin_pb2.WorkerInfo(worker_id="fleet-1", live=True, shared_fleet=True)
    (line,) = text_of(render.workers_table([fleet])).splitlines()[1:]
    assert line.split()[:4] == ["fleet-1", "(shared", "fleet)", "live"]


def test_elapsed_runs_from_submit_to_now_then_to_the_end() -> None:
    submitted = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    job = running(5, created_at=timestamp(submitted))
    assert "1:23" in text_of(live_line(job, "en", now=submitted + timedelta(seconds=83)))
    assert render.elapsed(job, submitted - timedelta(seconds=5)) == timedelta(0)  # a clock behind: never negative
    ended = Job(job_no="PT-1", status=Job.READY, created_at=timestamp(submitted))
    ended.finished_at.CopyFrom(timestamp(submitted + timedelta(hours=1, seconds=62)))
    assert render.fmt_elapsed(render.elapsed(ended) or timedelta(-1)) == "1:01:02"
    out = Console(file=io.StringIO(), width=120, record=True, color_system=None)
    WatchView(out, locale="en").finish(ended)
    assert "elapsed  1:01:02" in out.export_text()
    assert render.elapsed(Job(job_no="PT-2")) is None  # no submit time, nothing shown
