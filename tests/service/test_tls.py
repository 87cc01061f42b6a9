"""TLS and mutual TLS (JOBWIRE_TLS_CERT / _KEY / _CLIENT_CA) with certificates made at test time.

A CA signs the server's certificate (SAN 127.0.0.1 and localhost) and a client's; a
second CA signs a client certificate the server must not accept. The certificates come
from the `cryptography` package (installed with jobwire's db extra), not from an
`openssl` binary the machine may lack: these tests never skip.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from served import Served, start_server
from service_support import stop_server

from jobwire.client import JobClient
from jobwire.client.channel import ChannelConfig, aio_channel
from jobwire.client.retry import RetrySettings
from jobwire.v1 import job_pb2, job_pb2_grpc

NO_RETRY = RetrySettings(unary_attempts=1)


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


@dataclass(frozen=True)
class _Issuer:
    name: x509.Name
    key: ec.EllipticCurvePrivateKey


def _write(folder: Path, name: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> tuple[Path, Path]:
    cert_path, key_path = folder / f"{name}.crt", folder / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


def _certificate(
    name: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: _Issuer | None,
    extensions: list[tuple[x509.ExtensionType, bool]],
) -> x509.Certificate:
    """Signed by `issuer`, or by its own key when None (a CA). EC P-256: quick to make."""
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer.name if issuer else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
    )
    for extension, critical in extensions:
        builder = builder.add_extension(extension, critical=critical)
    return builder.sign(issuer.key if issuer else key, hashes.SHA256())


def _make_ca(folder: Path, name: str) -> tuple[Path, _Issuer]:
    key = ec.generate_private_key(ec.SECP256R1())
    usage = x509.KeyUsage(
        digital_signature=False, content_commitment=False, key_encipherment=False, data_encipherment=False,
        key_agreement=False, key_cert_sign=True, crl_sign=True, encipher_only=False, decipher_only=False,
    )  # fmt: skip
    cert = _certificate(name, key, None, [(x509.BasicConstraints(ca=True, path_length=None), True), (usage, True)])
    cert_path, _ = _write(folder, name, cert, key)
    return cert_path, _Issuer(cert.subject, key)


def _issue(
    folder: Path, ca: _Issuer, name: str, usage: x509.ObjectIdentifier, *, names: list[x509.GeneralName] | None = None
) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    extensions: list[tuple[x509.ExtensionType, bool]] = [
        (x509.BasicConstraints(ca=False, path_length=None), False),
        (x509.ExtendedKeyUsage([usage]), False),
    ]
    if names:
        extensions.append((x509.SubjectAlternativeName(names), False))
    return _write(folder, name, _certificate(name, key, ca, extensions), key)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    folder = tmp_path_factory.mktemp("pki")
    ca_cert, ca = _make_ca(folder, "jobwire-test-ca")
    server_names: list[x509.GeneralName] = [
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.DNSName("localhost"),
    ]
    server = _issue(folder, ca, "server", ExtendedKeyUsageOID.SERVER_AUTH, names=server_names)
    client = _issue(folder, ca, "client", ExtendedKeyUsageOID.CLIENT_AUTH)
    other_cert, other_ca = _make_ca(folder, "other-ca")
    stranger = _issue(folder, other_ca, "stranger", ExtendedKeyUsageOID.CLIENT_AUTH)
    return Pki(ca_cert, *server, *client, other_cert, *stranger)


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
