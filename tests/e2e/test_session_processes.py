"""Worker Sessions end to end: `jobwire serve` and `jobwire-worker` processes killed, stopped
and cut off, and what becomes of the job each was running.

Each server is one serving process on a fresh SQLite file; each worker runs `loop` (below),
a handler that calls ctx.check() every 50 ms and leaves marker files the test reads: when an
attempt started (and in which process), and when and why a check stopped it. Real time is
the subject of every test here (a session's grace, a lease's end, a heartbeat's interval):
the servers run a grace of GRACE_S and the workers leases of a few seconds, so that each
test takes seconds.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from processes import ServerProcess, start_server_process
from prometheus_client.parser import text_string_to_metric_families
from tcp_proxy import TcpProxy

from jobwire.client.status import error_reason
from jobwire.v1 import admin_pb2, admin_pb2_grpc, job_pb2, job_pb2_grpc, worker_pb2, worker_pb2_grpc

pytestmark = pytest.mark.timeout(90)

BIN = Path(sys.executable).parent
GRACE_S = 1.0  # JOBWIRE_SESSION_GRACE_SECONDS of every server here, and the workers' alike
LEASE_S = 3.0  # the workers' leases unless a test says otherwise: a heartbeat every second
STALL_S = 1.0  # JOBWIRE_STALL_GRACE_SECONDS unless a test says otherwise
RUNNING, READY, CANCELLED = job_pb2.Job.RUNNING, job_pb2.Job.READY, job_pb2.Job.CANCELLED
RETRY = job_pb2.RetryPolicy(max_attempts=3, on_lease_lost=job_pb2.RetryPolicy.RETRY)
INSPECT = job_pb2.RetryPolicy(max_attempts=3, on_lease_lost=job_pb2.RetryPolicy.INSPECT)
EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
_METRICS_PORT = re.compile(r"metrics at GET /metrics on port (\d+)")

HANDLERS = '''
"""The test's handler: `loop` checks every 50 ms until its job's folder has a `finish` file."""
import json, os, time
from pathlib import Path
from jobwire.worker.sdk import Handlers, JobInterrupted, Result

handlers = Handlers()


def mark(folder, name, **facts):
    """Write folder/name whole (the test may read it any time): this process and the time, and facts."""
    part = folder / f"{name}.part"
    part.write_text(json.dumps({"pid": os.getpid(), "at": time.time(), **facts}))
    os.replace(part, folder / name)


@handlers.job("loop")
def loop(ctx):
    payload = ctx.json()
    folder = Path(payload["folder"])
    mark(folder, f"{ctx.attempt}.started")
    checks = 0
    try:
        while not (folder / "finish").exists():
            ctx.check()
            checks += 1
            if payload["report"]:
                ctx.progress(checks)
            time.sleep(0.05)
    except JobInterrupted as stop:
        mark(folder, f"{ctx.attempt}.stopped", why=type(stop).__name__)
        raise
    return Result.from_json({"checks": checks})
'''


@dataclass
class Server:
    process: ServerProcess
    jobs: job_pb2_grpc.JobServiceStub
    admin: admin_pb2_grpc.AdminServiceStub
    workers: worker_pb2_grpc.WorkerServiceStub
    channel: grpc.Channel

    @property
    def target(self) -> str:
        return self.process.target

    @property
    def port(self) -> int:
        return self.process.port

    def metric(self, name: str, **labels: str) -> float:
        """A sample of this server's GET /metrics (0 when it is not shown)."""
        (port,) = {int(m.group(1)) for line in self.process.output if (m := _METRICS_PORT.search(line))}
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
            body = reply.read().decode()
        for family in text_string_to_metric_families(body):
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                    return float(sample.value)
        return 0.0


@dataclass
class Fleet:
    """The servers and workers of one test, on one SQLite file, and the jobs' marker folders."""

    root: Path
    servers: list[Server] = field(default_factory=list)
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    proxies: list[TcpProxy] = field(default_factory=list)
    folders: dict[str, Path] = field(default_factory=dict)

    def serve(self, **env: str) -> Server:
        settings = {
            "JOBWIRE_DATABASE_URL": f"sqlite:///{self.root / 'jobwire.db'}",
            "JOBWIRE_LISTEN": "127.0.0.1:0",
            "JOBWIRE_PROCESSES": "1",
            "JOBWIRE_METRICS_LISTEN": "127.0.0.1:0",
            "JOBWIRE_REAPER_INTERVAL_SECONDS": "0.5",
            "JOBWIRE_STALL_GRACE_SECONDS": str(STALL_S),
            "JOBWIRE_SESSION_GRACE_SECONDS": str(GRACE_S),
            **env,
        }
        process = start_server_process(["jobwire", "serve"], settings)
        channel = grpc.insecure_channel(process.target)
        server = Server(process, job_pb2_grpc.JobServiceStub(channel), admin_pb2_grpc.AdminServiceStub(channel),
                        worker_pb2_grpc.WorkerServiceStub(channel), channel)  # fmt: skip
        self.servers.append(server)
        return server

    def proxy(self, upstream: int) -> TcpProxy:
        proxy = TcpProxy(upstream)
        self.proxies.append(proxy)
        return proxy

    def worker(self, target: str, *, lease_s: float = LEASE_S) -> subprocess.Popen[bytes]:
        """A `jobwire-worker` of one slot, returned once its standing claim was answered: it waits for work."""
        log = self.root / f"worker-{len(self.workers) + 1}.log"
        args = [str(BIN / "jobwire-worker"), "--target", target, "--handlers", "session_handlers:handlers",
                "--concurrency", "1", "--lease-seconds", str(lease_s), "--session-grace-seconds", str(GRACE_S),
                "--grace-seconds", "5", "--tmp-dir", str(self.root / "worker-tmp")]  # fmt: skip
        with log.open("wb") as out:
            proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, cwd=self.root)
        self.workers.append(proc)
        wait_for(lambda: "worker transport: session" in log.read_text(errors="replace"), 30, f"{log.name} claiming")
        return proc

    def submit(self, server: Server, policy: job_pb2.RetryPolicy, *, report: bool = True) -> str:
        """A `loop` job; `report`: its handler reports progress at each check (else it only checks)."""
        folder = self.root / f"job-{len(self.folders) + 1}"
        folder.mkdir()
        payload = json.dumps({"folder": str(folder), "report": report}).encode()
        job = server.jobs.Submit(job_pb2.SubmitRequest(job_type="loop", payload=payload, retry_policy=policy)).job
        self.folders[job.job_no] = folder
        return str(job.job_no)

    def marker(self, job_no: str, name: str) -> dict[str, Any] | None:
        path = self.folders[job_no] / name
        return json.loads(path.read_text()) if path.exists() else None

    def wait_marker(self, job_no: str, name: str, timeout: float = 30) -> dict[str, Any]:
        found: dict[str, Any] = wait_for(lambda: self.marker(job_no, name), timeout, f"{job_no}'s {name}")
        return found

    def finish(self, job_no: str) -> None:
        (self.folders[job_no] / "finish").touch()

    def token(self, job_no: str) -> str:
        """The job's worker token now, read from the database as its worker was handed it."""
        with sqlite3.connect(self.root / "jobwire.db") as db:
            (token,) = db.execute("SELECT worker_token FROM job WHERE job_no = ?", (job_no,)).fetchone()
        return str(token)


def wait_for(probe: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := probe()):
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what}")
        time.sleep(0.05)
    return found


def wait_job(server: Server, job_no: str, done: Callable[[job_pb2.Job], bool], timeout: float = 30) -> job_pb2.Job:
    def probe() -> job_pb2.Job | None:
        job = server.jobs.Get(job_pb2.GetRequest(job_no=job_no), timeout=10)
        return job if done(job) else None

    found: job_pb2.Job = wait_for(probe, timeout, f"{job_no} as wanted")
    return found


def event_kinds(server: Server, job_no: str) -> list[str]:
    reply = server.admin.ListEvents(admin_pb2.ListEventsRequest(job_no=job_no, page_size=500), timeout=10)
    return [e.kind for e in reply.events]


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    (tmp_path / "session_handlers.py").write_text(textwrap.dedent(HANDLERS))
    made = Fleet(tmp_path)
    try:
        yield made
    finally:
        for proc in made.workers:
            if proc.poll() is None:
                proc.kill()  # a stopped (SIGSTOP) one too
            proc.wait(timeout=30)
        for proxy in made.proxies:
            proxy.close()
        for server in made.servers:
            server.process.kill()
            server.channel.close()
            print(f"----- server {server.port}\n{server.process.tail()}")  # shown when a test fails
        for log in sorted(tmp_path.glob("*.log")):
            print(f"----- {log.name}\n{log.read_text(errors='replace')[-4000:]}")


def test_a_worker_killed_mid_job_has_its_job_run_by_another_within_the_grace(fleet: Fleet) -> None:
    server = fleet.serve()
    doomed = fleet.worker(server.target)
    job_no = fleet.submit(server, RETRY)
    assert fleet.wait_marker(job_no, "1.started")["pid"] == doomed.pid
    token = fleet.token(job_no)
    standby = fleet.worker(server.target)
    killed_at = time.time()
    doomed.kill()
    doomed.wait(10)
    again = fleet.wait_marker(job_no, "2.started", timeout=GRACE_S + 10)
    assert again["pid"] == standby.pid
    assert again["at"] - killed_at <= GRACE_S + 1, again["at"] - killed_at
    nothing = job_pb2.Artifact(uri="file:///x", size_bytes=0, sha256=EMPTY_SHA256)
    complete = worker_pb2.CompleteRequest(job_no=job_no, worker_token=token, result=nothing)
    with pytest.raises(grpc.RpcError) as refused:
        server.workers.Complete(complete, timeout=10)  # the killed worker's token, as it would have sent it
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert error_reason(refused.value) == "WORKER_LEASE_LOST"
    fleet.finish(job_no)
    assert wait_job(server, job_no, lambda j: j.status == READY).attempt == 2
    assert "WORKER_DISCONNECTED" in event_kinds(server, job_no)


def test_an_inspect_job_of_a_killed_worker_is_flagged_within_the_grace_and_not_rerun(fleet: Fleet) -> None:
    server = fleet.serve()
    doomed = fleet.worker(server.target)
    job_no = fleet.submit(server, INSPECT)
    fleet.wait_marker(job_no, "1.started")
    standby = fleet.worker(server.target)
    killed_at = time.monotonic()
    doomed.kill()
    doomed.wait(10)
    flagged = wait_job(server, job_no, lambda j: j.stalled, timeout=GRACE_S + 10)
    assert time.monotonic() - killed_at <= GRACE_S + 1
    assert (flagged.status, flagged.attempt) == (RUNNING, 1)
    # The watch for a rerun ends on a fact: claims are first come, first served, so a job
    # submitted after the flag and run by the standby worker shows the flagged one was not
    # handed out.
    later = fleet.submit(server, INSPECT)
    assert fleet.wait_marker(later, "1.started")["pid"] == standby.pid
    fleet.finish(later)
    wait_job(server, later, lambda j: j.status == READY)
    still = server.jobs.Get(job_pb2.GetRequest(job_no=job_no), timeout=10)
    assert (still.status, still.attempt, still.stalled) == (RUNNING, 1, True)
    assert fleet.marker(job_no, "2.started") is None


# A worker cut off in silence notices through its pings (unanswered for 4 s: at most 8 s
# after the cut), then waits its grace: it stops by ~9 s. Its server hears nothing: it takes
# the session for dead if its own pings close the connection (10 s after the cut at the
# soonest, then the grace: 11 s), or else lets the lease run out (its end, 12 s after the cut
# since every report renews it, and the stall grace: 13 s). The worker must stop first.
CUT_LEASE_S = 12.0


def test_a_worker_cut_off_stops_its_handler_before_the_job_runs_elsewhere(fleet: Fleet) -> None:
    server = fleet.serve()
    proxy = fleet.proxy(server.port)
    cut = fleet.worker(proxy.target, lease_s=CUT_LEASE_S)
    job_no = fleet.submit(server, RETRY)
    assert fleet.wait_marker(job_no, "1.started")["pid"] == cut.pid
    standby = fleet.worker(server.target, lease_s=CUT_LEASE_S)
    proxy.pause()
    stopped = fleet.wait_marker(job_no, "1.stopped", timeout=CUT_LEASE_S + 10)
    assert stopped["why"] == "LeaseLost"
    again = fleet.wait_marker(job_no, "2.started", timeout=CUT_LEASE_S + 10)
    assert again["pid"] == standby.pid
    assert stopped["at"] < again["at"], again["at"] - stopped["at"]
    assert cut.poll() is None  # it lost a lease, not its life
    fleet.finish(job_no)
    assert wait_job(server, job_no, lambda j: j.status == READY).attempt == 2


def test_a_worker_whose_connection_drops_and_returns_within_the_grace_keeps_its_lease(fleet: Fleet) -> None:
    server = fleet.serve()
    proxy = fleet.proxy(server.port)
    # A long lease: its heartbeats come every 10 s, so only the worker's naming its lease on
    # the new session, not a beat falling due, keeps it. The handler reports nothing.
    worker = fleet.worker(proxy.target, lease_s=30)
    job_no = fleet.submit(server, RETRY, report=False)
    fleet.wait_marker(job_no, "1.started")
    proxy.drop()  # both sides of the connection closed; the next connection goes through
    wait_for(lambda: "WORKER_DISCONNECTED" in event_kinds(server, job_no), 10, "the lease marked")
    # The grace's end: the lease found named again in time, or expired.
    wait_for(lambda: server.metric("jobwire_session_leases_disconnected_total", step="untouched")
             or server.metric("jobwire_session_leases_disconnected_total", step="expired"),
             GRACE_S + 10, "the grace's end")  # fmt: skip
    assert server.metric("jobwire_session_leases_disconnected_total", step="expired") == 0
    fleet.finish(job_no)
    done = wait_job(server, job_no, lambda j: j.status == READY)
    assert done.attempt == 1
    assert fleet.marker(job_no, "1.stopped") is None
    assert worker.poll() is None


def test_a_stopped_worker_loses_its_lease_at_the_lease_end_not_at_the_grace(fleet: Fleet) -> None:
    server = fleet.serve()
    stopped = fleet.worker(server.target, lease_s=6)  # its lease ends 4 to 6 s after the stop
    job_no = fleet.submit(server, RETRY)
    fleet.wait_marker(job_no, "1.started")
    standby = fleet.worker(server.target, lease_s=6)
    os.kill(stopped.pid, signal.SIGSTOP)
    # Real time is the subject: through the grace and a second more, the lease stands.
    until = time.monotonic() + GRACE_S + 1
    while time.monotonic() < until:
        job = server.jobs.Get(job_pb2.GetRequest(job_no=job_no), timeout=10)
        assert (job.status, job.attempt) == (RUNNING, 1)
        time.sleep(0.1)
    again = fleet.wait_marker(job_no, "2.started", timeout=20)
    assert again["pid"] == standby.pid
    kinds = event_kinds(server, job_no)
    assert "LEASE_EXPIRED" in kinds and "WORKER_DISCONNECTED" not in kinds, kinds
    fleet.finish(job_no)
    assert wait_job(server, job_no, lambda j: j.status == READY).attempt == 2


def test_a_cancel_reaches_the_handler_at_its_next_check_not_its_next_heartbeat(fleet: Fleet) -> None:
    server = fleet.serve()
    fleet.worker(server.target, lease_s=60)  # a heartbeat every 20 s
    job_no = fleet.submit(server, RETRY, report=False)  # nothing but checks: no report's answer says it
    started = fleet.wait_marker(job_no, "1.started")
    cancelled_at = time.time()
    server.jobs.Cancel(job_pb2.CancelRequest(job_no=job_no), timeout=10)
    assert cancelled_at - started["at"] < 15  # the first heartbeat is due 20 s after the claim
    stopped = fleet.wait_marker(job_no, "1.stopped", timeout=15)
    assert stopped["why"] == "JobCancelled"
    assert stopped["at"] - cancelled_at < 1.5, stopped["at"] - cancelled_at
    assert wait_job(server, job_no, lambda j: j.status == CANCELLED).attempt == 1


# Reports are accepted only on a valid lease: ADVANCE checks past the kill (50 ms or more
# each) outlast the lease (3 s), the stall grace and a chore leader's handover, had the lease
# not been renewed on the other replica.
ADVANCE = 140


def test_a_replica_killed_leaves_its_workers_to_resume_their_leases_on_the_other(fleet: Fleet) -> None:
    replicas = [fleet.serve(JOBWIRE_CHORE_LEASE_SECONDS="1") for _ in range(2)]
    worker = fleet.worker(f"ipv4:{','.join(r.target for r in replicas)}")
    job_no = fleet.submit(replicas[0], RETRY)
    fleet.wait_marker(job_no, "1.started")
    # The replica whose session pushed the lease holds the worker's session.
    held = wait_for(lambda: [r for r in replicas if r.metric("jobwire_session_pushes_total", push="leased")],
                    10, "the lease's push counted")  # fmt: skip
    (dying,) = held
    (survivor,) = [r for r in replicas if r is not dying]
    seen = survivor.jobs.Get(job_pb2.GetRequest(job_no=job_no), timeout=10).progress.processed_units
    dying.process.kill()
    wait_job(survivor, job_no, lambda j: j.progress.processed_units >= seen + ADVANCE, timeout=30)
    fleet.finish(job_no)
    done = wait_job(survivor, job_no, lambda j: j.status == READY)
    assert done.attempt == 1
    assert "LEASE_EXPIRED" not in event_kinds(survivor, job_no)
    assert worker.poll() is None
