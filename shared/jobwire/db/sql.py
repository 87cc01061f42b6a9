"""The statements of every state change, rendered once per dialect and cached by shape.

Building a statement with SQLAlchemy on every call cost more CPU than the database spent
running it (bench/throughput.py), so the write path sends text prepared here. Names come
from the one schema (`jobwire.db.tables`); templates use `:name` placeholders and become
`%(name)s` for PyMySQL. Dialect differences are few and all here: the id of the last
insert, and row locks (SQLite has none: its writers hold the database). No statement reads
the database's clock: the transaction's time is bound (`:now`, jobwire.db.clock).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import DateTime

from jobwire.db.rows import ARTIFACT_COLUMNS
from jobwire.db.tables import artifact, job, job_event
from jobwire.domain.job import Name

# Row reads leave out the blobs (a payload of up to 1 MiB, the checkpoint, internal detail):
# no decision after Submit needs them. Claim reads payload and checkpoint; evidence needs
# only whether a checkpoint exists.
BLOBS = frozenset({"payload", "checkpoint", "error_detail"})
JOB_COLUMNS = tuple(c.name for c in job.c if c.name not in BLOBS)
EVENT_COLUMNS = tuple(c.name for c in job_event.c if c.name != "id")
ARTIFACT_INSERT_COLUMNS = tuple(c.name for c in artifact.c if c.name != "id")
_TIMES = frozenset(c.name for t in (job, artifact) for c in t.c if isinstance(c.type, DateTime))
_FLAGS = frozenset({"stalled", "no_progress", "error_retryable", "has_checkpoint", "limited"})
_PLACEHOLDER = re.compile(r":(\w+)")
# Where a read's value comes from, when not the job column of that name.
_SOURCES = {
    **{n: f"artifact.{n}" for n in ARTIFACT_COLUMNS},
    "has_checkpoint": "job.checkpoint IS NOT NULL",
    # Whether the job's queue has limits (jobwire.db.queue_limits): a primary-key probe in
    # the claim's own SELECT, so queues without limits cost the claim no statement. Not
    # locked, whatever the claim's lock clause: a plain read of the latest commit.
    "limited": "EXISTS (SELECT 1 FROM queue_limits WHERE queue_limits.tenant = job.tenant"
    " AND queue_limits.queue = job.queue)",
}


@dataclass(frozen=True)
class Dialect:
    """What differs between MySQL/MariaDB and SQLite in the statements of this module."""

    name: str
    last_id: str  # the id the previous INSERT generated
    locks: bool  # SELECT ... FOR UPDATE [SKIP LOCKED]
    json_object: str
    claim_from: str  # the claim's FROM: the job table, read through the claim index

    def text(self, template: str) -> str:
        """The template in this dialect's parameter style."""
        return _PLACEHOLDER.sub(r"%(\1)s", template) if self.name == "mysql" else template


MYSQL = Dialect(
    name="mysql",
    last_id="LAST_INSERT_ID()",
    locks=True,
    json_object="JSON_OBJECT",
    # Forced: on a small table MariaDB's optimizer picks a full scan and a filesort for the
    # claim, which locks every row it reads, and with SKIP LOCKED then returned no row at all
    # while rows past another claim's were free (tests/service/test_concurrency.py, 3 runs in
    # 40 left a job unclaimed among 8 claimers of 3).
    claim_from="job FORCE INDEX (ix_job_claim)",
)
SQLITE = Dialect(
    name="sqlite",
    last_id="last_insert_rowid()",
    locks=False,
    json_object="json_object",
    claim_from="job",  # one writer holds the whole database: no row locks to get wrong
)


class Lock:
    """How a row read locks: not at all, FOR UPDATE, or FOR UPDATE SKIP LOCKED."""

    NONE = ""
    UPDATE = " FOR UPDATE"
    SKIP_LOCKED = " FOR UPDATE SKIP LOCKED"
    SHARE = " LOCK IN SHARE MODE"  # MariaDB's spelling of FOR SHARE (MySQL 8 takes both)


JSON_PAIRS = 40


class RowShape:
    """How a read's raw values become a row: the values SQLAlchemy would give, by name.

    The job's columns travel as JSON objects (`json_names`): a result column costs the
    driver a field descriptor to parse on every read, and a job row has sixty of them.
    SQLite's functions take at most 100 arguments (50 pairs), so the pairs are split into
    a few objects of at most JSON_PAIRS each. Blobs follow as plain columns (`names`). A
    `clocked` row also carries the time of the transaction that read it, as `db_now`: the
    decisions made on the row compare with it.
    """

    def __init__(
        self, json_names: Sequence[str], names: Sequence[str], dialect: Dialect, *, clocked: bool = False
    ) -> None:
        self.json_names = tuple(json_names)
        self.names = tuple(names)
        self.clocked = clocked
        every = (*self.json_names, *self.names)
        self._convert: list[tuple[str, Callable[[Any], Any]]] = [(n, _flag) for n in every if n in _FLAGS]
        self._convert += [(n, _time) for n in self.json_names if n in _TIMES]
        if dialect.name == "sqlite":  # SQLite hands back text for DATETIME columns
            self._convert += [(n, _time) for n in self.names if n in _TIMES]

    def select_list(self, dialect: Dialect) -> str:
        def source(name: str) -> str:
            return _SOURCES.get(name, f"job.{name}")

        objects = []
        for start in range(0, len(self.json_names), JSON_PAIRS):
            pairs = ", ".join(f"'{n}', {source(n)}" for n in self.json_names[start : start + JSON_PAIRS])
            objects.append(f"{dialect.json_object}({pairs})")
        return ", ".join([*objects, *(source(n) for n in self.names)])

    def rows(self, raw: Iterable[Sequence[Any]], now: datetime) -> list[dict[str, Any]]:
        """The rows of a read made at `now` (the transaction's time)."""
        out = []
        skip = -(-len(self.json_names) // JSON_PAIRS)  # the number of JSON objects
        for values in raw:
            row: dict[str, Any] = {}
            for text in values[:skip]:
                row.update(json.loads(text))
            row.update(zip(self.names, values[skip:], strict=True))
            for name, convert in self._convert:
                value = row[name]
                if value is not None:
                    row[name] = convert(value)
            if self.clocked:
                row["db_now"] = now
            out.append(row)
        return out


def _flag(value: Any) -> bool:
    return bool(value)


def _time(value: Any) -> datetime:
    return value if isinstance(value, datetime) else datetime.fromisoformat(value)


def sqlite_param(value: Any) -> Any:
    """Times as the text SQLAlchemy stores on SQLite (always six fractional digits)."""
    return value.isoformat(sep=" ", timespec="microseconds") if isinstance(value, datetime) else value


class Statements:
    """Every statement the write path sends, for one dialect."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        d = dialect
        self.row_shape = RowShape([*JOB_COLUMNS, *ARTIFACT_COLUMNS, "has_checkpoint"], [], d, clocked=True)
        self._row_select = (
            f"SELECT {self.row_shape.select_list(d)} FROM job LEFT OUTER JOIN artifact ON artifact.job_id = job.id"
        )
        self.claim_shape = RowShape(JOB_COLUMNS, ["payload", "checkpoint", "limited"], d, clocked=True)
        self.insert_job = d.text(_insert("job", [c.name for c in job.c if c.name != "id"]))
        self.insert_event = d.text(_insert("job_event", EVENT_COLUMNS))
        # The event of a job inserted by the statement just before: its id is not known yet.
        self.insert_first_event = d.text(_insert("job_event", EVENT_COLUMNS).replace(":job_id", d.last_id))
        self.insert_artifact = d.text(_insert("artifact", ARTIFACT_INSERT_COLUMNS))
        self.touch_worker = d.text(
            "UPDATE worker SET last_seen_at = :last_seen_at WHERE tenant = :tenant AND worker_id = :worker_id"
        )
        worker = _insert("worker", ("tenant", "worker_id", "queues", "job_types", "last_seen_at"))
        fresh = ("queues", "job_types", "last_seen_at")
        if d.name == "mysql":
            worker += " ON DUPLICATE KEY UPDATE " + ", ".join(f"{c} = VALUES({c})" for c in fresh)
        else:
            worker += " ON CONFLICT (tenant, worker_id) DO UPDATE SET " + ", ".join(
                f"{c} = excluded.{c}" for c in fresh
            )
        self.upsert_worker = d.text(worker)
        # Many rows at once (a worker may serve 64 queues x 100 job types): the clause that
        # makes it an upsert goes after the rows (Many.tail). The later claim wins, whichever
        # replica commits first.
        self.insert_worker_claim = d.text(_insert("worker_claim", ("tenant", "queue", "job_type", "claimed_at")))
        if d.name == "mysql":
            self.worker_claim_tail = " ON DUPLICATE KEY UPDATE claimed_at = GREATEST(claimed_at, VALUES(claimed_at))"
        else:
            self.worker_claim_tail = (
                " ON CONFLICT (tenant, queue, job_type) DO UPDATE SET claimed_at = MAX(claimed_at, excluded.claimed_at)"
            )
        counter = _insert("job_day_counter", ("tenant", "day", "last_seq"))
        if d.name == "mysql":
            counter += " ON DUPLICATE KEY UPDATE last_seq = last_seq + VALUES(last_seq)"
        else:
            counter += " ON CONFLICT (tenant, day) DO UPDATE SET last_seq = last_seq + excluded.last_seq"
        self.reserve_numbers = d.text(counter)
        self.last_number = d.text("SELECT last_seq FROM job_day_counter WHERE tenant = :tenant AND day = :day")
        self.number_shape = RowShape([], ["last_seq"], d)
        self.dependency_shape = RowShape([], ["id", "tenant", "job_no", "status"], d)
        self.dependent_shape = RowShape([], ["id", "tenant", "job_no"], d)
        self.count_shape = RowShape([], ["tenant", "job_no", "unfinished", "failed_by", "cancelled_by"], d)
        self.insert_batch = d.text(
            _insert("job_batch", ("batch_id", "tenant", "idempotency_key", "fingerprint", "total", "created_at"))
        )
        self.batch_shape = RowShape([], ["batch_id", "fingerprint"], d)
        self.batch_by_key = d.text(
            "SELECT batch_id, fingerprint FROM job_batch WHERE tenant = :tenant AND idempotency_key = :key"
        )
        self.rows_by_batch = d.text(self._row_select + " WHERE job.batch_id = :batch_id ORDER BY job.id")
        # The edges of a job inserted by this transaction: its id is found by its name.
        self.insert_dependency = d.text(
            "INSERT INTO job_dependency (job_id, depends_on_id)"
            " SELECT id, :depends_on_id FROM job WHERE job_no = :job_no AND tenant = :tenant"
        )
        # Not versioned: nothing a person sees changes. An ending guards on the flag instead
        # (jobwire.db.changes), so a row guessed before the mark is read again.
        self.mark_depended_on = d.text("UPDATE job SET has_dependents = TRUE WHERE id = :id AND has_dependents = FALSE")
        # A schedule moved on by a round (jobwire.db.schedules.advance), guarded by the fire time
        # the round read: a batch's are one round trip on MySQL, each with its own count.
        self.advance_schedule = d.text(
            "UPDATE schedule SET next_fire_at = :next_fire_at, last_fire_at = COALESCE(:fired_at, last_fire_at),"
            " last_job_no = COALESCE(:job_no, last_job_no), skipped_firings = skipped_firings + :skipped,"
            " missed_firings = missed_firings + :missed"
            " WHERE tenant = :tenant AND schedule_id = :schedule_id AND next_fire_at = :due_at AND paused = FALSE"
        )

    @functools.cache  # noqa: B019 - two module-level instances, kept for the process
    def rows_by_key(self, count: int) -> str:
        """Job rows of one tenant by idempotency key (a Submit that replays)."""
        names = ", ".join(f":k{i}" for i in range(count))
        return self.dialect.text(self._row_select + f" WHERE job.tenant = :tenant AND job.idempotency_key IN ({names})")

    @functools.cache  # noqa: B019 - two module-level instances, kept for the process
    def rows_by_name(self, count: int, lock: str) -> str:
        """Job rows (with artifact) for `count` jobs named (`:t<i>`, `:n<i>`), in id order."""
        where = f" WHERE {named(count)} ORDER BY job.id"
        return self.dialect.text(self._row_select + where + (lock if self.dialect.locks else ""))

    @functools.cache  # noqa: B019 - two module-level instances, kept for the process
    def rows_by_job_no(self, count: int, lock: str) -> str:
        """Job rows (with artifact) for `count` job numbers (`:n<i>`), in id order.

        Every tenant's job of each number: a shared fleet's call names no tenant, and its
        token tells which of them is its own (jobwire.db.changes).
        """
        names = ", ".join(f":n{i}" for i in range(count))
        where = f" WHERE job.job_no IN ({names}) ORDER BY job.id"
        return self.dialect.text(self._row_select + where + (lock if self.dialect.locks else ""))

    @functools.cache  # noqa: B019 - two module-level instances, kept for the process
    def dependencies(self, count: int) -> str:
        """The jobs submits name in depends_on (`:t<i>`, `:n<i>`: each submit's own tenant),
        locked for the `mark_depended_on` that follows: one that is still running cannot end
        until the new job and its edges are committed. FOR UPDATE from the start, in id order:
        two submits that took a share lock each and then both marked the row would deadlock."""
        sql = f"SELECT id, tenant, job_no, status FROM job WHERE {named(count)} ORDER BY id"
        return self.dialect.text(sql + (Lock.UPDATE if self.dialect.locks else ""))

    @functools.cache  # noqa: B019 - two module-level instances, kept for the process
    def waiting_dependents(self, count: int) -> str:
        """At most `:limit` waiting jobs that depend on any of `count` job ids (`:e<i>`), in id
        order after `:after`. Not locked: the caller locks the jobs it settles, then counts."""
        names = ", ".join(f":e{i}" for i in range(count))
        # Driven from the edges, in order (ix_job_dependency_on: depends_on_id, job_id): a
        # chunk reads from where the last one ended, and a job nobody depends on costs one
        # index probe that finds nothing, on every transaction that ends jobs.
        sql = (
            "SELECT job.id, job.tenant, job.job_no FROM job_dependency JOIN job ON job.id = job_dependency.job_id"
            f" WHERE job_dependency.depends_on_id IN ({names}) AND job_dependency.job_id > :after"
            " AND job.status = 'QUEUED' AND job.waiting_on > 0 ORDER BY job_dependency.job_id LIMIT :limit"
        )
        return self.dialect.text(sql)

    @functools.cache  # noqa: B019 - two module-level instances, kept for the process
    def dependency_counts(self, count: int) -> str:
        """Per job (`:t<i>`, `:n<i>`): its dependencies not READY, and the first that ended FAILED, CANCELLED."""
        sql = (
            "SELECT j.tenant, j.job_no, SUM(CASE WHEN p.status <> 'READY' THEN 1 ELSE 0 END),"
            " MIN(CASE WHEN p.status = 'FAILED' THEN p.job_no END),"
            " MIN(CASE WHEN p.status = 'CANCELLED' THEN p.job_no END)"
            " FROM job j JOIN job_dependency d ON d.job_id = j.id JOIN job p ON p.id = d.depends_on_id"
            f" WHERE {named(count, 'j')} GROUP BY j.tenant, j.job_no"
        )
        return self.dialect.text(sql)

    @functools.cache  # noqa: B019
    def claim(self, job_types: int) -> str:
        """Runnable jobs of one queue, best first, locked; the claim index serves WHERE and ORDER BY.

        A job waiting for a dependency (waiting_on > 0) is never a candidate: the count is
        written in the transaction that ends its last dependency (jobwire.db.dependencies).
        """
        names = ", ".join(f":t{i}" for i in range(job_types))
        sql = (
            f"SELECT {self.claim_shape.select_list(self.dialect)} FROM {self.dialect.claim_from}"
            " WHERE job.tenant = :tenant AND job.queue = :queue AND job.status = 'QUEUED' AND job.waiting_on = 0"
            f" AND job.run_after <= :now AND job.job_type IN ({names})"
            " ORDER BY job.priority DESC, job.id LIMIT :limit"
        )
        return self.dialect.text(sql + (Lock.SKIP_LOCKED if self.dialect.locks else ""))

    @functools.cache  # noqa: B019
    def update(self, columns: tuple[str, ...], guards: tuple[str, ...]) -> str:
        """UPDATE job SET `columns` (each from `:v_<name>`) WHERE every guard holds.

        `guards` are column names compared with `:g_<name>`, or ready SQL conditions
        (those containing a space).
        """
        sets = [f"{c} = :v_{c}" for c in columns]
        where = [g if " " in g else f"{g} = :g_{g}" for g in guards]
        return self.dialect.text(f"UPDATE job SET {', '.join(sets)} WHERE {' AND '.join(where)}")


def named(count: int, table: str = "job") -> str:
    """The WHERE of `count` jobs by name, `:t<i>` and `:n<i>` (`name_params`): an equality on
    both columns of UNIQUE(job_no, tenant) each, so every one is an index probe."""
    return " OR ".join(f"({table}.job_no = :n{i} AND {table}.tenant = :t{i})" for i in range(count))


def name_params(names: Sequence[Name]) -> dict[str, str]:
    params = {}
    for i, (tenant, job_no) in enumerate(names):
        params[f"t{i}"], params[f"n{i}"] = tenant, job_no
    return params


def _insert(table: str, columns: Sequence[str]) -> str:
    return f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join(':' + c for c in columns)})"


def statements_for(name: str) -> Statements:
    return _BY_NAME[name]


_BY_NAME = {"mysql": Statements(MYSQL), "sqlite": Statements(SQLITE)}
