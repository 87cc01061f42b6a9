"""JobService.GetPayload: a job's payload read back whole or cut to its first bytes, with its
whole size; another tenant's job, or one in a queue the token may not use, is NOT_FOUND."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc
import pytest
from auth_files import Token, write_auth_file
from served import Served
from service_support import rpc_error

from jobwire.v1 import job_pb2

pytestmark = pytest.mark.timeout(60)
CLIENT = Token("acme-client", tenant="acme")
MAIL_ONLY = Token("acme-mail", tenant="acme", queues=("mail",))
OTHER = Token("globex-client", tenant="globex")
PAYLOAD = bytes(range(256)) * 4096  # 1 MiB, every byte value


@pytest.fixture
async def served(serve: Callable[..., Awaitable[Served]], tmp_path: Path) -> Served:
    return await serve(auth_file=write_auth_file(tmp_path / "auth.toml", [CLIENT, MAIL_ONLY, OTHER]))


async def _payload(s: Served, job_no: str, token: Token = CLIENT, max_bytes: int = 0) -> job_pb2.GetPayloadResponse:
    request = job_pb2.GetPayloadRequest(job_no=job_no, max_bytes=max_bytes)
    return await s.jobs.GetPayload(request, metadata=token.metadata)


async def test_the_payload_comes_back_whole_or_cut_with_its_size(served: Served) -> None:
    submitted = job_pb2.SubmitRequest(job_type="frames", queue="exports", payload=PAYLOAD)
    job_no = (await served.jobs.Submit(submitted, metadata=CLIENT.metadata)).job.job_no
    whole = await _payload(served, job_no)
    assert whole.data == PAYLOAD and whole.size_bytes == len(PAYLOAD)
    head = await _payload(served, job_no, max_bytes=1000)
    assert head.data == PAYLOAD[:1000] and head.size_bytes == len(PAYLOAD)
    empty = job_pb2.SubmitRequest(job_type="frames", queue="exports")
    none = (await served.jobs.Submit(empty, metadata=CLIENT.metadata)).job.job_no
    reply = await _payload(served, none, max_bytes=10)
    assert (reply.data, reply.size_bytes) == (b"", 0)


async def test_a_job_the_token_does_not_see_is_not_found(served: Served) -> None:
    submitted = job_pb2.SubmitRequest(job_type="frames", queue="exports", payload=b"{}")
    job_no = (await served.jobs.Submit(submitted, metadata=CLIENT.metadata)).job.job_no
    for token in (OTHER, MAIL_ONLY):
        code, _ = await rpc_error(_payload(served, job_no, token))
        assert code == grpc.StatusCode.NOT_FOUND, token
