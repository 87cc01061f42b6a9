"""Small helpers the service tests share: submit, claim, read errors, wait for a claim to wait."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc
from google.protobuf.duration_pb2 import Duration
from served import Served, eventually

from jobwire.client.status import error_reason
from jobwire.v1 import admin_pb2, admin_pb2_grpc, job_pb2, job_pb2_grpc, worker_pb2, worker_pb2_grpc
from jobwire.worker.server.leasing import POLL_INTERVAL_S

SHA = "ab" * 32
T = TypeVar("T")


def spec(name: str = "frames", stages: list[worker_pb2.StageDef] | None = None) -> worker_pb2.JobTypeSpec:
    return worker_pb2.JobTypeSpec(name=name, stages=stages or [])


async def submit(served, job_type: str = "frames", **fields) -> job_pb2.Job:  # type: ignore[no-untyped-def]
    reply = await served.jobs.Submit(job_pb2.SubmitRequest(job_type=job_type, **fields))
    return reply.job


async def claim(
    served,
    job_type: str = "frames",
    *,
    worker_id: str = "w1",
    max_jobs: int = 1,
    wait: float = 0,
    stages: list[worker_pb2.StageDef] | None = None,
    lease: float | None = None,
    queues=(),
) -> list[worker_pb2.Lease]:  # type: ignore[no-untyped-def]
    request = worker_pb2.ClaimRequest(
        worker_id=worker_id,
        job_types=[spec(job_type, stages)],
        max_jobs=max_jobs,
        queues=list(queues),
        wait=Duration(seconds=int(wait), nanos=int((wait % 1) * 1e9)),
    )
    if lease is not None:
        request.lease_duration.FromNanoseconds(int(lease * 1e9))
    reply = await served.workers.Claim(request)
    return list(reply.leases)


async def running(served, **fields) -> tuple[job_pb2.Job, worker_pb2.Lease]:  # type: ignore[no-untyped-def]
    """A job submitted and claimed: (job as submitted, its lease)."""
    job = await submit(served, **fields)
    leases = await claim(served, job.job_type)
    assert [lease.job_no for lease in leases] == [job.job_no]
    return job, leases[0]


def artifact(uri: str = "file:///results/out.bin") -> job_pb2.Artifact:
    return job_pb2.Artifact(uri=uri, size_bytes=12, sha256=SHA, content_type="application/octet-stream")


async def rpc_error(call) -> tuple[grpc.StatusCode, str | None]:  # type: ignore[no-untyped-def]
    """(code, ErrorInfo reason) of an awaited call that must fail."""
    try:
        await call
    except grpc.aio.AioRpcError as exc:
        return exc.code(), error_reason(exc)
    raise AssertionError("the call succeeded")


# --- helpers for the contract tests (transitions, concurrency, progress, failures, input) ---------

LEASE_LOST = (grpc.StatusCode.FAILED_PRECONDITION, "WORKER_LEASE_LOST")
FORGED_TOKEN = "1.AAAAAAAAAAAAAAAAAAAAAAAA"  # well-formed: epoch 1, a secret nobody was given


def duration(seconds: float) -> Duration:
    out = Duration()
    out.FromNanoseconds(round(seconds * 1e9))
    return out


def counted(served: Served, move: str, job_type: str = "frames", **labels: str) -> float:
    """The job counter of `move` (jobwire.rpc.job_metrics) of the default queue and `job_type`, as scraped."""
    name = f"jobwire_jobs_{move}_total"
    value = served.runtime.host.metrics.registry.get_sample_value(
        name, {"queue": "default", "job_type": job_type, **labels}
    )
    return value or 0.0


async def get(served, job_no: str, locale: str = "") -> job_pb2.Job:  # type: ignore[no-untyped-def]
    return await served.jobs.Get(job_pb2.GetRequest(job_no=job_no, locale=locale))


async def rpc_failure(call) -> grpc.aio.AioRpcError:  # type: ignore[no-untyped-def]
    """The error of an awaited call that must fail."""
    try:
        await call
    except grpc.aio.AioRpcError as exc:
        return exc
    raise AssertionError("the call succeeded")


def complete_request(lease_or_job_no, token: str | None = None, result: job_pb2.Artifact | None = None):  # type: ignore[no-untyped-def]
    job_no, token = _ref(lease_or_job_no, token)
    return worker_pb2.CompleteRequest(job_no=job_no, worker_token=token, result=result or artifact())


def _ref(lease_or_job_no, token: str | None) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    if isinstance(lease_or_job_no, str):
        assert token is not None
        return lease_or_job_no, token
    return lease_or_job_no.job_no, token if token is not None else lease_or_job_no.worker_token


def _count_rows() -> object:
    import sqlalchemy as sa

    from jobwire.db.tables import artifact as artifact_table
    from jobwire.db.tables import (
        job,
        job_batch,
        job_day_counter,
        job_dependency,
        job_event,
        schedule,
        schedule_tenant,
        worker,
    )

    return sa.select(
        sa.select(sa.func.count()).select_from(job).scalar_subquery().label("job"),
        sa.select(sa.func.coalesce(sa.func.sum(job.c.version), 0)).scalar_subquery().label("job_versions"),
        sa.select(sa.func.count()).select_from(job_event).scalar_subquery().label("job_event"),
        sa.select(sa.func.count()).select_from(artifact_table).scalar_subquery().label("artifact"),
        sa.select(sa.func.count()).select_from(worker).scalar_subquery().label("worker"),
        sa.select(sa.func.count()).select_from(job_day_counter).scalar_subquery().label("job_day_counter"),
        sa.select(sa.func.count()).select_from(job_batch).scalar_subquery().label("job_batch"),
        sa.select(sa.func.count()).select_from(job_dependency).scalar_subquery().label("job_dependency"),
        sa.select(sa.func.count()).select_from(schedule).scalar_subquery().label("schedule"),
        sa.select(sa.func.count()).select_from(schedule_tenant).scalar_subquery().label("schedule_tenant"),
        # not schedule_run: the schedule loop marks it on its own, whatever a call does
    )


async def db_rows(served) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """Row counts of every table (and the sum of job versions): equal before/after means nothing written."""
    import asyncio

    engine = served.runtime.store.db.engine

    def read() -> dict[str, int]:
        with engine.connect() as conn:
            row = conn.execute(_count_rows()).mappings().one()  # type: ignore[call-overload]
            return {k: int(v) for k, v in row.items()}

    return await asyncio.to_thread(read)


async def db_query(served, query):  # type: ignore[no-untyped-def]
    """Rows of a SQLAlchemy Core query on the server's own database, as dicts."""
    import asyncio

    engine = served.runtime.store.db.engine

    def read() -> list[dict[str, object]]:
        with engine.connect() as conn:
            return [dict(r) for r in conn.execute(query).mappings()]

    return await asyncio.to_thread(read)


async def terminal_rows_with_token(served) -> list[dict[str, object]]:  # type: ignore[no-untyped-def]
    """Terminal jobs still holding a worker token, read straight from the table: must stay empty."""
    import sqlalchemy as sa

    from jobwire.db.tables import job

    query = sa.select(job.c.job_no, job.c.status, job.c.worker_token).where(
        job.c.status.in_(["READY", "FAILED", "CANCELLED"]), job.c.worker_token.is_not(None)
    )
    return await db_query(served, query)  # type: ignore[no-any-return]


async def assert_invariants(served) -> None:  # type: ignore[no-untyped-def]
    """The two Inspect findings that must stay empty are empty, and the table agrees."""
    from jobwire.v1 import admin_pb2

    found = await served.admin.Inspect(admin_pb2.InspectRequest(
        kinds=[admin_pb2.Finding.TERMINAL_WITH_TOKEN, admin_pb2.Finding.RUNNING_WITHOUT_LEASE]
    ))  # fmt: skip
    assert list(found.findings) == []
    assert await terminal_rows_with_token(served) == []


class Stubs:
    """Stubs on a channel of their own: concurrent callers that share no connection."""

    def __init__(self, target: str) -> None:

        self.channel = grpc.aio.insecure_channel(target)
        self.jobs = job_pb2_grpc.JobServiceStub(self.channel)
        self.workers = worker_pb2_grpc.WorkerServiceStub(self.channel)
        self.admin = admin_pb2_grpc.AdminServiceStub(self.channel)

    async def close(self) -> None:
        await self.channel.close()


async def open_stubs(target: str, n: int) -> list[Stubs]:
    stubs = [Stubs(target) for _ in range(n)]
    for s in stubs:
        await s.channel.channel_ready()
    return stubs


async def stop_server(served: Served) -> None:
    await served.close()


# --- long polls: a claim known to wait (the server's jobwire_claims_waiting gauge), then woken ----

# Long enough that only a wake-up, never the claim's safety poll (POLL_INTERVAL_S) or the end
# of its wait, can hand it a job before the test gives up (WOKEN_WITHIN_S).
LONG_WAIT_S = POLL_INTERVAL_S * 2
WOKEN_WITHIN_S = POLL_INTERVAL_S / 2


async def until_waiting(served: Served, task: asyncio.Future[object], claims: int = 1) -> None:
    """Until `claims` claims wait for work in `served` (its gauge says so); `task` must not have returned."""

    async def waiting() -> bool:
        assert not task.done(), f"the claim returned before it waited: {task.result()!r}"
        return served.runtime.host.metrics.claims_waiting() >= claims

    await eventually(waiting, what=f"{claims} claim(s) waiting (jobwire_claims_waiting)")


async def woken(task: asyncio.Future[T]) -> T:
    """The result of a waiting claim that a wake-up must end (its safety poll would come far later)."""
    try:
        return await asyncio.wait_for(task, WOKEN_WITHIN_S)
    except TimeoutError:
        raise AssertionError(f"the waiting claim was not woken within {WOKEN_WITHIN_S}s") from None


# --- reading a job's state and evidence while something changes it ---------------------------


def when(s: Any, job_no: str, test: Callable[[job_pb2.Job], bool]) -> Callable[[], Awaitable[job_pb2.Job | None]]:
    """A probe for `eventually`: the job once `test` holds for it."""

    async def probe() -> job_pb2.Job | None:
        job = await get(s, job_no)
        return job if test(job) else None

    return probe


async def events(s: Any, job_no: str) -> list[admin_pb2.JobEvent]:
    reply = await s.admin.ListEvents(admin_pb2.ListEventsRequest(job_no=job_no, page_size=500))
    return list(reply.events)


async def kinds(s: Any, job_no: str) -> list[str]:
    return [e.kind for e in await events(s, job_no)]


async def heartbeat(s: Any, lease: worker_pb2.Lease, worker_id: str = "w1") -> worker_pb2.LeaseState:
    ref = worker_pb2.LeaseRef(job_no=lease.job_no, worker_token=lease.worker_token)
    reply = await s.workers.Heartbeat(worker_pb2.HeartbeatRequest(worker_id=worker_id, leases=[ref]))
    return reply.leases[0]


async def run_worker_until(s: Any, worker: Any, job_no: str, status: int) -> job_pb2.Job:
    """Run an SDK `worker` (jobwire.worker.sdk.Worker) until job `job_no` has `status`; then stop it."""
    running = asyncio.create_task(worker.run())
    try:
        name = job_pb2.Job.Status.Name(status)  # type: ignore[arg-type]
        return await eventually(when(s, job_no, lambda j: j.status == status), what=name)
    finally:
        worker.shutdown()
        await asyncio.wait_for(running, 10)
