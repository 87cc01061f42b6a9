"""Hypothesis strategies for any jobwire request message, built from its descriptor.

Every field may be left unset or given: text of any kind (control characters, long, the
shapes the server parses: job numbers, `<epoch>.<secret>` tokens, base64 page tokens
holding nested JSON), bytes up to past the payload limit, integers at their type's
extremes, enum numbers nobody defined, floats with NaN and infinities, repeated fields
and maps up to far past their caps, and nested messages. `known` strings (live job
numbers and lease tokens) are mixed in so that examples also get past the first checks.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from hypothesis import strategies as st

from jobwire.v1 import admin_pb2, job_pb2, schedule_pb2, worker_pb2

F = FieldDescriptor
INT_RANGES = {
    F.TYPE_INT32: (-(2**31), 2**31 - 1), F.TYPE_SINT32: (-(2**31), 2**31 - 1), F.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    F.TYPE_INT64: (-(2**63), 2**63 - 1), F.TYPE_SINT64: (-(2**63), 2**63 - 1), F.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    F.TYPE_UINT32: (0, 2**32 - 1), F.TYPE_FIXED32: (0, 2**32 - 1),
    F.TYPE_UINT64: (0, 2**64 - 1), F.TYPE_FIXED64: (0, 2**64 - 1),
}  # fmt: skip
MODULES = (job_pb2, worker_pb2, admin_pb2, schedule_pb2)  # every service's requests


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


SHAPES = [
    "", " ", "\x00", "\x1b[2J", "a\u202eb", "\ud7ff", "PT-20261130-001", "PT-99999999-999999999999", "pt-1-1",
    "1.forged", "0.x", "-1.x", "99999999999999999999.x", "1.", ".x", "１.x", "default", "*", "a" * 64, "a" * 65,
    "../../etc/passwd", "javascript:alert(1)", "https://x/y", "file:///etc/passwd", "zh-CN", "en", "x" * 5000,
    _b64(b'{"after": 1}'), _b64(b'{"after": -1}'), _b64(b"[" * 5000), _b64(b'{"after_worker": "w"}'),
    "PREPARING", "PROCESSING", "VERIFYING", "DELIVERING", "UPLOADING",
]  # fmt: skip


def text(known: Sequence[str]) -> st.SearchStrategy[str]:
    options = [st.text(max_size=30), st.text(max_size=400), st.sampled_from(SHAPES)]
    if known:
        options.append(st.sampled_from(list(known)))
    return st.one_of(*options)


def _scalar(field: FieldDescriptor, known: Sequence[str], depth: int) -> st.SearchStrategy[Any]:
    kind = field.type
    if kind == F.TYPE_STRING:
        return text(known)
    if kind == F.TYPE_BYTES:
        return st.one_of(st.binary(max_size=64), st.binary(min_size=1000, max_size=5000),
                         st.sampled_from([b"{}", b"\xff\xfe", b"x" * ((1 << 20) + 1)]))  # fmt: skip
    if kind in INT_RANGES:
        low, high = INT_RANGES[kind]
        return st.one_of(st.integers(low, high), st.sampled_from([low, high, 0, 1, -1 if low < 0 else 2]))
    if kind == F.TYPE_BOOL:
        return st.booleans()
    if kind == F.TYPE_ENUM:
        return st.integers(-3, 40)  # proto3 enums are open: unknown numbers arrive as they are
    if kind in (F.TYPE_DOUBLE, F.TYPE_FLOAT):
        return st.floats(allow_nan=True, allow_infinity=True, width=64 if kind == F.TYPE_DOUBLE else 32)
    if kind == F.TYPE_MESSAGE:
        return message_dict(field.message_type, known, depth + 1)
    raise AssertionError(f"no strategy for {field.full_name}")


def _field(field: FieldDescriptor, known: Sequence[str], depth: int) -> st.SearchStrategy[Any]:
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        key_field, value_field = field.message_type.fields_by_name["key"], field.message_type.fields_by_name["value"]
        keys, values = _scalar(key_field, known, depth), _scalar(value_field, known, depth)
        return st.one_of(
            st.dictionaries(keys, values, max_size=4), st.dictionaries(keys, values, min_size=33, max_size=40)
        )
    if field.is_repeated:
        few = st.lists(_scalar(field, known, depth), max_size=4)
        # far past every per-call cap (job_types, leases, reports, queues, statuses)
        filler: Any = {} if field.type == F.TYPE_MESSAGE else "x" if field.type == F.TYPE_STRING else 1
        many = st.integers(100, 1200).map(lambda n: [filler] * n)
        return st.one_of(few, few, many)
    return _scalar(field, known, depth)


def message_dict(descriptor: Descriptor, known: Sequence[str], depth: int = 0) -> st.SearchStrategy[dict[str, Any]]:
    """Field values for `descriptor`, each possibly absent; nesting stops at depth 3."""
    if depth > 3:
        return st.just({})
    fields = {f.name: st.one_of(st.none(), _field(f, known, depth)) for f in descriptor.fields}
    return st.fixed_dictionaries(fields).map(lambda d: {k: v for k, v in d.items() if v is not None})


def build(cls: type[Message], values: dict[str, Any]) -> Message:
    """A message of `cls` with `values`; ValueError or TypeError when protobuf itself refuses one."""
    message = cls()
    _fill(message, values)
    return message


def _fill(message: Message, values: dict[str, Any]) -> None:
    for name, value in values.items():
        field = message.DESCRIPTOR.fields_by_name[name]
        target = getattr(message, name)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            for key, item in value.items():
                if value_field.message_type is not None:
                    _fill(target[key], item)
                else:
                    target[key] = item
        elif field.is_repeated:
            for item in value:
                if field.message_type is not None:
                    _fill(target.add(), item)
                else:
                    target.append(item)
        elif field.message_type is not None:
            target.SetInParent()
            _fill(target, value)
        else:
            setattr(message, name, value)


def request_class(method: Any) -> type[Message]:
    for module in MODULES:
        found = getattr(module, method.input_type.name, None)
        if found is not None and found.DESCRIPTOR.full_name == method.input_type.full_name:
            return found  # type: ignore[no-any-return]
    raise AssertionError(method.input_type.full_name)
