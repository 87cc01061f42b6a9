"""Rows to domain values, and the snapshot each visible event carries for the change feed.

A snapshot is the user-visible subset of the job row (plus its artifact) as JSON, and
`record_from_row` reads both a live row and a snapshot: one path, so a resumed watcher
sees exactly what Get would have shown at that version.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from datetime import datetime, timedelta
from json.encoder import encode_basestring as _text
from typing import Any

from jobwire.domain import stages as stage_plans
from jobwire.domain.endings import Attempts, Ending
from jobwire.domain.job import Artifact, Digest, ErrorCategory, JobFailure, JobRecord
from jobwire.domain.lease import Holding
from jobwire.domain.progress import Progress
from jobwire.domain.retry import OnLeaseLost, RetryPolicy
from jobwire.domain.review import Decision, Review, ReviewRequest
from jobwire.domain.stages import DEFAULT_PLAN, StageDef
from jobwire.domain.states import Status
from jobwire.domain.timeouts import deadline

VISIBLE_COLUMNS = (
    "job_no", "tenant", "job_type", "queue", "owner", "title", "input_size", "input_sha256", "labels", "locale",
    "status", "priority",
    "stage", "stage_index", "stage_count", "stages", "processed_units", "total_units",
    "stalled", "no_progress", "progress_at", "attempt", "attempt_base", "max_attempts", "created_at",
    "updated_at", "started_at", "finished_at", "run_after", "error_category", "error_stage",
    "error_message", "error_retryable", "version", "depends_on", "waiting_on", "batch_id", "review_assignee",
    "review_items",
)  # fmt: skip
ARTIFACT_COLUMNS = ("uri", "size_bytes", "sha256", "content_type", "summary")
TIME_COLUMNS = frozenset({"created_at", "updated_at", "started_at", "finished_at", "run_after", "progress_at"})
# A queued job shows no stage; the next attempt starts again at the first one.
UNSTAGED: Mapping[str, Any] = {"stage": None, "stage_index": 0, "processed_units": 0, "total_units": None}


@functools.lru_cache(maxsize=1024)
def plan_of(text: str | None) -> tuple[StageDef, ...]:
    """A stored stage plan (JSON); the same few plans are parsed on every call, so once each."""
    return stage_plans.from_json(json.loads(text)) if text else DEFAULT_PLAN


def record_from_row(row: Mapping[str, Any]) -> JobRecord:
    """The job as stored. Where a QUEUED job stands (its place in line, whether a worker serves it,
    its queue's hold) is no column: a read adds it (jobwire.db.standing)."""
    status = Status(row["status"])
    depends_on = tuple(json.loads(row.get("depends_on") or "[]"))
    plan = plan_of(row["stages"])
    return JobRecord(
        job_no=row["job_no"],
        tenant=row["tenant"],
        job_type=row["job_type"],
        queue=row["queue"],
        owner=row["owner"],
        title=row.get("title") or "",  # snapshots written before titles have none
        input=_input(row),
        labels=json.loads(row["labels"]),
        locale=row["locale"],
        status=status,
        priority=row["priority"],
        stage=row["stage"],
        stages=plan,
        progress=Progress(
            stage_index=row["stage_index"],
            stage_count=row["stage_count"] or len(plan),
            processed_units=row["processed_units"],
            total_units=row["total_units"],
        ),
        stalled=bool(row["stalled"]),
        no_progress_for=_no_progress_for(row),
        attempt=row["attempt"],
        # The number of the last attempt it may make: attempt numbers keep counting across a
        # Release, a Requeue or a Retry, and those grant attempts back, so "attempt 2 of 3"
        # after a Release of a 2-attempt job says honestly that nothing failed yet.
        max_attempts=row["attempt_base"] + row["max_attempts"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        run_after=row["run_after"],
        error=_failure(row) if status is Status.FAILED else None,
        result=_artifact(row) if status is Status.READY else None,
        version=row["version"],
        depends_on=depends_on,
        batch_id=row.get("batch_id"),
        waiting_for=_waiting_for(row, status, depends_on),
        **_review_fields(row, status),
    )


def _input(row: Mapping[str, Any]) -> Digest | None:
    """The payload's digest; a snapshot written before digests were kept has none."""
    sha256 = row.get("input_sha256")
    return Digest(size_bytes=row["input_size"], sha256=sha256) if sha256 else None


def _review_fields(row: Mapping[str, Any], status: Status) -> dict[str, Any]:
    """A WAITING job's reviewer and items (snapshots written before these columns have neither)."""
    if status is not Status.WAITING:
        return {}
    return {"review_assignee": row.get("review_assignee") or "", "review_items": review_items_of(row)}


def review_items_of(row: Mapping[str, Any]) -> tuple[str, ...]:
    text = row.get("review_items")
    return tuple(json.loads(text)) if text else ()


def review_values(request: ReviewRequest) -> dict[str, Any]:
    """The columns a WAITING job keeps for its reviewer; a decision of an earlier review is forgotten."""
    return {
        "review_assignee": request.assignee,
        "review_items": json.dumps(list(request.items), ensure_ascii=False),
        "review_decision": None,
        "review_note": None,
        "review_by": None,
    }


def review_of(row: Mapping[str, Any]) -> Review | None:
    """The decision an approved job's next lease carries, or None."""
    if not row.get("review_decision"):
        return None
    return Review(
        decision=Decision(row["review_decision"]), note=row["review_note"] or "", resolved_by=row["review_by"] or ""
    )


def _waiting_for(row: Mapping[str, Any], status: Status, depends_on: tuple[str, ...]) -> tuple[str, ...]:
    """What a QUEUED job still waits for, as far as the row alone tells: all it depends on while
    none has ended (the row keeps only the count left), else nothing named; a read names them
    (jobwire.db.standing)."""
    waiting = row.get("waiting_on") or 0
    if status is not Status.QUEUED or not waiting:
        return ()
    return depends_on if waiting == len(depends_on) else ()


def _no_progress_for(row: Mapping[str, Any]) -> timedelta | None:
    """How long a job marked no progress has made none: up to the database clock of a read,
    or to the version's own time in a watcher's snapshot (which has no clock). Snapshots
    written before these columns existed have neither."""
    since: datetime | None = row.get("progress_at")
    if not row.get("no_progress") or since is None:
        return None
    now: datetime = row.get("db_now") or row["updated_at"]
    return now - since


def attempts_of(row: Mapping[str, Any]) -> Attempts:
    return Attempts(attempt=row["attempt"], base=row["attempt_base"], budget=row["max_attempts"])


def policy_of(row: Mapping[str, Any]) -> RetryPolicy:
    return RetryPolicy(
        max_attempts=row["max_attempts"],
        initial_backoff_s=row["initial_backoff_s"],
        max_backoff_s=row["max_backoff_s"],
        backoff_multiplier=row["backoff_multiplier"],
        on_lease_lost=OnLeaseLost(row["on_lease_lost"]),
    )


def holding_of(row: Mapping[str, Any]) -> Holding:
    return Holding(
        epoch=row["lease_epoch"],
        token=row["worker_token"],
        expires_at=row["lease_expires_at"],
        stalled=bool(row["stalled"]),
    )


def holding_values(holding: Holding) -> dict[str, Any]:
    return {
        "lease_epoch": holding.epoch,
        "worker_token": holding.token,
        "lease_expires_at": holding.expires_at,
        "stalled": holding.stalled,
    }


def ending_values(ending: Ending, now: datetime) -> dict[str, Any]:
    """The columns an Ending sets: its status, when it finished or may run again, the attempts
    that no longer count, and the error it tells."""
    values: dict[str, Any] = {"status": ending.status.value}
    if ending.status.terminal:
        values["finished_at"] = now
    if ending.status is Status.QUEUED:
        values.update(UNSTAGED, run_after=ending.run_after)
    if ending.attempt_base is not None:
        values["attempt_base"] = ending.attempt_base
    if ending.error is not None:
        values.update(
            error_category=ending.error.category.value,
            error_stage=ending.error.stage,
            error_message=ending.error.message,
            error_retryable=ending.error.retryable,
        )
    return values


def _failure(row: Mapping[str, Any]) -> JobFailure | None:
    if not row["error_category"]:
        return None
    return JobFailure(
        category=ErrorCategory(row["error_category"]),
        stage=row["error_stage"] or "",
        message=row["error_message"] or "",
        retryable=bool(row["error_retryable"]),
    )


def _artifact(row: Mapping[str, Any]) -> Artifact | None:
    if row.get("uri") is None:
        return None
    return Artifact(**{name: row[name] for name in ARTIFACT_COLUMNS})


SNAPSHOT_COLUMNS = (*VISIBLE_COLUMNS, *ARTIFACT_COLUMNS)
_SNAPSHOT_KEYS = tuple((name, json.dumps(name) + ":") for name in SNAPSHOT_COLUMNS)
# For a value that is not text, a whole number, a flag, a time or nothing (no column today).
_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=datetime.isoformat).encode


def snapshot(row: Mapping[str, Any]) -> str:
    """The user-visible state of `row` as JSON, for the event that produced it.

    Written value by value, not by json's encoder over a dict built for it: every change
    writes one, and this way costs two thirds of the time (the encoder called back into
    Python for each of the row's times). The same JSON: texts escaped as json does with
    ensure_ascii off, times as isoformat().
    """
    parts = []
    for name, key in _SNAPSHOT_KEYS:
        value: Any = row.get(name)
        kind: type = type(value)
        if kind is str:
            text = _text(value)
        elif value is None:
            text = "null"
        elif kind is int:
            text = int.__repr__(value)
        elif kind is bool:
            text = "true" if value else "false"
        elif kind is datetime:
            text = '"' + value.isoformat() + '"'
        else:
            text = _encode(value)
        parts.append(key + text)
    return "{" + ",".join(parts) + "}"


def row_from_snapshot(text: str) -> dict[str, Any]:
    row: dict[str, Any] = json.loads(text)
    for name in TIME_COLUMNS:
        if row.get(name):
            row[name] = datetime.fromisoformat(row[name])
    return row


def progress_moved(row: Mapping[str, Any], now: datetime) -> dict[str, object]:
    """Progress moved now (a claim, a report with new units or a new stage): the stage_timeout starts again."""
    return {"progress_at": now, "progress_deadline": deadline(now, row["stage_timeout_s"]), "no_progress": False}
