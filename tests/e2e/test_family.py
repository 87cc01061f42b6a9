"""A family of serving processes on one port (`--processes 2`, jobwire.runtime.family), as real processes.

- 8 claimers over 500 jobs, each on a connection of its own: every job is leased exactly
  once, and both children served;
- a child killed with SIGKILL is started again, and the callers it had reconnect;
- it says how many serving processes it starts and why; SIGTERM drains the whole family;
- a server on a port already held (by another family, a lone jobwire, or another program)
  refuses to start, exits non-zero and names the port.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

import grpc
import pytest
import sqlalchemy as sa
from google.protobuf.duration_pb2 import Duration
from proc_support import alive, children
from processes import ServerProcess, start_server_process
from served import eventually

from jobwire.db.tables import job, job_event
from jobwire.runtime.family import READY as READY_LINE
from jobwire.v1 import job_pb2, job_pb2_grpc, worker_pb2, worker_pb2_grpc

pytestmark = pytest.mark.timeout(120)
JOBS, CLAIMERS = 500, 8
SHA = hashlib.sha256(b"").hexdigest()
OWN_CONNECTION = [("grpc.use_local_subchannel_pool", 1)]  # grpc shares one per process otherwise


@dataclass
class Family:
    server: ServerProcess  # the parent

    @property
    def process(self) -> subprocess.Popen[str]:
        return self.server.proc

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def target(self) -> str:
        return self.server.target

    def children(self) -> list[int]:
        return children(self.server.pid)


def _server(database_url: str, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "JOBWIRE_DATABASE_URL": database_url, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "jobwire", "serve", *args], env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def start_family(database_url: str, listen: str = "127.0.0.1:0") -> Family:
    # The parent prints its one serving line once both children serve (theirs it keeps to
    # itself): so both must be there as soon as it is read.
    server = start_server_process(
        ["jobwire", "serve", "--processes", "2", "--listen", listen], {"JOBWIRE_DATABASE_URL": database_url}
    )
    family = Family(server)
    assert len(family.children()) == 2, server.tail()
    return family


def stop(family: Family) -> int:
    try:
        return family.server.terminate(30)
    finally:
        family.server.kill()


@pytest.fixture
def family(database_url: str) -> Iterator[Family]:
    started = start_family(database_url)
    try:
        yield started
    finally:
        stop(started)


def _connections(pid: int, port: int) -> int:
    """Established TCP connections on `port` that process `pid` holds (from /proc)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table, encoding="ascii") as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                local_port = int(fields[1].rsplit(":", 1)[1], 16)
                if local_port == port and fields[3] == "01" and fields[9] in inodes:
                    count += 1
    return count


async def _claim_all(target: str) -> list[str]:
    """One claimer on a connection of its own: claim and complete until the queue stays empty."""
    async with grpc.aio.insecure_channel(target, options=OWN_CONNECTION) as channel:
        workers = worker_pb2_grpc.WorkerServiceStub(channel)
        leased: list[str] = []
        empty = 0
        while empty < 3:
            reply = await workers.Claim(worker_pb2.ClaimRequest(
                worker_id=f"w{id(leased)}", job_types=[worker_pb2.JobTypeSpec(name="bulk")], max_jobs=5,
                wait=Duration(nanos=300_000_000),
            ))  # fmt: skip
            empty = 0 if reply.leases else empty + 1
            for lease in reply.leases:
                leased.append(lease.job_no)
                artifact = job_pb2.Artifact(uri=f"file:///{lease.job_no}", size_bytes=0, sha256=SHA)
                done = await workers.Complete(
                    worker_pb2.CompleteRequest(job_no=lease.job_no, worker_token=lease.worker_token, result=artifact)
                )
                assert done.status == job_pb2.Job.READY
        return leased


async def test_every_job_is_leased_once_across_the_family(family: Family, database_url: str) -> None:
    async with grpc.aio.insecure_channel(family.target) as channel:
        jobs = job_pb2_grpc.JobServiceStub(channel)
        for start in range(0, JOBS, 50):
            await asyncio.gather(
                *(jobs.Submit(job_pb2.SubmitRequest(job_type="bulk")) for _ in range(start, start + 50))
            )
    claimers = [asyncio.create_task(_claim_all(family.target)) for _ in range(CLAIMERS)]
    seen: list[dict[int, int]] = []

    async def both_serving() -> bool:  # while the claimers hold their connections
        seen.append({pid: _connections(pid, family.port) for pid in family.children()})
        return len(seen[-1]) == 2 and all(count > 0 for count in seen[-1].values())

    try:
        await eventually(both_serving, what="both processes serving a claimer")
    except AssertionError as exc:
        raise AssertionError(f"one process served nobody: {seen[-1]}") from exc
    leased = [n for found in await asyncio.gather(*claimers) for n in found]

    assert len(leased) == JOBS and len(set(leased)) == JOBS, "a job leased twice, or one not at all"
    engine = sa.create_engine(database_url)
    with engine.connect() as conn:
        ready = conn.execute(sa.select(sa.func.count()).where(job.c.status == "READY")).scalar_one()
        claims = conn.execute(sa.select(sa.func.count()).where(job_event.c.kind == "CLAIMED")).scalar_one()
    engine.dispose()
    assert (ready, claims) == (JOBS, JOBS)


def _get(target: str) -> None:
    """Submit and read back on a connection of its own, retrying while the server reconnects."""
    deadline = time.monotonic() + 20
    with grpc.insecure_channel(target, options=OWN_CONNECTION) as channel:
        jobs = job_pb2_grpc.JobServiceStub(channel)
        while True:
            try:
                job_no = jobs.Submit(job_pb2.SubmitRequest(job_type="ping"), timeout=5).job.job_no
                assert jobs.Get(job_pb2.GetRequest(job_no=job_no), timeout=5).job_no == job_no
                return
            except grpc.RpcError as exc:
                if exc.code() != grpc.StatusCode.UNAVAILABLE or time.monotonic() > deadline:  # type: ignore[attr-defined]
                    raise
                time.sleep(0.1)


def _each_on_its_own_connection(family: Family, count: int) -> tuple[list[grpc.Channel], list[object]]:
    channels = [grpc.insecure_channel(family.target, options=OWN_CONNECTION) for _ in range(count)]
    stubs = [job_pb2_grpc.JobServiceStub(c) for c in channels]
    for stub in stubs:
        stub.Submit(job_pb2.SubmitRequest(job_type="ping"), timeout=10)  # type: ignore[attr-defined]
    return channels, stubs


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_killed_child_is_started_again_and_its_callers_reconnect(family: Family) -> None:
    channels, stubs = _each_on_its_own_connection(family, 8)
    try:
        before = family.children()
        victim = before[0]
        assert _connections(victim, family.port) > 0, "nobody was connected to the process to kill"
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while not (len(family.children()) == 2 and victim not in family.children()):
            assert time.monotonic() < deadline, "the killed process was not started again"
            time.sleep(0.1)
        assert family.process.poll() is None
        for stub in stubs:  # the callers of the dead process reconnect, to a live one
            deadline = time.monotonic() + 20
            while True:
                try:
                    stub.Submit(job_pb2.SubmitRequest(job_type="after"), timeout=5)  # type: ignore[attr-defined]
                    break
                except grpc.RpcError as exc:
                    if exc.code() != grpc.StatusCode.UNAVAILABLE or time.monotonic() > deadline:  # type: ignore[attr-defined]
                        raise
                    time.sleep(0.1)
        _get(family.target)
    finally:
        for channel in channels:
            channel.close()


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_sigterm_drains_the_whole_family(database_url: str) -> None:
    family = start_family(database_url)
    assert "jobwire: 2 serving processes: set by --processes" in family.server.tail()  # how many, and why
    children = family.children()
    _get(family.target)
    assert stop(family) == 0
    assert not any(alive(pid) for pid in children)
    with socket.socket() as probe:  # and the port is free again
        probe.bind(("127.0.0.1", family.port))


def _refused(database_url: str, port: int, processes: str) -> str:
    process = _server(database_url, "--processes", processes, "--listen", f"127.0.0.1:{port}")
    out, err = process.communicate(timeout=60)
    assert process.returncode != 0, f"a second server started on port {port}: {out}"
    assert READY_LINE not in out
    return err


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_port_in_use_is_refused_by_name(family: Family, tmp_path: object) -> None:
    other = f"sqlite:///{tmp_path}/other.db"
    for processes in ("2", "1"):  # another family, and a lone server
        assert f"port {family.port} is in use" in _refused(other, family.port, processes)
    _get(family.target)  # the family serves on, alone on its port
    with socket.socket() as held:  # another program's port
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        for processes in ("2", "1"):
            assert f"port {port} is in use" in _refused(other, port, processes)


def _time_wait_port() -> int:
    """A port that only closed connections name: a server that just stopped leaves it so."""
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = listener.accept()
        accepted.close()  # the server's side closes first: its end waits in TIME_WAIT on `port`
        client.close()
    return port


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_port_a_server_just_left_is_free_again(database_url: str) -> None:
    """Found in `make run` after a stop: connections in TIME_WAIT made the port look held for a minute."""
    port = _time_wait_port()
    started = start_family(database_url, listen=f"127.0.0.1:{port}")
    try:
        assert started.port == port
        _get(started.target)
    finally:
        assert stop(started) == 0
