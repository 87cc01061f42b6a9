"""SIGHUP re-reads the auth file of a real server process without dropping open streams.

A WatchStatus stream opened with a token stays open across the reload and still delivers
the next version; after it a new token works and a removed one is refused; a broken file is
logged and the tokens in use are kept.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from auth_files import Token, write_auth_file
from processes import ServerProcess, start_server_process

from jobwire.client.status import error_reason
from jobwire.v1 import admin_pb2, admin_pb2_grpc, job_pb2, job_pb2_grpc

pytestmark = pytest.mark.timeout(120)
OLD = Token("old-client-token")
NEW = Token("new-operator-token", roles=("client", "admin"))
RELOAD_WAIT_S = 15.0


@pytest.fixture
def auth_file(tmp_path: Path) -> Path:
    return write_auth_file(tmp_path / "auth.toml", [OLD])


@pytest.fixture(params=["1", "2"], ids=["one-process", "family"])
def server(request: pytest.FixtureRequest, tmp_path: Path, auth_file: Path) -> Iterator[ServerProcess]:
    """A lone server, and a family whose parent must pass SIGHUP on to its serving processes."""
    env = {
        "JOBWIRE_DATABASE_URL": f"sqlite:///{tmp_path / 'jobwire.db'}",
        "JOBWIRE_LISTEN": "127.0.0.1:0",
        "JOBWIRE_AUTH_FILE": str(auth_file),
    }
    process = start_server_process(["jobwire", "serve", "--processes", request.param], env)
    try:
        yield process
    finally:
        process.kill()


def _code(call: Callable[[], object]) -> tuple[grpc.StatusCode, str | None] | None:
    try:
        call()
    except grpc.RpcError as error:
        return error.code(), error_reason(error)
    return None


def _until(probe: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + RELOAD_WAIT_S
    while not probe():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {RELOAD_WAIT_S}s: {what}")
        time.sleep(0.05)


def test_sighup_swaps_tokens_and_keeps_open_streams(server: ServerProcess, auth_file: Path) -> None:
    with grpc.insecure_channel(server.target) as channel:
        jobs, admin = job_pb2_grpc.JobServiceStub(channel), admin_pb2_grpc.AdminServiceStub(channel)
        job = jobs.Submit(job_pb2.SubmitRequest(job_type="frames"), metadata=OLD.metadata, timeout=10).job
        stream = jobs.WatchStatus(job_pb2.WatchStatusRequest(job_no=job.job_no), metadata=OLD.metadata)
        assert next(stream).job.status == job_pb2.Job.QUEUED

        write_auth_file(auth_file, [NEW])
        server.proc.send_signal(signal.SIGHUP)
        get = job_pb2.GetRequest(job_no=job.job_no)
        _until(lambda: _code(lambda: jobs.Get(get, metadata=NEW.metadata, timeout=5)) is None, "the new token works")
        unauthenticated = (grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED")
        assert _code(lambda: jobs.Get(get, metadata=OLD.metadata, timeout=5)) == unauthenticated
        # the new token's second role: one token for an operator
        admin.ListWorkers(admin_pb2.ListWorkersRequest(), metadata=NEW.metadata, timeout=5)

        # The stream let in with the removed token is still open and still delivers.
        jobs.Cancel(job_pb2.CancelRequest(job_no=job.job_no), metadata=NEW.metadata, timeout=5)
        assert next(stream).job.status == job_pb2.Job.CANCELLED

        auth_file.write_text("[[token]]\nthis is not toml", encoding="utf-8")
        server.proc.send_signal(signal.SIGHUP)
        _until(lambda: "auth file not reloaded" in server.tail(), "the bad file logged")
        assert _code(lambda: jobs.Get(get, metadata=NEW.metadata, timeout=5)) is None
        assert server.proc.poll() is None
