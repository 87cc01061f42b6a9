"""A job as the pages show it: the server's Display labels plus the numbers for the bars.

The same values render the HTML and travel in each live update (as JSON), so a page that
updates itself shows exactly what a reload would.
"""

from __future__ import annotations

import mimetypes
import re
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from jobwire.client.convert import is_terminal, status_name
from jobwire.client.render import fmt_elapsed, fmt_size, fmt_time, percent
from jobwire.gateway.i18n import t
from jobwire.v1 import admin_pb2, job_pb2

# What the gateway offers for each Display action; VIEW is the page itself.
ACTIONS = {
    job_pb2.Display.CANCEL: "cancel",
    job_pb2.Display.RETRY: "retry",
    job_pb2.Display.DOWNLOAD: "download",
}
_CONTENT_TYPE = re.compile(r"[\w.+-]+/[\w.+-]+")
OCTET_STREAM = "application/octet-stream"


@dataclass(frozen=True, kw_only=True)
class JobView:
    title: str  # as submitted: shown first; empty when none was given
    job_no: str
    job_type: str
    status: str  # the code, for styles and tests
    status_label: str
    stage_label: str
    detail: str
    stage_index: int
    stage_count: int
    stage_text: str
    units_text: str
    percent: int | None  # only when the stage's total is known
    actions: tuple[str, ...]
    terminal: bool
    attempt: str
    queue: str
    owner: str
    created: str
    started: str
    duration: str  # started to finished, or to now while it runs; "" before it starts
    finished: str
    updated: str
    result_summary: str
    error_message: str
    input_size: str  # what the job was given: its payload's size and sha256
    input_sha256: str

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def job_view(job: job_pb2.Job, locale: str) -> JobView:
    p = job.progress
    return JobView(
        title=job.title,
        job_no=job.job_no,
        job_type=job.job_type,
        status=status_name(job.status),
        status_label=job.display.status_label or status_name(job.status),
        stage_label=job.display.stage_label,
        detail=job.display.detail,
        stage_index=p.stage_index,
        stage_count=p.stage_count,
        stage_text=t("stage_of", locale, i=p.stage_index, n=p.stage_count) if p.stage_index else t("no_stage", locale),
        units_text=_units(p, locale),
        percent=percent(p),
        actions=tuple(ACTIONS[a] for a in job.display.actions if a in ACTIONS),
        terminal=is_terminal(job),
        attempt=f"{job.attempt}/{job.max_attempts}" if job.max_attempts else str(job.attempt),
        queue=job.queue,
        owner=job.owner,
        created=fmt_time(job.created_at),
        started=fmt_time(job.started_at) if job.HasField("started_at") else "",
        duration=_duration(job),
        finished=fmt_time(job.finished_at),
        updated=fmt_time(job.updated_at, short=True),
        result_summary=job.result.summary if job.HasField("result") else "",
        error_message=job.error.message if job.HasField("error") else "",
        input_size=fmt_size(job.input.size_bytes) if job.HasField("input") else "",
        input_sha256=job.input.sha256,
    )


def _duration(job: job_pb2.Job) -> str:
    """How long it ran: from its start to its end, or to now (this machine's clock) while it runs."""
    if not job.HasField("started_at"):
        return ""
    end = job.finished_at.ToDatetime(UTC) if job.HasField("finished_at") else datetime.now(UTC)
    return fmt_elapsed(max(timedelta(0), end - job.started_at.ToDatetime(UTC)))


HANDLER_EVIDENCE = "HANDLER_EVIDENCE"  # an entry a handler recorded: key = value


def checkpoint_view(saved: admin_pb2.Checkpoint | None) -> dict[str, str | None] | None:
    """The latest checkpoint as the evidence page shows it: its text when it is UTF-8, always its size and digest."""
    if saved is None:
        return None
    try:
        text: str | None = saved.data.decode("utf-8")
    except UnicodeDecodeError:
        text = None  # bytes a person cannot read: the size and digest say what they were
    return {"size": fmt_size(saved.size_bytes), "sha256": saved.sha256, "text": text}


def _units(p: job_pb2.Progress, locale: str) -> str:
    if p.HasField("total_units"):
        return t("units_of", locale, done=f"{p.processed_units:,}", total=f"{p.total_units:,}")
    return t("units_open", locale, done=f"{p.processed_units:,}") if p.processed_units else ""


def download_headers(job_no: str, content_type: str) -> tuple[str, dict[str, str]]:
    """The media type and headers a result is sent with: `PT-20261008-001.json`, never sniffed."""
    media = content_type.split(";", 1)[0].strip().lower()
    if not _CONTENT_TYPE.fullmatch(media):
        media = OCTET_STREAM  # a worker's free text must not become a header we cannot vouch for
    extension = mimetypes.guess_extension(media) or ".bin"
    filename = re.sub(r"[^A-Za-z0-9._-]", "_", job_no) + extension
    return media, {
        "Content-Disposition": f'attachment; filename="{filename}"',
        "X-Content-Type-Options": "nosniff",
        "Cache-Control": "no-store",  # a person's result: kept by no cache on the way or in the browser
    }
