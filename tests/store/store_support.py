"""The calls the store tier makes, as a use case would make them (no gRPC, no server)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

from sqlalchemy.engine import Connection

from jobwire.db import leases, user_actions
from jobwire.db.changes import JobOp
from jobwire.db.reaper import Reaped
from jobwire.db.store import Call, Claim, JobStore, Submit
from jobwire.db.timeouts import Swept
from jobwire.domain.commands import Claimant, Failure, NewJob, Scope
from jobwire.domain.errors import JobwireError
from jobwire.domain.job import Artifact, ErrorCategory, JobRecord
from jobwire.domain.lease import Lease
from jobwire.domain.retry import OnLeaseLost, RetryPolicy
from jobwire.domain.stages import DEFAULT_PLAN

T = TypeVar("T")
TENANT = "acme"
SCOPE = Scope(tenant=TENANT)
RESULT = Artifact(uri="file:///results/out.bin", size_bytes=12, sha256="ab" * 32)
LEASE_S = 30.0
A_LEASE = timedelta(seconds=LEASE_S)


def new_job(job_type: str = "frames", **fields: Any) -> NewJob:
    """A job of `job_type` for TENANT's default queue; `fields` as NewJob takes them."""
    values: dict[str, Any] = {"tenant": TENANT, "job_type": job_type, "queue": "default", "payload": b"{}"}
    return NewJob(**(values | fields))


def retrying(max_attempts: int = 3, **fields: Any) -> RetryPolicy:
    """A policy that requeues a lost lease (RETRY), with `max_attempts` attempts."""
    return RetryPolicy(max_attempts=max_attempts, on_lease_lost=OnLeaseLost.RETRY, **fields)


async def submitted(store: JobStore, new: NewJob) -> tuple[JobRecord, bool] | JobwireError:
    """The store's answer to one Submit: (job, created) or the refusal."""
    (answer,) = (await store.apply([Submit([new])]))[0]
    return answer  # type: ignore[no-any-return]


async def submit(store: JobStore, job_type: str = "frames", **fields: Any) -> JobRecord:
    """A job made now (a refusal fails the test)."""
    answer = await submitted(store, new_job(job_type, **fields))
    assert not isinstance(answer, JobwireError), answer
    job, created = answer
    assert created
    return job


def worker(worker_id: str = "w1", *job_types: str, lease_s: float = LEASE_S, **fields: Any) -> Claimant:
    """A worker of TENANT serving `job_types` (frames) in the default queue, on the default plan."""
    values: dict[str, Any] = {
        "tenant": TENANT,
        "worker_id": worker_id,
        "queues": ("default",),
        "plans": {t: DEFAULT_PLAN for t in job_types or ("frames",)},
        "lease_seconds": lease_s,
    }
    return Claimant(**(values | fields))


async def claim(store: JobStore, who: Claimant | None = None, max_jobs: int = 1) -> list[Lease]:
    """The leases one Claim gets now (possibly none)."""
    return list((await store.apply([Claim(who or worker(), max_jobs)]))[0])


async def leased(store: JobStore, job_type: str = "frames", **fields: Any) -> tuple[JobRecord, Lease]:
    """A job submitted and claimed by w1."""
    job = await submit(store, job_type, **fields)
    [lease] = await claim(store, worker("w1", job_type))
    assert lease.job_no == job.job_no
    return job, lease


async def outcome(store: JobStore, op: JobOp[T]) -> T | JobwireError:
    """One call's outcome, or its refusal."""
    return (await store.apply([Call([op])]))[0][0]  # type: ignore[no-any-return]


async def one(store: JobStore, op: JobOp[T]) -> T:
    """One call's outcome (a refusal fails the test)."""
    answer = await outcome(store, op)
    assert not isinstance(answer, JobwireError), answer
    return answer


async def refusal(store: JobStore, op: JobOp[Any]) -> JobwireError:
    """The refusal of one call (an outcome fails the test)."""
    answer = await outcome(store, op)
    assert isinstance(answer, JobwireError), answer
    return answer


def get(store: JobStore, job_no: str) -> JobRecord:
    return store.get(SCOPE, job_no, no_worker_after=timedelta(minutes=5))


# -- the worker's and the user's calls, by lease or job number --------------------------------


def report(lease: Lease, stage: str = "PREPARING", processed: int = 0, **fields: Any) -> leases.Report:
    return leases.Report(
        tenant=lease.tenant, job_no=lease.job_no, token=lease.worker_token, stage=stage, processed=processed, **fields
    )


def renew(lease: Lease) -> leases.Renew:
    return leases.Renew(tenant=lease.tenant, job_no=lease.job_no, token=lease.worker_token)


def complete(lease: Lease) -> leases.Complete:
    return leases.Complete(tenant=lease.tenant, job_no=lease.job_no, token=lease.worker_token, result=RESULT)


def fail(
    lease: Lease, *, retryable: bool = True, category: ErrorCategory = ErrorCategory.PROCESSING_ERROR
) -> leases.Fail:
    failure = Failure(category=category, message="the input was odd", retryable=retryable, detail="trace")
    return leases.Fail(tenant=lease.tenant, job_no=lease.job_no, token=lease.worker_token, failure=failure)


def release(lease: Lease, checkpoint: bytes | None = None) -> leases.Release:
    return leases.Release(tenant=lease.tenant, job_no=lease.job_no, token=lease.worker_token, checkpoint=checkpoint)


def confirm_cancel(lease: Lease) -> leases.ConfirmCancel:
    return leases.ConfirmCancel(tenant=lease.tenant, job_no=lease.job_no, token=lease.worker_token)


def cancel(job_no: str) -> user_actions.Cancel:
    return user_actions.Cancel(scope=SCOPE, job_no=job_no)


def retry(job_no: str, forced_by: str | None = None) -> user_actions.Retry:
    return user_actions.Retry(scope=SCOPE, job_no=job_no, forced_by=forced_by)


def requeue(job_no: str) -> user_actions.Requeue:
    return user_actions.Requeue(scope=SCOPE, job_no=job_no, reason="host gone")


# -- housekeeping, as one round of it would run -------------------------------------------------


def _reader(store: JobStore) -> Callable[[Callable[[Connection], Any]], Any]:
    async def read(query: Callable[[Connection], Any]) -> Any:
        return store.db.read(query)

    return read


async def reap(store: JobStore, grace: timedelta = timedelta(0)) -> Reaped:
    """One run of the lease reaper, by the store's clock."""
    return await store.reap_leases(grace, by="test-reaper", read=_reader(store))


async def sweep(store: JobStore) -> Swept:
    """One run of the timeout sweeps, by the store's clock."""
    return await store.sweep_timeouts(by="test-sweep", read=_reader(store))
