"""A soak with a nemesis: the whole system under faults, then a checker that counts every broken promise.

    .venv/bin/python tests/soak/soak.py                   # make soak: 4 minutes of faults
    .venv/bin/python tests/soak/soak.py --seconds 40      # what `make test` runs (tests/soak/test_soak.py)

On one fresh MariaDB database: jobapi and the worker service, two serving processes each
(a family apiece), three `jobwire-worker` processes running the examples (one on unary
calls, two on a Session each), a submitter
(every Submit recorded as ok, failed or indeterminate; an idempotency key each, retried
as a careful client would), a canceller, and a watcher on every acknowledged job. A
nemesis takes turns:

  kill -9 a worker (a new one starts)          SIGSTOP a worker past its lease, then SIGCONT
  kill -9 a serving process (its parent restarts it)
  KILL every database connection of the soak (from a second connection)
  restart MariaDB

When the faults stop, submits stop and the queue drains. The checker prints:

  lost          acknowledged, yet neither terminal nor on the inspection list
  duplicated    delivered by two leases (two COMPLETED events, two artifacts)
  late accepted a call with a lease that was taken away while its worker stood still, answered OK
  missed end    a watcher that did not see its job's terminal state
  dishonest     frames with a percent but no total, progress going back, versions going
                back, or RUNNING without `stalled` while its worker was stopped past its lease
  leaked        a host, path, address or trace in a user-facing field

Every count must be 0. Exit code 0 when they are, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: run as a script too (make soak)
from processes import ServerProcess, start_server_process

from jobwire.v1 import admin_pb2, admin_pb2_grpc, job_pb2, job_pb2_grpc, worker_pb2, worker_pb2_grpc

ROOT = Path(__file__).resolve().parents[2]
MYSQL = os.environ.get("JOBWIRE_TEST_MYSQL_URL", "mysql+pymysql://root@127.0.0.1:3306")
MARIADBD = "/usr/sbin/mariadbd"
LEASE_S = 3
REAPER_S = 0.5
GRACE_S = 3.0  # stalled this long before RETRY requeues: the window in which "stalled" must show
TERMINAL = {job_pb2.Job.READY, job_pb2.Job.FAILED, job_pb2.Job.CANCELLED}
RUNNING = job_pb2.Job.RUNNING
RETRIED = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.ABORTED,
           grpc.StatusCode.CANCELLED, grpc.StatusCode.RESOURCE_EXHAUSTED}  # fmt: skip
LEAK = re.compile(r"Traceback|File \"|\.py\b|/(?:tmp|usr|home|root|var|work|etc)/|\b\d{1,3}(?:\.\d{1,3}){3}\b"
                  r"|\b[a-z][a-z0-9-]*:\d{2,5}\b|Exception|\w+Error\b", re.I)  # fmt: skip


@dataclass
class Config:
    seconds: float = 240.0  # faults and submits run this long
    rate: float = 4.0  # submits per second
    workers: int = 3
    fault_every: float = 8.0
    drain_seconds: float = 150.0
    seed: int = 1


@dataclass
class Frames:
    """What one watcher saw of its job."""

    frames: list[job_pb2.Job] = field(default_factory=list)
    reconnects: int = 0
    ended_by: str = ""  # the error that ended the watch before the job's end, if one did


@dataclass
class Findings:
    submits: Counter[str] = field(default_factory=Counter)
    faults: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    probes: Counter[str] = field(default_factory=Counter)  # how much the checks had to look at
    lost: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    late_accepted: list[str] = field(default_factory=list)
    missed_end: list[str] = field(default_factory=list)
    dishonest: list[str] = field(default_factory=list)
    leaked: list[str] = field(default_factory=list)

    @property
    def broken(self) -> dict[str, int]:
        return {name: len(items) for name, items in self._lists()}

    def _lists(self) -> list[tuple[str, list[str]]]:
        return [
            ("lost", self.lost),
            ("duplicated", self.duplicated),
            ("late reports accepted", self.late_accepted),
            ("watchers that missed the end", self.missed_end),
            ("dishonest frames", self.dishonest),
            ("internal details in user fields", self.leaked),
        ]

    def table(self, config: Config, elapsed: float) -> str:
        lines = [
            f"## jobwire soak: {config.seconds:.0f} s of faults, {elapsed:.0f} s in all (seed {config.seed})",
            "",
            "| check | count |",
            "|---|---|",
            *(f"| {name} | **{count}** |" for name, count in self.broken.items()),
            "",
            "submits: " + ", ".join(f"{k} {v}" for k, v in sorted(self.submits.items())),
            "jobs ended: " + ", ".join(f"{k} {v}" for k, v in sorted(self.outcomes.items())),
            "faults: " + ", ".join(f"{k} {v}" for k, v in sorted(self.faults.items())),
            "checked: " + ", ".join(f"{k} {v}" for k, v in sorted(self.probes.items())),
        ]
        for name, items in self._lists():
            lines += [f"- {name}: {item}" for item in items[:10]]
        return "\n".join(lines)


# -- processes ------------------------------------------------------------------------------
def _env(database_url: str) -> dict[str, str]:
    return {
        "JOBWIRE_DATABASE_URL": database_url, "JOBWIRE_REAPER_INTERVAL_SECONDS": str(REAPER_S),
        "JOBWIRE_STALL_GRACE_SECONDS": str(GRACE_S),
    }  # fmt: skip


def start_family(module: str, database_url: str) -> ServerProcess:
    """Two serving processes of `module` on a port of their own: the parent, once both serve."""
    try:
        return start_server_process([module, "--processes", "2", "--listen", "127.0.0.1:0"], _env(database_url))
    except AssertionError as exc:
        raise SystemExit(str(exc)) from None


def children(pid: int) -> list[int]:
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children", encoding="ascii") as f:
                found += [int(child) for child in f.read().split()]
    return sorted(found)


class Workers:
    """The fleet: `jobwire-worker` processes running the examples, replaced when killed. The
    first talks unary calls, the others a Session each (the SDK's default): the checks hold
    for both transports, and for the two side by side."""

    def __init__(self, target: str, workdir: Path, count: int) -> None:
        self.target, self.workdir = target, workdir
        self.procs: list[subprocess.Popen[bytes]] = [self._start(i) for i in range(count)]

    def _start(self, index: int) -> subprocess.Popen[bytes]:
        worker_id = f"soak-{uuid.uuid4().hex[:6]}"
        transport = "unary" if index == 0 else "session"
        log = (self.workdir / f"{worker_id}.log").open("ab")
        return subprocess.Popen(
            [str(Path(sys.executable).parent / "jobwire-worker"), "--target", self.target, "--handlers",
             "jobwire.examples:handlers", "--concurrency", "3", "--lease-seconds", str(LEASE_S), "--claim-wait", "2",
             "--worker-id", worker_id, "--results-dir", str(self.workdir / "results"),
             "--tmp-dir", str(self.workdir / "tmp"), "--grace-seconds", "5", "--transport", transport],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip

    def replace(self, index: int) -> None:
        self.procs[index] = self._start(index)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()


def mariadb_up(engine: sa.Engine) -> bool:
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
        return True
    except sa.exc.DBAPIError:
        return False


# -- the soak -------------------------------------------------------------------------------
class Soak:
    def __init__(self, config: Config, database_url: str, workdir: Path) -> None:
        self.config, self.url, self.workdir = config, database_url, workdir
        self.rng = random.Random(config.seed)
        self.found = Findings()
        self.acknowledged: dict[str, str] = {}  # idempotency key -> job number
        self.watched: dict[str, Frames] = {}
        self.watch_tasks: list[asyncio.Task[None]] = []
        self.db = sa.create_engine(database_url, poolclass=sa.pool.NullPool, connect_args={"connect_timeout": 2})
        self.admin_db = sa.create_engine(MYSQL + "/", poolclass=sa.pool.NullPool, connect_args={"connect_timeout": 2})
        self.faulting = True

    async def run(self) -> Findings:
        api = start_family("jobwire.jobapi", self.url)
        svc = start_family("jobwire.worker.server", self.url)
        self.families = [api, svc]
        workers = Workers(svc.target, self.workdir, self.config.workers)
        channel = grpc.aio.insecure_channel(api.target)
        svc_channel = grpc.aio.insecure_channel(svc.target)
        self.jobs = job_pb2_grpc.JobServiceStub(channel)
        self.admin = admin_pb2_grpc.AdminServiceStub(channel)
        self.worker_api = worker_pb2_grpc.WorkerServiceStub(svc_channel)
        try:
            nemesis = asyncio.create_task(self.nemesis(workers))
            submitter = asyncio.create_task(self.submit_for(self.config.seconds))
            canceller = asyncio.create_task(self.cancel_some(self.config.seconds))
            await submitter
            self.faulting = False
            await nemesis
            await canceller
            await self.drain()
            await self.check()
        finally:
            for task in self.watch_tasks:
                task.cancel()
            workers.stop()
            for family in self.families:
                family.proc.send_signal(signal.SIGTERM)
            for family in self.families:
                try:
                    family.proc.wait(30)
                except subprocess.TimeoutExpired:
                    family.kill()
            with (self.workdir / "servers.log").open("a") as log:  # both families' output, for a failed run
                for family in self.families:
                    log.write("".join(family.output))
            await channel.close()
            await svc_channel.close()
        return self.found

    # -- clients -----------------------------------------------------------------------------
    def _payload(self, n: int) -> tuple[str, bytes]:
        kind = ("frames", "report", "csv_import")[n % 3]
        payload: dict[str, Any] = {
            "frames": {"frames": self.rng.randint(50, 150), "frame_ms": 20},
            "report": {"seconds": self.rng.uniform(1.0, 4.0)},
            "csv_import": {"rows": self.rng.randint(5000, 20000), "batch_ms": 100,
                           "target_db": str(self.workdir / f"import-{n}.db")},
        }[kind]  # fmt: skip
        return kind, json.dumps(payload).encode()

    async def submit_for(self, seconds: float) -> None:
        end, n = time.monotonic() + seconds, 0
        pending: set[asyncio.Task[None]] = set()
        while time.monotonic() < end:
            n += 1
            task = asyncio.create_task(self.submit_one(n))
            pending.add(task)
            task.add_done_callback(pending.discard)
            await asyncio.sleep(1 / self.config.rate)
        await asyncio.gather(*pending)

    async def submit_one(self, n: int) -> None:
        job_type, payload = self._payload(n)
        policy = job_pb2.RetryPolicy(max_attempts=20, on_lease_lost=job_pb2.RetryPolicy.RETRY, backoff_multiplier=1.0)
        policy.initial_backoff.FromMilliseconds(200)
        policy.max_backoff.FromMilliseconds(200)
        key = f"soak-{n}"
        request = job_pb2.SubmitRequest(job_type=job_type, payload=payload, idempotency_key=key, retry_policy=policy,
                                        owner="soak", labels={"n": str(n)})  # fmt: skip
        for attempt in range(8):  # a careful client: the same key, again, while the answer is unknown
            try:
                reply = await self.jobs.Submit(request, timeout=5)
            except grpc.aio.AioRpcError as error:
                if error.code() not in RETRIED:
                    self.found.submits[f"failed {error.code().name}"] += 1
                    return
                await asyncio.sleep(0.5 * (attempt + 1))
                continue
            self.found.submits["ok" if attempt == 0 else "ok after retrying"] += 1
            self.acknowledged[key] = reply.job.job_no
            self.watch_tasks.append(asyncio.create_task(self.watch(reply.job.job_no)))
            return
        self.found.submits["indeterminate"] += 1

    async def cancel_some(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            await asyncio.sleep(self.rng.uniform(1.0, 3.0))
            if self.acknowledged:
                job_no = self.rng.choice(list(self.acknowledged.values()))
                with contextlib.suppress(grpc.aio.AioRpcError):  # refused (not cancellable) or unreachable: both fine
                    await self.jobs.Cancel(job_pb2.CancelRequest(job_no=job_no), timeout=5)
                    self.found.submits["cancels asked"] += 1

    async def watch(self, job_no: str) -> None:
        seen = self.watched.setdefault(job_no, Frames())
        after = 0
        while True:
            try:
                async for update in self.jobs.WatchStatus(
                    job_pb2.WatchStatusRequest(job_no=job_no, after_version=after)
                ):
                    seen.frames.append(update.job)
                    after = max(after, update.job.version)
                    if update.job.status in TERMINAL:
                        return
            except grpc.aio.AioRpcError as error:
                if error.code() not in RETRIED:
                    seen.ended_by = f"{error.code().name}: {error.details()}"
                    return
            seen.reconnects += 1
            await asyncio.sleep(0.2 + self.rng.random() * 0.5)

    # -- the nemesis -------------------------------------------------------------------------
    async def nemesis(self, workers: Workers) -> None:
        faults = [self.kill_worker, self.pause_worker, self.kill_server_process, self.kill_connections,
                  self.restart_mariadb]  # fmt: skip
        turn = 0
        await asyncio.sleep(self.config.fault_every / 2)
        while self.faulting:
            fault = faults[turn % len(faults)]
            turn += 1
            await fault(workers)
            self.found.faults[fault.__name__.replace("_", " ")] += 1
            await asyncio.sleep(self.config.fault_every)

    async def kill_worker(self, workers: Workers) -> None:
        index = self.rng.randrange(len(workers.procs))
        workers.procs[index].kill()
        workers.procs[index].wait()
        workers.replace(index)

    async def pause_worker(self, workers: Workers) -> None:
        """SIGSTOP past the lease; before SIGCONT, its jobs must show stalled; then its stale tokens must fail."""
        index = self.rng.randrange(len(workers.procs))
        proc = workers.procs[index]
        held_before = self._held_by(proc.pid)
        proc.send_signal(signal.SIGSTOP)
        await asyncio.sleep(LEASE_S + 4 * REAPER_S)  # expired, and marked stalled by now
        self._check_stalled_shown(self._held_by(proc.pid, expired_only=True))
        await asyncio.sleep(GRACE_S + 2 * REAPER_S)  # past the grace: RETRY has requeued them
        held = held_before or self._held_by(proc.pid)
        proc.send_signal(signal.SIGCONT)
        await asyncio.sleep(0.5)
        await self._probe_stale_tokens(held)

    def _held_by(self, pid: int, *, expired_only: bool = False) -> dict[str, str]:
        """job_no -> worker_token of the leases the worker process `pid` holds now."""
        worker_id = self._worker_id_of(pid)
        if worker_id is None:
            return {}
        query = "SELECT job_no, worker_token FROM job WHERE worker_id = :w AND worker_token IS NOT NULL"
        if expired_only:
            query += f" AND status = 'RUNNING' AND lease_expires_at < UTC_TIMESTAMP(6) - INTERVAL {2 * REAPER_S} SECOND"
        try:
            with self.db.connect() as conn:
                return {r.job_no: r.worker_token for r in conn.execute(sa.text(query), {"w": worker_id})}
        except sa.exc.DBAPIError:
            return {}

    def _worker_id_of(self, pid: int) -> str | None:
        try:
            args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return None
        return args[args.index(b"--worker-id") + 1].decode() if b"--worker-id" in args else None

    def _check_stalled_shown(self, expired: dict[str, str]) -> None:
        self.found.probes["jobs checked for a stalled frame"] += len(expired)
        for job_no in expired:
            frames = self.watched.get(job_no)
            last = frames.frames[-1] if frames and frames.frames else None
            if last is not None and last.status == RUNNING and not last.stalled:
                self.found.dishonest.append(f"{job_no}: RUNNING v{last.version} without stalled, lease long expired")

    async def _probe_stale_tokens(self, held: dict[str, str]) -> None:
        """A call with each token whose lease is gone now (the job moved on while its worker stood still)."""
        with self.db.connect() as conn:
            now = {r.job_no: r.worker_token for r in conn.execute(
                sa.text("SELECT job_no, worker_token FROM job WHERE job_no IN :nos").bindparams(
                    sa.bindparam("nos", expanding=True)), {"nos": list(held) or ["-"]})}  # fmt: skip
        for job_no, token in held.items():
            if now.get(job_no) == token:
                continue  # still its lease: the worker may use it
            self.found.probes["revoked tokens tried"] += 1
            request = worker_pb2.ReportStageRequest(job_no=job_no, worker_token=token, stage="PREPARING")
            try:
                await self.worker_api.ReportStage(request, timeout=5)
                self.found.late_accepted.append(f"{job_no}: a report with a revoked lease was accepted")
            except grpc.aio.AioRpcError as error:
                if error.code() != grpc.StatusCode.FAILED_PRECONDITION:
                    self.found.submits[f"stale probe answered {error.code().name}"] += 1

    async def kill_server_process(self, workers: Workers) -> None:
        family = self.rng.choice(self.families)
        kids = children(family.pid)
        if kids:
            os.kill(self.rng.choice(kids), signal.SIGKILL)

    async def kill_connections(self, workers: Workers) -> None:
        name = self.url.rsplit("/", 1)[1]
        with contextlib.suppress(sa.exc.DBAPIError), self.admin_db.connect() as conn:
            ids = [r.ID for r in conn.execute(
                sa.text("SELECT ID FROM information_schema.PROCESSLIST WHERE DB = :db AND ID <> CONNECTION_ID()"),
                {"db": name})]  # fmt: skip
            for connection_id in ids:
                with contextlib.suppress(sa.exc.DBAPIError):
                    conn.execute(sa.text(f"KILL CONNECTION {int(connection_id)}"))

    async def restart_mariadb(self, workers: Workers) -> None:
        await asyncio.to_thread(
            subprocess.run, ["start-stop-daemon", "--stop", "--exec", MARIADBD, "--retry", "30"], check=True
        )
        await asyncio.sleep(1.0)
        await asyncio.to_thread(
            subprocess.run,
            ["start-stop-daemon", "--start", "--oknodo", "--background", "--exec", MARIADBD],
            check=True,
        )
        deadline = time.monotonic() + 60
        while not mariadb_up(self.admin_db):
            if time.monotonic() > deadline:
                raise SystemExit("MariaDB did not come back")
            await asyncio.sleep(0.2)

    # -- the end ---------------------------------------------------------------------------
    async def drain(self) -> None:
        """Wait (bounded) until every acknowledged job is terminal and its watcher has seen it."""
        deadline = time.monotonic() + self.config.drain_seconds
        while time.monotonic() < deadline:
            with self.db.connect() as conn:
                query = "SELECT COUNT(*) FROM job WHERE status NOT IN ('READY', 'FAILED', 'CANCELLED')"
                open_jobs = conn.execute(sa.text(query)).scalar_one()
            if open_jobs == 0 and all(t.done() for t in self.watch_tasks):
                return
            await asyncio.sleep(0.5)

    async def check(self) -> None:
        found = self.found
        with self.db.connect() as conn:
            rows = {r.job_no: r for r in conn.execute(sa.text("SELECT job_no, status, version FROM job"))}
            completed = conn.execute(
                sa.text(
                    "SELECT job_no, COUNT(*) AS n FROM job_event WHERE kind = 'COMPLETED' GROUP BY job_no HAVING n > 1"
                )
            )
            found.duplicated += [f"{r.job_no}: {r.n} COMPLETED events" for r in completed]
            artifacts = conn.execute(sa.text(
                "SELECT job_id, COUNT(*) AS n FROM artifact GROUP BY job_id HAVING n > 1"))  # fmt: skip
            found.duplicated += [f"job id {r.job_id}: {r.n} artifacts" for r in artifacts]
        stalled = {f.job_no for f in (await self.admin.Inspect(admin_pb2.InspectRequest(), timeout=10)).findings}
        for key, job_no in self.acknowledged.items():
            row = rows.get(job_no)
            if row is None:
                found.lost.append(f"{job_no} ({key}): not in the database")
                continue
            found.outcomes[row.status] += 1
            if row.status not in ("READY", "FAILED", "CANCELLED") and job_no not in stalled:
                found.lost.append(f"{job_no}: {row.status} at the end, not on the inspection list")
            seen = self.watched.get(job_no, Frames())
            self.found.probes["frames"] += len(seen.frames)
            self.found.probes["watcher reconnects"] += seen.reconnects
            last = seen.frames[-1] if seen.frames else None
            if row.status in ("READY", "FAILED", "CANCELLED") and (
                last is None or job_pb2.Job.Status.Name(last.status) != row.status
            ):
                shown = job_pb2.Job.Status.Name(last.status) if last else "none"
                ended_by = f", its watch ended by {seen.ended_by}" if seen.ended_by else ""
                found.missed_end.append(f"{job_no}: ended {row.status}, the watcher's last frame {shown}{ended_by}")
            self._check_frames(job_no, seen.frames)

    def _check_frames(self, job_no: str, frames: list[job_pb2.Job]) -> None:
        found = self.found
        previous: job_pb2.Job | None = None
        for frame in frames:
            p = frame.progress
            if p.HasField("percent") and not (p.HasField("total_units") and p.total_units > 0):
                found.dishonest.append(f"{job_no} v{frame.version}: a percent without a total")
            if previous is not None:
                if frame.version <= previous.version:
                    found.dishonest.append(f"{job_no}: v{frame.version} after v{previous.version}")
                same_step = (frame.attempt, frame.progress.stage_index) == (
                    previous.attempt,
                    previous.progress.stage_index,
                )
                if (
                    same_step
                    and frame.status == previous.status
                    and p.processed_units < previous.progress.processed_units
                ):
                    found.dishonest.append(f"{job_no} v{frame.version}: progress went back")
            texts = [frame.error.message, frame.display.status_label, frame.display.stage_label, frame.display.detail]
            for text in texts:
                if text and LEAK.search(text):
                    found.leaked.append(f"{job_no} v{frame.version}: {text[:80]!r}")
            previous = frame


def fresh_database() -> tuple[str, sa.Engine, str]:
    name = f"jobwire_soak_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(MYSQL + "/", poolclass=sa.pool.NullPool, pool_pre_ping=True)
    with admin.begin() as conn:
        conn.execute(sa.text(f"CREATE DATABASE {name} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"))
    return f"{MYSQL}/{name}", admin, name


def run(config: Config, *, keep: bool = False) -> Findings:
    url, admin, name = fresh_database()
    workdir = Path(tempfile.mkdtemp(prefix="jobwire-soak-"))
    started = time.monotonic()
    try:
        found = asyncio.run(Soak(config, url, workdir).run())
        print(found.table(config, time.monotonic() - started), flush=True)
        return found
    finally:
        with contextlib.suppress(sa.exc.DBAPIError), admin.begin() as conn:
            conn.execute(sa.text(f"DROP DATABASE IF EXISTS {name}"))
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"kept {workdir}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=Config.seconds, help="how long faults and submits run")
    parser.add_argument("--rate", type=float, default=Config.rate, help="submits per second")
    parser.add_argument("--fault-every", type=float, default=Config.fault_every, help="seconds between faults")
    parser.add_argument("--seed", type=int, default=Config.seed)
    parser.add_argument("--keep", action="store_true", help="keep the logs and results folder")
    args = parser.parse_args()
    found = run(
        Config(seconds=args.seconds, rate=args.rate, fault_every=args.fault_every, seed=args.seed), keep=args.keep
    )
    return 1 if any(found.broken.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
