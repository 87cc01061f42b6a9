"""A bad-input matrix for every RPC of JobService, ScheduleService, WorkerService and AdminService.

Each case must be answered with its canonical code (INVALID_ARGUMENT with ErrorInfo and a
BadRequest naming the field, or RESOURCE_EXHAUSTED from the transport for a message over the
server's 4 MiB limit) and never UNKNOWN or INTERNAL; it must write no row anywhere; and the
server must keep serving. The requests are otherwise valid (a live job, its real token), so
the one bad field is what is refused.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from google.longrunning import operations_pb2
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp
from service_support import artifact, claim, db_rows, duration, get, rpc_failure, running, submit

from jobwire.client.status import error_info, field_violations
from jobwire.v1 import admin_pb2, job_pb2, schedule_pb2, worker_pb2

INVALID = grpc.StatusCode.INVALID_ARGUMENT
TOO_BIG = grpc.StatusCode.RESOURCE_EXHAUSTED
MiB, KiB = 1 << 20, 1 << 10


@dataclass
class Ctx:
    """A server with a RUNNING job (and its token), a FAILED retryable job and a QUEUED job."""

    served: object
    job_no: str
    token: str
    failed_no: str
    queued_no: str


@dataclass(frozen=True)
class Bad:
    name: str
    call: Callable[[Ctx], Awaitable[object]]
    field: str | None = None  # the BadRequest field; None for transport limits
    code: grpc.StatusCode = INVALID
    reason: str | None = "INVALID_ARGUMENT"  # the ErrorInfo reason; None: grpc's own status


INT64_MAX = 2**63 - 1
# past what a Python timedelta holds (about 8.6e13 s) and past google.protobuf.Duration's +-315,576,000,000 s
OVERFLOWING = [10**14, INT64_MAX, -(2**63)]


def page_token(after: object) -> str:
    return base64.urlsafe_b64encode(json.dumps({"after": after}).encode()).decode().rstrip("=")


def ts(seconds: int, nanos: int = 0) -> Timestamp:
    out = Timestamp()
    out.seconds, out.nanos = seconds, nanos
    return out


def raw_duration(seconds: int, nanos: int = 0) -> Duration:
    out = Duration()
    out.seconds, out.nanos = seconds, nanos
    return out


async def first_message(call):  # type: ignore[no-untyped-def]
    """A server stream's first message (or its error)."""
    try:
        return await call.read()
    finally:
        call.cancel()


BAD_JOB_NOS = [
    "",
    "garbage",
    "pt-20260101-001",
    "PT-2026-001",
    "PT_20260101_001",
    "P" * 17 + "-20260101-001",
    "PT-20260101-0010000000000",
    "PT-20260101-001\n",
    " PT-20260101-001",
    "PT-20260101-00١",
]
LONG_TOKEN = "1." + "a" * 79


def _job_no_cases(rpc: str, make: Callable[[Ctx, str], Awaitable[object]]) -> list[Bad]:
    return [Bad(f"{rpc} job_no={n!r}", (lambda c, n=n: make(c, n)), "job_no") for n in BAD_JOB_NOS]


# -- JobService ----------------------------------------------------------------------------------


def submit_case(
    name: str,
    field: str | None,
    code: grpc.StatusCode = INVALID,
    reason: str | None = "INVALID_ARGUMENT",
    **fields: object,
) -> Bad:
    fields.setdefault("job_type", "frames")

    async def call(c: Ctx) -> object:
        return await c.served.jobs.Submit(job_pb2.SubmitRequest(**fields))  # type: ignore[attr-defined]

    return Bad(f"Submit {name}", call, field, code, reason)


def policy(**fields: object) -> job_pb2.RetryPolicy:
    return job_pb2.RetryPolicy(**fields)  # type: ignore[arg-type]


def limits(**fields: object) -> job_pb2.Timeouts:
    return job_pb2.Timeouts(**fields)  # type: ignore[arg-type]


SUBMIT = [
    submit_case("title of 201 chars", "title", title="t" * 201),
    submit_case("title with a newline", "title", title="two\nlines"),
    submit_case("empty job_type", "job_type", job_type=""),
    submit_case("job_type with a space", "job_type", job_type="bad name!"),
    submit_case("job_type of 65 chars", "job_type", job_type="x" * 65),
    submit_case("job_type starting with _", "job_type", job_type="_frames"),
    submit_case("job_type with a newline", "job_type", job_type="frames\n"),
    submit_case("job_type with NUL", "job_type", job_type="fra\x00mes"),
    submit_case("job_type non-ASCII", "job_type", job_type="帧"),
    submit_case("queue with a space", "queue", queue="bad name!"),
    submit_case("queue of 65 chars", "queue", queue="q" * 65),
    submit_case("queue with ESC", "queue", queue="q\x1b"),
    submit_case("idempotency_key of 129 chars", "idempotency_key", idempotency_key="k" * 129),
    submit_case("idempotency_key with NUL", "idempotency_key", idempotency_key="k\x00"),
    submit_case("idempotency_key with a newline", "idempotency_key", idempotency_key="k\n"),
    submit_case("owner of 129 chars", "owner", owner="o" * 129),
    submit_case("owner with BEL", "owner", owner="o\x07"),
    submit_case("33 labels", "labels", labels={f"k{i}": "v" for i in range(33)}),
    submit_case("empty label key", "labels", labels={"": "v"}),
    submit_case("label key of 64 chars", "labels", labels={"k" * 64: "v"}),
    submit_case("label value of 257 chars", "labels", labels={"k": "v" * 257}),
    submit_case("label value with a newline", "labels", labels={"k": "a\nb"}),
    submit_case("label key with a tab", "labels", labels={"k\t": "v"}),
    submit_case("payload of 1 MiB + 1", "payload", payload=b"x" * (MiB + 1)),
    submit_case("payload of 5 MiB", None, TOO_BIG, None, payload=b"x" * (5 * MiB)),
    submit_case("run_after after 9999", "run_after", run_after=ts(10**12)),
    submit_case("run_after before year 1", "run_after", run_after=ts(-(10**12))),
    submit_case("run_after with negative nanos", "run_after", run_after=ts(5, -5)),
    submit_case("run_after with nanos over a second", "run_after", run_after=ts(5, 10**9)),
    *(submit_case(f"run_after of {s} s", "run_after", run_after=ts(s)) for s in OVERFLOWING),
    *(
        submit_case(f"{name} of {s} s", f"retry_policy.{name}", retry_policy=policy(**{name: raw_duration(s)}))
        for name in ("initial_backoff", "max_backoff")
        for s in OVERFLOWING
    ),
    *(
        submit_case(f"{name} of {s} s", f"timeouts.{name}", timeouts=limits(**{name: raw_duration(s)}))
        for name in ("attempt_timeout", "job_timeout", "stage_timeout")
        for s in OVERFLOWING
    ),
    submit_case(
        "job_timeout of 1 s and 2^31 ns",
        "timeouts.job_timeout",
        timeouts=limits(job_timeout=raw_duration(1, 2**31 - 1)),
    ),
    submit_case("max_attempts -1", "retry_policy.max_attempts", retry_policy=policy(max_attempts=-1)),
    submit_case("max_attempts 101", "retry_policy.max_attempts", retry_policy=policy(max_attempts=101)),
    submit_case("on_lease_lost 7", "retry_policy.on_lease_lost", retry_policy=policy(on_lease_lost=7)),
    submit_case(
        "negative initial_backoff", "retry_policy.initial_backoff", retry_policy=policy(initial_backoff=duration(-1))
    ),
    submit_case(
        "initial_backoff of 2 days",
        "retry_policy.initial_backoff",
        retry_policy=policy(initial_backoff=duration(2 * 86400)),
    ),
    submit_case("negative max_backoff", "retry_policy.max_backoff", retry_policy=policy(max_backoff=duration(-1))),
    submit_case(
        "max_backoff below initial",
        "retry_policy.max_backoff",
        retry_policy=policy(initial_backoff=duration(10), max_backoff=duration(5)),
    ),
    submit_case("multiplier 0.5", "retry_policy.backoff_multiplier", retry_policy=policy(backoff_multiplier=0.5)),
    submit_case("multiplier 11", "retry_policy.backoff_multiplier", retry_policy=policy(backoff_multiplier=11)),
    submit_case("multiplier -2", "retry_policy.backoff_multiplier", retry_policy=policy(backoff_multiplier=-2)),
    submit_case(
        "multiplier NaN", "retry_policy.backoff_multiplier", retry_policy=policy(backoff_multiplier=float("nan"))
    ),
    submit_case(
        "multiplier inf", "retry_policy.backoff_multiplier", retry_policy=policy(backoff_multiplier=float("inf"))
    ),
    submit_case("locale of 36 chars", "locale", locale="l" * 36),
    submit_case("locale with a newline", "locale", locale="en\n"),
    submit_case("negative attempt_timeout", "timeouts.attempt_timeout", timeouts=limits(attempt_timeout=duration(-1))),
    submit_case(
        "attempt_timeout of 31 days",
        "timeouts.attempt_timeout",
        timeouts=limits(attempt_timeout=duration(31 * 86400)),
    ),
    submit_case(
        "attempt_timeout of -1 ns", "timeouts.attempt_timeout", timeouts=limits(attempt_timeout=raw_duration(0, -1))
    ),
    submit_case("negative job_timeout", "timeouts.job_timeout", timeouts=limits(job_timeout=duration(-0.5))),
    submit_case("job_timeout of 2^62 s", "timeouts.job_timeout", timeouts=limits(job_timeout=raw_duration(2**62))),
    submit_case("negative stage_timeout", "timeouts.stage_timeout", timeouts=limits(stage_timeout=duration(-60))),
    submit_case(
        "stage_timeout of 31 days", "timeouts.stage_timeout", timeouts=limits(stage_timeout=duration(31 * 86400))
    ),
    submit_case("on_no_progress 7", "timeouts.on_no_progress", timeouts=limits(on_no_progress=7)),
    submit_case(
        "on_no_progress FAIL without a stage_timeout",
        "timeouts.on_no_progress",
        timeouts=limits(attempt_timeout=duration(60), on_no_progress=job_pb2.Timeouts.FAIL),
    ),
    submit_case("depends_on not a job number", "depends_on", depends_on=["job-1"]),
    submit_case("depends_on of 101 jobs", "depends_on", depends_on=[f"PT-20260101-{i:03}" for i in range(101)]),
    submit_case("depends_on an unknown job", "depends_on", depends_on=["PT-20260101-999"]),
    Bad(
        "Submit depends_on a FAILED job",
        lambda c: c.served.jobs.Submit(  # type: ignore[attr-defined]
            job_pb2.SubmitRequest(job_type="frames", depends_on=[c.failed_no])
        ),
        None,
        grpc.StatusCode.FAILED_PRECONDITION,
        "DEPENDENCY_ENDED",
    ),
]

LONG_LOCALE = "l" * 36

GET = [
    *_job_no_cases("Get", lambda c, n: c.served.jobs.Get(job_pb2.GetRequest(job_no=n))),  # type: ignore[attr-defined]
    Bad(
        "Get locale of 36 chars",
        lambda c: c.served.jobs.Get(job_pb2.GetRequest(job_no=c.job_no, locale=LONG_LOCALE)),  # type: ignore[attr-defined]
        "locale",
    ),
]

CANCEL = [
    *_job_no_cases("Cancel", lambda c, n: c.served.jobs.Cancel(job_pb2.CancelRequest(job_no=n))),  # type: ignore[attr-defined]
    # a bad locale must refuse the call before the job is cancelled, not after
    Bad(
        "Cancel queued, locale of 36 chars",
        lambda c: c.served.jobs.Cancel(job_pb2.CancelRequest(job_no=c.queued_no, locale=LONG_LOCALE)),
        "locale",
    ),  # type: ignore[attr-defined]
    Bad(
        "Cancel running, locale with ESC",
        lambda c: c.served.jobs.Cancel(job_pb2.CancelRequest(job_no=c.job_no, locale="\x1b")),
        "locale",
    ),  # type: ignore[attr-defined]
]

RETRY = [
    *_job_no_cases("Retry", lambda c, n: c.served.jobs.Retry(job_pb2.RetryRequest(job_no=n))),  # type: ignore[attr-defined]
    Bad(
        "Retry failed, locale of 36 chars",
        lambda c: c.served.jobs.Retry(job_pb2.RetryRequest(job_no=c.failed_no, locale=LONG_LOCALE)),
        "locale",
    ),  # type: ignore[attr-defined]
]


def list_jobs(name: str, field: str, **fields: object) -> Bad:
    return Bad(f"ListJobs {name}", lambda c: c.served.jobs.ListJobs(job_pb2.ListJobsRequest(**fields)), field)  # type: ignore[attr-defined,arg-type]


GARBAGE_TOKENS = [
    "!!!",
    "not-a-token",
    "e30",
    base64.urlsafe_b64encode(b"[1, 2]").decode(),
    base64.urlsafe_b64encode(b"\xff\xfe").decode(),
    page_token(-1),
    page_token("12"),
    page_token(1.5),
    page_token(None),
    page_token(True),
    page_token(10**30),
    page_token(2**63),
    "A" * 5000,
    # deeply nested JSON: the parser recursed into INTERNAL
    base64.urlsafe_b64encode(b"[" * 100_000).decode(),
    base64.urlsafe_b64encode(b'{"after": ' * 30 + b"1" + b"}" * 30).decode(),
    base64.urlsafe_b64encode(b"[" * 40).decode(),
]


def resolve(name: str, field: str, **fields: object) -> Bad:
    async def call(c: Ctx) -> object:
        values: dict[str, object] = {"job_no": c.queued_no, "decision": job_pb2.Review.APPROVE, **fields}
        return await c.served.jobs.Resolve(job_pb2.ResolveRequest(**values))  # type: ignore[attr-defined,arg-type]

    return Bad(f"Resolve {name}", call, field)


RESOLVE = [
    *(resolve(f"job_no={n!r}", "job_no", job_no=n) for n in BAD_JOB_NOS),
    resolve("decision unset", "decision", decision=0),
    resolve("decision=99", "decision", decision=99),
    resolve("decision=-1", "decision", decision=-1),
    resolve("note of 1001 chars", "note", note="n" * 1001),
    resolve("note with NUL", "note", note="\x00"),
    resolve("locale of 36 chars", "locale", locale=LONG_LOCALE),
]

LIST_JOBS = [
    list_jobs("statuses=[99]", "statuses", statuses=[99]),
    list_jobs("statuses=[0]", "statuses", statuses=[0]),
    list_jobs("statuses=[1, 99]", "statuses", statuses=[1, 99]),
    list_jobs("statuses=[-1]", "statuses", statuses=[-1]),
    list_jobs("page_size=-1", "page_size", page_size=-1),
    *(list_jobs(f"page_token={t[:20]!r}", "page_token", page_token=t) for t in GARBAGE_TOKENS),
    list_jobs("owner of 129 chars", "owner", owner="o" * 129),
    list_jobs("owner with NUL", "owner", owner="\x00"),
    list_jobs("job_type with a space", "job_type", job_type="bad name!"),
    list_jobs("job_type of 65 chars", "job_type", job_type="x" * 65),
    list_jobs("locale of 36 chars", "locale", locale=LONG_LOCALE),
    list_jobs("assignee of 129 chars", "assignee", assignee="a" * 129),
    list_jobs("assignee with a newline", "assignee", assignee="a\nb"),
    list_jobs("assignee with a leading space", "assignee", assignee=" alice"),
    list_jobs("queue with a space", "queue", queue="bad name!"),
    list_jobs("queue of 65 chars", "queue", queue="q" * 65),
    list_jobs("label key of 65 chars", "labels", labels={"k" * 65: "v"}),
    list_jobs("33 labels", "labels", labels={f"k{i}": "v" for i in range(33)}),
    list_jobs("batch_id with a space", "batch_id", batch_id="not a batch"),
]


def _watch_status(c: Ctx, **fields: object) -> Awaitable[object]:
    return first_message(c.served.jobs.WatchStatus(job_pb2.WatchStatusRequest(**fields)))  # type: ignore[attr-defined,arg-type]


def _watch_jobs(c: Ctx, **fields: object) -> Awaitable[object]:
    return first_message(c.served.jobs.WatchJobs(job_pb2.WatchJobsRequest(**fields)))  # type: ignore[attr-defined,arg-type]


WATCH_STATUS = [
    *_job_no_cases("WatchStatus", lambda c, n: _watch_status(c, job_no=n)),
    Bad("WatchStatus after_version=-1", lambda c: _watch_status(c, job_no=c.job_no, after_version=-1), "after_version"),
    Bad("WatchStatus locale of 36 chars", lambda c: _watch_status(c, job_no=c.job_no, locale=LONG_LOCALE), "locale"),
]

WATCH_JOBS = [
    *(
        Bad(f"WatchJobs job_nos=[{n!r}]", (lambda c, n=n: _watch_jobs(c, job_nos=[c.job_no, n])), "job_no")
        for n in BAD_JOB_NOS
    ),
    Bad("WatchJobs owner of 129 chars", lambda c: _watch_jobs(c, owner="o" * 129), "owner"),
    Bad("WatchJobs owner with a newline", lambda c: _watch_jobs(c, owner="a\nb"), "owner"),
    Bad("WatchJobs locale of 36 chars", lambda c: _watch_jobs(c, job_nos=[c.job_no], locale=LONG_LOCALE), "locale"),
    Bad("WatchJobs batch_id not a batch id", lambda c: _watch_jobs(c, batch_id="B-1"), "batch_id"),
    Bad(
        "WatchJobs batch_id and job_nos",
        lambda c: _watch_jobs(c, batch_id=UNKNOWN_BATCH, job_nos=[c.job_no]),
        "batch_id",
    ),
]

# -- batches -------------------------------------------------------------------------------------

UNKNOWN_BATCH = "B-" + "0" * 20
BAD_BATCH_IDS = ["", "B-1", "b-" + "0" * 20, "B-" + "0" * 20 + "\n", "B-" + "g" * 20]


def batch_case(name: str, field: str | None, *jobs: job_pb2.SubmitRequest, **fields: object) -> Bad:
    async def call(c: Ctx) -> object:
        request = job_pb2.SubmitBatchRequest(jobs=list(jobs), **fields)  # type: ignore[arg-type]
        return await c.served.jobs.SubmitBatch(request)  # type: ignore[attr-defined]

    return Bad(f"SubmitBatch {name}", call, field)


FRAMES = job_pb2.SubmitRequest(job_type="frames")
SUBMIT_BATCH = [
    batch_case("of no jobs", "jobs"),
    batch_case("of 1001 jobs", "jobs", *[FRAMES] * 1001),
    batch_case("with a bad job_type", "jobs[1].job_type", FRAMES, job_pb2.SubmitRequest(job_type="a b")),
    batch_case(
        "with a bad retry policy",
        "jobs[0].retry_policy.max_attempts",
        job_pb2.SubmitRequest(job_type="frames", retry_policy=policy(max_attempts=-1)),
    ),
    batch_case(
        "with a job's own idempotency_key",
        "jobs[0].idempotency_key",
        job_pb2.SubmitRequest(job_type="frames", idempotency_key="k"),
    ),
    batch_case(
        "with an unknown dependency",
        "jobs[0].depends_on",
        job_pb2.SubmitRequest(job_type="frames", depends_on=["PT-20260101-999"]),
    ),
    batch_case("idempotency_key of 129 chars", "idempotency_key", FRAMES, idempotency_key="k" * 129),
    batch_case("idempotency_key with a trailing space", "idempotency_key", FRAMES, idempotency_key="k "),
]
GET_BATCH = [
    *(
        Bad(
            f"GetBatch batch_id={b!r}",
            (lambda c, b=b: c.served.jobs.GetBatch(job_pb2.GetBatchRequest(batch_id=b))),
            "batch_id",
        )
        for b in BAD_BATCH_IDS
    ),
    Bad(
        "GetBatch of an unknown batch",
        lambda c: c.served.jobs.GetBatch(job_pb2.GetBatchRequest(batch_id=UNKNOWN_BATCH)),  # type: ignore[attr-defined]
        None,
        grpc.StatusCode.NOT_FOUND,
        "BATCH_NOT_FOUND",
    ),
]
CANCEL_BATCH = [
    *(
        Bad(
            f"CancelBatch batch_id={b!r}",
            (lambda c, b=b: c.served.jobs.CancelBatch(job_pb2.CancelBatchRequest(batch_id=b))),
            "batch_id",
        )
        for b in BAD_BATCH_IDS
    ),
    Bad(
        "CancelBatch of an unknown batch",
        lambda c: c.served.jobs.CancelBatch(job_pb2.CancelBatchRequest(batch_id=UNKNOWN_BATCH)),  # type: ignore[attr-defined]
        None,
        grpc.StatusCode.NOT_FOUND,
        "BATCH_NOT_FOUND",
    ),
]


# -- WorkerService -------------------------------------------------------------------------------


def claim_case(name: str, field: str, **fields: object) -> Bad:
    fields.setdefault("worker_id", "w-bad")
    fields.setdefault("job_types", [worker_pb2.JobTypeSpec(name="frames")])

    async def call(c: Ctx) -> object:
        return await c.served.workers.Claim(worker_pb2.ClaimRequest(**fields))  # type: ignore[attr-defined,arg-type]

    return Bad(f"Claim {name}", call, field)


def plan(*stages: worker_pb2.StageDef) -> list[worker_pb2.JobTypeSpec]:
    return [worker_pb2.JobTypeSpec(name="frames", stages=list(stages))]


CLAIM = [
    claim_case("empty worker_id", "worker_id", worker_id=""),
    claim_case("worker_id of 129 chars", "worker_id", worker_id="w" * 129),
    claim_case("worker_id with a newline", "worker_id", worker_id="w\n1"),
    claim_case("queue with a space", "queues", queues=["bad name!"]),
    claim_case("queue of 65 chars", "queues", queues=["default", "q" * 65]),
    claim_case("no job types", "job_types", job_types=[]),
    claim_case("101 job types", "job_types", job_types=[worker_pb2.JobTypeSpec(name=f"t{i}") for i in range(101)]),
    claim_case("job type with a space", "job_types.name", job_types=[worker_pb2.JobTypeSpec(name="bad name!")]),
    claim_case("empty job type", "job_types.name", job_types=[worker_pb2.JobTypeSpec(name="")]),
    claim_case("lower-case stage code", "job_types.stages", job_types=plan(worker_pb2.StageDef(code="fetch"))),
    claim_case("empty stage code", "job_types.stages", job_types=plan(worker_pb2.StageDef(code=""))),
    claim_case("stage code of 33 chars", "job_types.stages", job_types=plan(worker_pb2.StageDef(code="S" * 33))),
    claim_case(
        "duplicate stage codes",
        "job_types.stages",
        job_types=plan(worker_pb2.StageDef(code="A"), worker_pb2.StageDef(code="A")),
    ),
    claim_case(
        "33 stages", "job_types.stages", job_types=plan(*(worker_pb2.StageDef(code=f"S{i}") for i in range(33)))
    ),
    claim_case(
        "stage label of 201 chars",
        "job_types.stages",
        job_types=plan(worker_pb2.StageDef(code="A", labels={"en": "x" * 201})),
    ),
    claim_case(
        "stage label with ESC",
        "job_types.stages",
        job_types=plan(worker_pb2.StageDef(code="A", labels={"en": "\x1b[2Jgone"})),
    ),
    claim_case(
        "stage label with NUL",
        "job_types.stages",
        job_types=plan(worker_pb2.StageDef(code="A", labels={"en": "cut\x00here"})),
    ),
    claim_case(
        "stage label locale of 36 chars",
        "job_types.stages",
        job_types=plan(worker_pb2.StageDef(code="A", labels={"l" * 36: "x"})),
    ),
    claim_case("max_jobs=-1", "max_jobs", max_jobs=-1),
    claim_case("max_jobs=101", "max_jobs", max_jobs=101),
    claim_case("wait=-1s", "wait", wait=raw_duration(-1)),
    claim_case("wait=-1ns", "wait", wait=raw_duration(0, -1)),
    claim_case("wait=61s", "wait", wait=raw_duration(61)),
    claim_case("lease_duration=0.5s", "lease_duration", lease_duration=duration(0.5)),
    claim_case("lease_duration=-30s", "lease_duration", lease_duration=raw_duration(-30)),
    claim_case("lease_duration=3601s", "lease_duration", lease_duration=raw_duration(3601)),
    claim_case("lease_duration=10**12s", "lease_duration", lease_duration=raw_duration(10**12)),
    *(claim_case(f"wait={s}s", "wait", wait=raw_duration(s)) for s in OVERFLOWING),
    *(claim_case(f"lease_duration={s}s", "lease_duration", lease_duration=raw_duration(s)) for s in OVERFLOWING),
]


def heartbeat_case(
    name: str, field: str, worker_id: str = "w1", refs: Callable[[Ctx], list[tuple[str, str]]] | None = None
) -> Bad:
    async def call(c: Ctx) -> object:
        leases = [
            worker_pb2.LeaseRef(job_no=n, worker_token=t) for n, t in (refs(c) if refs else [(c.job_no, c.token)])
        ]
        return await c.served.workers.Heartbeat(worker_pb2.HeartbeatRequest(worker_id=worker_id, leases=leases))  # type: ignore[attr-defined]

    return Bad(f"Heartbeat {name}", call, field)


HEARTBEAT = [
    heartbeat_case("empty worker_id", "worker_id", worker_id=""),
    heartbeat_case("worker_id of 129 chars", "worker_id", worker_id="w" * 129),
    heartbeat_case("1001 leases", "leases", refs=lambda c: [(c.job_no, c.token)] * 1001),
    *(
        heartbeat_case(f"job_no={n!r}", "job_no", refs=lambda c, n=n: [(c.job_no, c.token), (n, c.token)])
        for n in BAD_JOB_NOS
    ),
    heartbeat_case("token of 81 chars", "worker_token", refs=lambda c: [(c.job_no, LONG_TOKEN)]),
    heartbeat_case("token with a newline", "worker_token", refs=lambda c: [(c.job_no, c.token + "\n")]),
]


def report_case(name: str, field: str, reason: str = "INVALID_ARGUMENT", **fields: object) -> Bad:
    async def call(c: Ctx) -> object:
        return await c.served.workers.ReportStage(report_request(c, **fields))  # type: ignore[attr-defined]

    return Bad(f"ReportStage {name}", call, field, INVALID, reason)


def report_request(c: Ctx, **fields: object) -> worker_pb2.ReportStageRequest:
    values: dict[str, object] = {"job_no": c.job_no, "worker_token": c.token, "stage": "PROCESSING", **fields}
    return worker_pb2.ReportStageRequest(**values)  # type: ignore[arg-type]


# (name, field, reason, request fields): each refused alone, by ReportStage and inside BatchReportStage
BAD_REPORTS: list[tuple[str, str, str, dict[str, object]]] = [
    *((f"job_no={n!r}", "job_no", "INVALID_ARGUMENT", {"job_no": n}) for n in BAD_JOB_NOS),
    ("token of 81 chars", "worker_token", "INVALID_ARGUMENT", {"worker_token": LONG_TOKEN}),
    ("token with NUL", "worker_token", "INVALID_ARGUMENT", {"worker_token": "1.\x00"}),
    ("stage of 33 chars", "stage", "INVALID_ARGUMENT", {"stage": "S" * 33}),
    ("stage with NUL", "stage", "INVALID_ARGUMENT", {"stage": "PROC\x00"}),
    ("unknown stage", "stage", "UNKNOWN_STAGE", {"stage": "UPLOADING"}),
    ("empty stage", "stage", "UNKNOWN_STAGE", {"stage": ""}),
    ("processed_units=-1", "processed_units", "INVALID_ARGUMENT", {"processed_units": -1}),
    ("total_units=-1", "total_units", "INVALID_ARGUMENT", {"total_units": -1}),
    ("processed over total", "processed_units", "INVALID_ARGUMENT", {"processed_units": 11, "total_units": 10}),
    ("note of 1001 chars", "note", "INVALID_ARGUMENT", {"note": "n" * 1001}),
    ("note with ESC", "note", "INVALID_ARGUMENT", {"note": "\x1b[2J"}),
    ("checkpoint of 64 KiB + 1", "checkpoint", "INVALID_ARGUMENT", {"checkpoint": b"c" * (64 * KiB + 1)}),
]

REPORT = [
    *(report_case(name, field, reason, **fields) for name, field, reason, fields in BAD_REPORTS),
    Bad(
        "ReportStage checkpoint of 5 MiB",
        lambda c: c.served.workers.ReportStage(report_request(c, checkpoint=b"c" * (5 * MiB))),  # type: ignore[attr-defined]
        None,
        TOO_BIG,
        None,
    ),
]


def batch_report_case(
    name: str, field: str | None, code: grpc.StatusCode, reports: Callable[[Ctx], list[object]]
) -> Bad:
    async def call(c: Ctx) -> object:
        request = worker_pb2.BatchReportStageRequest(reports=reports(c))  # type: ignore[arg-type]
        return await c.served.workers.BatchReportStage(request)  # type: ignore[attr-defined]

    return Bad(f"BatchReportStage {name}", call, field, code, "INVALID_ARGUMENT" if field else None)


BATCH_REPORT = [
    batch_report_case("1001 reports", "reports", INVALID, lambda c: [report_request(c)] * 1001),
    batch_report_case(
        "5 MiB of checkpoints", None, TOO_BIG, lambda c: [report_request(c, checkpoint=b"c" * (64 * KiB))] * 80
    ),
]


def complete_case(
    name: str, field: str, reason: str = "INVALID_ARGUMENT", result: job_pb2.Artifact | None = None, **fields: object
) -> Bad:
    async def call(c: Ctx) -> object:
        values: dict[str, object] = {
            "job_no": c.job_no,
            "worker_token": c.token,
            "result": result or artifact(),
            **fields,
        }
        return await c.served.workers.Complete(worker_pb2.CompleteRequest(**values))  # type: ignore[attr-defined,arg-type]

    return Bad(f"Complete {name}", call, field, INVALID, reason)


def result(**fields: object) -> job_pb2.Artifact:
    values: dict[str, object] = {"uri": "s3://bucket/out.mp4", "size_bytes": 10, "sha256": "ab" * 32, **fields}
    return job_pb2.Artifact(**values)  # type: ignore[arg-type]


DI = "DELIVERABLE_INVALID"
NO_CLAIM = job_pb2.Artifact()  # a result the server keeps: the worker claims nothing of it
COMPLETE = [
    *(complete_case(f"job_no={n!r}", "job_no", job_no=n) for n in BAD_JOB_NOS),
    complete_case("token of 81 chars", "worker_token", worker_token=LONG_TOKEN),
    complete_case("no result", "result", DI, result=job_pb2.Artifact()),
    complete_case("empty uri", "result", DI, result=result(uri="")),
    complete_case("uri of 2049 chars", "result", DI, result=result(uri="s3://" + "u" * 2044)),
    complete_case("sha256 not hex", "result", DI, result=result(sha256="zz" * 32)),
    complete_case("sha256 of 63 digits", "result", DI, result=result(sha256="a" * 63)),
    complete_case("sha256 of 65 digits", "result", DI, result=result(sha256="a" * 65)),
    complete_case("sha256 empty", "result", DI, result=result(sha256="")),
    complete_case("negative size", "result", DI, result=result(size_bytes=-1)),
    complete_case("content_type of 256 chars", "result", DI, result=result(content_type="t" * 256)),
    complete_case("summary of 2001 chars", "result", DI, result=result(summary="s" * 2001)),
    # a result page turns the URI into a link
    complete_case("javascript: uri", "result", DI, result=result(uri="javascript:alert(1)")),
    # results the server keeps
    complete_case("inline_result and upload_id", "upload_id", result=NO_CLAIM, inline_result=b"x", upload_id="a" * 32),
    complete_case("upload_id not hex", "upload_id", result=NO_CLAIM, upload_id="z" * 32),
    complete_case("upload_id of 31 digits", "upload_id", result=NO_CLAIM, upload_id="a" * 31),
    complete_case("upload_id never uploaded", "upload_id", result=NO_CLAIM, upload_id="a" * 32),
    complete_case("inline_result over 1 MiB", "inline_result", result=NO_CLAIM, inline_result=b"x" * (MiB + 1)),
    complete_case(
        "inline_result with another sha256",
        "result.sha256",
        DI,
        result=job_pb2.Artifact(sha256="0" * 64),
        inline_result=b"x",
    ),
    complete_case(
        "inline_result with another size",
        "result.size_bytes",
        DI,
        result=job_pb2.Artifact(size_bytes=2),
        inline_result=b"x",
    ),
    complete_case("inline_result with a uri of its own", "result.uri", DI, result=result(), inline_result=b"x"),
    Bad(
        "Complete inline_result over 4 MiB",
        lambda c: c.served.workers.Complete(
            worker_pb2.CompleteRequest(  # type: ignore[attr-defined]
                job_no=c.job_no, worker_token=c.token, inline_result=b"x" * (4 * MiB + 1)
            )
        ),
        None,
        TOO_BIG,
        None,
    ),
    complete_case("data: uri", "result", DI, result=result(uri="data:text/html,<b>x</b>")),
    complete_case("uri with ESC", "result", DI, result=result(uri="https://x/\x1b[2J")),
]


def fail_case(name: str, field: str, **fields: object) -> Bad:
    async def call(c: Ctx) -> object:
        values: dict[str, object] = {"job_no": c.job_no, "worker_token": c.token, "message": "boom", **fields}
        return await c.served.workers.Fail(worker_pb2.FailRequest(**values))  # type: ignore[attr-defined,arg-type]

    return Bad(f"Fail {name}", call, field)


FAIL = [
    *(fail_case(f"job_no={n!r}", "job_no", job_no=n) for n in BAD_JOB_NOS),
    fail_case("token of 81 chars", "worker_token", worker_token=LONG_TOKEN),
    fail_case("category=99", "category", category=99),
    fail_case("category=-1", "category", category=-1),
    # No message case: a Fail is never refused for its text (test_failures.py), since a
    # refused Fail would leave the job RUNNING with nobody working on it.
]


def confirm_case(name: str, field: str, **fields: object) -> Bad:
    async def call(c: Ctx) -> object:
        values: dict[str, object] = {"job_no": c.job_no, "worker_token": c.token, **fields}
        return await c.served.workers.ConfirmCancel(worker_pb2.ConfirmCancelRequest(**values))  # type: ignore[attr-defined,arg-type]

    return Bad(f"ConfirmCancel {name}", call, field)


CONFIRM = [
    *(confirm_case(f"job_no={n!r}", "job_no", job_no=n) for n in BAD_JOB_NOS),
    confirm_case("token of 81 chars", "worker_token", worker_token=LONG_TOKEN),
    confirm_case("note of 1001 chars", "note", note="n" * 1001),
    confirm_case("note with NUL", "note", note="\x00"),
]


def release_case(
    name: str,
    field: str | None,
    code: grpc.StatusCode = INVALID,
    reason: str | None = "INVALID_ARGUMENT",
    **fields: object,
) -> Bad:
    async def call(c: Ctx) -> object:
        values: dict[str, object] = {"job_no": c.job_no, "worker_token": c.token, **fields}
        return await c.served.workers.Release(worker_pb2.ReleaseRequest(**values))  # type: ignore[attr-defined,arg-type]

    return Bad(f"Release {name}", call, field, code, reason)


RELEASE = [
    *(release_case(f"job_no={n!r}", "job_no", job_no=n) for n in BAD_JOB_NOS),
    release_case("token of 81 chars", "worker_token", worker_token=LONG_TOKEN),
    release_case("note of 1001 chars", "note", note="n" * 1001),
    release_case("note with a newline", "note", note="a\nb"),
    release_case("checkpoint of 64 KiB + 1", "checkpoint", checkpoint=b"c" * (64 * KiB + 1)),
    release_case("checkpoint of 5 MiB", None, TOO_BIG, None, checkpoint=b"c" * (5 * MiB)),
]


def await_review_case(
    name: str,
    field: str | None,
    code: grpc.StatusCode = INVALID,
    reason: str | None = "INVALID_ARGUMENT",
    **fields: object,
) -> Bad:
    async def call(c: Ctx) -> object:
        values: dict[str, object] = {"job_no": c.job_no, "worker_token": c.token, "assignee": "alice", **fields}
        return await c.served.workers.AwaitReview(worker_pb2.AwaitReviewRequest(**values))  # type: ignore[attr-defined,arg-type]

    return Bad(f"AwaitReview {name}", call, field, code, reason)


AWAIT_REVIEW = [
    *(await_review_case(f"job_no={n!r}", "job_no", job_no=n) for n in BAD_JOB_NOS),
    await_review_case("token of 81 chars", "worker_token", worker_token=LONG_TOKEN),
    await_review_case("no assignee", "assignee", assignee=""),
    await_review_case("assignee of 129 chars", "assignee", assignee="a" * 129),
    await_review_case("assignee with a newline", "assignee", assignee="al\nice"),
    await_review_case("assignee with a trailing space", "assignee", assignee="alice "),
    await_review_case("51 items", "items", items=["look"] * 51),
    await_review_case("an item of 501 chars", "items", items=["ok", "i" * 501]),
    await_review_case("an item with ESC", "items", items=["\x1b[2J"]),
    await_review_case("an item with a newline", "items", items=["two\nlines"]),
    await_review_case("checkpoint of 64 KiB + 1", "checkpoint", checkpoint=b"c" * (64 * KiB + 1)),
    await_review_case("checkpoint of 5 MiB", None, TOO_BIG, None, checkpoint=b"c" * (5 * MiB)),
]


# -- ScheduleService -------------------------------------------------------------------------------


def schedule_case(name: str, field: str, **fields: object) -> Bad:
    """A CreateSchedule that would be valid but for one field (a cron, a template)."""
    fields.setdefault("template", job_pb2.SubmitRequest(job_type="report"))
    if "every" not in fields:
        fields.setdefault("cron", "0 2 * * *")
    fields.setdefault("schedule_id", "nightly")
    request = schedule_pb2.CreateScheduleRequest(**fields)  # type: ignore[arg-type]
    return Bad(f"CreateSchedule {name}", lambda c: c.served.schedules.CreateSchedule(request), field)  # type: ignore[attr-defined]


def report(**fields: object) -> job_pb2.SubmitRequest:
    return job_pb2.SubmitRequest(job_type=str(fields.pop("job_type", "report")), **fields)  # type: ignore[arg-type]


CREATE_SCHEDULE = [
    schedule_case("bad id", "schedule_id", schedule_id="no spaces"),
    Bad(
        "CreateSchedule without cron or every",
        lambda c: c.served.schedules.CreateSchedule(  # type: ignore[attr-defined]
            schedule_pb2.CreateScheduleRequest(schedule_id="x", template=report())
        ),
        "cron",
    ),
    schedule_case("bad cron", "cron", cron="every day"),
    schedule_case("six-field cron", "cron", cron="0 0 2 * * *"),
    schedule_case("cron that never fires", "cron", cron="0 0 30 2 *"),
    schedule_case("every under 1 s", "every", every=duration(0.5)),
    schedule_case("every of 367 days", "every", every=duration(367 * 86400)),
    *(schedule_case(f"every of {s} s", "every", every=raw_duration(s)) for s in OVERFLOWING),
    schedule_case("every of -1 s and 5e8 ns", "every", every=raw_duration(-1, 500_000_000)),
    schedule_case("template run_after past 9999", "template.run_after", template=report(run_after=ts(10**14))),
    schedule_case(
        "template job_timeout of 10**14 s",
        "template.timeouts.job_timeout",
        template=report(timeouts=job_pb2.Timeouts(job_timeout=raw_duration(10**14))),
    ),
    schedule_case("unknown zone", "time_zone", time_zone="Europe/Atlantis"),
    schedule_case("zone as a path", "time_zone", time_zone="../../etc/passwd"),
    Bad(
        "CreateSchedule without template",
        lambda c: c.served.schedules.CreateSchedule(  # type: ignore[attr-defined]
            schedule_pb2.CreateScheduleRequest(schedule_id="x", cron="0 2 * * *")
        ),
        "template",
    ),
    schedule_case("template without job type", "template.job_type", template=job_pb2.SubmitRequest()),
    schedule_case("template bad queue", "template.queue", template=report(queue="no spaces")),
    schedule_case("template payload too large", "template.payload", template=report(payload=b"x" * (MiB + 1))),
    schedule_case("template with a key", "template.idempotency_key", template=report(idempotency_key="k")),
    schedule_case("template bad label", "template.labels", template=report(labels={"": "x"})),
    schedule_case(
        "template bad retry policy",
        "template.retry_policy.max_attempts",
        template=report(retry_policy=job_pb2.RetryPolicy(max_attempts=-1)),
    ),
    schedule_case("unknown overlap", "overlap", overlap=7),
    schedule_case("unknown catch_up", "catch_up", catch_up=9),
]


def _schedule_ref_cases(rpc: str) -> list[Bad]:
    return [
        Bad(
            f"{rpc} schedule_id={bad!r}",
            lambda c, bad=bad: getattr(c.served.schedules, rpc)(  # type: ignore[attr-defined,misc]
                schedule_pb2.ScheduleRef(schedule_id=bad)
            ),
            "schedule_id",
        )
        for bad in ("", "no spaces", "s" * 65)
    ]


LIST_SCHEDULES = [
    Bad(
        "ListSchedules page_size -1",
        lambda c: c.served.schedules.ListSchedules(schedule_pb2.ListSchedulesRequest(page_size=-1)),  # type: ignore[attr-defined]
        "page_size",
    ),
    *(
        Bad(
            f"ListSchedules page_token={token[:20]!r}",
            lambda c, token=token: c.served.schedules.ListSchedules(  # type: ignore[attr-defined,misc]
                schedule_pb2.ListSchedulesRequest(page_token=token)
            ),
            "page_token",
        )
        for token in GARBAGE_TOKENS
    ),
]


# -- AdminService --------------------------------------------------------------------------------


def inspect_case(name: str, field: str, **fields: object) -> Bad:
    return Bad(f"Inspect {name}", lambda c: c.served.admin.Inspect(admin_pb2.InspectRequest(**fields)), field)  # type: ignore[attr-defined,arg-type]


INSPECT = [
    inspect_case("stalled_after=-1s", "stalled_after", stalled_after=raw_duration(-1)),
    inspect_case("stalled_after=-1ns", "stalled_after", stalled_after=raw_duration(0, -1)),
    inspect_case("stalled_after of 3000 years", "stalled_after", stalled_after=raw_duration(10**11)),
    inspect_case("stalled_after of 10000 years", "stalled_after", stalled_after=raw_duration(315_576_000_000)),
    *(inspect_case(f"stalled_after of {s} s", "stalled_after", stalled_after=raw_duration(s)) for s in OVERFLOWING),
    inspect_case("queue with a space", "queue", queue="bad name!"),
    inspect_case("queue of 65 chars", "queue", queue="q" * 65),
    inspect_case("kinds=[42]", "kinds", kinds=[42]),
    inspect_case("kinds=[0]", "kinds", kinds=[0]),
    inspect_case("kinds=[1, -3]", "kinds", kinds=[1, -3]),
    inspect_case("kinds of 100,000", "kinds", kinds=[1] * 100_000),  # a query per kind: one each, and few
]


def list_events(name: str, field: str, **fields: object) -> Bad:
    async def call(c: Ctx) -> object:
        values: dict[str, object] = {"job_no": c.job_no, **fields}
        return await c.served.admin.ListEvents(admin_pb2.ListEventsRequest(**values))  # type: ignore[attr-defined,arg-type]

    return Bad(f"ListEvents {name}", call, field)


LIST_EVENTS = [
    *(list_events(f"job_no={n!r}", "job_no", job_no=n) for n in BAD_JOB_NOS),
    list_events("page_size=-1", "page_size", page_size=-1),
    *(list_events(f"page_token={t[:20]!r}", "page_token", page_token=t) for t in GARBAGE_TOKENS),
]


async def get_checkpoint(c: Ctx, job_no: str) -> object:
    return await c.served.admin.GetCheckpoint(admin_pb2.GetCheckpointRequest(job_no=job_no))  # type: ignore[attr-defined]


def record_case(name: str, field: str, **fields: object) -> Bad:
    async def call(c: Ctx) -> object:
        values: dict[str, object] = {
            "job_no": c.job_no, "worker_token": c.token, "entries": [worker_pb2.EvidenceEntry(key="k", value="v")],
            **fields,
        }  # fmt: skip
        return await c.served.workers.RecordEvidence(worker_pb2.RecordEvidenceRequest(**values))  # type: ignore[attr-defined,arg-type]

    return Bad(f"RecordEvidence {name}", call, field)


def _entry(key: str = "k", value: str = "v") -> worker_pb2.EvidenceEntry:
    return worker_pb2.EvidenceEntry(key=key, value=value)


RECORD_EVIDENCE = [
    *(record_case(f"job_no={n!r}", "job_no", job_no=n) for n in BAD_JOB_NOS),
    record_case("token of 81 chars", "worker_token", worker_token=LONG_TOKEN),
    record_case("no entries", "entries", entries=[]),
    record_case("51 entries", "entries", entries=[_entry()] * 51),
    record_case("an empty key", "entries[0].key", entries=[_entry(key="")]),
    record_case("a key with a space", "entries[1].key", entries=[_entry(), _entry(key="bad key")]),
    record_case("a value of 1001 chars", "entries[0].value", entries=[_entry(value="v" * 1001)]),
    record_case("a value with a control character", "entries[0].value", entries=[_entry(value="a\x1bb")]),
]


def requeue(name: str, field: str, **fields: object) -> Bad:
    async def call(c: Ctx) -> object:
        values: dict[str, object] = {"job_no": c.job_no, **fields}
        return await c.served.admin.Requeue(admin_pb2.RequeueRequest(**values))  # type: ignore[attr-defined,arg-type]

    return Bad(f"Requeue {name}", call, field)


REQUEUE = [
    *(requeue(f"job_no={n!r}", "job_no", job_no=n) for n in BAD_JOB_NOS),
    requeue("reason of 1001 chars", "reason", reason="r" * 1001),
    requeue("reason with a newline", "reason", reason="line\nbreak"),
]


async def _upload(c: Ctx, *chunks: job_pb2.ResultChunk) -> object:
    async def stream():  # type: ignore[no-untyped-def]
        for chunk in chunks:
            yield chunk

    return await c.served.workers.UploadResult(stream())  # type: ignore[attr-defined]


def upload_case(name: str, field: str | None, *more: job_pb2.ResultChunk, code: grpc.StatusCode = INVALID,
                reason: str | None = "INVALID_ARGUMENT", **first: object) -> Bad:  # fmt: skip
    def call(c: Ctx) -> Awaitable[object]:
        values: dict[str, object] = {"job_no": c.job_no, "worker_token": c.token, "data": b"abc", **first}
        return _upload(c, job_pb2.ResultChunk(**values), *more)  # type: ignore[arg-type]

    return Bad(f"UploadResult {name}", call, field, code, reason)


UPLOAD_RESULT = [
    *(upload_case(f"job_no={n!r}", "job_no", job_no=n) for n in BAD_JOB_NOS),
    upload_case("token of 81 chars", "worker_token", worker_token=LONG_TOKEN),
    upload_case("content_type of 256 chars", "content_type", content_type="t" * 256),
    upload_case("content_type with a newline", "content_type", content_type="text/plain\n"),
    upload_case("data over 1 MiB in one chunk", "data", data=b"x" * (MiB + 1)),
    upload_case("a later chunk naming the job", "job_no", job_pb2.ResultChunk(job_no="PT-20260101-001", data=b"x")),
    upload_case("a later chunk over 1 MiB", "data", job_pb2.ResultChunk(data=b"x" * (MiB + 1))),
    upload_case("a chunk over 4 MiB", None, code=TOO_BIG, reason=None, data=b"x" * (4 * MiB + 1)),
    Bad("UploadResult no chunk at all", lambda c: _upload(c), "job_no"),
]


async def _session(c: Ctx, *frames: bytes) -> object:
    """A Session that sends `frames` as they are, half-closes, and reads to its end (its status)."""
    call = c.served.channel.stream_stream("/jobwire.v1.WorkerService/Session")(iter(frames))  # type: ignore[attr-defined]
    return [frame async for frame in call]


# A heartbeat whose worker_id is not UTF-8: the frame does not parse, so no call_id can be answered.
UNPARSED_HEARTBEAT = bytes([(3 << 3) | 2, 4, (1 << 3) | 2, 2, 0xFF, 0xFE])
# Complete (field 6) with 4 MiB + 1 of inline_result (field 4): past the server's message limit.
OVERSIZED = worker_pb2.WorkerFrame(complete=worker_pb2.CompleteRequest(inline_result=b"x" * (4 * MiB + 1)))

# A frame's call is refused in its reply (tests/service/test_session.py); these end the stream.
SESSION = [
    Bad("Session a frame that does not parse", lambda c: _session(c, UNPARSED_HEARTBEAT), "request"),
    Bad("Session a frame over 4 MiB", lambda c: _session(c, OVERSIZED.SerializeToString()), None, TOO_BIG, None),
]

GET_RESULT = _job_no_cases(
    "GetResult",
    lambda c, n: first_message(c.served.jobs.GetResult(job_pb2.GetResultRequest(job_no=n))),  # type: ignore[attr-defined]
)

GET_PAYLOAD = [
    *_job_no_cases(
        "GetPayload",
        lambda c, n: c.served.jobs.GetPayload(job_pb2.GetPayloadRequest(job_no=n)),  # type: ignore[attr-defined]
    ),
    Bad(
        "GetPayload negative max_bytes",
        lambda c: c.served.jobs.GetPayload(job_pb2.GetPayloadRequest(job_no=c.job_no, max_bytes=-1)),  # type: ignore[attr-defined]
        "max_bytes",
    ),
]

LIST_WORKERS = [
    Bad(
        "ListWorkers queue with a space",
        lambda c: c.served.admin.ListWorkers(admin_pb2.ListWorkersRequest(queue="bad name!")),
        "queue",
    ),  # type: ignore[attr-defined]
    Bad(
        "ListWorkers queue of 65 chars",
        lambda c: c.served.admin.ListWorkers(admin_pb2.ListWorkersRequest(queue="q" * 65)),
        "queue",
    ),  # type: ignore[attr-defined]
]


def set_limits(name: str, field: str, queue: str = "exports", **limits: object) -> Bad:
    request = admin_pb2.SetQueueLimitsRequest(queue=queue, limits=admin_pb2.QueueLimits(**limits))  # type: ignore[arg-type]
    return Bad(f"SetQueueLimits {name}", lambda c: c.served.admin.SetQueueLimits(request), field)  # type: ignore[attr-defined]


SET_QUEUE_LIMITS = [
    set_limits("max_running=-1", "limits.max_running", max_running=-1),
    set_limits("max_running of 2**31-1", "limits.max_running", max_running=2**31 - 1),
    set_limits("rate_per_second=-1", "limits.rate_per_second", rate_per_second=-1.0),
    set_limits("rate_per_second=nan", "limits.rate_per_second", rate_per_second=float("nan")),
    set_limits("rate_per_second=inf", "limits.rate_per_second", rate_per_second=float("inf")),
    set_limits("burst=-1", "limits.burst", rate_per_second=1.0, burst=-1),
    set_limits("burst without a rate", "limits.burst", burst=2),
    set_limits("max_running_per_tenant=1", "limits.max_running_per_tenant", max_running_per_tenant=1),
    set_limits("job_type set", "limits.job_type", job_type="frames"),
    set_limits("queue with a space", "queue", queue="bad name!", max_running=1),
    set_limits("queue of 65 chars", "queue", queue="q" * 65, max_running=1),
    set_limits("no queue", "queue", queue="", max_running=1),
]


def _queue_cases(rpc: str, request_type: Any) -> list[Bad]:
    def case(name: str, queue: str) -> Bad:
        return Bad(
            f"{rpc} {name}",
            lambda c: getattr(c.served.admin, rpc)(request_type(queue=queue)),  # type: ignore[attr-defined]
            "queue",
        )

    return [case("queue with a space", "bad name!"), case("queue of 65 chars", "q" * 65), case("no queue", "")]


def _operation_names(rpc: str, call: Callable[[Ctx, str], Awaitable[object]]) -> list[Bad]:
    """Names that are not `operations/<job_no>`, each refused as `name` before anything is read."""
    names: list[Callable[[Ctx], str]] = [
        lambda c: "",
        lambda c: c.job_no,  # a job number without the collection
        lambda c: "operations/",
        lambda c: "operations/garbage",
        lambda c: "Operations/" + c.job_no,
        lambda c: f"operations/{c.job_no}/x",
        lambda c: f"jobs/{c.queued_no}",
    ]
    return [Bad(f"{rpc} name #{i}", lambda c, n=n: call(c, n(c)), "name") for i, n in enumerate(names)]  # type: ignore[misc]


def _ops(c: Ctx) -> Any:
    return c.served.operations  # type: ignore[attr-defined]


def _list_operations(case: str, field: str, **fields: object) -> Bad:
    request = operations_pb2.ListOperationsRequest(**fields)  # type: ignore[arg-type]
    return Bad(f"ListOperations {case}", lambda c: _ops(c).ListOperations(request), field)


def _wait(c: Ctx, timeout: Duration) -> Awaitable[object]:
    request = operations_pb2.WaitOperationRequest(name=f"operations/{c.queued_no}", timeout=timeout)
    return _ops(c).WaitOperation(request)  # type: ignore[no-any-return]


OPERATIONS_GET = _operation_names(
    "GetOperation", lambda c, n: _ops(c).GetOperation(operations_pb2.GetOperationRequest(name=n))
)
OPERATIONS_LIST = [
    _list_operations("name=jobs", "name", name="jobs"),
    _list_operations("name=operations/", "name", name="operations/"),
    _list_operations("filter=done=true", "filter", filter="done = true"),
    _list_operations("page_size=-1", "page_size", page_size=-1),
    *(_list_operations(f"page_token={t[:20]!r}", "page_token", page_token=t) for t in GARBAGE_TOKENS),
]
OPERATIONS_WAIT = [
    *_operation_names("WaitOperation", lambda c, n: _ops(c).WaitOperation(operations_pb2.WaitOperationRequest(name=n))),
    Bad("WaitOperation timeout=-1s", lambda c: _wait(c, raw_duration(-1)), "timeout"),
    Bad("WaitOperation timeout=-1ns", lambda c: _wait(c, raw_duration(0, -1)), "timeout"),
    Bad("WaitOperation timeout nanos=1e9", lambda c: _wait(c, raw_duration(0, 1_000_000_000)), "timeout"),
    *(Bad(f"WaitOperation timeout={s}s", lambda c, s=s: _wait(c, raw_duration(s)), "timeout") for s in OVERFLOWING),
]
# a bad name must refuse the call before any job is cancelled or deleted
OPERATIONS_CANCEL = _operation_names(
    "CancelOperation", lambda c, n: _ops(c).CancelOperation(operations_pb2.CancelOperationRequest(name=n))
)
OPERATIONS_DELETE = _operation_names(
    "DeleteOperation", lambda c, n: _ops(c).DeleteOperation(operations_pb2.DeleteOperationRequest(name=n))
)


MATRIX: dict[str, list[Bad]] = {
    "JobService.Submit": SUBMIT,
    "JobService.Get": GET,
    "JobService.Cancel": CANCEL,
    "JobService.Retry": RETRY,
    "JobService.Resolve": RESOLVE,
    "JobService.ListJobs": LIST_JOBS,
    "JobService.WatchStatus": WATCH_STATUS,
    "JobService.WatchJobs": WATCH_JOBS,
    "JobService.SubmitBatch": SUBMIT_BATCH,
    "JobService.GetBatch": GET_BATCH,
    "JobService.CancelBatch": CANCEL_BATCH,
    "JobService.GetResult": GET_RESULT,
    "JobService.GetPayload": GET_PAYLOAD,
    "WorkerService.Claim": CLAIM,
    "WorkerService.Heartbeat": HEARTBEAT,
    "WorkerService.ReportStage": REPORT,
    "WorkerService.BatchReportStage": BATCH_REPORT,
    "WorkerService.Complete": COMPLETE,
    "WorkerService.Fail": FAIL,
    "WorkerService.ConfirmCancel": CONFIRM,
    "WorkerService.Release": RELEASE,
    "WorkerService.AwaitReview": AWAIT_REVIEW,
    "WorkerService.UploadResult": UPLOAD_RESULT,
    "WorkerService.RecordEvidence": RECORD_EVIDENCE,
    "WorkerService.Session": SESSION,
    "ScheduleService.CreateSchedule": CREATE_SCHEDULE,
    "ScheduleService.GetSchedule": _schedule_ref_cases("GetSchedule"),
    "ScheduleService.ListSchedules": LIST_SCHEDULES,
    "ScheduleService.PauseSchedule": _schedule_ref_cases("PauseSchedule"),
    "ScheduleService.ResumeSchedule": _schedule_ref_cases("ResumeSchedule"),
    "ScheduleService.DeleteSchedule": _schedule_ref_cases("DeleteSchedule"),
    "AdminService.Inspect": INSPECT,
    "AdminService.ListEvents": LIST_EVENTS,
    "AdminService.GetCheckpoint": _job_no_cases("GetCheckpoint", get_checkpoint),
    "AdminService.Requeue": REQUEUE,
    "AdminService.ListWorkers": LIST_WORKERS,
    "AdminService.SetQueueLimits": SET_QUEUE_LIMITS,
    "AdminService.GetQueueLimits": _queue_cases("GetQueueLimits", admin_pb2.GetQueueLimitsRequest),
    "AdminService.PauseQueue": _queue_cases("PauseQueue", admin_pb2.PauseQueueRequest),
    "AdminService.ResumeQueue": _queue_cases("ResumeQueue", admin_pb2.ResumeQueueRequest),
    "ScheduleService.ListScheduleJobs": [
        Bad(
            "ListScheduleJobs schedule_id with a space",
            lambda c: c.served.schedules.ListScheduleJobs(schedule_pb2.ListScheduleJobsRequest(schedule_id="a b")),  # type: ignore[attr-defined]
            "schedule_id",
        ),
        Bad(
            "ListScheduleJobs negative page_size",
            lambda c: c.served.schedules.ListScheduleJobs(  # type: ignore[attr-defined]
                schedule_pb2.ListScheduleJobsRequest(schedule_id="s", page_size=-1)
            ),
            "page_size",
        ),
    ],
    "AdminService.ListQueues": [
        Bad(
            "ListQueues queue with a space",
            lambda c: c.served.admin.ListQueues(admin_pb2.ListQueuesRequest(queue="bad name!")),
            "queue",
        ),  # type: ignore[attr-defined]
        Bad(
            "ListQueues negative minutes",
            lambda c: c.served.admin.ListQueues(admin_pb2.ListQueuesRequest(minutes=-1)),
            "minutes",
        ),  # type: ignore[attr-defined]
        Bad(
            "ListQueues past a day",
            lambda c: c.served.admin.ListQueues(admin_pb2.ListQueuesRequest(minutes=1441)),
            "minutes",
        ),  # type: ignore[attr-defined]
    ],
    "Operations.GetOperation": OPERATIONS_GET,
    "Operations.ListOperations": OPERATIONS_LIST,
    "Operations.WaitOperation": OPERATIONS_WAIT,
    "Operations.CancelOperation": OPERATIONS_CANCEL,
    "Operations.DeleteOperation": OPERATIONS_DELETE,
}


def test_the_matrix_covers_every_rpc() -> None:
    from jobwire.v1 import admin_pb2 as a
    from jobwire.v1 import job_pb2 as j
    from jobwire.v1 import schedule_pb2 as sch
    from jobwire.v1 import worker_pb2 as w

    rpcs = {
        f"{service.name}.{method.name}"
        for module in (a, j, sch, w, operations_pb2)
        for service in module.DESCRIPTOR.services_by_name.values()
        for method in service.methods
    }
    assert set(MATRIX) == rpcs


async def _context(served) -> Ctx:  # type: ignore[no-untyped-def]
    failed = await submit(served, "doomed", retry_policy=job_pb2.RetryPolicy(max_attempts=1))
    (doomed,) = await claim(served, "doomed")
    await served.workers.Fail(
        worker_pb2.FailRequest(job_no=failed.job_no, worker_token=doomed.worker_token, message="boom", retryable=True)
    )
    job, lease = await running(served)
    queued = await submit(served, "later")
    return Ctx(served, job.job_no, lease.worker_token, failed.job_no, queued.job_no)


async def _problems(served, ctx: Ctx, case: Bad) -> list[str]:  # type: ignore[no-untyped-def]
    """What is wrong with the server's answer to one bad request (empty: all is well)."""
    problems: list[str] = []
    before = await db_rows(served)
    exc = await rpc_failure(case.call(ctx))
    got = (exc.code(), exc.details())
    info = error_info(exc)
    fields = [f for f, _ in field_violations(exc)]
    if exc.code() in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL):
        problems.append(f"{case.name}: {got} for a caller's mistake")
    elif exc.code() != case.code:
        problems.append(f"{case.name}: {got}, expected {case.code}")
    elif case.reason is None:
        if info is not None:
            problems.append(f"{case.name}: a transport limit with ErrorInfo {info.reason}")
    elif info is None or info.reason != case.reason:
        problems.append(f"{case.name}: ErrorInfo {info and info.reason}, expected {case.reason}")
    elif case.field is not None and fields != [case.field]:
        problems.append(f"{case.name}: BadRequest fields {fields}, expected [{case.field!r}]")
    after = await db_rows(served)
    if after != before:
        problems.append(f"{case.name}: wrote rows ({before} -> {after})")
    return problems


@pytest.mark.parametrize("service", ["JobService", "ScheduleService", "WorkerService", "AdminService", "Operations"])
async def test_bad_input(served, service: str) -> None:  # type: ignore[no-untyped-def]
    """Every case of every RPC of `service`; all problems are reported together."""
    ctx = await _context(served)
    problems: list[str] = []
    for rpc, cases in MATRIX.items():
        if not rpc.startswith(service + "."):
            continue
        for case in cases:
            problems += await _problems(served, ctx, case)
            # the server keeps serving
            assert (await get(served, ctx.job_no)).job_no == ctx.job_no, case.name
    assert not problems, "\n".join(problems)
    # and the jobs the cases aimed at are as they were
    assert (await get(served, ctx.job_no)).status == job_pb2.Job.RUNNING
    assert (await get(served, ctx.failed_no)).status == job_pb2.Job.FAILED
    assert (await get(served, ctx.queued_no)).status == job_pb2.Job.QUEUED


async def test_a_batch_answers_each_bad_report_alone_and_writes_nothing_for_it(served) -> None:  # type: ignore[no-untyped-def]
    """BatchReportStage answers every bad report of BAD_REPORTS in its own result, as ReportStage would."""
    ctx = await _context(served)
    before = await db_rows(served)
    reply = await served.workers.BatchReportStage(
        worker_pb2.BatchReportStageRequest(reports=[report_request(ctx, **fields) for _, _, _, fields in BAD_REPORTS])
    )
    assert len(reply.results) == len(BAD_REPORTS)
    problems = []
    for (name, field, reason, _), got in zip(BAD_REPORTS, reply.results, strict=True):
        if got.WhichOneof("result") != "error":
            problems.append(f"{name}: accepted")
            continue
        info, violations = _detail(got.error)
        if (got.error.code, info, violations) != (INVALID.value[0], reason, [field]):
            problems.append(f"{name}: {got.error.code} {info} {violations}, expected {reason} [{field}]")
    assert not problems, "\n".join(problems)
    assert await db_rows(served) == before
    assert (await get(served, ctx.job_no)).status == job_pb2.Job.RUNNING


def _detail(status: object) -> tuple[str | None, list[str]]:
    """The ErrorInfo reason and the BadRequest fields of a google.rpc.Status."""
    from google.rpc import error_details_pb2

    reason, fields = None, []
    for packed in status.details:  # type: ignore[attr-defined]
        info, bad = error_details_pb2.ErrorInfo(), error_details_pb2.BadRequest()
        if packed.Unpack(info):
            reason = info.reason
        elif packed.Unpack(bad):
            fields = [v.field for v in bad.field_violations]
    return reason, fields


@pytest.mark.both_databases  # the longest values each database's columns must hold
async def test_the_limits_themselves_are_accepted(served) -> None:  # type: ignore[no-untyped-def]
    """A 1 MiB payload, a 64 KiB checkpoint and the longest names pass, on both databases."""
    max_name = "a" * 64
    reply = await served.jobs.Submit(
        job_pb2.SubmitRequest(
            job_type=max_name,
            queue="q" * 64,
            payload=b"\xff" * MiB,
            idempotency_key="k" * 128,
            owner="o" * 128,
            labels={f"k{i:02d}" + "x" * 60: "v" * 256 for i in range(32)},
            locale="l" * 35,
            retry_policy=job_pb2.RetryPolicy(
                max_attempts=100, initial_backoff=duration(86400), max_backoff=duration(86400), backoff_multiplier=10
            ),
            run_after=ts(253402300799),  # 9999-12-31T23:59:59Z: legal, if patient
            timeouts=job_pb2.Timeouts(
                attempt_timeout=duration(30 * 86400),
                job_timeout=duration(30 * 86400),
                stage_timeout=duration(30 * 86400),
                on_no_progress=job_pb2.Timeouts.FAIL,
            ),
        )
    )
    assert reply.created and reply.job.max_attempts == 100
    await submit(served, max_name, queue="q" * 64)
    (lease,) = await claim(served, max_name, queues=["q" * 64], worker_id="w" * 128, max_jobs=100, lease=3600)
    await served.workers.ReportStage(
        worker_pb2.ReportStageRequest(
            job_no=lease.job_no,
            worker_token=lease.worker_token,
            stage="PROCESSING",
            note="n" * 1000,
            processed_units=2**63 - 1,
            total_units=2**63 - 1,
            checkpoint=b"\x00" * (64 * KiB),
        )
    )
    await served.workers.Release(
        worker_pb2.ReleaseRequest(job_no=lease.job_no, worker_token=lease.worker_token, checkpoint=b"\x01" * (64 * KiB))
    )
    (again,) = await claim(served, max_name, queues=["q" * 64], lease=1)
    assert again.checkpoint == b"\x01" * (64 * KiB)
    done = await served.workers.Complete(
        worker_pb2.CompleteRequest(
            job_no=again.job_no,
            worker_token=again.worker_token,
            result=result(uri="s3://" + "u" * 2043, content_type="t" * 255, summary="s" * 2000, size_bytes=0),
        )
    )
    assert done.status == job_pb2.Job.READY and len(done.result.uri) == 2048
    got = await served.jobs.Get(job_pb2.GetRequest(job_no=reply.job.job_no))
    assert len(got.labels) == 32 and got.owner == "o" * 128


def _undecodable(message: object) -> bytes | None:
    """`message`'s type on the wire with invalid UTF-8 in its first string field, or None."""
    from google.protobuf.descriptor import FieldDescriptor

    for field in message.DESCRIPTOR.fields:  # type: ignore[attr-defined]
        if field.type == FieldDescriptor.TYPE_STRING:
            tag = (field.number << 3) | 2  # length-delimited
            return bytes([tag]) + bytes([2]) + b"\xff\xfe" if tag < 128 else None
    return None


async def test_bytes_that_do_not_parse_answer_invalid_argument(served) -> None:  # type: ignore[no-untyped-def]
    """Security review, finding 9: invalid UTF-8 in a string field answered UNKNOWN with the
    parser's exception text. Every RPC with a string field answers INVALID_ARGUMENT, naming
    no Python class, and writes nothing."""
    from jobwire.v1 import admin_pb2 as a
    from jobwire.v1 import job_pb2 as j
    from jobwire.v1 import schedule_pb2 as sch
    from jobwire.v1 import worker_pb2 as w

    ctx = await _context(served)
    before = await db_rows(served)
    problems, tried = [], 0
    for module in (a, j, sch, w):
        for service in module.DESCRIPTOR.services_by_name.values():
            for method in service.methods:
                request_class = getattr(module, method.input_type.name, None) or getattr(j, method.input_type.name)
                raw = _undecodable(request_class())
                if raw is None:
                    continue
                tried += 1
                path = f"/{service.full_name}/{method.name}"
                if method.client_streaming:  # UploadResult: one chunk that does not parse
                    failure = rpc_failure(served.channel.stream_unary(path)(iter([raw])))
                elif method.server_streaming:
                    call = served.channel.unary_stream(path)(raw)
                    failure = rpc_failure(first_message(call))
                else:
                    failure = rpc_failure(served.channel.unary_unary(path)(raw))
                exc = await failure
                if exc.code() != INVALID or "Error" in (exc.details() or "") or "parsing" in (exc.details() or ""):
                    problems.append(f"{path}: {exc.code()} {exc.details()!r}")
    assert tried >= 15, tried
    assert not problems, "\n".join(problems)
    assert await db_rows(served) == before
    assert (await get(served, ctx.job_no)).status == job_pb2.Job.RUNNING
