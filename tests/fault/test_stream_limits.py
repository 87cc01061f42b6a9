"""One tenant opens every stream it may and 100 more of each kind; the other tenant's calls stay fast.

Security review, issue 22: result downloads, uploads and watches of one tenant took a server's
memory to gigabytes and its open files to the process's limit, and another tenant's Submit,
Get and WatchStatus failed. Here a real server process (`python -m jobwire serve`, so its
memory and open files can be read from /proc) runs with small limits: 20 watch streams and
400 watched jobs and 8 transfers, half of each for either tenant. Tenant A holds all of its
share (stalled downloads, idle uploads, WatchJobs of 40 jobs) and asks for 100 more of each
kind; every extra is RESOURCE_EXHAUSTED. Meanwhile tenant B's Submit, Get and WatchStatus all
succeed with a p99 under 250 ms, and the server stays under the bounds stated below.

SQLite, one process, a few seconds; MariaDB is not touched.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from auth_files import Token, write_auth_file
from processes import ServerProcess, start_server_process

from jobwire.client.channel import FIXED_WINDOW_OPTIONS
from jobwire.client.status import error_reason
from jobwire.v1 import job_pb2, job_pb2_grpc, worker_pb2, worker_pb2_grpc

# alone: a load test, whose latency bound needs the machine to itself
pytestmark = [pytest.mark.alone, pytest.mark.timeout(180)]

TOKENS = [
    Token("a", tenant="a"), Token("a-w", tenant="a", role="worker"),
    Token("b", tenant="b"), Token("b-w", tenant="b", role="worker"),
]  # fmt: skip
A, A_WORKER, B, B_WORKER = (t.metadata for t in TOKENS)
SETTINGS = {"JOBWIRE_MAX_STREAMS": "20", "JOBWIRE_MAX_WATCHED_JOBS": "400", "JOBWIRE_MAX_TRANSFERS": "8"}
WATCHED, TRANSFERS = 200, 4  # tenant A's share of each (and of 10 streams): half, with two tenants
JOBS_PER_WATCH = 40
WATCHES = WATCHED // JOBS_PER_WATCH  # all the jobs it may watch, in 5 of the 10 streams it may open
EXTRA = 100  # asked for past the share, of each kind
CALLS = 100  # of each of tenant B's kinds
P99_MS = 250.0
RESULT = os.urandom(8 << 20)  # far more than a stalled reader's window: its download stays open
# The bounds: stalled transfers hold a file and a few 64 KiB chunks each, refused calls hold
# nothing, watches a few KB a job; the rest is the margin a busy Python process needs.
MAX_RSS_GROWTH_MB = 150
MAX_FILES_GROWTH = 40  # 4 transfers, each client channel's connection, the event tail's, SQLite's


def usage(pid: int) -> tuple[int, int]:
    """(resident MB, open files) of the server process."""
    status = Path(f"/proc/{pid}/status").read_text()
    rss_kb = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS"))
    return rss_kb // 1024, len(os.listdir(f"/proc/{pid}/fd"))


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    env = {
        "JOBWIRE_DATABASE_URL": f"sqlite:///{tmp_path / 'jobwire.db'}",
        "JOBWIRE_AUTH_FILE": str(write_auth_file(tmp_path / "auth.toml", TOKENS)),
        "JOBWIRE_RESULT_STORE": str(tmp_path / "results"),
        "JOBWIRE_STREAM_IDLE_SECONDS": "120",  # nothing is cut while the test runs
        "JOBWIRE_LOG_LEVEL": "WARNING",
        **SETTINGS,
    }
    process = start_server_process(["jobwire", "serve", "--listen", "127.0.0.1:0", "--processes", "1"], env)
    try:
        yield process
    finally:
        process.terminate()


class Tenant:
    def __init__(self, channel: grpc.aio.Channel, client: Any, worker: Any) -> None:
        self.jobs = job_pb2_grpc.JobServiceStub(channel)
        self.workers = worker_pb2_grpc.WorkerServiceStub(channel)
        self.client, self.worker = client, worker

    async def leases(self, n: int) -> list[worker_pb2.Lease]:
        batch = [job_pb2.SubmitRequest(job_type="frames") for _ in range(n)]
        await self.jobs.SubmitBatch(job_pb2.SubmitBatchRequest(jobs=batch), metadata=self.client)
        leases: list[worker_pb2.Lease] = []
        while len(leases) < n:
            kinds = [worker_pb2.JobTypeSpec(name="frames")]
            claim = worker_pb2.ClaimRequest(worker_id="w", job_types=kinds, max_jobs=min(100, n - len(leases)))
            leases += (await self.workers.Claim(claim, metadata=self.worker)).leases
        return leases

    async def kept_result(self) -> str:
        (lease,) = await self.leases(1)
        reply = await self.workers.UploadResult(upload(lease, RESULT), metadata=self.worker)
        await self.workers.Complete(worker_pb2.CompleteRequest(
            job_no=lease.job_no, worker_token=lease.worker_token, upload_id=reply.upload_id
        ), metadata=self.worker)  # fmt: skip
        return lease.job_no


async def upload(lease: worker_pb2.Lease, data: bytes, hold: asyncio.Event | None = None) -> AsyncIterator[Any]:
    step = 1 << 20
    for at in range(0, len(data), step):
        head = {"job_no": lease.job_no, "worker_token": lease.worker_token} if at == 0 else {}
        yield job_pb2.ResultChunk(data=data[at : at + step], **head)
        if hold is not None:
            await hold.wait()  # an idle upload: its first chunk, then nothing


async def outcome(first: Awaitable[Any]) -> str:
    """ "OK" once the stream's first message (or the call) arrived, else the refusal's reason."""
    try:
        await first
        return "OK"
    except grpc.aio.AioRpcError as exc:
        return f"{exc.code().name} {error_reason(exc)}"


async def timed(calls: list[Callable[[], Awaitable[Any]]]) -> list[float]:
    took = []
    for call in calls:
        start = time.perf_counter()
        await call()
        took.append((time.perf_counter() - start) * 1000)
    return took


async def test_one_tenant_at_every_limit_leaves_the_other_fast(server: ServerProcess) -> None:
    idle_rss, idle_files = usage(server.pid)
    channel, theirs_only = grpc.aio.insecure_channel(server.target), grpc.aio.insecure_channel(server.target)
    stalled = grpc.aio.insecure_channel(server.target, options=list(FIXED_WINDOW_OPTIONS))  # readers that stop
    a, a_stalled, b = Tenant(channel, A, A_WORKER), Tenant(stalled, A, A_WORKER), Tenant(theirs_only, B, B_WORKER)
    result = await a.kept_result()
    to_upload = await a.leases(TRANSFERS // 2 + EXTRA)
    watched = [job.job_no for job in (await a.jobs.SubmitBatch(job_pb2.SubmitBatchRequest(
        jobs=[job_pb2.SubmitRequest(job_type="watched") for _ in range(WATCHED)]
    ), metadata=A)).jobs]  # fmt: skip
    theirs = (await b.jobs.Submit(job_pb2.SubmitRequest(job_type="theirs"), metadata=B)).job

    # Tenant A: its share of each kind, then 100 more of each.
    held = asyncio.Event()
    downloads = [a_stalled.jobs.GetResult(job_pb2.GetResultRequest(job_no=result), metadata=A)
                 for _ in range(TRANSFERS // 2 + EXTRA)]  # fmt: skip
    got = [await outcome(call.read()) for call in downloads]
    uploads = [asyncio.ensure_future(a.workers.UploadResult(upload(lease, RESULT, held), metadata=A_WORKER))
               for lease in to_upload]  # fmt: skip
    answered: set[asyncio.Future[Any]] = set()
    while len(answered) < EXTRA:  # the refused ones answer; the held ones wait for `held`
        done, _ = await asyncio.wait(set(uploads) - answered, timeout=10, return_when=asyncio.FIRST_COMPLETED)
        assert done, f"{EXTRA - len(answered)} uploads past the share were not refused"
        answered |= done
    got += [await outcome(u) if u in answered else "OK" for u in uploads]
    watches = [a.jobs.WatchJobs(job_pb2.WatchJobsRequest(job_nos=watched[i : i + JOBS_PER_WATCH]), metadata=A)
               for i in (JOBS_PER_WATCH * (n % WATCHES) for n in range(WATCHES + EXTRA))]  # fmt: skip
    got += [await outcome(call.read()) for call in watches]
    kinds = {reason: got.count(reason) for reason in set(got)}
    assert kinds == {
        "OK": TRANSFERS + WATCHES,
        "RESOURCE_EXHAUSTED TOO_MANY_TRANSFERS": 2 * EXTRA,
        "RESOURCE_EXHAUSTED TOO_MANY_WATCHED_JOBS": EXTRA,
    }

    # Tenant B, meanwhile: every call answered, p99 under 250 ms.
    async def submit() -> None:
        await b.jobs.Submit(job_pb2.SubmitRequest(job_type="theirs"), metadata=B, timeout=5)

    async def get() -> None:
        await b.jobs.Get(job_pb2.GetRequest(job_no=theirs.job_no), metadata=B, timeout=5)

    async def watch() -> None:
        call = b.jobs.WatchStatus(job_pb2.WatchStatusRequest(job_no=theirs.job_no), metadata=B, timeout=5)
        assert (await call.read()).job.job_no == theirs.job_no
        call.cancel()

    for kind in (submit, get, watch):
        took = await timed([kind] * CALLS)
        p99 = statistics.quantiles(took, n=100)[98]
        assert p99 < P99_MS, f"tenant B's {kind.__name__}: p99 {p99:.1f} ms"

    rss, files = usage(server.pid)
    assert rss - idle_rss < MAX_RSS_GROWTH_MB, f"RSS {idle_rss} -> {rss} MB"
    assert files - idle_files < MAX_FILES_GROWTH, f"open files {idle_files} -> {files}"
    held.set()
    for call in [*downloads, *watches]:
        call.cancel()
    await asyncio.gather(*uploads, return_exceptions=True)
    for each in (channel, theirs_only, stalled):
        await each.close()
