"""Server configuration from JOBWIRE_* environment variables, each in docs/deployment.md's settings table."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from jobwire.domain.job import DEFAULT_RESULT_SCHEMES
from jobwire.domain.kept_results import DEFAULT_MAX_INLINE_RESULT, DEFAULT_MAX_RESULT_BYTES
from jobwire.domain.limits import LIST_SCAN_ROWS, MAX_GRPC_MESSAGE_BYTES, MAX_LEASE_S, MAX_TIMEOUT_S, MIN_LEASE_S
from jobwire.observe.logs import FORMATS, LEVELS
from jobwire.runtime.cpus import usable_cpus

DEFAULT_DATABASE_URL = "sqlite:///var/jobwire.db"
# Job numbers must read back through jobwire.domain.limits.JOB_NO: PT-20261129-001.
JOB_PREFIX = re.compile(r"[A-Z][A-Z0-9]{0,15}")
URI_SCHEME = re.compile(r"[a-z][a-z0-9+.\-]*")
MAX_PROCESSES = 64
# A CompleteRequest carries the inline result with the rest of the call in one gRPC message.
MAX_INLINE_RESULT = MAX_GRPC_MESSAGE_BYTES - (256 << 10)


@dataclass(frozen=True, kw_only=True)
class Settings:
    database_url: str = DEFAULT_DATABASE_URL
    listen: str = "127.0.0.1:50051"
    auth_file: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_client_ca: Path | None = None
    metrics_listen: str | None = None
    job_prefix: str = "PT"
    lease_seconds: float = 30.0
    reaper_interval_seconds: float = 5.0
    # the lease of the one process of all replicas that runs housekeeping (and of the one that
    # runs the schedule loop): renewed every third of it, taken over within it of a death
    # (jobwire.runtime.leadership)
    chore_lease_seconds: float = 15.0
    # schedules: how often the job-service process that runs the loop looks for due ones (0:
    # never), and how long after a fire time some server's loop must have run for it not to
    # be missed (a missed one is the schedule's catch_up's; one found late while loops ran fires)
    schedule_interval_seconds: float = 1.0
    schedule_misfire_grace_seconds: float = 60.0
    # schedules one tenant may keep: a round's work grows with them (CreateSchedule past it: RESOURCE_EXHAUSTED)
    max_schedules_per_tenant: int = 1000
    stall_grace_seconds: float | None = None  # default: one lease
    # a worker's Session that ends while it holds leases: how long they wait for the worker to
    # name them again before they are handled as expired, with no stall grace (jobwire.worker.server.disconnects)
    session_grace_seconds: float = 3.0
    default_attempt_timeout_seconds: float | None = None  # for submits that set no attempt_timeout
    # a QUEUED job whose queue and job type no worker has claimed for this long is NO_WORKER
    no_worker_after_seconds: float = 300.0
    # rows one ListJobs call looks at where no index serves every filter (a label): the page
    # then holds what was found and a token to go on (jobwire.db.job_pages)
    list_scan_rows: int = LIST_SCAN_ROWS
    # (queue, job type) pairs one tenant's claims record for NO_WORKER, per process, within
    # the worker retention: past it new ones are not recorded (jobwire.process_state.claim_kinds)
    max_claim_kinds_per_tenant: int = 10_000
    max_streams: int = 4000  # watch streams (WatchStatus, WatchJobs) per process, shared among tenants
    # jobs those streams watch, per process, shared among tenants: a WatchJobs of 1,000 job
    # numbers weighs 1,000 (jobwire.jobapi.watch)
    max_watched_jobs: int = 100_000
    # result downloads and uploads in flight per process, shared among tenants: each holds a
    # file of the result store open (jobwire.runtime.transfers)
    max_transfers: int = 256
    stream_idle_seconds: float = 60.0  # a download or upload that makes no progress this long is cut
    db_pool_size: int = 8
    feed_poll_seconds: float = 0.05
    # retention of terminal jobs, in days after they finished (0: keep forever); the deleter is "module:function"
    retention_ready_days: float = 30.0
    retention_cancelled_days: float = 30.0
    retention_failed_days: float = 90.0
    retention_worker_days: float = 7.0  # workers not seen for this long leave ListWorkers
    artifact_deleter: str = ""
    # URI schemes a worker's result may have (JOBWIRE_RESULT_SCHEMES, comma-separated)
    result_schemes: frozenset[str] = DEFAULT_RESULT_SCHEMES
    # results the server keeps: CompleteRequest.inline_result up to this size, larger ones
    # uploaded (UploadResult) into the result store, a directory or an fsspec URL
    # ("": var/results beside the SQLite file, else ./var/results)
    max_inline_result_bytes: int = DEFAULT_MAX_INLINE_RESULT
    result_store: str = ""
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES  # one upload; past it RESOURCE_EXHAUSTED and nothing kept
    upload_ttl_seconds: float = 86_400.0  # an upload no Complete named is removed after this long
    # serving processes on one port (JOBWIRE_PROCESSES; from_env defaults to the CPUs the
    # process may use: jobwire.runtime.cpus), and why that many, for the start's log line
    processes: int = 1
    processes_why: str = "set by JOBWIRE_PROCESSES"
    share_port: bool = False  # a child of a family: join the port its parent holds (jobwire.runtime.family)
    # create or upgrade the schema at start (a family's parent does it for all); when False
    # (JOBWIRE_MIGRATE=0: `python -m jobwire migrate` does it, and the serving account needs
    # no DDL rights) a server refuses to start on a schema that is not current
    migrate: bool = True
    # A client's connection is closed after this long (0: never), so a client that keeps one
    # channel (dns:/// with round_robin, jobwire.client.channel) resolves again and spreads
    # over replicas added since; calls in flight then have the grace to end (a watch that
    # outlasts it resumes on a new connection).
    max_connection_age_seconds: float = 300.0
    max_connection_age_grace_seconds: float = 600.0
    log_format: str = "text"  # or "json": one JSON object per line (jobwire.observe.logs)
    log_level: str = "INFO"

    def __post_init__(self) -> None:
        # A bad setting stops the server at start, naming the variable, rather than failing
        # later on every call in a way that blames the caller.
        problems = []
        if not JOB_PREFIX.fullmatch(self.job_prefix):
            problems.append("JOBWIRE_JOB_PREFIX must be 1 to 16 capitals and digits, starting with a capital")
        if not MIN_LEASE_S <= self.lease_seconds <= MAX_LEASE_S:
            problems.append("JOBWIRE_LEASE_SECONDS must be between 1 and 3600")
        if (self.tls_cert is None) != (self.tls_key is None):
            problems.append("JOBWIRE_TLS_CERT and JOBWIRE_TLS_KEY go together")
        if self.tls_client_ca is not None and self.tls_cert is None:
            problems.append("JOBWIRE_TLS_CLIENT_CA needs JOBWIRE_TLS_CERT and JOBWIRE_TLS_KEY")
        if self.reaper_interval_seconds < 0 or (self.stall_grace_seconds or 0) < 0:
            problems.append("JOBWIRE_REAPER_INTERVAL_SECONDS and JOBWIRE_STALL_GRACE_SECONDS must not be negative")
        if not 0 <= self.session_grace_seconds <= MAX_LEASE_S:
            problems.append("JOBWIRE_SESSION_GRACE_SECONDS must be between 0 and 3600")
        if not 0 < self.chore_lease_seconds <= MAX_LEASE_S:
            problems.append("JOBWIRE_CHORE_LEASE_SECONDS must be more than 0 and at most 3600")
        if self.schedule_interval_seconds < 0 or self.schedule_misfire_grace_seconds < 0:
            problems.append(
                "JOBWIRE_SCHEDULE_INTERVAL_SECONDS and JOBWIRE_SCHEDULE_MISFIRE_GRACE_SECONDS must not be negative"
            )
        if self.max_schedules_per_tenant < 1:
            problems.append("JOBWIRE_MAX_SCHEDULES_PER_TENANT must be at least 1")
        if self.list_scan_rows < 1:
            problems.append("JOBWIRE_LIST_SCAN_ROWS must be at least 1")
        if self.max_claim_kinds_per_tenant < 1:
            problems.append("JOBWIRE_MAX_CLAIM_KINDS_PER_TENANT must be at least 1")
        timeout = self.default_attempt_timeout_seconds
        if timeout is not None and not 0 < timeout <= MAX_TIMEOUT_S:
            problems.append("JOBWIRE_DEFAULT_ATTEMPT_TIMEOUT must be more than 0 and at most 2592000 (30 days)")
        if not 0 < self.no_worker_after_seconds <= MAX_TIMEOUT_S:
            problems.append("JOBWIRE_NO_WORKER_AFTER must be more than 0 and at most 2592000 (30 days)")
        if min(self.max_streams, self.max_watched_jobs, self.max_transfers, self.db_pool_size) < 1:
            problems.append(
                "JOBWIRE_MAX_STREAMS, JOBWIRE_MAX_WATCHED_JOBS, JOBWIRE_MAX_TRANSFERS and JOBWIRE_DB_POOL_SIZE"
                " must be at least 1"
            )
        if not self.stream_idle_seconds > 0:
            problems.append("JOBWIRE_STREAM_IDLE_SECONDS must be positive")
        if self.max_result_bytes < 1:
            problems.append("JOBWIRE_MAX_RESULT_BYTES must be at least 1")
        if not self.result_schemes or not all(URI_SCHEME.fullmatch(x) for x in self.result_schemes):
            problems.append("JOBWIRE_RESULT_SCHEMES must list URI schemes in lower case, such as https,s3")
        if not 0 <= self.max_inline_result_bytes <= MAX_INLINE_RESULT:
            problems.append(f"JOBWIRE_MAX_INLINE_RESULT must be between 0 and {MAX_INLINE_RESULT} bytes")
        if self.upload_ttl_seconds <= 0:
            problems.append("JOBWIRE_UPLOAD_TTL_SECONDS must be positive")
        if self.retention_worker_days <= 0:
            problems.append("JOBWIRE_RETENTION_WORKER_DAYS must be positive")
        if not (self.max_connection_age_seconds >= 0 and self.max_connection_age_grace_seconds > 0):  # nan too
            problems.append(
                "JOBWIRE_MAX_CONNECTION_AGE_SECONDS must not be negative (0: never) and"
                " JOBWIRE_MAX_CONNECTION_AGE_GRACE_SECONDS must be positive"
            )
        if not 1 <= self.processes <= MAX_PROCESSES:
            problems.append(f"JOBWIRE_PROCESSES must be between 1 and {MAX_PROCESSES}")
        if self.log_format not in FORMATS:
            problems.append(f"JOBWIRE_LOG_FORMAT must be one of {', '.join(FORMATS)}")
        if self.log_level not in LEVELS:
            problems.append(f"JOBWIRE_LOG_LEVEL must be one of {', '.join(LEVELS)}")
        if problems:
            raise ValueError("; ".join(problems))

    @property
    def result_store_url(self) -> str:
        """Where uploaded results go: JOBWIRE_RESULT_STORE, else var/results beside the SQLite file."""
        if self.result_store:
            return self.result_store
        if self.database_url.startswith("sqlite:///") and ":memory:" not in self.database_url:
            return str(Path(self.database_url.removeprefix("sqlite:///")).parent / "results")
        return "var/results"

    @property
    def stall_grace(self) -> float:
        return self.lease_seconds if self.stall_grace_seconds is None else self.stall_grace_seconds

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ, **overrides: object) -> Settings:
        def path(name: str) -> Path | None:
            value = env.get(name)
            return Path(value) if value else None

        def number(name: str, default: float) -> float:
            return float(env.get(name, default))

        def flag(name: str, default: bool) -> bool:
            value = env.get(name, "").strip().lower()
            if not value:
                return default
            if value not in {"1", "true", "yes", "0", "false", "no"}:
                raise ValueError(f"{name} must be 1/true/yes or 0/false/no, not {value!r}")
            return value in {"1", "true", "yes"}

        def schemes(name: str) -> frozenset[str]:
            value = env.get(name)
            return frozenset(x.strip() for x in value.split(",") if x.strip()) if value else DEFAULT_RESULT_SCHEMES

        def processes() -> tuple[int, str]:
            if env.get("JOBWIRE_PROCESSES"):
                return int(env["JOBWIRE_PROCESSES"]), "set by JOBWIRE_PROCESSES"
            cpus = usable_cpus()
            if cpus.count > MAX_PROCESSES:
                return MAX_PROCESSES, f"{cpus.why}, and at most {MAX_PROCESSES} serve"
            return cpus.count, cpus.why

        grace = env.get("JOBWIRE_STALL_GRACE_SECONDS")
        serving, serving_why = processes()
        attempt_timeout = env.get("JOBWIRE_DEFAULT_ATTEMPT_TIMEOUT")
        settings = cls(
            database_url=env.get("JOBWIRE_DATABASE_URL", DEFAULT_DATABASE_URL),
            listen=env.get("JOBWIRE_LISTEN", "127.0.0.1:50051"),
            auth_file=path("JOBWIRE_AUTH_FILE"),
            tls_cert=path("JOBWIRE_TLS_CERT"),
            tls_key=path("JOBWIRE_TLS_KEY"),
            tls_client_ca=path("JOBWIRE_TLS_CLIENT_CA"),
            metrics_listen=env.get("JOBWIRE_METRICS_LISTEN") or None,
            job_prefix=env.get("JOBWIRE_JOB_PREFIX", "PT"),
            lease_seconds=number("JOBWIRE_LEASE_SECONDS", 30.0),
            reaper_interval_seconds=number("JOBWIRE_REAPER_INTERVAL_SECONDS", 5.0),
            chore_lease_seconds=number("JOBWIRE_CHORE_LEASE_SECONDS", 15.0),
            schedule_interval_seconds=number("JOBWIRE_SCHEDULE_INTERVAL_SECONDS", 1.0),
            schedule_misfire_grace_seconds=number("JOBWIRE_SCHEDULE_MISFIRE_GRACE_SECONDS", 60.0),
            max_schedules_per_tenant=int(env.get("JOBWIRE_MAX_SCHEDULES_PER_TENANT", 1000)),
            stall_grace_seconds=float(grace) if grace else None,
            session_grace_seconds=number("JOBWIRE_SESSION_GRACE_SECONDS", 3.0),
            default_attempt_timeout_seconds=float(attempt_timeout) if attempt_timeout else None,
            no_worker_after_seconds=number("JOBWIRE_NO_WORKER_AFTER", 300.0),
            list_scan_rows=int(env.get("JOBWIRE_LIST_SCAN_ROWS", LIST_SCAN_ROWS)),
            max_claim_kinds_per_tenant=int(env.get("JOBWIRE_MAX_CLAIM_KINDS_PER_TENANT", 10_000)),
            max_streams=int(env.get("JOBWIRE_MAX_STREAMS", 4000)),
            max_watched_jobs=int(env.get("JOBWIRE_MAX_WATCHED_JOBS", 100_000)),
            max_transfers=int(env.get("JOBWIRE_MAX_TRANSFERS", 256)),
            stream_idle_seconds=number("JOBWIRE_STREAM_IDLE_SECONDS", 60.0),
            db_pool_size=int(env.get("JOBWIRE_DB_POOL_SIZE", 8)),
            retention_ready_days=number("JOBWIRE_RETENTION_READY_DAYS", 30.0),
            retention_cancelled_days=number("JOBWIRE_RETENTION_CANCELLED_DAYS", 30.0),
            retention_failed_days=number("JOBWIRE_RETENTION_FAILED_DAYS", 90.0),
            retention_worker_days=number("JOBWIRE_RETENTION_WORKER_DAYS", 7.0),
            artifact_deleter=env.get("JOBWIRE_ARTIFACT_DELETER", ""),
            result_schemes=schemes("JOBWIRE_RESULT_SCHEMES"),
            max_inline_result_bytes=int(env.get("JOBWIRE_MAX_INLINE_RESULT", DEFAULT_MAX_INLINE_RESULT)),
            result_store=env.get("JOBWIRE_RESULT_STORE", ""),
            max_result_bytes=int(env.get("JOBWIRE_MAX_RESULT_BYTES", DEFAULT_MAX_RESULT_BYTES)),
            upload_ttl_seconds=number("JOBWIRE_UPLOAD_TTL_SECONDS", 86_400.0),
            processes=serving,
            processes_why=serving_why,
            max_connection_age_seconds=number("JOBWIRE_MAX_CONNECTION_AGE_SECONDS", 300.0),
            max_connection_age_grace_seconds=number("JOBWIRE_MAX_CONNECTION_AGE_GRACE_SECONDS", 600.0),
            migrate=flag("JOBWIRE_MIGRATE", True),
            log_format=env.get("JOBWIRE_LOG_FORMAT", "text").strip().lower(),
            log_level=env.get("JOBWIRE_LOG_LEVEL", "INFO").strip().upper(),
        )
        return replace(settings, **overrides)  # type: ignore[arg-type]
