"""Hypothesis strategies for any request message a jobwire server answers, built from its descriptor.

Every field may be left unset or given: text of any kind (control characters, long, the
shapes the server parses: job numbers, `<epoch>.<secret>` tokens, base64 page tokens
holding nested JSON), bytes up to past the payload limit, integers at their type's
extremes, enum numbers nobody defined, floats with NaN and infinities, Durations and
Timestamps at and past their type's limits (what protobuf decodes without a complaint:
seconds anywhere in int64, nanos anywhere in int32), repeated fields and maps up to far
past their caps (100,000 items), and nested messages. `known` strings (live job numbers
and lease tokens) are mixed in so that examples also get past the first checks.

Random messages rarely get past the first field a servicer checks, so `mutated` starts
from a valid request (a seed, tests/fuzz/seeds.py) and gives one field anywhere in it,
nested ones included, any value of its type: the extremes then reach the deeper checks.
`at_limits` is the same without chance: the seed with each number in it, one at a time,
at each limit of its type.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

from google.longrunning import operations_pb2
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from grpc_health.v1 import health_pb2
from hypothesis import strategies as st

from jobwire.v1 import admin_pb2, job_pb2, schedule_pb2, worker_pb2

F = FieldDescriptor
INT_RANGES = {
    F.TYPE_INT32: (-(2**31), 2**31 - 1), F.TYPE_SINT32: (-(2**31), 2**31 - 1), F.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    F.TYPE_INT64: (-(2**63), 2**63 - 1), F.TYPE_SINT64: (-(2**63), 2**63 - 1), F.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    F.TYPE_UINT32: (0, 2**32 - 1), F.TYPE_FIXED32: (0, 2**32 - 1),
    F.TYPE_UINT64: (0, 2**64 - 1), F.TYPE_FIXED64: (0, 2**64 - 1),
}  # fmt: skip
# every service a server answers; tests/fuzz/test_fuzz_requests.py checks this against its reflection
MODULES = (job_pb2, worker_pb2, admin_pb2, schedule_pb2, operations_pb2, health_pb2)
INT64_MIN, INT64_MAX, INT32_MIN, INT32_MAX = -(2**63), 2**63 - 1, -(2**31), 2**31 - 1
MAX_DURATION_S = 315_576_000_000  # google.protobuf.Duration's documented range: +-10,000 years
MIN_TIMESTAMP_S, MAX_TIMESTAMP_S = -62_135_596_800, 253_402_300_799  # 0001-01-01 .. 9999-12-31T23:59:59
NANOS = [0, 1, 999_999_999, 1_000_000_000, -1, -999_999_999, INT32_MIN, INT32_MAX]
DURATION_SECONDS = [
    0, 1, -1, 59, 61, 3601, 86_400 * 366 + 1, 2**31, 10**12, 10**14, MAX_DURATION_S, MAX_DURATION_S + 1,
    -MAX_DURATION_S, -MAX_DURATION_S - 1, INT64_MAX, INT64_MIN,
]  # fmt: skip
TIMESTAMP_SECONDS = [
    0, -1, MIN_TIMESTAMP_S, MIN_TIMESTAMP_S - 1, MAX_TIMESTAMP_S, MAX_TIMESTAMP_S + 1, 4_102_444_800,
    10**14, -(10**14), INT64_MAX, INT64_MIN,
]  # fmt: skip
MANY = [101, 1001, 10_000, 100_000]  # repeated fields and maps: past every cap, up to what fits 4 MiB


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


SHAPES = [
    "", " ", "\x00", "\x1b[2J", "a\u202eb", "\ud7ff", "PT-20261130-001", "PT-99999999-999999999999", "pt-1-1",
    "1.forged", "0.x", "-1.x", "99999999999999999999.x", "1.", ".x", "１.x", "default", "*", "a" * 64, "a" * 65,
    "../../etc/passwd", "javascript:alert(1)", "https://x/y", "file:///etc/passwd", "zh-CN", "en", "x" * 5000,
    _b64(b'{"after": 1}'), _b64(b'{"after": -1}'), _b64(b"[" * 5000), _b64(b'{"after_worker": "w"}'),
    "PREPARING", "PROCESSING", "VERIFYING", "DELIVERING", "UPLOADING",
    "题" * 200, "t" * 201, "title\u0085",  # a title at its limit, past it, with a C1 control
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
        if field.message_type.full_name in WELL_KNOWN:
            return WELL_KNOWN[field.message_type.full_name]
        return message_dict(field.message_type, known, depth + 1)
    raise AssertionError(f"no strategy for {field.full_name}")


def _time(seconds: list[int]) -> st.SearchStrategy[dict[str, int]]:
    """A Duration's or Timestamp's fields: each at its type's limits and past them, or anywhere in its int."""
    return st.fixed_dictionaries({
        "seconds": st.one_of(st.sampled_from(seconds), st.integers(INT64_MIN, INT64_MAX)),
        "nanos": st.one_of(st.sampled_from(NANOS), st.integers(INT32_MIN, INT32_MAX)),
    })  # fmt: skip


WELL_KNOWN = {
    "google.protobuf.Duration": _time(DURATION_SECONDS),
    "google.protobuf.Timestamp": _time(TIMESTAMP_SECONDS),
}


def _many(n: int, key: FieldDescriptor) -> list[Any]:
    """n distinct map keys of `key`'s type."""
    if key.type == F.TYPE_STRING:
        return [f"k{i}" for i in range(n)]
    if key.type == F.TYPE_BOOL:
        return [False, True][:n]
    return list(range(n))


def _field(field: FieldDescriptor, known: Sequence[str], depth: int) -> st.SearchStrategy[Any]:
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        key_field, value_field = field.message_type.fields_by_name["key"], field.message_type.fields_by_name["value"]
        keys, values = _scalar(key_field, known, depth), _scalar(value_field, known, depth)
        huge = st.tuples(st.sampled_from(MANY), values).map(lambda nv: dict.fromkeys(_many(nv[0], key_field), nv[1]))
        return st.one_of(
            st.dictionaries(keys, values, max_size=4), st.dictionaries(keys, values, min_size=33, max_size=40), huge
        )
    if field.is_repeated:
        few = st.lists(_scalar(field, known, depth), max_size=4)
        # far past every per-call cap (job_types, leases, reports, queues, statuses)
        filler: Any = {} if field.type == F.TYPE_MESSAGE else "x" if field.type == F.TYPE_STRING else 1
        many = st.one_of(st.integers(100, 1200), st.sampled_from(MANY)).map(lambda n: [filler] * n)
        return st.one_of(few, few, many)
    return _scalar(field, known, depth)


def message_dict(descriptor: Descriptor, known: Sequence[str], depth: int = 0) -> st.SearchStrategy[dict[str, Any]]:
    """Field values for `descriptor`, each possibly absent; nesting stops at depth 3."""
    if depth > 3:
        return st.just({})
    fields = {f.name: st.one_of(st.none(), _field(f, known, depth)) for f in descriptor.fields}
    return st.fixed_dictionaries(fields).map(lambda d: {k: v for k, v in d.items() if v is not None})


Path = tuple[FieldDescriptor, ...]


def paths(descriptor: Descriptor, depth: int = 0) -> list[Path]:
    """Every field of `descriptor` and of its nested messages (a repeated one: its first item),
    down to depth 3; a Duration or Timestamp is one field, not two."""
    found: list[Path] = []
    for field in descriptor.fields:
        found.append((field,))
        nested = field.message_type
        if nested is None or nested.full_name in WELL_KNOWN or nested.GetOptions().map_entry or depth >= 3:
            continue
        found += [(field, *rest) for rest in paths(nested, depth + 1)]
    return found


def mutated(descriptor: Descriptor, seed: dict[str, Any], known: Sequence[str]) -> st.SearchStrategy[dict[str, Any]]:
    """`seed` (field values as message_dict draws them) with one field, anywhere in it, drawn anew."""
    every = paths(descriptor)
    if not every:  # a request without fields (grpc.health.v1's List)
        return st.just(seed)

    @st.composite
    def one(draw: st.DrawFn) -> dict[str, Any]:
        path = draw(st.sampled_from(every))
        return _with(seed, path, draw(_field(path[-1], known, len(path))))

    return one()


def _limits(field: FieldDescriptor) -> list[Any]:
    """The values at (and past) the limits of a number's, a Duration's or a Timestamp's type."""
    kind = field.message_type.full_name if field.message_type is not None else field.type
    return {
        "google.protobuf.Duration": [
            {"seconds": MAX_DURATION_S, "nanos": 999_999_999},
            {"seconds": -MAX_DURATION_S, "nanos": -999_999_999},
            {"seconds": INT64_MAX},
            {"seconds": INT64_MIN},
            {"nanos": INT32_MAX},
        ],
        "google.protobuf.Timestamp": [
            {"seconds": MIN_TIMESTAMP_S},
            {"seconds": MAX_TIMESTAMP_S, "nanos": 999_999_999},
            {"seconds": MAX_TIMESTAMP_S + 1},
            {"seconds": INT64_MAX},
            {"seconds": INT64_MIN},
        ],
        F.TYPE_ENUM: [INT32_MIN, INT32_MAX],
        F.TYPE_DOUBLE: [float("inf"), float("-inf"), float("nan"), 1.7976931348623157e308, -1.0],
        F.TYPE_FLOAT: [float("inf"), float("nan"), -1.0],
    }.get(kind, list(INT_RANGES.get(kind, ())))  # type: ignore[call-overload]


def at_limits(descriptor: Descriptor, seed: dict[str, Any]) -> list[dict[str, Any]]:
    """`seed` with one number (a Duration, a Timestamp), anywhere in it, at a limit of its type: each in turn."""
    return [
        _with(seed, path, [value] if path[-1].is_repeated else value)
        for path in paths(descriptor)
        if not (path[-1].message_type is not None and path[-1].message_type.GetOptions().map_entry)
        for value in _limits(path[-1])
    ]


def _with(values: dict[str, Any], path: Path, value: Any) -> dict[str, Any]:
    """A copy of `values` with the field at `path` set to `value` (last, so it wins its oneof)."""
    out = {k: v for k, v in values.items() if k != path[0].name}
    if len(path) == 1:
        out[path[0].name] = value
        return out
    inner = values.get(path[0].name)
    if path[0].is_repeated:
        items = list(inner or [{}])
        items[0] = _with(items[0], path[1:], value)
        out[path[0].name] = items
    else:
        out[path[0].name] = _with(inner or {}, path[1:], value)
    return out


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
