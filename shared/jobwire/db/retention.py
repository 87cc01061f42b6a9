"""Retention: terminal jobs, their events, artifact and dependency rows go once past their time.

Per status, counted from `finished_at` by the database clock (defaults: READY and
CANCELLED 30 days, FAILED 90). The work goes in small batches, each a short read and a
short write transaction, so purging never holds many locks while claims go on.

A READY job's artifact is handed to the deleter before its rows go, outside any
transaction. A job whose file could not be deleted keeps its rows and is tried again on
the next run, so files never outlive their rows; a deleter must therefore treat a file
that is already gone as deleted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import timedelta
from functools import partial

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from jobwire.db.engine import Database
from jobwire.db.reads import clock, scoped
from jobwire.db.tables import artifact, job, job_dependency, job_event
from jobwire.domain.commands import Scope
from jobwire.domain.errors import InvalidTransition, JobNotFound
from jobwire.domain.states import Status

log = logging.getLogger(__name__)

BATCH = 100
MAX_BATCHES = 20  # per status and run: one run never monopolises the database


@dataclass(frozen=True, kw_only=True)
class Retention:
    """How long a terminal job is kept after it finished, per status."""

    ready: timedelta = timedelta(days=30)
    cancelled: timedelta = timedelta(days=30)
    failed: timedelta = timedelta(days=90)

    @classmethod
    def days(cls, *, ready: float, cancelled: float, failed: float) -> Retention:
        return cls(ready=timedelta(days=ready), cancelled=timedelta(days=cancelled), failed=timedelta(days=failed))

    def by_status(self) -> dict[Status, timedelta]:
        """The statuses to purge and for how long to keep each; zero or less keeps forever."""
        kept = {Status.READY: self.ready, Status.CANCELLED: self.cancelled, Status.FAILED: self.failed}
        return {status: keep for status, keep in kept.items() if keep > timedelta(0)}


@dataclass(frozen=True, kw_only=True)
class ExpiredArtifact:
    """A result whose job is being purged: the deleter removes the file it names."""

    tenant: str
    job_no: str
    uri: str
    size_bytes: int
    sha256: str
    content_type: str
    stored_key: str | None = None  # a result the server keeps in its result store (jobwire.runtime.result_store)


ArtifactDeleter = Callable[[ExpiredArtifact], None]


def keep_files(expired: ExpiredArtifact) -> None:
    """The default deleter: jobwire records where results are; it does not own that storage."""


@dataclass(frozen=True, kw_only=True)
class Purged:
    """What one run removed."""

    jobs: int = 0
    events: int = 0
    artifacts: int = 0
    batches: int = 0
    kept: int = 0  # jobs kept because their file could not be deleted

    def __add__(self, other: Purged) -> Purged:
        return Purged(
            jobs=self.jobs + other.jobs,
            events=self.events + other.events,
            artifacts=self.artifacts + other.artifacts,
            batches=self.batches + other.batches,
            kept=self.kept + other.kept,
        )


@dataclass(frozen=True, kw_only=True)
class Due:
    job_id: int
    artifact: ExpiredArtifact | None


def due(conn: Connection, status: Status, keep: timedelta, limit: int, skip: Collection[int] = ()) -> list[Due]:
    """Up to `limit` jobs in `status` finished more than `keep` ago, oldest first."""
    cutoff = clock(conn) - keep
    where = [job.c.status == status.value, job.c.finished_at < cutoff]
    if skip:
        where.append(job.c.id.not_in(list(skip)))
    query = (
        sa.select(job.c.id, job.c.tenant, job.c.job_no, artifact.c.uri, artifact.c.size_bytes, artifact.c.sha256,
                  artifact.c.content_type, artifact.c.stored_key)
        .select_from(job.outerjoin(artifact, artifact.c.job_id == job.c.id))
        .where(*where)
        .order_by(job.c.finished_at, job.c.id)
        .limit(limit)
    )  # fmt: skip
    out = []
    for r in conn.execute(query).mappings():
        found = None
        if r["uri"] is not None:
            found = ExpiredArtifact(
                tenant=r["tenant"], job_no=r["job_no"], uri=r["uri"], size_bytes=r["size_bytes"],
                sha256=r["sha256"], content_type=r["content_type"], stored_key=r["stored_key"],
            )  # fmt: skip
        out.append(Due(job_id=r["id"], artifact=found))
    return out


def purge(conn: Connection, status: Status, job_ids: Sequence[int], keep: timedelta, *, skip_locked: bool) -> Purged:
    """Delete these jobs with their events and artifact rows, if still terminal and due."""
    if not job_ids:
        return Purged()
    cutoff = clock(conn) - keep
    query = sa.select(job.c.id).where(
        job.c.id.in_(list(job_ids)), job.c.status == status.value, job.c.finished_at < cutoff
    )
    # Lock what goes; a row someone is reading for update (a user's Retry) waits for next time.
    ids = list(conn.execute(query.with_for_update(skip_locked=skip_locked)).scalars())
    if not ids:
        return Purged(batches=1)
    events, artifacts = _delete_rows_of(conn, ids)
    jobs = conn.execute(sa.delete(job).where(job.c.id.in_(ids), job.c.status == status.value)).rowcount
    return Purged(jobs=jobs, events=events, artifacts=artifacts, batches=1)


def _delete_rows_of(conn: Connection, ids: Sequence[int]) -> tuple[int, int]:
    """Delete what belongs to these (locked, terminal) jobs besides their own rows: events,
    artifact rows, and dependency edges either way (a terminal job waits for nothing, and a
    job that depended on it was settled when it ended). The events and artifacts deleted."""
    ids = list(ids)
    events = conn.execute(sa.delete(job_event).where(job_event.c.job_id.in_(ids))).rowcount
    artifacts = conn.execute(sa.delete(artifact).where(artifact.c.job_id.in_(ids))).rowcount
    conn.execute(sa.delete(job_dependency).where(job_dependency.c.job_id.in_(ids)))
    conn.execute(sa.delete(job_dependency).where(job_dependency.c.depends_on_id.in_(ids)))
    return events, artifacts


def purge_expired(
    db: Database, retention: Retention, deleter: ArtifactDeleter = keep_files, *, batch: int = BATCH
) -> Purged:
    """Purge every status's due jobs, a batch per transaction; files first, rows after."""
    total = Purged()
    for status, keep in retention.by_status().items():
        total = total + _purge_status(db, status, keep, deleter, batch)
    return total


def _purge_status(db: Database, status: Status, keep: timedelta, deleter: ArtifactDeleter, batch: int) -> Purged:
    total = Purged()
    kept: set[int] = set()  # files that would not go: their rows stay, skipped for this run
    for _ in range(MAX_BATCHES):
        found = db.read(partial(due, status=status, keep=keep, limit=batch, skip=frozenset(kept)))
        gone = [d.job_id for d in found if _files_deleted(deleter, d)]
        kept.update(d.job_id for d in found if d.job_id not in set(gone))
        if gone:
            total = total + db.write(partial(purge, status=status, job_ids=gone, keep=keep, skip_locked=db.is_mysql))
        total = total + Purged(kept=len(found) - len(gone))
        if len(found) < batch:
            break
    return total


def _files_deleted(deleter: ArtifactDeleter, found: Due) -> bool:
    if found.artifact is None:
        return True
    try:
        deleter(found.artifact)
        return True
    except Exception:  # a deleter's failure keeps the rows; it must not stop the run
        log.warning("retention: could not delete the result of %s; its rows stay", found.artifact.job_no, exc_info=True)
        return False


def delete_finished(db: Database, scope: Scope, job_no: str, deleter: ArtifactDeleter) -> None:
    """Delete one terminal job now, as retention would once it is due (DeleteOperation).

    Raises JobNotFound for no such job `scope` sees and InvalidTransition for one still
    unfinished. As in a purge, the file goes first and the rows after; a file that would not
    go leaves the rows in place (the deleter's error is raised), so files never outlive rows.
    """
    found = db.read(partial(_one_terminal, scope=scope, job_no=job_no))
    if found.artifact is not None:
        deleter(found.artifact)
    db.write(partial(_delete_rows, job_id=found.job_id, job_no=job_no))


def _one_terminal(conn: Connection, scope: Scope, job_no: str) -> Due:
    query = (
        sa.select(job.c.id, job.c.status, artifact.c.uri, artifact.c.size_bytes, artifact.c.sha256,
                  artifact.c.content_type)
        .select_from(job.outerjoin(artifact, artifact.c.job_id == job.c.id))
        .where(*scoped(scope), job.c.job_no == job_no)
    )  # fmt: skip
    r = conn.execute(query).mappings().first()
    if r is None:
        raise JobNotFound()
    if not Status(r["status"]).terminal:
        raise InvalidTransition(f"job {job_no} has not finished; cancel it first, or wait for it")
    found = None
    if r["uri"] is not None:
        found = ExpiredArtifact(
            tenant=scope.tenant, job_no=job_no, uri=r["uri"], size_bytes=r["size_bytes"],
            sha256=r["sha256"], content_type=r["content_type"],
        )  # fmt: skip
    return Due(job_id=r["id"], artifact=found)


def _delete_rows(conn: Connection, job_id: int, job_no: str) -> None:
    # A FAILED job may be retried (FAILED -> QUEUED) between the read and now: read the status
    # again under the row's lock, as a purge does, and delete only what is still terminal.
    query = sa.select(job.c.status).where(job.c.id == job_id).with_for_update()
    status = conn.execute(query).scalar()
    if status is None:  # deleted meanwhile, by a second caller or by retention
        raise JobNotFound()
    if not Status(status).terminal:
        raise InvalidTransition(f"job {job_no} has not finished; cancel it first, or wait for it")
    _delete_rows_of(conn, [job_id])
    conn.execute(sa.delete(job).where(job.c.id == job_id))
