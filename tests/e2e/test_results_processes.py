"""Results the server keeps, across real processes, as on three machines.

The embedded server (`python -m jobwire serve`) on a fresh SQLite file keeps results in its
default store (var/results beside the database). A `jobwire-worker` runs in an empty folder
of its own with no result settings and uploads a 20 MiB result; `jobctl result`, a third
process, gets the same bytes. A forged token's upload is refused and leaves no file behind;
a small JSON result travels inline and comes back through JobClient.result.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest
from processes import ServerProcess, start_server_process

from jobwire.client import JobClient
from jobwire.client.status import error_info
from jobwire.v1 import job_pb2, worker_pb2, worker_pb2_grpc

pytestmark = pytest.mark.timeout(180)

BIN = Path(sys.executable).parent
BIG = 20 << 20
READY = job_pb2.Job.READY

HANDLERS = textwrap.dedent('''
    """Handlers of this test: a 20 MiB file, and a small JSON document."""
    import hashlib

    from jobwire.worker.sdk import Handlers, JobContext, Result

    handlers = Handlers()


    def block(i: int) -> bytes:
        return hashlib.sha256(b"%d" % i).digest() * (1 << 15)  # 1 MiB, different for each i


    @handlers.job("big")
    def big(ctx: JobContext) -> Result:
        path = ctx.tmp_dir / "big.bin"
        with path.open("wb") as out:
            for i in range(20):
                out.write(block(i))
        return Result.from_file(path, content_type="application/octet-stream", summary="20 MiB")


    @handlers.job("small")
    def small(ctx: JobContext) -> dict[str, object]:
        return {"answer": 42, "payload": ctx.payload.decode()}
''')


def expected_big() -> bytes:
    return b"".join(hashlib.sha256(b"%d" % i).digest() * (1 << 15) for i in range(20))


class Hosts:
    def __init__(self, root: Path, server: ServerProcess) -> None:
        self.root, self.server = root, server
        self.target = f"127.0.0.1:{server.port}"
        self.procs: list[subprocess.Popen[bytes]] = []

    @property
    def store(self) -> Path:
        return self.root / "server" / "results"

    def stored_files(self) -> set[Path]:
        return {p for p in self.store.rglob("*") if p.is_file()}

    def worker(self) -> subprocess.Popen[bytes]:
        host = self.root / "worker-host"
        host.mkdir()
        env = {**os.environ, "PYTHONPATH": str(self.root / "code")}
        for name in ("JOBWIRE_RESULTS_DIR", "JOBWIRE_RESULTS_URL"):
            env.pop(name, None)
        args = [str(BIN / "jobwire-worker"), "--target", self.target, "--handlers", "results_handlers:handlers",
                "--claim-wait", "1", "--grace-seconds", "5"]  # fmt: skip
        log = (self.root / "worker.log").open("wb")
        proc = subprocess.Popen(args, env=env, cwd=host, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(proc)
        return proc

    def jobctl(self, *args: str) -> subprocess.CompletedProcess[bytes]:
        host = self.root / "client-host"
        host.mkdir(exist_ok=True)
        command = [str(BIN / "jobctl"), "--target", self.target, *args]
        return subprocess.run(command, cwd=host, capture_output=True, timeout=120, check=False)


@pytest.fixture
def hosts(tmp_path: Path) -> Iterator[Hosts]:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "results_handlers.py").write_text(HANDLERS)
    (tmp_path / "server").mkdir()
    env = {"JOBWIRE_DATABASE_URL": f"sqlite:///{tmp_path / 'server' / 'jobwire.db'}", "JOBWIRE_LISTEN": "127.0.0.1:0"}
    env["JOBWIRE_RESULT_STORE"] = ""  # the default
    server = start_server_process(["jobwire", "serve"], env)
    h = Hosts(tmp_path, server)
    try:
        yield h
    finally:
        for proc in h.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=30)
        server.kill()
        print(f"----- server\n{server.tail()}")
        log = tmp_path / "worker.log"
        if log.exists():
            print(f"----- worker\n{log.read_text(errors='replace')[-4000:]}")


def wait_ready(client: JobClient, job_no: str, timeout: float = 120) -> job_pb2.Job:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = client.get(job_no)
        if job.status == READY:
            return job
        assert job.status in (job_pb2.Job.QUEUED, job_pb2.Job.RUNNING), job
        time.sleep(0.1)
    raise AssertionError(f"{job_no} never READY: {client.get(job_no)}")


def test_a_20_mib_upload_from_one_host_is_fetched_identical_by_jobctl_on_another(hosts: Hosts) -> None:
    hosts.worker()
    with JobClient.connect(hosts.target, timeout=10) as client:
        job_no = client.submit("big").job.job_no
        job = wait_ready(client, job_no)
    want = hashlib.sha256(expected_big()).hexdigest()
    assert (job.result.uri, job.result.size_bytes, job.result.sha256) == (f"jobwire://results/{job_no}", BIG, want)
    assert list((hosts.root / "worker-host").rglob("*")) == []  # the worker kept nothing

    out = hosts.root / "client-host" / "big.bin"
    done = hosts.jobctl("result", job_no, "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert hashlib.sha256(out.read_bytes()).hexdigest() == want
    piped = hosts.jobctl("result", job_no)  # stdout by default
    assert piped.returncode == 0 and hashlib.sha256(piped.stdout).hexdigest() == want


def test_an_inline_json_result_comes_back_through_the_client(hosts: Hosts) -> None:
    hosts.worker()
    with JobClient.connect(hosts.target, timeout=10) as client:
        job_no = client.submit("small", payload=b"hello").job.job_no
        job = wait_ready(client, job_no)
        data = client.result(job_no)
    assert job.result.uri == f"jobwire://results/{job_no}" and job.result.content_type == "application/json"
    assert hashlib.sha256(data).hexdigest() == job.result.sha256
    assert json.loads(data) == {"answer": 42, "payload": "hello"}
    assert hosts.stored_files() == set()  # small: kept inline with the job


async def _chunks(job_no: str, token: str, n: int) -> AsyncIterator[job_pb2.ResultChunk]:
    yield job_pb2.ResultChunk(job_no=job_no, worker_token=token, content_type="text/plain", data=b"x" * 1000)
    for _ in range(n):
        yield job_pb2.ResultChunk(data=b"y" * (1 << 20))


async def test_a_forged_tokens_upload_is_refused_and_leaves_no_file(hosts: Hosts) -> None:
    with JobClient.connect(hosts.target, timeout=10) as client:
        job_no = client.submit("unserved").job.job_no
    async with grpc.aio.insecure_channel(hosts.target) as channel:
        workers = worker_pb2_grpc.WorkerServiceStub(channel)
        claim = worker_pb2.ClaimRequest(worker_id="w", job_types=[worker_pb2.JobTypeSpec(name="unserved")])
        lease = (await workers.Claim(claim)).leases[0]
        epoch, _, mac = lease.worker_token.partition(".")
        for forged in (f"{epoch}.{'0' * len(mac)}", f"{int(epoch) + 1}.{mac}"):
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await workers.UploadResult(_chunks(job_no, forged, 0))
            assert error_info(refused.value).reason == "WORKER_LEASE_LOST"
            # Refused while megabytes are still on their way: the call fails, nothing is kept.
            with pytest.raises(grpc.aio.AioRpcError):
                await workers.UploadResult(_chunks(job_no, forged, 3))
            assert hosts.stored_files() == set()
        up = await workers.UploadResult(_chunks(job_no, lease.worker_token, 3))
        assert up.size_bytes == 1000 + 3 * (1 << 20) and len(hosts.stored_files()) == 2  # the bytes and their sum
        done = await workers.Complete(worker_pb2.CompleteRequest(
            job_no=job_no, worker_token=lease.worker_token, upload_id=up.upload_id
        ))  # fmt: skip
        assert done.status == READY and done.result.sha256 == up.sha256
