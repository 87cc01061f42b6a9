"""Without an auth file a server listens on loopback only (docs/security.md), enforced by the server itself.

The rule lives in `jobwire.rpc.server.ServerHost`: every server (the all-in-one, jobapi, the
worker service, each child of a family) is built on it. Checked here at that door and through
the whole assembly a server process runs (`open_runtime`, then the services), not through the
client's helper. The refusal is a SystemExit whose text names the address, the variable that
would allow it and why. Loopback addresses start and answer; with an auth file a wildcard
address is allowed.
"""

from __future__ import annotations

import contextlib
import socket
from pathlib import Path

import grpc
import pytest
from auth_files import Token, write_auth_file

from jobwire.jobapi.app import add_jobapi
from jobwire.rpc.server import Endpoint, ServerHost
from jobwire.runtime.parts import open_runtime
from jobwire.runtime.settings import Settings
from jobwire.v1 import job_pb2, job_pb2_grpc
from jobwire.worker.server.app import add_worker_service

pytestmark = pytest.mark.timeout(60)

TOKEN = Token("loopback-rule-client-3c9", tenant="acme")


def own_address(family: socket.AddressFamily, probe: str) -> str | None:
    """This machine's address on its route out (no packet is sent), if it has one that is not loopback."""
    with contextlib.suppress(OSError), socket.socket(family, socket.SOCK_DGRAM) as s:
        s.connect((probe, 9))
        address = str(s.getsockname()[0])
        if not address.startswith(("127.", "::1", "0.")) and address not in ("::", "0.0.0.0"):
            return address
    return None


def can_bind(family: socket.AddressFamily, host: str) -> bool:
    with contextlib.suppress(OSError), socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return True
    return False


OWN_V4 = own_address(socket.AF_INET, "192.0.2.1")
OWN_V6 = own_address(socket.AF_INET6, "2001:db8::1")
HAS_V6_LOOPBACK = can_bind(socket.AF_INET6, "::1")

NOT_LOOPBACK = [
    "0.0.0.0:0",
    "[::]:0",
    ":0",  # no host: every interface
    "0.0.0.0:50051",
    pytest.param(f"{OWN_V4}:0", id="own-ipv4", marks=pytest.mark.skipif(OWN_V4 is None, reason="no IPv4 route")),
    pytest.param(f"[{OWN_V6}]:0", id="own-ipv6", marks=pytest.mark.skipif(OWN_V6 is None, reason="no IPv6 route")),
]


def assert_clear(message: str, listen: str) -> None:
    assert listen in message, message
    assert "JOBWIRE_AUTH_FILE" in message, message
    assert "loopback" in message, message
    assert "Traceback" not in message, message


@pytest.mark.parametrize("listen", NOT_LOOPBACK)
async def test_the_server_host_refuses_a_non_loopback_address_without_an_auth_file(listen: str) -> None:
    with pytest.raises(SystemExit) as refused:
        ServerHost(Endpoint(listen=listen), ping=lambda recent: True)
    assert_clear(str(refused.value.code), listen)


@pytest.mark.parametrize("listen", NOT_LOOPBACK)
async def test_a_whole_server_refuses_to_start_on_a_non_loopback_address_without_an_auth_file(
    tmp_path: Path, listen: str
) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'jobwire.db'}", listen=listen)
    try:
        rt = open_runtime(settings)
    except SystemExit as refused:
        assert_clear(str(refused.code), listen)
        assert not (tmp_path / "jobwire.db").exists()  # refused before any database was made
        return
    # It was not refused: serve it to show what a client elsewhere would reach, then fail.
    add_jobapi(rt)
    add_worker_service(rt)
    try:
        port = await rt.host.start()
    finally:
        await rt.stop(grace=0)
    raise AssertionError(f"a server without an auth file started on {listen} (port {port})")


def test_a_family_refuses_before_it_holds_the_port_or_migrates(tmp_path: Path) -> None:
    from jobwire.runtime import family

    settings = Settings(database_url=f"sqlite:///{tmp_path / 'jobwire.db'}", listen="0.0.0.0:0", processes=2)
    with pytest.raises(SystemExit) as refused:
        family.run(settings)
    assert_clear(str(refused.value.code), "0.0.0.0:0")
    assert not (tmp_path / "jobwire.db").exists()


LOOPBACK = [
    "127.0.0.1:0",
    "127.0.0.2:0",  # all of 127/8 is loopback
    "localhost:0",
    pytest.param("[::1]:0", marks=pytest.mark.skipif(not HAS_V6_LOOPBACK, reason="no IPv6 loopback")),
]


async def serve_and_submit(settings: Settings, target_host: str, metadata: tuple[tuple[str, str], ...] = ()) -> str:
    """Start a whole server with `settings`, Submit through `target_host`; the job number."""
    rt = open_runtime(settings)
    add_jobapi(rt)
    add_worker_service(rt)
    try:
        port = await rt.host.start()
        async with grpc.aio.insecure_channel(f"{target_host}:{port}") as channel:
            stub = job_pb2_grpc.JobServiceStub(channel)
            reply = await stub.Submit(job_pb2.SubmitRequest(job_type="frames"), metadata=metadata, timeout=10)
            return reply.job.job_no
    finally:
        await rt.stop(grace=1.0)


@pytest.mark.parametrize("listen", LOOPBACK)
async def test_loopback_addresses_serve_without_an_auth_file(tmp_path: Path, listen: str) -> None:
    host = listen.rsplit(":", 1)[0]
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'jobwire.db'}", listen=listen)
    assert (await serve_and_submit(settings, host)).startswith("PT-")


async def test_with_an_auth_file_a_wildcard_address_is_allowed(tmp_path: Path) -> None:
    auth = write_auth_file(tmp_path / "auth.toml", [TOKEN])
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'jobwire.db'}", listen="0.0.0.0:0", auth_file=auth)
    assert (await serve_and_submit(settings, "127.0.0.1", TOKEN.metadata)).startswith("PT-")
