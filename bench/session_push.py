"""A worker Session's pushes and its death, timed: Cancel to push, kill -9 to the job claimable again.

    .venv/bin/python bench/session_push.py                      # 20 cancels, 3 kills
    .venv/bin/python bench/session_push.py --unary-baseline     # and 3 kills of a unary worker (~1 min each)
    .venv/bin/python bench/session_push.py --sigstop            # and a stopped (SIGSTOP) session worker

`python -m jobwire serve` as it ships (one serving process per core, default settings:
30 s leases, the stall grace of one lease, JOBWIRE_SESSION_GRACE_SECONDS 3) on a fresh
MariaDB database; with `--replicas 2` a second server on the same database takes the Cancels.

- cancel: a client opens a Session, claims a job through it, and a backend (a connection
  of its own: through a family's other process, or the other replica) calls Cancel; the
  time from the Cancel's start to the `cancel_requested` frame read. Printed: p50, p90, max.
- kill: a worker process opens a Session, claims a RETRY job and heartbeats through it
  every 10 s as the SDK does; a second worker waits in a Claim for the same job type; the
  first is killed -9. The time from the kill to the second's Claim returning the job.
- `--unary-baseline`: the same kill of a worker that claims and heartbeats with unary calls
  (what a killed worker cost before Sessions: the lease, the stall grace, the reaper's round).
- `--sigstop`: the session worker is stopped, not killed: the servers' keepalive closes its
  connection ~20 s after its last word (docs/deployment.md, "Keepalive"), which is no
  evidence of death, so the job is claimable only at the lease's end and the stall grace.

No test asserts these figures.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import grpc
from e2e import Server
from measure import pct

from jobwire.v1 import job_pb2, job_pb2_grpc, worker_pb2, worker_pb2_grpc

OWN_CONNECTION = [("grpc.use_local_subchannel_pool", 1)]
RETRY = job_pb2.RetryPolicy(max_attempts=5, on_lease_lost=job_pb2.RetryPolicy.RETRY)

# The worker that dies: a Session, one RETRY job claimed through it (or unary calls with
# --unary), heartbeats every 10 s (a third of the default lease), the job number printed.
WORKER = textwrap.dedent("""
    import asyncio, sys
    import grpc
    from jobwire.v1 import worker_pb2, worker_pb2_grpc

    async def main(port, job_type, unary):
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.use_local_subchannel_pool", 1)])
        stub = worker_pb2_grpc.WorkerServiceStub(channel)
        claim = worker_pb2.ClaimRequest(worker_id="doomed", job_types=[worker_pb2.JobTypeSpec(name=job_type)])
        if unary:
            (lease,) = (await stub.Claim(claim)).leases
        else:
            session = stub.Session()
            await session.write(worker_pb2.WorkerFrame(call_id=1, claim=claim))
            (lease,) = (await session.read()).claim.leases
        print("claimed", lease.job_no, flush=True)
        ref = worker_pb2.LeaseRef(job_no=lease.job_no, worker_token=lease.worker_token)
        beat = worker_pb2.HeartbeatRequest(worker_id="doomed", leases=[ref])
        for call_id in range(2, 10_000):
            await asyncio.sleep(10)
            if unary:
                await stub.Heartbeat(beat)
            else:
                await session.write(worker_pb2.WorkerFrame(call_id=call_id, heartbeat=beat))
                await session.read()

    asyncio.run(main(int(sys.argv[1]), sys.argv[2], sys.argv[3] == "unary"))
""")


def claim_request(job_type: str, wait_s: float = 0) -> worker_pb2.ClaimRequest:
    request = worker_pb2.ClaimRequest(worker_id="bench", job_types=[worker_pb2.JobTypeSpec(name=job_type)])
    request.wait.FromMilliseconds(int(wait_s * 1000))
    return request


async def cancels(worker_port: int, jobapi_port: int, rounds: int) -> list[float]:
    """Seconds from each Cancel's start to its `cancel_requested` push."""
    worker = grpc.aio.insecure_channel(f"127.0.0.1:{worker_port}", options=OWN_CONNECTION)
    backend = grpc.aio.insecure_channel(f"127.0.0.1:{jobapi_port}", options=OWN_CONNECTION)
    workers, jobs = worker_pb2_grpc.WorkerServiceStub(worker), job_pb2_grpc.JobServiceStub(backend)
    session = workers.Session()
    took = []
    for call_id in range(1, rounds + 1):
        await jobs.Submit(job_pb2.SubmitRequest(job_type="bench.cancel"))
        claim = claim_request("bench.cancel", wait_s=5)  # another process's "now" may be a hair ahead of this one's
        await session.write(worker_pb2.WorkerFrame(call_id=2 * call_id, claim=claim))
        (lease,) = (await session.read()).claim.leases
        start = time.monotonic()
        await jobs.Cancel(job_pb2.CancelRequest(job_no=lease.job_no))
        pushed = await asyncio.wait_for(session.read(), 10)
        took.append(time.monotonic() - start)
        assert pushed.cancel_requested.job_no == lease.job_no, pushed
        confirm = worker_pb2.ConfirmCancelRequest(job_no=lease.job_no, worker_token=lease.worker_token)
        await session.write(worker_pb2.WorkerFrame(call_id=2 * call_id + 1, confirm_cancel=confirm))
        await session.read()
    session.cancel()
    await worker.close()
    await backend.close()
    return took


async def death(port: int, how: str, job_type: str) -> float:
    """Seconds from a worker's kill -9 (or SIGSTOP) to its job claimable by another worker."""
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=OWN_CONNECTION)
    jobs, workers = job_pb2_grpc.JobServiceStub(channel), worker_pb2_grpc.WorkerServiceStub(channel)
    job = (await jobs.Submit(job_pb2.SubmitRequest(job_type=job_type, retry_policy=RETRY))).job
    mode = "unary" if how == "unary" else "session"
    doomed = subprocess.Popen(
        [sys.executable, "-c", WORKER, str(port), job_type, mode], stdout=subprocess.PIPE, text=True
    )
    assert doomed.stdout is not None
    line = await asyncio.to_thread(doomed.stdout.readline)
    assert line.split() == ["claimed", job.job_no], line
    waiting = asyncio.ensure_future(workers.Claim(claim_request(job_type, wait_s=58), timeout=60))
    start = time.monotonic()
    doomed.send_signal(signal.SIGSTOP if how == "sigstop" else signal.SIGKILL)
    while job.job_no not in [lease.job_no for lease in (await waiting).leases]:
        waiting = asyncio.ensure_future(workers.Claim(claim_request(job_type, wait_s=58), timeout=60))
    took = time.monotonic() - start
    doomed.kill()
    doomed.wait()
    await channel.close()
    return took


def show(what: str, seconds: list[float]) -> None:
    ms = [s * 1000 for s in seconds]
    print(f"{what}: n={len(ms)} p50 {pct(ms, 50):.1f} ms, p90 {pct(ms, 90):.1f} ms, max {max(ms):.1f} ms")


async def run(args: argparse.Namespace, ports: list[int]) -> None:
    show("cancel -> push", await cancels(ports[0], ports[-1], args.cancels))
    kinds = ["session"] * args.kills + ["unary"] * (args.kills if args.unary_baseline else 0)
    kinds += ["sigstop"] if args.sigstop else []
    for i, how in enumerate(kinds):
        took = await death(ports[0], how, f"bench.death.{i}")
        what = {"session": "kill -9 of a session worker", "unary": "kill -9 of a unary worker",
                "sigstop": "SIGSTOP of a session worker"}[how]  # fmt: skip
        print(f"{what} -> its job claimable again: {took:.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cancels", type=int, default=20)
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--replicas", type=int, default=1, choices=(1, 2))
    parser.add_argument("--unary-baseline", action="store_true")
    parser.add_argument("--sigstop", action="store_true")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="jwbench-push-"))
    database = f"jwbench_push_{os.getpid()}"
    servers = [Server(database, folder / "server-0.log")]
    try:
        if args.replicas == 2:
            servers.append(Server(database, folder / "server-1.log", fresh=False))
        asyncio.run(run(args, [s.port for s in servers]))
    finally:
        for server in reversed(servers):
            server.stop(drop=server is servers[0])


if __name__ == "__main__":
    main()
