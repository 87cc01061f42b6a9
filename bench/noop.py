"""No-op jobs end to end through jobwire, timed as bench/peers.py times RQ and Celery.

The clock runs from the first Submit until the last job is READY (read from the database
every 10 ms), with the worker already running and proven ready by one warm-up job.
Submits come from 8 concurrent callers, as backends would send them. Two workers:

* raw: one process's worth of plain gRPC calls (this bench's own loop): Claim, then
  Complete with a result, 8 jobs at a time: the three calls of a job's life that any
  language's worker makes (submit, claim, complete);
* SDK: a `jobwire-worker` process (`--concurrency 8`, bench/noop_handlers.py): the runtime
  as users run it, with its defaults: the JSON result hashed and handed to the server
  inline with Complete (the server keeps it), the attempt's temporary folder made and
  removed, the DELIVERING stage reported only if the hand-over lasts. Run once per
  transport (`--transport session`, the default: every call a frame of one Session, jobs
  pushed by a standing claim; `--transport unary`: one RPC per call, Claims long-polled).

Every job is real: each change is durably committed with its event.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import grpc
from measure import CpuMeter, connect
from peers import PeerResult

from jobwire.v1 import job_pb2, job_pb2_grpc, worker_pb2, worker_pb2_grpc

BENCH = Path(__file__).resolve().parent
VENV_BIN = Path(sys.executable).parent
JOB_TYPE = "bench.noop"
RAW_TYPE = "bench.noop-raw"
SHA = hashlib.sha256(b"").hexdigest()
SUBMITTERS = 8
CONCURRENCY = 8
READY_TIMEOUT_S = 120.0
RAW_NAME = "jobwire, plain gRPC worker"
TRANSPORTS = ("session", "unary")


def sdk_name(transport: str) -> str:
    return f"jobwire SDK worker, {transport}"


def run_raw(port: int, database: str, jobs: int) -> PeerResult:
    """Plain gRPC calls: claimers of 8 slots each claim and complete until all jobs are READY."""
    conn = connect(database)
    try:
        asyncio.run(_raw(port, conn, jobs))
        return _RAW_RESULT.pop()
    finally:
        conn.close()


_RAW_RESULT: list[PeerResult] = []


async def _raw(port: int, conn: object, jobs: int) -> None:
    done = asyncio.Event()
    target = f"127.0.0.1:{port}"

    async def claimer() -> None:
        async with grpc.aio.insecure_channel(target, options=[("grpc.use_local_subchannel_pool", 1)]) as channel:
            stub = worker_pb2_grpc.WorkerServiceStub(channel)
            request = worker_pb2.ClaimRequest(worker_id="noop", job_types=[worker_pb2.JobTypeSpec(name=RAW_TYPE)],
                                              max_jobs=CONCURRENCY)  # fmt: skip
            request.wait.FromMilliseconds(500)
            while not done.is_set():
                reply = await stub.Claim(request, timeout=30)
                await asyncio.gather(*(_complete(stub, lease) for lease in reply.leases))

    claimers = [asyncio.create_task(claimer())]
    before = _ready(conn, RAW_TYPE)
    await _submit(port, 1, RAW_TYPE)
    await asyncio.to_thread(_until_ready, conn, before + 1, RAW_TYPE)
    t0 = time.monotonic()
    await _submit(port, jobs, RAW_TYPE)
    t_enq = time.monotonic()
    await asyncio.to_thread(_until_ready, conn, before + jobs + 1, RAW_TYPE)
    t1 = time.monotonic()
    done.set()
    await asyncio.gather(*claimers)
    _RAW_RESULT.append(PeerResult(RAW_NAME, jobs, jobs / (t1 - t0), jobs / (t_enq - t0),
                                  float("nan")))  # fmt: skip


async def _complete(stub: worker_pb2_grpc.WorkerServiceStub, lease: worker_pb2.Lease) -> None:
    artifact = job_pb2.Artifact(uri=f"file:///noop/{lease.job_no}", size_bytes=0, sha256=SHA)
    await stub.Complete(
        worker_pb2.CompleteRequest(job_no=lease.job_no, worker_token=lease.worker_token, result=artifact), timeout=30
    )


def run_jobwire(port: int, database: str, jobs: int, workdir: Path, transport: str) -> PeerResult:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(BENCH), os.environ.get("PYTHONPATH", "")])}
    with open(workdir / "noop-worker.log", "ab") as out:
        worker = subprocess.Popen(
            [str(VENV_BIN / "jobwire-worker"), "--target", f"127.0.0.1:{port}", "--handlers",
             "noop_handlers:handlers", "--concurrency", str(CONCURRENCY), "--claim-wait", "5",
             "--transport", transport, "--log-level", "WARNING"],
            cwd=BENCH, env=env, stdout=out, stderr=out,
        )  # fmt: skip
    conn = connect(database)
    try:
        before = _ready(conn, JOB_TYPE)  # READY rows of earlier runs stay: count from here
        asyncio.run(_submit(port, 1, JOB_TYPE))
        _until_ready(conn, before + 1, JOB_TYPE)
        meter = CpuMeter({"worker": worker.pid})
        cpu0 = meter.sample()
        t0 = time.monotonic()
        asyncio.run(_submit(port, jobs, JOB_TYPE))
        t_enq = time.monotonic()
        _until_ready(conn, before + jobs + 1, JOB_TYPE)
        t1 = time.monotonic()
        cpu = CpuMeter.delta(cpu0, meter.sample()).get("worker", float("nan"))
        return PeerResult(sdk_name(transport), jobs, jobs / (t1 - t0), jobs / (t_enq - t0), cpu * 1000 / jobs)
    finally:
        worker.terminate()
        worker.wait(timeout=30)
        conn.close()


async def _submit(port: int, jobs: int, job_type: str) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = job_pb2_grpc.JobServiceStub(channel)
        request = job_pb2.SubmitRequest(job_type=job_type, payload=b"{}")
        left = [jobs]

        async def submitter() -> None:
            while left[0] > 0:
                left[0] -= 1
                await stub.Submit(request, timeout=30)

        await asyncio.gather(*(submitter() for _ in range(min(SUBMITTERS, jobs))))


def _ready(conn: object, job_type: str) -> int:
    with conn.cursor() as cur:  # type: ignore[attr-defined]
        cur.execute("SELECT COUNT(*) FROM job WHERE job_type = %s AND status = 'READY'", (job_type,))
        return int(cur.fetchone()[0])


def _until_ready(conn: object, count: int, job_type: str) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if _ready(conn, job_type) >= count:
            return
        time.sleep(0.01)
    raise TimeoutError(f"{count} no-op jobs were not READY in {READY_TIMEOUT_S:.0f} s")
