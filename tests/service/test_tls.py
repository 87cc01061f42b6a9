"""TLS and mutual TLS (JOBWIRE_TLS_CERT / _KEY / _CLIENT_CA) with certificates made by `openssl` at test time.

A CA signs the server's certificate (SAN 127.0.0.1 and localhost) and a client's; a
second CA signs a client certificate the server must not accept.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from served import Served, start_server
from service_support import stop_server

from jobwire.client import JobClient
from jobwire.client.channel import ChannelConfig, aio_channel
from jobwire.client.retry import RetrySettings
from jobwire.v1 import job_pb2, job_pb2_grpc

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")

NO_RETRY = RetrySettings(unary_attempts=1)
NEW_KEY = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")  # EC: quick to make


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path  # a CA the server does not trust, nor its certificate
    stranger_cert: Path  # a client certificate from the other CA
    stranger_key: Path


def _openssl(*args: str | Path) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True, timeout=60)


def _make_ca(folder: Path, name: str) -> tuple[Path, Path]:
    cert, key = folder / f"{name}.crt", folder / f"{name}.key"
    ca_extensions = ("-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    _openssl(
        "req", "-x509", *NEW_KEY, "-keyout", key, "-out", cert, "-days", "2", "-subj", f"/CN={name}", *ca_extensions
    )
    return cert, key


def _issue(folder: Path, ca: tuple[Path, Path], name: str, extensions: str) -> tuple[Path, Path]:
    cert, key, csr, ext = (folder / f"{name}.{s}" for s in ("crt", "key", "csr", "ext"))
    _openssl("req", *NEW_KEY, "-keyout", key, "-out", csr, "-subj", f"/CN={name}")
    ext.write_text(f"basicConstraints=CA:FALSE\n{extensions}\n", encoding="utf-8")
    signer = ("-CA", ca[0], "-CAkey", ca[1], "-CAcreateserial")
    _openssl("x509", "-req", "-in", csr, *signer, "-out", cert, "-days", "2", "-sha256", "-extfile", ext)
    return cert, key


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    folder = tmp_path_factory.mktemp("pki")
    ca = _make_ca(folder, "jobwire-test-ca")
    server = _issue(folder, ca, "server", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth")
    client = _issue(folder, ca, "client", "extendedKeyUsage=clientAuth")
    other_ca = _make_ca(folder, "other-ca")
    stranger = _issue(folder, other_ca, "stranger", "extendedKeyUsage=clientAuth")
    return Pki(ca[0], *server, *client, other_ca[0], *stranger)


@pytest.fixture
async def tls_server(database_url: str, pki: Pki) -> AsyncIterator[Served]:
    served = await start_server(database_url, tls_cert=pki.server_cert, tls_key=pki.server_key)
    try:
        yield served
    finally:
        await stop_server(served)


@pytest.fixture
async def mtls_server(database_url: str, pki: Pki) -> AsyncIterator[Served]:
    served = await start_server(database_url, tls_cert=pki.server_cert, tls_key=pki.server_key, tls_client_ca=pki.ca)
    try:
        yield served
    finally:
        await stop_server(served)


def _submit_and_get(client: JobClient) -> None:
    with client:
        job, created = client.submit("frames", {"video": "v.mp4"})
        assert created
        assert client.get(job.job_no).job_no == job.job_no


async def _aio_submit(config: ChannelConfig) -> grpc.StatusCode:
    """Submit over an aio channel from jobwire.client.channel: OK or the failure's code."""
    channel = aio_channel(config)
    try:
        stub = job_pb2_grpc.JobServiceStub(channel)
        await stub.Submit(job_pb2.SubmitRequest(job_type="frames"), timeout=10)
        return grpc.StatusCode.OK
    except grpc.aio.AioRpcError as exc:
        return exc.code()
    finally:
        await channel.close()


async def test_tls_client_submits_and_gets(tls_server: Served, pki: Pki) -> None:
    # The blocking client in a thread: the server shares this test's event loop.
    for host in ("127.0.0.1", "localhost"):
        target = f"{host}:{tls_server.runtime.host.port}"
        await asyncio.to_thread(_submit_and_get, JobClient.connect(target, tls_ca=pki.ca, retry=NO_RETRY))
    assert await _aio_submit(ChannelConfig(target=tls_server.target, tls_ca=pki.ca)) == grpc.StatusCode.OK


async def test_plain_text_client_is_unavailable(tls_server: Served) -> None:
    # Served's own channel is plain text.
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await tls_server.jobs.Submit(job_pb2.SubmitRequest(job_type="frames"), timeout=10)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_untrusted_server_certificate_is_unavailable(tls_server: Served, pki: Pki) -> None:
    # Trusting only the other CA, the client must refuse the server's certificate.
    config = ChannelConfig(target=tls_server.target, tls_ca=pki.other_ca)
    assert await _aio_submit(config) == grpc.StatusCode.UNAVAILABLE


async def test_mutual_tls_client_with_certificate_works(mtls_server: Served, pki: Pki) -> None:
    config = ChannelConfig(target=mtls_server.target, tls_ca=pki.ca, tls_cert=pki.client_cert, tls_key=pki.client_key)
    # JobClient.connect() has no client-certificate arguments; a ChannelConfig carries them.
    await asyncio.to_thread(_submit_and_get, JobClient(config, retry=NO_RETRY))
    assert await _aio_submit(config) == grpc.StatusCode.OK


async def test_mutual_tls_refuses_clients_without_a_trusted_certificate(mtls_server: Served, pki: Pki) -> None:
    target = mtls_server.target
    assert await _aio_submit(ChannelConfig(target=target, tls_ca=pki.ca)) == grpc.StatusCode.UNAVAILABLE
    stranger = ChannelConfig(target=target, tls_ca=pki.ca, tls_cert=pki.stranger_cert, tls_key=pki.stranger_key)
    assert await _aio_submit(stranger) == grpc.StatusCode.UNAVAILABLE
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await mtls_server.jobs.Submit(job_pb2.SubmitRequest(job_type="frames"), timeout=10)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
