"""The schema, declared once. Alembic migrations must agree with it (a test checks)."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Float,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.dialects import mysql

metadata = MetaData()

# DATETIME(6) on MySQL: leases are decided to the microsecond by the database clock.
Timestamp = DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
# MEDIUMBLOB on MySQL: payloads go up to 1 MiB, beyond BLOB's 64 KiB.
Blob = LargeBinary().with_variant(mysql.MEDIUMBLOB(), "mysql", "mariadb")
LongText = Text().with_variant(mysql.MEDIUMTEXT(), "mysql", "mariadb")
Id = BigInteger().with_variant(Integer(), "sqlite")  # SQLite autoincrement needs INTEGER

job = Table(
    "job",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("tenant", String(64), nullable=False),
    Column("job_no", String(40), nullable=False),
    Column("job_type", String(64), nullable=False),
    Column("queue", String(64), nullable=False),
    Column("owner", String(128), nullable=False, server_default=""),
    Column("title", String(200), nullable=False, server_default=""),  # plain text, as submitted
    Column("labels", Text, nullable=False),  # JSON object
    Column("locale", String(35), nullable=False, server_default="en"),
    Column("payload", Blob, nullable=False),
    # the payload's size and sha256, computed at submit, so a read shows them without the payload
    Column("input_size", BigInteger, nullable=False, server_default="0"),
    Column("input_sha256", String(64), nullable=False, server_default=""),
    Column("fingerprint", String(64), nullable=False),  # sha256 of the submitted request
    Column("idempotency_key", String(128), nullable=True),
    Column("priority", Integer, nullable=False, server_default="0"),
    Column("status", String(20), nullable=False),
    # current stage: code, 1-based index, plan snapshot taken at claim time
    Column("stage", String(32), nullable=True),
    Column("stage_index", Integer, nullable=False, server_default="0"),
    Column("stage_count", Integer, nullable=False, server_default="0"),
    Column("stages", Text, nullable=True),  # JSON list of stage definitions
    Column("processed_units", BigInteger, nullable=False, server_default="0"),
    Column("total_units", BigInteger, nullable=True),
    Column("checkpoint", Blob, nullable=True),  # up to 64 KiB: one byte past BLOB
    # attempts: attempt counts up on every claim; attempt - attempt_base is what was charged
    Column("attempt", Integer, nullable=False, server_default="0"),
    Column("attempt_base", Integer, nullable=False, server_default="0"),
    Column("max_attempts", Integer, nullable=False),
    Column("initial_backoff_s", Float, nullable=False),
    Column("max_backoff_s", Float, nullable=False),
    Column("backoff_multiplier", Float, nullable=False),
    Column("on_lease_lost", String(16), nullable=False),
    # time limits in seconds (NULL: none) and what no progress leads to (jobwire.domain.timeouts)
    Column("attempt_timeout_s", Float, nullable=True),
    Column("job_timeout_s", Float, nullable=True),
    Column("stage_timeout_s", Float, nullable=True),
    Column("on_no_progress", String(16), nullable=False, server_default="INSPECT"),
    # when they run out, by the database clock: the timeout sweeps find them by these
    Column("job_deadline", Timestamp, nullable=True),  # set at submit
    Column("attempt_deadline", Timestamp, nullable=True),  # set at each claim
    # when units or stage last moved (claim, and each report that moved them); marked once
    # the stage_timeout passes without progress
    Column("progress_at", Timestamp, nullable=True),
    Column("progress_deadline", Timestamp, nullable=True),
    Column("no_progress", Boolean, nullable=False, server_default="0"),
    # dependencies: the job numbers as submitted (JSON list, NULL: none), and how many of
    # them are not READY yet; a claim takes only jobs with none left (job_dependency)
    Column("depends_on", Text, nullable=True),
    Column("waiting_on", Integer, nullable=False, server_default="0"),
    # set once a job is named in another's depends_on: only then does its ending look for
    # dependents to settle (jobwire.db.dependencies), so every other ending skips that read
    Column("has_dependents", Boolean, nullable=False, server_default="0"),
    Column("batch_id", String(24), nullable=True),  # the SubmitBatch that made it (job_batch)
    # the W3C traceparent of the Submit call (jobwire.observe.tracing); NULL when not traced
    Column("trace_context", String(128), nullable=True),
    # review (jobwire.domain.review): who must review a WAITING job and what (a JSON list);
    # the last decision, its note and who made it, for the next lease after an approval
    Column("review_assignee", String(128), nullable=True),
    Column("review_items", Text, nullable=True),
    Column("review_decision", String(16), nullable=True),
    Column("review_note", Text, nullable=True),
    Column("review_by", String(128), nullable=True),
    # the lease: token embeds the epoch, so a token can never be valid twice
    Column("worker_id", String(128), nullable=True),
    Column("worker_token", String(80), nullable=True),
    Column("lease_epoch", BigInteger, nullable=False, server_default="0"),
    # signs this job's tokens (HMAC of the epoch), so a late call of a real lease can be told
    # from a forged token; never leaves the server
    Column("lease_key", String(32), nullable=True),
    Column("lease_seconds", Float, nullable=True),
    Column("lease_expires_at", Timestamp, nullable=True),
    Column("heartbeat_at", Timestamp, nullable=True),
    Column("stalled", Boolean, nullable=False, server_default="0"),
    # the last operation that ended a lease, so a retried Complete/Fail/... replays
    Column("ended_token", String(80), nullable=True),
    Column("ended_kind", String(20), nullable=True),
    # failure, user-facing fields plus internal detail for operators only
    Column("error_category", String(32), nullable=True),
    Column("error_stage", String(32), nullable=True),
    Column("error_message", Text, nullable=True),
    Column("error_retryable", Boolean, nullable=True),
    Column("error_detail", LongText, nullable=True),
    Column("created_at", Timestamp, nullable=False),
    Column("updated_at", Timestamp, nullable=False),
    Column("started_at", Timestamp, nullable=True),
    Column("finished_at", Timestamp, nullable=True),
    Column("run_after", Timestamp, nullable=False),
    Column("version", BigInteger, nullable=False, server_default="1"),
    # Evidence entries the handler recorded (jobwire.domain.handler_evidence) in attempt
    # `recorded_attempt`, counted against the per-attempt bound; another attempt starts at 0.
    Column("recorded_attempt", Integer, nullable=False, server_default="0"),
    Column("recorded_entries", Integer, nullable=False, server_default="0"),
    # Job numbers are per tenant: a job is named by (tenant, job_no). job_no leads, so a shared
    # fleet's call, which names only the number (its token tells the tenant), finds its
    # candidates on this index too (jobwire.db.changes).
    UniqueConstraint("job_no", "tenant", name="uq_job_tenant_job_no"),
    UniqueConstraint("tenant", "idempotency_key", name="uq_job_idempotency"),
    mysql_engine="InnoDB",
    mysql_charset="utf8mb4",
    mysql_collate="utf8mb4_bin",  # idempotency keys and names compare exactly
)
# The claim scans this index in order: same sort directions as ORDER BY priority DESC, id,
# or MySQL falls back to a filesort and FOR UPDATE locks every queued row. waiting_on = 0
# is an equality before the sort columns, so jobs waiting for dependencies are never scanned.
Index(
    "ix_job_claim",
    job.c.tenant,
    job.c.queue,
    job.c.status,
    job.c.waiting_on,
    job.c.priority.desc(),
    job.c.id,
)
# ListJobs, newest first, one index per leading filter and per filter with a status
# (jobwire.db.job_pages): each serves its WHERE and its ORDER BY id DESC, so a page never
# sorts the tenant's jobs, nor reads rows of the filter that have another status.
Index("ix_job_tenant", job.c.tenant, job.c.id)
Index("ix_job_owner", job.c.tenant, job.c.owner, job.c.id)
Index("ix_job_assignee", job.c.tenant, job.c.review_assignee, job.c.id)
Index("ix_job_type", job.c.tenant, job.c.job_type, job.c.id)
Index("ix_job_status", job.c.tenant, job.c.status, job.c.id)
Index("ix_job_queue", job.c.tenant, job.c.queue, job.c.id)  # a token's queues
Index("ix_job_owner_status", job.c.tenant, job.c.owner, job.c.status, job.c.id)
Index("ix_job_assignee_status", job.c.tenant, job.c.review_assignee, job.c.status, job.c.id)
Index("ix_job_type_status", job.c.tenant, job.c.job_type, job.c.status, job.c.id)
Index("ix_job_queue_status", job.c.tenant, job.c.queue, job.c.status, job.c.id)  # a token of one queue
Index("ix_job_lease", job.c.status, job.c.lease_expires_at)
Index("ix_job_finished", job.c.status, job.c.finished_at)
# The timeout sweeps: status first, so deadlines left behind by ended attempts and finished
# jobs are never scanned.
Index("ix_job_attempt_deadline", job.c.status, job.c.attempt_deadline)
Index("ix_job_deadline", job.c.status, job.c.job_deadline)
Index("ix_job_no_progress", job.c.status, job.c.no_progress, job.c.progress_deadline)
# A batch's jobs, counted by status (GetBatch) and listed (CancelBatch, WatchJobs).
Index("ix_job_batch", job.c.batch_id, job.c.status)
# The dependency sweep: waiting jobs only (QUEUED, waiting_on > 0), never the runnable ones.
Index("ix_job_waiting", job.c.status, job.c.waiting_on)

# One row per dependency: `job_id` may be claimed once `depends_on_id` is READY. Read from
# the dependency's side when it ends (ix_job_dependency_on: its dependents in id order, read
# in chunks after the last one settled), from the job's side for its view.
job_dependency = Table(
    "job_dependency",
    metadata,
    Column("job_id", BigInteger, primary_key=True, autoincrement=False),
    Column("depends_on_id", BigInteger, primary_key=True, autoincrement=False),
    mysql_engine="InnoDB",
    mysql_charset="utf8mb4",
    mysql_collate="utf8mb4_bin",
)
Index("ix_job_dependency_on", job_dependency.c.depends_on_id, job_dependency.c.job_id)

# One row per SubmitBatch: its jobs carry its batch_id; its key replays it whole.
job_batch = Table(
    "job_batch",
    metadata,
    Column("batch_id", String(24), primary_key=True),
    Column("tenant", String(64), nullable=False),
    Column("idempotency_key", String(128), nullable=True),
    Column("fingerprint", String(64), nullable=False),  # sha256 of its jobs' fingerprints
    Column("total", Integer, nullable=False),
    Column("created_at", Timestamp, nullable=False),
    UniqueConstraint("tenant", "idempotency_key", name="uq_job_batch_idempotency"),
    mysql_engine="InnoDB",
    mysql_charset="utf8mb4",
    mysql_collate="utf8mb4_bin",
)

job_event = Table(
    "job_event",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("job_id", BigInteger, nullable=False),
    Column("tenant", String(64), nullable=False),
    Column("job_no", String(40), nullable=False),
    Column("version", BigInteger, nullable=False),
    Column("kind", String(40), nullable=False),
    # visible events change what users see (the change feed); others are evidence only
    Column("visible", Boolean, nullable=False),
    Column("from_status", String(20), nullable=True),
    Column("to_status", String(20), nullable=True),
    Column("stage", String(32), nullable=True),
    Column("processed_units", BigInteger, nullable=True),
    Column("total_units", BigInteger, nullable=True),
    Column("worker_id", String(128), nullable=True),
    Column("attempt", Integer, nullable=True),
    Column("detail", LongText, nullable=True),
    Column("snapshot", LongText, nullable=True),  # the user-visible job after this event
    Column("entry_key", String(64), nullable=True),  # HANDLER_EVIDENCE: the entry's key; its value is the detail
    # CHECKPOINT_SAVED: the checkpoint's size and sha256 (its bytes stay on the job row only)
    Column("size_bytes", BigInteger, nullable=True),
    Column("sha256", String(64), nullable=True),
    Column("created_at", Timestamp, nullable=False),
    mysql_engine="InnoDB",
    mysql_charset="utf8mb4",
    mysql_collate="utf8mb4_bin",  # idempotency keys and names compare exactly
)
Index("ix_job_event_job", job_event.c.job_id, job_event.c.version)

artifact = Table(
    "artifact",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("job_id", BigInteger, nullable=False),
    Column("uri", String(2048), nullable=False),
    Column("size_bytes", BigInteger, nullable=False),
    Column("sha256", String(64), nullable=False),
    Column("content_type", String(255), nullable=False),
    Column("summary", Text, nullable=False),
    Column("created_at", Timestamp, nullable=False),
    # a result the server keeps (uri jobwire://results/<job_no>): its bytes, or where the result store has them
    Column("inline_data", Blob, nullable=True),
    Column("stored_key", String(200), nullable=True),
    UniqueConstraint("job_id", name="uq_artifact_job"),
    mysql_engine="InnoDB",
    mysql_charset="utf8mb4",
    mysql_collate="utf8mb4_bin",  # idempotency keys and names compare exactly
)

Index("ix_artifact_stored_key", artifact.c.stored_key)  # housekeeping: is an upload named by any result?

# The last job number reserved per tenant and UTC day (jobwire.db.number_counters).
job_day_counter = Table(
    "job_day_counter",
    metadata,
    Column("tenant", String(64), primary_key=True),
    Column("day", String(8), primary_key=True),
    Column("last_seq", BigInteger, nullable=False),
    mysql_engine="InnoDB",
    mysql_charset="utf8mb4",
    mysql_collate="utf8mb4_bin",
)

worker = Table(
    "worker",
    metadata,
    Column("tenant", String(64), primary_key=True),
    Column("worker_id", String(128), primary_key=True),
    Column("queues", Text, nullable=False),  # JSON list
    Column("job_types", Text, nullable=False),  # JSON list
    Column("last_seen_at", Timestamp, nullable=False),
    mysql_engine="InnoDB",
    mysql_charset="utf8mb4",
    mysql_collate="utf8mb4_bin",  # idempotency keys and names compare exactly
)

# When a worker last claimed for each queue and job type (written with the worker row, as
# often), so "does anyone serve this kind of job?" is one primary-key lookup for a Get
# and one join for Inspect, on any replica. The worker rows' JSON lists cannot be indexed.
worker_claim = Table(
    "worker_claim",
    metadata,
    Column("tenant", String(64), primary_key=True),
    Column("queue", String(64), primary_key=True),
    Column("job_type", String(64), primary_key=True),
    Column("claimed_at", Timestamp, nullable=False),
    mysql_engine="InnoDB",
    mysql_charset="utf8mb4",
    mysql_collate="utf8mb4_bin",
)

Index("ix_worker_claim_at", worker_claim.c.claimed_at)  # housekeeping forgets kinds nobody claims for

# A queue's flow control (jobwire.db.queue_limits), one row per (tenant, queue) that has any:
# a claim of that queue locks its row, counts what runs, and spends the token bucket kept
# here, in its own transaction, so every replica and process shares one limit. A queue
# without a row costs a claim nothing (which queues have rows is cached per process).
queue_limits = Table(
    "queue_limits",
    metadata,
    Column("tenant", String(64), primary_key=True),
    Column("queue", String(64), primary_key=True),
    Column("max_running", Integer, nullable=False, server_default="0"),  # 0: none
    Column("rate_per_second", Float, nullable=False, server_default="0"),  # 0: none
    Column("burst", Integer, nullable=False, server_default="0"),
    Column("paused", Boolean, nullable=False, server_default="0"),
    # the token bucket: tokens left at refilled_at (database clock)
    Column("tokens", Float, nullable=False, server_default="0"),
    Column("refilled_at", Timestamp, nullable=False),
    mysql_engine="InnoDB",
    mysql_charset="utf8mb4",
    mysql_collate="utf8mb4_bin",
)

# One row per MySQL write transaction, so a COMMIT whose reply was lost can be told from one
# that failed (jobwire.db.commit_markers); purged after minutes.
commit_marker = Table(
    "commit_marker",
    metadata,
    Column("id", String(24), primary_key=True),
    mysql_engine="InnoDB",
    mysql_charset="utf8mb4",
    mysql_collate="utf8mb4_bin",
)

# Schedules (jobwire.db.schedules): a job submitted from a template on a cron or a period.
# The template is the caller's SubmitRequest as serialized bytes, not decoded columns: each
# firing decodes it through Submit's own path (jobwire.jobapi.decode.decode_submit), so it
# is checked by the same rules as any Submit, and a field SubmitRequest gains later rides
# along without a migration.
schedule = Table(
    "schedule",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("tenant", String(64), nullable=False),
    Column("schedule_id", String(64), nullable=False),
    # the template's queue, so a token's queues scope schedules as they scope jobs
    Column("queue", String(64), nullable=False, server_default="default"),
    Column("cron", String(200), nullable=True),  # 5 fields, or NULL for every_s
    Column("every_s", Float, nullable=True),
    Column("time_zone", String(64), nullable=False),
    Column("template", Blob, nullable=False),
    Column("overlap", String(8), nullable=False),
    Column("catch_up", String(8), nullable=False),
    Column("paused", Boolean, nullable=False, server_default="0"),
    # NULL while paused; a round advances it with an UPDATE guarded by the value it read
    Column("next_fire_at", Timestamp, nullable=True),
    Column("last_fire_at", Timestamp, nullable=True),
    Column("last_job_no", String(40), nullable=True),
    # fire times a server reached that made no job: overlap SKIP, or Submit refused the job
    Column("skipped_firings", BigInteger, nullable=False, server_default="0"),
    # fire times no server ran for (none ran within the misfire grace after them)
    Column("missed_firings", BigInteger, nullable=False, server_default="0"),
    Column("created_at", Timestamp, nullable=False),
    UniqueConstraint("tenant", "schedule_id", name="uq_schedule_id"),
    mysql_engine="InnoDB",
    mysql_charset="utf8mb4",
    mysql_collate="utf8mb4_bin",
)
Index("ix_schedule_due", schedule.c.next_fire_at)  # the rounds' scan: due and not paused

# A tenant's schedules are capped (JOBWIRE_MAX_SCHEDULES_PER_TENANT): each CreateSchedule
# locks its tenant's row here, then counts and inserts, so two creates of one tenant never
# both count the last free place (MySQL runs READ COMMITTED: a count alone would not hold).
schedule_tenant = Table(
    "schedule_tenant",
    metadata,
    Column("tenant", String(64), primary_key=True),
    mysql_engine="InnoDB",
    mysql_charset="utf8mb4",
    mysql_collate="utf8mb4_bin",
)

# When the schedule loops ran (jobwire.domain.schedules.Run): a fire time is missed only if
# no loop ran between it and the misfire grace after it. A round extends the latest run or,
# after a silence longer than the run gap, starts a new one; runs older than a week go.
schedule_run = Table(
    "schedule_run",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("started_at", Timestamp, nullable=False),
    Column("last_at", Timestamp, nullable=False),
    mysql_engine="InnoDB",
    mysql_charset="utf8mb4",
    mysql_collate="utf8mb4_bin",
)

# Which one serving process of all replicas runs a set of chores (housekeeping, schedules):
# the holder of the row's lease until expires_at, by the database clock; renewed by its
# holder, taken over once expired, released on a clean stop (jobwire.db.chore_leases).
chore_leader = Table(
    "chore_leader",
    metadata,
    Column("name", String(32), primary_key=True),
    Column("holder", String(128), nullable=False),
    Column("elected_at", Timestamp, nullable=False),
    Column("expires_at", Timestamp, nullable=False),
    mysql_engine="InnoDB",
    mysql_charset="utf8mb4",
    mysql_collate="utf8mb4_bin",
)
