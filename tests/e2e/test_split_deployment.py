"""docker-compose.yml's deployment, in real processes on a fresh MariaDB database.

As compose runs it: `python -m jobwire migrate` first, on an empty database; then jobapi
(`python -m jobwire.jobapi`) and the worker service (`python -m jobwire.worker.server`), each
on a port of its own, with one auth file holding a client, a worker and an admin token;
then `jobwire-worker` fleet workers running `jobwire.examples:handlers` against the worker service
only, each in an empty folder of its own and keeping no results (the servers share one
JOBWIRE_RESULT_STORE, as compose's volume); and `jobctl` against jobapi.

- a submitted job is watched to READY and `jobctl result` gives bytes whose sha256 is the result's;
- a running job is cancelled: it ends CANCELLED, confirmed by its worker at a safe point
  (the events show it), with no result and no temporary files left;
- the worker running a job is killed with SIGKILL: the reaper requeues the job (retry
  policy RETRY on a lost lease) and another worker resumes it to READY;
- at the end AdminService.Inspect reports nothing, and no job completed twice.

The servers start with JOBWIRE_MIGRATE=0, as compose's do: they check the schema the
migrate step made is current and change nothing (the test compares it before and after).
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import sqlalchemy as sa
from auth_files import Token, write_auth_file
from proc_support import alive, children
from processes import ServerProcess, start_server_process

from jobwire.client import AdminClient, JobClient
from jobwire.db.tables import metadata
from jobwire.v1 import admin_pb2, job_pb2

pytestmark = [pytest.mark.mysql, pytest.mark.timeout(90)]

BIN = Path(sys.executable).parent
LEASE_S = 3  # the workers ask for short leases so a killed worker's job comes back within seconds
SERVER_STOP_S = 30.0  # a family's SIGTERM drain is at most 15 s
READY, CANCELLED = job_pb2.Job.READY, job_pb2.Job.CANCELLED
SCHEMA_TABLES = {*metadata.tables, "alembic_version"}


@dataclass
class Deployment:
    """Everything one test started, stopped in the fixture's finally; the folders the workers share."""

    root: Path
    database_url: str
    client: Token
    worker_token: Token
    admin: Token
    servers: list[ServerProcess] = field(default_factory=list)
    workers: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    family: dict[int, list[int]] = field(default_factory=dict)  # a server's serving children, by its pid
    jobctl_runs: list[str] = field(default_factory=list)

    @property
    def results(self) -> Path:
        return self.root / "results"

    @property
    def tmp(self) -> Path:
        return self.root / "worker-tmp"

    def server_env(self, auth_file: Path) -> dict[str, str]:
        # What compose gives jobapi and worker-service (no JOBWIRE_PROCESSES: one per core),
        # plus a fast reaper so a lease that ran out is acted on within about a second.
        return {
            "JOBWIRE_DATABASE_URL": self.database_url,
            "JOBWIRE_MIGRATE": "0",
            "JOBWIRE_LISTEN": "127.0.0.1:0",
            "JOBWIRE_AUTH_FILE": str(auth_file),
            "JOBWIRE_RESULT_STORE": str(self.results),  # both servers: compose's results volume
            "JOBWIRE_REAPER_INTERVAL_SECONDS": "0.5",
            "JOBWIRE_STALL_GRACE_SECONDS": "1",
        }

    def start_servers(self, env: dict[str, str]) -> tuple[ServerProcess, ServerProcess]:
        """jobapi and the worker service, started together as compose does once migrate has completed."""
        with ThreadPoolExecutor(2) as pool:
            modules = ("jobwire.jobapi", "jobwire.worker.server")
            futures = [pool.submit(start_server_process, [module], env) for module in modules]
            started = []
            for future in futures:
                if future.exception() is None:
                    server = future.result()
                    self.servers.append(server)
                    self.family[server.pid] = children(server.pid)
                    started.append(server)
            for future in futures:
                future.result()  # raises the first start that failed, with its output
        return started[0], started[1]

    def worker(self, worker_id: str, target: str) -> subprocess.Popen[bytes]:
        """A fleet worker as compose's example-worker runs, with the test's short lease and claim wait."""
        env = {**os.environ, "JOBWIRE_TOKEN": self.worker_token.secret}
        for name in ("JOBWIRE_TARGET", "JOBWIRE_RESULTS_DIR", "JOBWIRE_RESULTS_URL"):
            env.pop(name, None)
        host = self.root / worker_id  # an empty working folder, as on a machine of its own
        host.mkdir()
        args = [str(BIN / "jobwire-worker"), "--target", target, "--handlers", "jobwire.examples:handlers",
                "--worker-id", worker_id, "--tmp-dir", str(self.tmp), "--lease-seconds", str(LEASE_S),
                "--claim-wait", "1", "--grace-seconds", "15"]  # fmt: skip
        log = (self.root / f"{worker_id}.log").open("wb")
        proc = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=host)
        self.workers[worker_id] = proc
        return proc

    def jobctl(self, token: Token, target: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "JOBWIRE_TOKEN": token.secret}
        env.pop("JOBWIRE_TARGET", None)
        command = [str(BIN / "jobctl"), "--target", target, *args]
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout, check=False)
        self.jobctl_runs.append(f"$ jobctl {' '.join(args)}  -> {done.returncode}\n{done.stdout[-1500:]}{done.stderr}")
        return done

    def stop_all(self) -> None:
        for proc in self.workers.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=30)
        for server in self.servers:
            if server.proc.poll() is None:
                server.proc.send_signal(signal.SIGTERM)  # the parent drains its serving children
            try:
                server.proc.wait(SERVER_STOP_S)
            except subprocess.TimeoutExpired:
                server.kill()
        for pids in self.family.values():  # none should be left; a parent killed outright leaves them
            for pid in pids:
                deadline = time.monotonic() + 10
                while alive(pid) and time.monotonic() < deadline:
                    time.sleep(0.1)
                if alive(pid):
                    os.kill(pid, signal.SIGKILL)

    def show(self) -> None:
        """The processes' output, shown by pytest when the test fails."""
        names = ["jobapi", "worker service"]
        for name, server in zip(names, self.servers, strict=False):
            print(f"----- {name} (exit {server.proc.returncode})\n{server.tail()}")
        for log in sorted(self.root.glob("*.log")):
            print(f"----- {log.name}\n{log.read_text(errors='replace')[-4000:]}")
        print("----- jobctl\n" + "\n".join(self.jobctl_runs)[-6000:])


@pytest.fixture
def deployment(empty_mysql_url: str, tmp_path: Path) -> Iterator[Deployment]:
    d = Deployment(
        root=tmp_path,
        database_url=empty_mysql_url,
        client=Token(secrets.token_hex(16), tenant="acme", role="client"),
        worker_token=Token(secrets.token_hex(16), tenant="acme", role="worker"),
        admin=Token(secrets.token_hex(16), tenant="acme", role="admin"),
    )
    d.tmp.mkdir()
    try:
        yield d
    finally:
        try:
            d.stop_all()  # before empty_mysql_url drops the database
        finally:
            d.show()


# -- reading the database, the jobs and the results ------------------------------------------


def schema(url: str) -> dict[str, object]:
    """The tables with their creation times, and the Alembic revision."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            tables = conn.execute(
                sa.text("SELECT table_name, create_time FROM information_schema.tables WHERE table_schema = DATABASE()")
            ).all()
            found: dict[str, object] = {str(name).lower(): created for name, created in tables}
            if "alembic_version" in found:
                found["revision"] = conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalars().all()
        return found
    finally:
        engine.dispose()


def completions(url: str) -> dict[str, int]:
    """COMPLETED events per job, straight from job_event."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.text("SELECT job_no, COUNT(*) FROM job_event WHERE kind = 'COMPLETED' GROUP BY job_no")
            ).all()
        return {str(job_no): int(count) for job_no, count in rows}
    finally:
        engine.dispose()


def wait_for(
    client: JobClient, job_no: str, done: Callable[[job_pb2.Job], bool], what: str, timeout: float = 45
) -> job_pb2.Job:
    deadline = time.monotonic() + timeout
    while True:
        job = client.get(job_no)
        if done(job):
            return job
        if time.monotonic() > deadline:
            raise AssertionError(f"{job_no} not {what} within {timeout}s; last seen:\n{job}")
        time.sleep(0.05)


def at_least(stage: str, units: int) -> Callable[[job_pb2.Job], bool]:
    return lambda job: (
        job.status == job_pb2.Job.RUNNING and job.stage == stage and job.progress.processed_units >= units
    )


def submit(d: Deployment, target: str, job_type: str, payload: dict[str, object], *options: str) -> str:
    """`jobctl submit` with the client token; the new job's number."""
    done = d.jobctl(d.client, target, "--json", "submit", job_type, "--payload", json.dumps(payload), *options)
    assert done.returncode == 0, done.stderr
    reply = json.loads(done.stdout)
    assert reply["created"] is True
    return str(reply["job"]["job_no"])


def watched(done: subprocess.CompletedProcess[str]) -> dict[str, object]:
    """The last update `jobctl watch --json` printed (one JSON object per line)."""
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert lines, f"jobctl watch printed nothing: {done.stderr}"
    last: dict[str, object] = json.loads(lines[-1])
    return last


def fetched(d: Deployment, target: str, job_no: str, result: job_pb2.Artifact | dict[str, object]) -> bytes:
    """`jobctl result JOB_NO -o FILE` in a process of its own; the bytes, checked against the result."""
    uri, sha256, size = (
        (result.uri, result.sha256, result.size_bytes) if isinstance(result, job_pb2.Artifact)
        else (result["uri"], result["sha256"], int(str(result["size_bytes"])))
    )  # fmt: skip
    assert uri == f"jobwire://results/{job_no}"
    out = d.root / f"{job_no}.result"
    done = d.jobctl(d.client, target, "result", job_no, "-o", str(out))
    assert done.returncode == 0, done.stderr
    data = out.read_bytes()
    assert hashlib.sha256(data).hexdigest() == sha256 and len(data) == size
    return data


def events(admin: AdminClient, job_no: str) -> list[admin_pb2.JobEvent]:
    return list(admin.list_events(job_no))


# -- the test ---------------------------------------------------------------------------------


def test_compose_deployment_on_mariadb(deployment: Deployment) -> None:
    d = deployment

    # 1-2. The migrate job, on an empty database.
    assert not set(schema(d.database_url)) & SCHEMA_TABLES
    migrate = subprocess.run(
        [sys.executable, "-m", "jobwire", "migrate"], env={**os.environ, "JOBWIRE_DATABASE_URL": d.database_url},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert migrate.returncode == 0, migrate.stdout + migrate.stderr
    migrated = schema(d.database_url)
    assert set(migrated) >= SCHEMA_TABLES, sorted(migrated)
    assert migrated["revision"], "alembic_version holds no revision"

    # 3. jobapi and the worker service, each on its own port, one auth file with three roles.
    auth_file = write_auth_file(d.root / "auth.toml", [d.client, d.worker_token, d.admin])
    jobapi, worker_service = d.start_servers(d.server_env(auth_file))
    assert jobapi.port != worker_service.port
    assert schema(d.database_url) == migrated  # the servers checked the schema and changed nothing
    refused = d.jobctl(d.client, jobapi.target, "inspect")  # the auth file is in force: a client is no admin
    assert refused.returncode == 4 and "PERMISSION_DENIED" in refused.stderr, refused.stderr

    # 4. Two fleet workers against the worker service only.
    d.worker("worker-a", worker_service.target)
    d.worker("worker-b", worker_service.target)

    with (
        JobClient.connect(jobapi.target, d.client.secret, timeout=10) as client,
        AdminClient.connect(jobapi.target, d.admin.secret, timeout=10) as admin,
    ):
        # 5a. Submit, watch to READY, the result is what the worker handed the server.
        frames = submit(d, jobapi.target, "frames", {"frames": 120, "frame_ms": 1})
        watch = d.jobctl(d.client, jobapi.target, "--json", "watch", frames)
        assert watch.returncode == 0, watch.stderr
        final = watched(watch)
        assert final["status"] == "READY"
        result = final["result"]
        assert isinstance(result, dict)
        fetched(d, jobapi.target, frames, result)

        # 5b. Cancel a running job: it stops at its next safe point (frame 40 holds for a minute).
        slow = submit(d, jobapi.target, "frames", {"frames": 900, "frame_ms": 1, "pause_at": 40, "pause_ms": 60000})
        wait_for(client, slow, at_least("PROCESSING", 40), "paused at frame 40")
        assert any(d.tmp.iterdir())  # the attempt's temporary folder exists while it runs
        cancel = d.jobctl(d.client, jobapi.target, "--json", "cancel", slow)
        assert cancel.returncode == 0, cancel.stderr
        assert json.loads(cancel.stdout)["status"] in ("CANCEL_REQUESTED", "CANCELLED")
        watch = d.jobctl(d.client, jobapi.target, "--json", "watch", slow)
        assert watch.returncode == 3, watch.stderr  # jobctl: 3 means it ended CANCELLED
        assert watched(watch)["status"] == "CANCELLED"
        cancelled = client.get(slow)
        assert cancelled.status == CANCELLED and not cancelled.HasField("result")
        trail = events(admin, slow)
        claimed = [e for e in trail if e.kind == "CLAIMED"]
        assert len(claimed) == 1 and claimed[0].worker_id in d.workers
        asked = [e for e in trail if e.kind == "CANCEL_REQUESTED"]
        assert [(e.from_status, e.to_status) for e in asked] == [(job_pb2.Job.RUNNING, job_pb2.Job.CANCEL_REQUESTED)]
        ends = [e for e in trail if e.to_status == CANCELLED]
        # The worker confirmed (kind CANCELLED, its own id), mid-stage: not the reaper revoking a lease.
        assert len(ends) == 1, [e.kind for e in trail]
        end = ends[0]
        assert (end.kind, end.from_status, end.worker_id) == (
            "CANCELLED",
            job_pb2.Job.CANCEL_REQUESTED,
            claimed[0].worker_id,
        )
        assert (end.stage, end.attempt) == ("PROCESSING", 1)
        assert end.version > asked[0].version
        assert not [e for e in trail if e.kind.startswith("LEASE_") or e.kind == "COMPLETED"]
        assert list(d.tmp.iterdir()) == []  # its temporary folder went with it
        refused = d.jobctl(d.client, jobapi.target, "result", slow)
        assert refused.returncode == 4 and "not READY" in refused.stderr, refused.stderr

        # 5c. kill -9 the worker running an import; another worker resumes it from its checkpoint.
        rows, target_db = 20_000, d.root / "import.db"
        payload = {"rows": rows, "target_db": str(target_db), "batch_ms": 100}
        retry = ("--max-attempts", "3", "--on-lease-lost", "RETRY")
        imported = submit(d, jobapi.target, "csv_import", payload, *retry)
        wait_for(client, imported, at_least("IMPORTING", 3000), "importing past row 3000")
        holder = [e.worker_id for e in events(admin, imported) if e.kind == "CLAIMED"]
        assert len(holder) == 1 and holder[0] in d.workers, holder
        victim = d.workers[holder[0]]
        victim.kill()  # SIGKILL: no goodbye, the lease just runs out
        assert victim.wait(timeout=10) == -signal.SIGKILL
        watch = d.jobctl(d.client, jobapi.target, "--json", "watch", imported)
        assert watch.returncode == 0, watch.stderr
        recovered = client.get(imported)
        assert recovered.status == READY and recovered.attempt == 2
        data = fetched(d, jobapi.target, imported, recovered.result)
        assert client.result(imported) == data
        trail = events(admin, imported)
        kinds = [e.kind for e in trail]
        assert "LEASE_EXPIRED" in kinds and "LEASE_REVOKED_REQUEUED" in kinds, kinds
        claims = [e.worker_id for e in trail if e.kind == "CLAIMED"]
        finishers = [e.worker_id for e in trail if e.kind == "COMPLETED"]
        assert len(claims) == 2 and claims[0] == holder[0] and claims[1] != holder[0], claims
        assert finishers == [claims[1]]
        summary = json.loads(data)
        assert summary["rows"] == rows and summary["resumed_at_row"] >= 3000  # resumed, not started over
        with sqlite3.connect(target_db) as conn:
            total, distinct = conn.execute("SELECT COUNT(*), COUNT(DISTINCT id) FROM imported_rows").fetchone()
        assert total == distinct == rows  # each row imported once across the two attempts

        # 6. Nothing left broken, nothing completed twice.
        listed = d.jobctl(d.client, jobapi.target, "--json", "list")
        assert listed.returncode == 0, listed.stderr
        statuses = {job["job_no"]: job["status"] for job in json.loads(listed.stdout)}
        assert statuses == {frames: "READY", slow: "CANCELLED", imported: "READY"}
        inspect = d.jobctl(d.admin, jobapi.target, "--json", "inspect")
        assert inspect.returncode == 0, inspect.stderr
        assert json.loads(inspect.stdout) == []  # no STALLED, RUNNING_WITHOUT_LEASE or TERMINAL_WITH_TOKEN
        assert list(admin.inspect()) == []
        assert completions(d.database_url) == {frames: 1, imported: 1}
        for worker_id in d.workers:
            assert list((d.root / worker_id).rglob("*")) == []  # nothing kept on a worker's machine
        # Temporary folders: only the killed attempt's is left (SIGKILL leaves no chance to clean up).
        assert [p.name.startswith(f"jobwire-{imported}-a1-") for p in d.tmp.iterdir()] == [True]
