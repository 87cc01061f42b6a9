"""The rows a change leaves besides the job's: its job_event row (with the job's snapshot)
and its artifact row."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from jobwire.db.rows import ARTIFACT_COLUMNS, snapshot
from jobwire.domain.evidence import EventKind
from jobwire.domain.job import Artifact


def artifact_values(result: Artifact) -> dict[str, Any]:
    return {name: getattr(result, name) for name in ARTIFACT_COLUMNS}


def event_values(
    row: Mapping[str, Any],
    kind: EventKind,
    at: datetime,
    from_status: str | None,
    *,
    visible: bool = True,
    detail: str | None = None,
    worker_id: str | None = None,
    entry_key: str | None = None,
    size_bytes: int | None = None,
    sha256: str | None = None,
) -> dict[str, Any]:
    """The job_event row recording `row` as it is after a change (its version and snapshot)."""
    return {
        "job_id": row["id"],
        "tenant": row["tenant"],
        "job_no": row["job_no"],
        "version": row["version"],
        "kind": kind.value,
        "visible": visible,
        "from_status": from_status,
        "to_status": row["status"],
        "stage": row["stage"],
        "processed_units": row["processed_units"],
        "total_units": row["total_units"],
        "worker_id": row.get("worker_id") if worker_id is None else worker_id,
        "attempt": row["attempt"],
        "detail": detail,
        "snapshot": snapshot(row) if visible else None,
        "entry_key": entry_key,
        "size_bytes": size_bytes,
        "sha256": sha256,
        "created_at": at,
    }
