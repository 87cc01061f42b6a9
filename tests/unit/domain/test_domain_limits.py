"""Input limits and name rules."""

from __future__ import annotations

import math

import pytest

from jobwire.domain import limits
from jobwire.domain.errors import InvalidArgument

# ---------------------------------------------------------------- names: [A-Za-z0-9][A-Za-z0-9_.:-]{0,63}

GOOD_NAMES = [
    "a",
    "Z",
    "0",
    "default",
    "video.transcode",
    "csv:import-v2",
    "a_b.c:d-e",
    "A" * 64,
    "9" + "_" * 63,
]
BAD_NAMES = [
    "",
    "_a",
    "-a",
    ".a",
    ":a",
    "A" * 65,
    "a b",
    "a/b",
    "a\\b",
    "a@b",
    "é",
    "aé",
    "名字",
    "a\t",
    "a\n",  # trailing newline
    "\na",
    "a\x00",
]


@pytest.mark.parametrize("value", GOOD_NAMES, ids=repr)
def test_good_names(value: str) -> None:
    assert limits.name("job_type", value) == value


@pytest.mark.parametrize("value", BAD_NAMES, ids=repr)
def test_bad_names(value: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        limits.name("job_type", value)
    assert info.value.field == "job_type"
    assert info.value.code == "INVALID_ARGUMENT"


def test_empty_queue_means_default() -> None:
    assert limits.DEFAULT_QUEUE == "default"
    assert limits.queue("queue", "") == "default"
    assert limits.queue("queue", "fast") == "fast"


@pytest.mark.parametrize("value", ["-bad", "a" * 65, "a b", "q\n"], ids=repr)
def test_bad_queue_names_field(value: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        limits.queue("queues[1]", value)
    assert info.value.field == "queues[1]"


# ---------------------------------------------------------------- job numbers

GOOD_JOB_NOS = [
    "PT-20261008-001",
    "PT-20261008-999",
    "PT-20261008-1000",
    "PT-20261008-123456789012",
    "A-20261008-001",
    "X1-20261008-001",
    "ABCDEFGHIJKLMNOP-20261008-001",  # 16-character prefix
]
BAD_JOB_NOS = [
    "",
    "pt-20261008-001",
    "Pt-20261008-001",
    "1T-20261008-001",
    "ABCDEFGHIJKLMNOPQ-20261008-001",  # 17-character prefix
    "PT-2026108-001",
    "PT-202610080-001",
    "PT-20261008-01",
    "PT-20261008-1234567890123",
    "PT_20261008_001",
    "PT-20261008-",
    "PT20261008001",
    " PT-20261008-001",
    "PT-20261008-001 ",
    "PT-20261008-001\n",  # trailing newline
    "PT-２０２６１００８-001",  # fullwidth digits are not a day
    "PT-٢٠٢٦١٠٠٨-٠٠١",  # Arabic-Indic digits
    "PT-20261008-00a",
]


@pytest.mark.parametrize("value", GOOD_JOB_NOS)
def test_good_job_nos(value: str) -> None:
    assert limits.job_no(value) == value


@pytest.mark.parametrize("value", BAD_JOB_NOS, ids=repr)
def test_bad_job_nos(value: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        limits.job_no(value)
    assert info.value.field == "job_no"


# ---------------------------------------------------------------- short text (idempotency_key, owner)


def test_short_text_limit_is_128() -> None:
    assert limits.MAX_KEY_CHARS == 128
    assert limits.short_text("owner", "x" * 128) == "x" * 128
    assert limits.short_text("owner", "") == ""
    assert limits.short_text("owner", "名" * 128) == "名" * 128  # characters, not bytes
    with pytest.raises(InvalidArgument) as info:
        limits.short_text("idempotency_key", "x" * 129)
    assert info.value.field == "idempotency_key"


@pytest.mark.parametrize("value", ["a\x00b", "a\nb", "\t", "x\x1f"], ids=repr)
def test_short_text_refuses_control_characters(value: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        limits.short_text("owner", value)
    assert info.value.field == "owner"


def test_short_text_custom_limit() -> None:
    assert limits.short_text("note", "x" * 5, 5)
    with pytest.raises(InvalidArgument):
        limits.short_text("note", "x" * 6, 5)


# ---------------------------------------------------------------- labels


def test_labels_at_most_32() -> None:
    assert limits.MAX_LABELS == 32
    ok = {f"k{i}": "v" for i in range(32)}
    assert limits.labels(ok) == ok
    with pytest.raises(InvalidArgument) as info:
        limits.labels({f"k{i}": "v" for i in range(33)})
    assert info.value.field == "labels"


def test_labels_empty_ok_and_copied() -> None:
    src = {"a": "b"}
    out = limits.labels(src)
    assert out == src and out is not src
    assert limits.labels({}) == {}


@pytest.mark.parametrize(
    "value",
    [{"": "v"}, {"k" * 64: "v"}, {"k": "v" * 257}, {"k": "a\nb"}],
    ids=["empty-key", "long-key", "long-value", "control-char-value"],
)
def test_bad_labels(value: dict[str, str]) -> None:
    with pytest.raises(InvalidArgument) as info:
        limits.labels(value)
    assert info.value.field == "labels"


def test_label_boundaries() -> None:
    assert limits.labels({"k" * 63: "v" * 256})
    assert limits.labels({"k": ""})


# ---------------------------------------------------------------- blobs


@pytest.mark.parametrize(
    ("field", "limit"),
    [
        ("payload", limits.MAX_PAYLOAD_BYTES),
        ("checkpoint", limits.MAX_CHECKPOINT_BYTES),
    ],
)
def test_blob_limits(field: str, limit: int) -> None:
    assert limits.blob(field, b"", limit) == b""
    assert len(limits.blob(field, b"x" * limit, limit)) == limit
    with pytest.raises(InvalidArgument) as info:
        limits.blob(field, b"x" * (limit + 1), limit)
    assert info.value.field == field


def test_blob_constants() -> None:
    assert limits.MAX_PAYLOAD_BYTES == 1024 * 1024
    assert limits.MAX_CHECKPOINT_BYTES == 64 * 1024


# ---------------------------------------------------------------- lease bounds


@pytest.mark.parametrize("seconds", [1.0, 1, 30.0, 3599.999, 3600.0, 3600])
def test_lease_in_bounds(seconds: float) -> None:
    assert limits.lease_seconds(seconds) == seconds


@pytest.mark.parametrize("seconds", [0.0, 0.999, -1.0, 3600.001, 86400.0, math.nan, math.inf, -math.inf])
def test_lease_out_of_bounds(seconds: float) -> None:
    with pytest.raises(InvalidArgument) as info:
        limits.lease_seconds(seconds)
    assert info.value.field == "lease_duration"


# ---------------------------------------------------------------- page size


@pytest.mark.parametrize(("given", "got"), [(0, 50), (1, 1), (500, 500), (501, 500), (10**9, 500)])
def test_page_size(given: int, got: int) -> None:
    assert limits.page_size(given) == got


def test_page_size_default_and_negative() -> None:
    assert limits.page_size(0, default=20) == 20
    with pytest.raises(InvalidArgument) as info:
        limits.page_size(-1)
    assert info.value.field == "page_size"


@pytest.mark.parametrize("value", [" k", "k ", "k\t", "\u00a0k"])
def test_keys_refuse_surrounding_white_space(value: str) -> None:
    # MySQL's PAD SPACE collation would make "k " equal "k"; SQLite would not.
    with pytest.raises(InvalidArgument):
        limits.key("idempotency_key", value)


@pytest.mark.parametrize("char", ["\x7f", "\x85", "\x9f"])
def test_short_text_refuses_c1_control_characters(char: str) -> None:
    with pytest.raises(InvalidArgument):
        limits.short_text("owner", f"a{char}b")
