"""Python values to and from the wire types the client API accepts and returns."""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from itertools import islice
from typing import Any, Protocol, TypeVar

import grpc
from google.protobuf import duration_pb2, timestamp_pb2
from google.protobuf.message import Message

from jobwire.client.errors import InvalidArgumentError
from jobwire.domain.states import TERMINAL
from jobwire.domain.view import status_named
from jobwire.v1 import admin_pb2, job_pb2

M = TypeVar("M", bound=Message)
T = TypeVar("T")

# bytes as they are; a mapping as a JSON object; None as no payload. Any other JSON (a list,
# a number) is the caller's to encode: json.dumps(value).encode().
Payload = bytes | bytearray | memoryview | Mapping[str, Any] | None
Seconds = float | timedelta

# The domain's terminal states, as the wire numbers them.
TERMINAL_STATUSES = frozenset(job_pb2.Job.Status.Value(status.value) for status in TERMINAL)


def message(cls: type[M], **fields: Any) -> M:
    """`cls(**fields)`; a value its wire type cannot hold is INVALID_ARGUMENT naming the field.

    protobuf says only "Value out of range: 999999999999", naming no field; the caller gets
    the error a server would give for it instead, and nothing is sent.
    """
    try:
        return cls(**fields)
    except (ValueError, TypeError) as error:
        for name, value in fields.items():
            try:
                cls(**{name: value})
            except (ValueError, TypeError):
                why = "is out of range" if isinstance(error, ValueError) else "has the wrong type"
                raise InvalidArgumentError(
                    grpc.StatusCode.INVALID_ARGUMENT, f"{name} {why}", violations=((name, why),)
                ) from None
        raise


def at_most(items: Iterable[T], limit: int | None) -> Iterator[T]:
    """The first `limit` of `items` (all with None); a negative limit is INVALID_ARGUMENT, before any call."""
    _check_limit(limit)
    return islice(items, limit)


def async_at_most(items: AsyncIterable[T], limit: int | None) -> AsyncIterator[T]:
    """`at_most` for an async iterable: the limit is checked here, before any call."""
    _check_limit(limit)
    return _first(items, limit)


async def _first(items: AsyncIterable[T], limit: int | None) -> AsyncIterator[T]:
    if limit == 0:
        return
    count = 0
    async for item in items:
        yield item
        count += 1
        if count == limit:
            return


def _check_limit(limit: int | None) -> None:
    if limit is not None and limit < 0:
        why = "must not be negative"
        raise InvalidArgumentError(grpc.StatusCode.INVALID_ARGUMENT, f"limit {why}", violations=(("limit", why),))


def encode_payload(payload: Payload) -> bytes:
    """bytes as given; a mapping as a compact UTF-8 JSON object; None as empty.

    Keys are sorted so the same mapping always gives the same bytes: a Submit replayed
    with the same idempotency key must carry an identical payload, or the server answers
    IDEMPOTENCY_KEY_REUSED.

    Raises:
        TypeError: any other type (a str, a list or tuple, a number, a set, an object), or
            a mapping that is not JSON (a set inside, a NaN, a cycle); it names `payload`
            and says what to pass instead.
    """
    if payload is None:
        return b""
    if isinstance(payload, bytes | bytearray | memoryview):
        return bytes(payload)
    if not isinstance(payload, Mapping):
        raise TypeError(_payload_type_hint(payload))
    try:
        text = json.dumps(dict(payload), separators=(",", ":"), sort_keys=True, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise TypeError(
            f"payload is not JSON-serialisable ({error}); pass bytes as they are, or a dict of JSON"
            " values (str, int, float, bool, None, and lists and dicts of them with str keys)"
        ) from None
    return text.encode("utf-8")


def _payload_type_hint(payload: object) -> str:
    what = type(payload).__name__
    head = f"payload must be bytes, a JSON-serialisable mapping (a dict), or None, not {what}"
    if isinstance(payload, str):
        return f"{head}; to send text, encode it: payload=text.encode()"
    if isinstance(payload, list | tuple):
        return f"{head}; pass a dict, or send this JSON as bytes: payload=json.dumps(value).encode()"
    return f"{head}; pass bytes as they are (json.dumps(value).encode() for any JSON), or a dict of JSON values"


def timestamp(value: datetime) -> timestamp_pb2.Timestamp:
    """A Timestamp; a naive datetime is read as UTC, as everything in jobwire is."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    ts = timestamp_pb2.Timestamp()
    ts.FromDatetime(value.astimezone(UTC))
    return ts


def from_timestamp(ts: timestamp_pb2.Timestamp) -> datetime | None:
    """An aware UTC datetime, or None for an unset (zero) Timestamp."""
    if ts.seconds == 0 and ts.nanos == 0:
        return None
    return ts.ToDatetime(tzinfo=UTC)


def duration(value: Seconds) -> duration_pb2.Duration:
    d = duration_pb2.Duration()
    d.FromTimedelta(value if isinstance(value, timedelta) else timedelta(seconds=value))
    return d


def status_value(name: str | int) -> job_pb2.Job.Status.ValueType:
    """A Job.Status from its number, its name or the label a person reads for it in any locale
    (QUEUED, Queued, 排队中), in any case; ValueError for a word that names no status."""
    if isinstance(name, int):
        return job_pb2.Job.Status.ValueType(name)
    status = status_named(name)
    if status is None:
        raise ValueError(f"unknown status {name!r}")
    return job_pb2.Job.Status.Value(status.value)


def statuses(names: Iterable[str | int]) -> list[job_pb2.Job.Status.ValueType]:
    return [status_value(n) for n in names]


def status_name(value: int) -> str:
    return job_pb2.Job.Status.Name(job_pb2.Job.Status.ValueType(value))


def on_lease_lost(name: str | int | None) -> job_pb2.RetryPolicy.OnLeaseLost.ValueType:
    if name is None:
        return job_pb2.RetryPolicy.ON_LEASE_LOST_UNSPECIFIED
    if isinstance(name, int):
        return job_pb2.RetryPolicy.OnLeaseLost.ValueType(name)
    return job_pb2.RetryPolicy.OnLeaseLost.Value(name.strip().upper())


def on_no_progress(name: str | int) -> job_pb2.Timeouts.OnNoProgress.ValueType:
    if isinstance(name, int):
        return job_pb2.Timeouts.OnNoProgress.ValueType(name)
    return job_pb2.Timeouts.OnNoProgress.Value(name.strip().upper())


def finding_kind(name: str | int) -> admin_pb2.Finding.Kind.ValueType:
    if isinstance(name, int):
        return admin_pb2.Finding.Kind.ValueType(name)
    return admin_pb2.Finding.Kind.Value(name.strip().upper())


def category_name(value: int) -> str:
    return job_pb2.JobError.Category.Name(job_pb2.JobError.Category.ValueType(value))


class HasStatus(Protocol):
    """A job as the wire or a view holds it: anything with a status number."""

    @property
    def status(self) -> int: ...


def is_terminal(job: HasStatus) -> bool:
    """READY, FAILED and CANCELLED end a job; nothing changes after them."""
    return job.status in TERMINAL_STATUSES
