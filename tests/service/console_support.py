"""What the operator console's gateway tests share: tokens, a signed-in browser, jobs made and run.

The console's pages (queues, jobs search, a job, workers) stand in front of a real jobwire
server on SQLite, reached over HTTP through a real uvicorn (tests/gateway_support.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
from auth_files import Token, write_auth_file
from served import Served, start_server

from jobwire.gateway.session import CSRF_COOKIE
from jobwire.v1 import job_pb2, worker_pb2

CLIENT = Token("console-client-token", tenant="acme")
ADMIN = Token("console-admin-token", tenant="acme", roles=("client", "admin"), name="olivia")
OPERATOR = Token("console-operator-token", tenant="acme", role="admin")  # the admin role alone
WORKER = Token("console-worker-token", tenant="acme", role="worker")
OTHER = Token("console-globex-token", tenant="globex", roles=("client", "admin"))
FLEET = Token("console-fleet-token", tenant="*", role="worker")  # a shared fleet's worker
TOKENS = [CLIENT, ADMIN, OPERATOR, WORKER, OTHER, FLEET]
ZH = {"Accept-Language": "zh-CN,zh;q=0.9"}


@asynccontextmanager
async def console_server(tmp_path: Path) -> AsyncIterator[Served]:
    """A jobwire server on SQLite that knows the console's tokens."""
    s = await start_server(
        f"sqlite:///{tmp_path / 'jobwire.db'}", auth_file=write_auth_file(tmp_path / "a.toml", TOKENS)
    )
    try:
        yield s
    finally:
        await s.close()


def csrf(client: httpx.AsyncClient, **fields: str) -> dict[str, str]:
    """A form's fields with this browser's CSRF token, as the page's form sends them."""
    return {"csrf": client.cookies[CSRF_COOKIE], **fields}


async def submit(served: Served, token: Token = CLIENT, job_type: str = "frames", **fields: object) -> job_pb2.Job:
    request = job_pb2.SubmitRequest(job_type=job_type, **fields)  # type: ignore[arg-type]
    return (await served.jobs.Submit(request, metadata=token.metadata)).job


async def claim(
    served: Served, job_type: str = "frames", queue: str = "", worker_id: str = "w1", token: Token = WORKER
) -> list[worker_pb2.Lease]:
    request = worker_pb2.ClaimRequest(
        worker_id=worker_id, job_types=[worker_pb2.JobTypeSpec(name=job_type)], max_jobs=1,
        queues=[queue] if queue else [],
    )  # fmt: skip
    return list((await served.workers.Claim(request, metadata=token.metadata)).leases)


async def complete(served: Served, lease: worker_pb2.Lease, data: bytes, content_type: str) -> job_pb2.Job:
    done = worker_pb2.CompleteRequest(job_no=lease.job_no, worker_token=lease.worker_token, inline_result=data)
    done.result.content_type = content_type
    return await served.workers.Complete(done, metadata=WORKER.metadata)


async def fail(
    served: Served, lease: worker_pb2.Lease, message: str = "boom", detail: str = "", *, retryable: bool = False
) -> job_pb2.Job:
    request = worker_pb2.FailRequest(
        job_no=lease.job_no, worker_token=lease.worker_token, category=job_pb2.JobError.PROCESSING_ERROR,
        message=message, retryable=retryable,
    )  # fmt: skip
    if detail:
        request.detail = detail
    return await served.workers.Fail(request, metadata=WORKER.metadata)
