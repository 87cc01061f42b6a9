"""How jobctl shows jobs, findings, events and workers: text pieces, tables, JSON.

Pure functions from protobuf messages to rich renderables, so they are tested without a
terminal. The progress rule (jobwire.domain.progress) holds here too: a percent only with a known total.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from google.protobuf import timestamp_pb2
from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message
from rich.table import Table
from rich.text import Text

from jobwire.client.convert import (
    category_name,
    from_timestamp,
    is_terminal,
    status_name,
)
from jobwire.domain.states import Status
from jobwire.domain.view import STATUS_LABELS, no_progress_text, normalize_locale
from jobwire.v1 import admin_pb2, job_pb2

STATUS_STYLES = {
    "QUEUED": "cyan",
    "RUNNING": "blue",
    "CANCEL_REQUESTED": "yellow",
    "READY": "green",
    "FAILED": "red",
    "CANCELLED": "magenta",
    "WAITING": "bright_yellow",
}
# The few words jobctl adds around the server's localized labels.
_WORDS = {
    "stage": {"en": "stage {i}/{n}", "zh-CN": "第 {i}/{n} 步"},
    "review": {"en": "waiting for review by {who}", "zh-CN": "等待 {who} 审核"},
    "stalled": {"en": "stalled: no news from the worker", "zh-CN": "处理程序暂无响应"},
}
DASH = "-"
_SEP = " · "  # between the parts of a line, here and in the server's Display


def word(key: str, locale: str, **values: object) -> str:
    loc = "zh-CN" if locale.lower().startswith("zh") else "en"
    return _WORDS[key][loc].format(**values)


def to_json(message: Message) -> dict[str, Any]:
    """A message as proto3 JSON (field names as in the .proto, enums by name)."""
    return MessageToDict(message, preserving_proto_field_name=True)


def dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def fmt_time(ts: timestamp_pb2.Timestamp, *, short: bool = False) -> str:
    """UTC, to the second (`short`: without the year); `-` when unset."""
    moment = from_timestamp(ts)
    if moment is None:
        return DASH
    return moment.strftime("%m-%d %H:%M:%SZ" if short else "%Y-%m-%d %H:%M:%SZ")


def elapsed(job: job_pb2.Job, now: datetime | None = None) -> timedelta | None:
    """How long the job has been going: from its submit to its end, or to `now` while it runs.

    An ended job's span is the server's own (created_at to finished_at); a running one's is
    measured against this machine's clock, so a skewed clock never shows less than zero.
    """
    start = from_timestamp(job.created_at)
    if start is None:
        return None
    end = from_timestamp(job.finished_at) or now or datetime.now(UTC)
    return max(timedelta(0), end - start)


def fmt_elapsed(span: timedelta) -> str:
    """`0:42`, `12:05`, `1:02:03`: a stopwatch, whole seconds."""
    minutes, seconds = divmod(int(span.total_seconds()), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02}:{seconds:02}" if hours else f"{minutes}:{seconds:02}"


def fmt_size(size: int) -> str:
    value, unit = float(size), "bytes"
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            break
        value /= 1024
    exact = f"{size:,} bytes"
    return exact if unit == "bytes" else f"{value:.1f} {unit} ({exact})"


def status_label(status: int, locale: str) -> str:
    """The label a person reads for a status (the one a job's Display carries), without a job at hand."""
    return STATUS_LABELS[Status(status_name(status))][normalize_locale(locale)]


def status_text(job: job_pb2.Job) -> Text:
    name = status_name(job.status)
    label = job.display.status_label or name
    return Text(label, style=STATUS_STYLES.get(name, ""))


def stage_text(job: job_pb2.Job, locale: str) -> str:
    """`Verifying result · stage 3/4`, or empty when no stage is running."""
    p = job.progress
    if not job.stage or p.stage_index <= 0:
        return ""
    label = job.display.stage_label or job.stage
    return f"{label} · {word('stage', locale, i=p.stage_index, n=p.stage_count)}"


def percent(progress: job_pb2.Progress) -> int | None:
    """The percent, only when the stage's total is known and positive."""
    if not progress.HasField("total_units") or progress.total_units <= 0:
        return None
    if progress.HasField("percent"):
        return progress.percent
    return min(100, progress.processed_units * 100 // progress.total_units)


def units_text(progress: job_pb2.Progress) -> str:
    """`120/1000 units` with a known total, `120 units` without, empty before any."""
    if progress.HasField("total_units"):
        return f"{progress.processed_units:,}/{progress.total_units:,} units"
    return f"{progress.processed_units:,} units" if progress.processed_units else ""


def queue_text(job: job_pb2.Job, locale: str) -> str:
    """Where a job that is not running stands: its place in line, or why it has none.

    For a QUEUED job that is the server's own line (its Display detail, in the locale asked
    for), without the status label beside it: the one story every view of the job tells
    (its dependencies, no worker for its kind, a paused queue, its place in line).
    """
    if job.status == job_pb2.Job.WAITING:
        return _SEP.join([word("review", locale, who=job.review_assignee), *job.review_items])
    if job.status != job_pb2.Job.QUEUED:
        return ""
    label, detail = job.display.status_label, job.display.detail
    return "" if detail == label else detail.removeprefix(label + _SEP)


def progress_summary(job: job_pb2.Job, locale: str) -> str:
    """One line: stage, units and (only with a known total) the percent."""
    parts = [queue_text(job, locale), stage_text(job, locale), units_text(job.progress)]
    pct = percent(job.progress)
    if pct is not None and stage_text(job, locale):
        parts.append(f"{pct}%")
    if job.stalled and not is_terminal(job):
        parts.append(word("stalled", locale))
    if job.HasField("no_progress_for") and not is_terminal(job):
        parts.append(no_progress_text(job.no_progress_for.ToTimedelta(), locale))
    return _SEP.join(p for p in parts if p)


def job_details(job: job_pb2.Job, locale: str) -> Table:
    """`jobctl get`: one job, key by key."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    # The title first, as a person names the job; a job without one shows no title row.
    rows: list[tuple[str, str | Text]] = [("title", job.title)] if job.title else []
    rows += [
        ("job", job.job_no),
        ("type", job.job_type),
        ("queue", job.queue),
        ("status", status_text(job)),
        ("progress", progress_summary(job, locale) or DASH),
        ("attempt", f"{job.attempt}/{job.max_attempts}" if job.max_attempts else DASH),
        ("input", input_text(job.input) if job.HasField("input") else DASH),
        ("owner", job.owner or DASH),
        (
            "labels",
            ", ".join(f"{k}={v}" for k, v in sorted(job.labels.items())) or DASH,
        ),
        ("created", fmt_time(job.created_at)),
        ("updated", fmt_time(job.updated_at)),
        ("version", str(job.version)),
    ]
    for key, value in rows:
        grid.add_row(key, value)
    for key, value in outcome_rows(job):
        grid.add_row(key, value)
    return grid


def input_text(given: job_pb2.JobInput) -> str:
    """What a job was given: its payload's size and sha256."""
    return f"{fmt_size(given.size_bytes)} · sha256 {given.sha256}"


def outcome_rows(job: job_pb2.Job) -> list[tuple[str, str]]:
    """The result of a READY job, the review a WAITING one waits for, or the error of a FAILED one."""
    if job.status == job_pb2.Job.READY and job.HasField("result"):
        r = job.result
        rows = [
            ("result", r.uri),
            ("size", fmt_size(r.size_bytes)),
            ("sha256", r.sha256),
        ]
        rows += [("type", r.content_type)] if r.content_type else []
        return rows + ([("summary", r.summary)] if r.summary else [])
    if job.status == job_pb2.Job.WAITING:
        # The server's line names the reviewer and the items, in the caller's locale.
        return [("review", job.display.detail or job.review_assignee)]
    if job.status == job_pb2.Job.FAILED and job.HasField("error"):
        e = job.error
        where = f" in stage {e.stage}" if e.stage else ""
        retry = f"retryable: jobctl retry {job.job_no}" if e.retryable else "not retryable"
        return [
            ("error", f"{category_name(e.category)}{where}"),
            ("message", e.message or DASH),
            ("retry", retry),
        ]
    return []


def jobs_table(jobs: Iterable[job_pb2.Job], locale: str) -> Table:
    table = _table("TITLE", "JOB", "TYPE", "QUEUE", "STATUS", "PROGRESS", "ATTEMPT", "UPDATED")
    for job in jobs:
        table.add_row(
            job.title or DASH,  # the table's mark for nothing, as for every empty cell
            job.job_no,
            job.job_type,
            job.queue,
            status_text(job),
            progress_summary(job, locale) or DASH,
            f"{job.attempt}/{job.max_attempts}" if job.max_attempts else DASH,
            fmt_time(job.updated_at, short=True),
        )
    return table


def findings_table(findings: Iterable[admin_pb2.Finding]) -> Table:
    """`jobctl inspect`: one row per finding; times are UTC month-day time to stay narrow."""
    table = _table("KIND", "JOB", "QUEUE", "STATUS", "UNITS", "TRY", "WORKER", "HEARTBEAT", "EXPIRED", "CKPT", "DETAIL")
    for f in findings:
        units = f"{f.processed_units}/{f.total_units}" if f.HasField("total_units") else str(f.processed_units)
        status = status_name(f.status) + (f" {f.stage}" if f.stage else "")
        table.add_row(
            admin_pb2.Finding.Kind.Name(f.kind),
            f.job_no,
            f.queue or DASH,
            status,
            units,
            str(f.attempt),
            f.worker_id or DASH,
            fmt_time(f.heartbeat_at, short=True),
            fmt_time(f.lease_expires_at, short=True),
            "yes" if f.checkpoint_present else "no",
            f.detail or DASH,
        )
    return table


@dataclass(frozen=True)
class Folded:
    """The place of progress reports a table leaves out: `count` of them."""

    count: int


def fold_progress(events: Iterable[admin_pb2.JobEvent]) -> list[admin_pb2.JobEvent | Folded]:
    """`events`, each run of more than two PROGRESS events kept by its first and last only,
    a Folded standing for those between: a trail's endings and stalls are not lost among a
    long stage's reports (86 of them in 21 s of an example job)."""
    out: list[admin_pb2.JobEvent | Folded] = []
    run: list[admin_pb2.JobEvent] = []

    def flush() -> None:
        out.extend(run if len(run) <= 2 else [run[0], Folded(len(run) - 2), run[-1]])
        run.clear()

    for event in events:
        if event.kind == "PROGRESS":
            run.append(event)
            continue
        flush()
        out.append(event)
    flush()
    return out


def events_table(events: Iterable[admin_pb2.JobEvent | Folded]) -> Table:
    table = _table(
        "VERSION",
        "TIME",
        "KIND",
        "TRANSITION",
        "STAGE",
        "UNITS",
        "WORKER",
        "ATTEMPT",
        "DETAIL",
    )
    for e in events:
        if isinstance(e, Folded):
            left_out = f"{e.count} more progress reports (--all shows them)"
            table.add_row("…", DASH, "PROGRESS", DASH, DASH, DASH, DASH, DASH, left_out)
            continue
        units = f"{e.processed_units}/{e.total_units}" if e.HasField("total_units") else ""
        table.add_row(
            str(e.version),
            fmt_time(e.created_at, short=True),
            e.kind,
            _transition(e.from_status, e.to_status),
            e.stage or DASH,
            units or (str(e.processed_units) if e.processed_units else DASH),
            e.worker_id or DASH,
            str(e.attempt),
            event_detail(e) or DASH,
        )
    return table


def event_detail(event: admin_pb2.JobEvent) -> str:
    """What an event says beyond its columns: a handler's entry as key = value, a checkpoint's size and digest."""
    if event.kind == "HANDLER_EVIDENCE":
        return f"{event.key} = {event.detail}"
    if event.kind == "CHECKPOINT_SAVED":
        return f"{fmt_size(event.size_bytes)} · sha256 {event.sha256}"
    return event.detail


def checkpoint_lines(saved: admin_pb2.Checkpoint) -> list[str]:
    """`jobctl checkpoint`: its size and digest, then its text when it is UTF-8."""
    head = f"{saved.job_no}: {fmt_size(saved.size_bytes)} · sha256 {saved.sha256}"
    try:
        return [head, saved.data.decode("utf-8")]
    except UnicodeDecodeError:
        return [head, "(not text: write it to a file with -o)"]


def _transition(before: int, after: int) -> str:
    if not before and not after:
        return DASH
    if before == after or not before:
        return status_name(after)
    return f"{status_name(before)} → {status_name(after)}"


def queue_line(found: admin_pb2.QueueLimitsResponse) -> str:
    """ "exports: at most 2 running · 5/s, burst 1 · paused", or "exports: no limits"."""
    limits = found.limits
    parts = []
    if limits.max_running:
        parts.append(f"at most {limits.max_running} running")
    if limits.rate_per_second:
        parts.append(f"{limits.rate_per_second:g}/s, burst {max(limits.burst, 1)}")
    if found.paused:
        parts.append("paused")
    return f"{found.queue}: {' · '.join(parts) or 'no limits'}"


def workers_table(workers: Iterable[admin_pb2.WorkerInfo]) -> Table:
    table = _table("WORKER", "STATE", "QUEUES", "JOB TYPES", "LAST SEEN", "LEASES")
    for w in workers:
        table.add_row(
            f"{w.worker_id} (shared fleet)" if w.shared_fleet else w.worker_id,
            Text("live", style="green") if w.live else Text("gone", style="dim"),
            ", ".join(w.queues) or DASH,
            ", ".join(w.job_types) or DASH,
            fmt_time(w.last_seen_at),
            leases_cell(w.leases_held, w.leases_stalled),
        )
    return table


def leases_cell(held: int, stalled: int, stalled_word: str = "stalled") -> str:
    """A worker's leases, its stalled ones said: a worker killed mid-job shows `2 (2 stalled)`."""
    return f"{held} ({stalled} {stalled_word})" if stalled else str(held)


# Identifiers stay whole; free text folds when the terminal is narrow.
_NO_WRAP = {
    "JOB",
    "KIND",
    "STATUS",
    "STAGE",
    "WORKER",
    "VERSION",
    "TIME",
    "HEARTBEAT",
    "EXPIRED",
    "UPDATED",
    "LAST SEEN",
    "STATE",
}


def _table(*columns: str) -> Table:
    table = Table(header_style="bold", box=None, pad_edge=False, show_edge=False)
    for column in columns:
        # min_width keeps headers whole: a folded "ATTEMP/T" header is unreadable.
        if column in _NO_WRAP:
            table.add_column(column, no_wrap=True, min_width=len(column))
        else:
            table.add_column(column, overflow="fold", min_width=len(column))
    return table
