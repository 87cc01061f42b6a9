"""Channel helpers: which targets are loopback, and how a token travels on plain text."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from jobwire.client.channel import (
    ChannelConfig,
    _aio_details,
    _SyncBearer,
    bearer_metadata,
    is_loopback,
)
from jobwire.client.convert import encode_payload

pytestmark = pytest.mark.timeout(10)


@pytest.mark.parametrize(
    ("target", "loopback"),
    [
        ("127.0.0.1:50051", True),
        ("localhost:50051", True),
        ("[::1]:50051", True),
        ("unix:/run/jobwire.sock", True),
        ("10.1.2.3:50051", False),
        ("jobapi.internal:50051", False),
        ("dns:///jobapi:50051", False),
    ],
)
def test_loopback_targets(target: str, loopback: bool) -> None:
    assert is_loopback(target) is loopback


class Details:
    method = "/jobwire.v1.JobService/Get"
    timeout = 5.0
    metadata = (("x-request-id", "r1"),)
    credentials = None
    wait_for_ready = None
    compression = None


def test_sync_interceptor_adds_the_bearer_token_and_keeps_other_metadata() -> None:
    seen: list[Any] = []
    _SyncBearer("s3cret").intercept_unary_unary(lambda details, request: seen.append(details), Details(), object())
    assert list(seen[0].metadata) == [
        ("x-request-id", "r1"),
        ("authorization", "Bearer s3cret"),
    ]
    assert seen[0].method == Details.method and seen[0].timeout == 5.0


def test_aio_details_carry_the_bearer_token() -> None:
    details = grpc.aio.ClientCallDetails("/jobwire.v1.WorkerService/Claim", None, None, None, None)
    assert ("authorization", "Bearer t") in list(_aio_details(details, "t").metadata)


def test_bearer_metadata_and_tls_switch() -> None:
    assert bearer_metadata("t") == (("authorization", "Bearer t"),)
    assert not ChannelConfig(target="h:1", token="t").uses_tls
    assert ChannelConfig(target="h:1", tls=True).uses_tls


def test_mapping_payloads_are_canonical_json() -> None:
    # Same mapping, same bytes: an idempotent replay must carry an identical payload.
    assert encode_payload({"b": 1, "a": "é"}) == '{"a":"é","b":1}'.encode()
    assert encode_payload(b"\x00raw") == b"\x00raw"
    assert encode_payload(None) == b""
