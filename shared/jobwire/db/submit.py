"""Submitting jobs: the rows, their first events, and idempotency keys that replay.

Submits that arrive together are inserted together: each job and its SUBMITTED event
(whose job id the database supplies, `LAST_INSERT_ID()`), all with the COMMIT, in one
round trip. The insert comes first; an idempotency key is looked up only when the
UNIQUE(tenant, key) index refuses one, so a fresh key costs nothing extra.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from jobwire.db import dependencies
from jobwire.db.changes import Row
from jobwire.db.event_rows import event_values
from jobwire.db.lease_tokens import new_lease_key
from jobwire.db.wire import Statement, Wire
from jobwire.db.writer import RetryTransaction
from jobwire.domain.commands import NewJob
from jobwire.domain.errors import IdempotencyKeyReused, JobwireError
from jobwire.domain.evidence import EventKind
from jobwire.domain.job import Digest
from jobwire.domain.states import Status
from jobwire.domain.timeouts import deadline

Submitted = tuple[Row, bool] | JobwireError  # (the job's row, created) or the refusal


async def submit(
    wire: Wire, items: Sequence[tuple[NewJob, str]], *, now: datetime, duplicate: type[Exception], commit: bool
) -> list[Submitted]:
    """Insert each `(new job, job number)`, or answer with the job its idempotency key made.

    `duplicate` is the driver's IntegrityError: the key index refusing an insert. With
    `commit` the inserts ride with the COMMIT; else the transaction goes on (a batch's
    claims and other changes follow).
    """
    send = wire.commit if commit else wire.run
    news = [new for new, _ in items]
    first: dict[tuple[str, str], int] = {}  # a key used twice in one batch: the second replays the first
    for i, new in enumerate(news):
        if new.idempotency_key:
            first.setdefault((new.tenant, new.idempotency_key), i)
    waits, refused, rows = await _prepared(wire, items, now)
    inserting = [i for i, new in enumerate(news) if _key_owner(new, first, i) and i not in refused]
    existing: dict[tuple[str, str], Row] = {}
    if any(news[i].idempotency_key for i in refused):
        # A refused job may be a replay of one made before its dependency ended: that one answers.
        existing = await _by_keys(wire, [news[i] for i in refused if news[i].idempotency_key])
    try:
        await send(_inserts(wire, [rows[i] for i in inserting], [waits[i] for i in inserting], now))
    except duplicate:
        # A key is taken by a committed job: find which, replay those, insert the rest.
        await wire.restart()
        # The restart let go of the dependencies' locks: they are read (and locked) again.
        waits, refused, rows = await _prepared(wire, items, now)
        existing = await _by_keys(wire, [new for new in news if new.idempotency_key])
        inserting = [
            i
            for i, new in enumerate(news)
            if _key_owner(new, first, i) and i not in refused and _key(new) not in existing
        ]
        try:
            await send(_inserts(wire, [rows[i] for i in inserting], [waits[i] for i in inserting], now))
        except duplicate:
            raise RetryTransaction() from None  # another submit took a key meanwhile: all again
    made = {i: rows[i] for i in inserting}
    return [
        refused[i] if i in refused and _key(new) not in existing else _answer(i, new, rows[i], made, existing, first)
        for i, new in enumerate(news)
    ]


Waited = dependencies.Waits | JobwireError | None


async def _prepared(
    wire: Wire, items: Sequence[tuple[NewJob, str]], now: datetime
) -> tuple[list[Waited], dict[int, JobwireError], list[Row]]:
    """Each job's dependencies as found (share-locked), the jobs they refuse, and the rows to insert."""
    news = [new for new, _ in items]
    waits: list[Waited] = [None] * len(items)
    if any(new.depends_on for new in news):
        waits = list(await dependencies.resolve(wire, news))
    refused = {i: w for i, w in enumerate(waits) if isinstance(w, JobwireError)}
    rows = [_new_row(new, job_no, now, _waits(waits[i])) for i, (new, job_no) in enumerate(items)]
    return waits, refused, rows


def _waits(found: Waited) -> dependencies.Waits | None:
    return found if isinstance(found, dependencies.Waits) else None


def _key(new: NewJob) -> tuple[str, str]:
    return new.tenant, new.idempotency_key or ""


def _key_owner(new: NewJob, first: dict[tuple[str, str], int], i: int) -> bool:
    return not new.idempotency_key or first[_key(new)] == i


def _answer(
    i: int, new: NewJob, row: Row, made: dict[int, Row], existing: dict[tuple[str, str], Row],
    first: dict[tuple[str, str], int],
) -> Submitted:  # fmt: skip
    if i in made:
        return row, True
    found = existing.get(_key(new)) or made.get(first[_key(new)])
    if found is None:
        raise RetryTransaction()  # the key's job is gone again (retention): all again
    if found["fingerprint"] != row["fingerprint"]:
        return IdempotencyKeyReused()
    return found, False


def _inserts(wire: Wire, rows: Sequence[Row], waits: Sequence[Waited], now: datetime) -> list[Statement]:
    out: list[Statement] = []
    for row, found in zip(rows, waits, strict=True):
        values = {k: v for k, v in row.items() if k not in _NOT_INSERTED}
        out.append((wire.sql.insert_job, values))
        out.append((wire.sql.insert_first_event, event_values(row, EventKind.SUBMITTED, now, None)))
        if isinstance(found, dependencies.Waits):
            out += dependencies.edges(wire, (row["tenant"], row["job_no"]), found)
    return out


async def _by_keys(wire: Wire, news: Sequence[NewJob]) -> dict[tuple[str, str], Row]:
    found: dict[tuple[str, str], Row] = {}
    tenants = {new.tenant for new in news}
    for tenant in tenants:
        keys = sorted({new.idempotency_key or "" for new in news if new.tenant == tenant})
        params: dict[str, Any] = {"tenant": tenant, **{f"k{i}": k for i, k in enumerate(keys)}}
        for row in await wire.fetch(wire.sql.rows_by_key(len(keys)), params, wire.sql.row_shape):
            found[tenant, row["idempotency_key"]] = row
    return found


# Columns a new job leaves to their defaults, and the artifact a queued job lacks.
NEW_ROW_DEFAULTS: dict[str, object] = {
    "stage": None, "stage_index": 0, "stage_count": 0, "stages": None, "processed_units": 0,
    "total_units": None, "checkpoint": None, "attempt": 0, "attempt_base": 0, "worker_id": None,
    "worker_token": None, "lease_epoch": 0, "lease_seconds": None, "lease_expires_at": None,
    "heartbeat_at": None, "stalled": False, "ended_token": None, "ended_kind": None,
    "attempt_deadline": None, "progress_at": None, "progress_deadline": None, "no_progress": False,
    "error_category": None, "error_stage": None, "error_message": None, "error_retryable": None,
    "error_detail": None, "started_at": None, "finished_at": None, "review_assignee": None,
    "review_items": None, "review_decision": None, "review_note": None, "review_by": None,
    "has_dependents": False, "recorded_attempt": 0, "recorded_entries": 0,
}  # fmt: skip
_NOT_INSERTED = frozenset({"id", "uri", "size_bytes", "sha256", "content_type", "summary"})


def _new_row(new: NewJob, job_no: str, now: datetime, waits: dependencies.Waits | None) -> Row:
    """The row a submit inserts, complete: the reply and the event need no read back."""
    policy, limits = new.retry, new.timeouts
    digest = Digest.of(new.payload)
    return {
        **NEW_ROW_DEFAULTS,
        "id": None,  # the database's; the event takes it from LAST_INSERT_ID()
        "tenant": new.tenant,
        "job_no": job_no,
        "job_type": new.job_type,
        "queue": new.queue,
        "owner": new.owner,
        "title": new.title,
        "labels": json.dumps(new.labels, ensure_ascii=False, sort_keys=True),
        "locale": new.locale,
        "payload": new.payload,
        "input_size": digest.size_bytes,
        "input_sha256": digest.sha256,
        "fingerprint": new.fingerprint(),
        "lease_key": new_lease_key(),
        "idempotency_key": new.idempotency_key or None,
        "priority": new.priority,
        "status": Status.QUEUED.value,
        "max_attempts": policy.max_attempts,
        "initial_backoff_s": policy.initial_backoff_s,
        "max_backoff_s": policy.max_backoff_s,
        "backoff_multiplier": policy.backoff_multiplier,
        "on_lease_lost": policy.on_lease_lost.value,
        "attempt_timeout_s": limits.attempt_s,
        "job_timeout_s": limits.job_s,
        "stage_timeout_s": limits.stage_s,
        "on_no_progress": limits.on_no_progress.value,
        "job_deadline": deadline(now, limits.job_s),
        "created_at": now,
        "updated_at": now,
        "run_after": max(new.run_after, now) if new.run_after else now,
        "version": 1,
        **dependencies.row_values(new, waits),
        "batch_id": new.batch_id,
        "trace_context": new.trace_context,
        "uri": None, "size_bytes": None, "sha256": None, "content_type": None, "summary": None,
    }  # fmt: skip
