"""The job value: deliverable results, cancellable / downloadable flags, error categories."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from jobwire.domain.errors import InvalidArgument
from jobwire.domain.job import (
    DEFAULT_RESULT_SCHEMES,
    MAX_USER_MESSAGE,
    Artifact,
    ErrorCategory,
    JobRecord,
    plain_message,
)
from jobwire.domain.progress import Progress
from jobwire.domain.stages import DEFAULT_PLAN, StageDef
from jobwire.domain.states import Status

SHA = "0123456789abcdef" * 4
T0 = datetime(2026, 10, 8, tzinfo=UTC)


def record(status: Status, stage: str | None = None, **kw: Any) -> JobRecord:
    fields: dict[str, Any] = {
        "job_no": "PT-20261008-001",
        "tenant": "acme",
        "job_type": "csv.import",
        "queue": "default",
        "owner": "",
        "labels": {},
        "status": status,
        "priority": 0,
        "stage": stage,
        "progress": Progress(stage_index=0, stage_count=4),
        "created_at": T0,
        "updated_at": T0,
    }
    fields.update(kw)
    return JobRecord(**fields)


# ---------------------------------------------------------------- Artifact.verified


def test_valid_artifact() -> None:
    a = Artifact(
        uri="s3://bucket/out.mp4",
        size_bytes=0,
        sha256=SHA,
        content_type="video/mp4",
        summary="ok",
    )
    assert a.verified() == a


def test_uppercase_sha_is_normalised() -> None:
    assert Artifact(uri="u", size_bytes=1, sha256=SHA.upper()).verified().sha256 == SHA


def test_uri_length_limits() -> None:
    assert Artifact(uri="u" * 2048, size_bytes=1, sha256=SHA).verified()


@pytest.mark.parametrize(
    "kw",
    [
        {"uri": ""},
        {"uri": "u" * 2049},
        {"sha256": ""},
        {"sha256": SHA[:-1]},
        {"sha256": SHA + "0"},
        {"sha256": "g" * 64},
        {"sha256": " " + SHA[1:]},
        {"sha256": SHA[:-1] + "\n"},
        {"sha256": SHA + "\n"},  # 64 hex digits *and* a newline is not 64 hex digits
        {"size_bytes": -1},
        {"content_type": "x" * 256},
        {"summary": "x" * 2001},
    ],
    ids=repr,
)
def test_undeliverable_refused(kw: dict[str, Any]) -> None:
    fields: dict[str, Any] = {"uri": "s3://b/k", "size_bytes": 10, "sha256": SHA} | kw
    with pytest.raises(InvalidArgument) as info:
        Artifact(**fields).verified()
    assert info.value.code == "INVALID_ARGUMENT"
    assert info.value.reason == "DELIVERABLE_INVALID"
    assert info.value.field == "result"


def test_content_type_and_summary_at_limits() -> None:
    assert Artifact(uri="u", size_bytes=1, sha256=SHA, content_type="x" * 255, summary="x" * 2000).verified()


# ---------------------------------------------------------------- cancellable / downloadable


@pytest.mark.parametrize(
    ("status", "stage", "cancellable"),
    [
        (Status.QUEUED, None, True),
        (Status.RUNNING, "PREPARING", True),
        (Status.RUNNING, "PROCESSING", True),
        (Status.RUNNING, "VERIFYING", True),
        (Status.RUNNING, "DELIVERING", False),
        (Status.CANCEL_REQUESTED, "PROCESSING", False),
        (Status.READY, None, False),
        (Status.FAILED, "PROCESSING", False),
        (Status.CANCELLED, None, False),
    ],
    ids=lambda v: getattr(v, "value", str(v)),
)
def test_cancellable(status: Status, stage: str | None, cancellable: bool) -> None:
    assert record(status, stage).cancellable is cancellable


def test_stage_def_lookup() -> None:
    assert record(Status.RUNNING, "VERIFYING").stage_def == DEFAULT_PLAN[2]
    assert record(Status.QUEUED).stage_def is None


def test_custom_plan_non_cancellable_stage() -> None:
    plan = (StageDef(code="A"), StageDef(code="B", cancellable=False))
    assert record(Status.RUNNING, "A", stages=plan).cancellable
    assert not record(Status.RUNNING, "B", stages=plan).cancellable


def test_downloadable_only_when_ready_with_result() -> None:
    art = Artifact(uri="u", size_bytes=1, sha256=SHA)
    assert record(Status.READY, result=art).downloadable
    assert not record(Status.READY).downloadable
    assert not record(Status.RUNNING, "PROCESSING", result=art).downloadable


def test_error_categories_match_contract() -> None:
    assert {c.value for c in ErrorCategory} == {
        "INPUT_INVALID",
        "DEPENDENCY_FAILED",
        "TIMEOUT",
        "WORKER_LOST",
        "RESULT_INVALID",
        "PROCESSING_ERROR",
        "REJECTED",
    }


def test_record_defaults() -> None:
    r = record(Status.QUEUED)
    assert r.stages == DEFAULT_PLAN
    assert r.stalled is False
    assert r.version == 1
    assert r.queue_position is None


# ---------------------------------------------------------------- plain_message
# "A user never sees a host name, a command line, a path on a worker or a stack trace".

GENERIC = "The job could not be completed."


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "\n\n",
        "Traceback (most recent call last):\n  File x",
        "  \n Traceback (most",
    ],
    ids=repr,
)
def test_plain_message_generic_for_empty_or_trace(text: str) -> None:
    assert plain_message(text) == GENERIC


def test_plain_message_keeps_a_plain_sentence() -> None:
    assert plain_message("The input is not a CSV file") == "The input is not a CSV file"


def test_plain_message_first_line_only() -> None:
    assert plain_message("Row 12 is malformed\nTraceback (most recent call last):") == ("Row 12 is malformed")
    assert plain_message("\n  first  \nsecond") == "first"


@pytest.mark.parametrize(
    ("text", "leak"),
    [
        ("Could not open /var/lib/worker/tmp/in.csv", "/var/lib"),
        ("Could not open C:\\Users\\bob\\in.csv", "bob"),
        ("connect to db01.prod.internal refused", "db01"),
        ("connect to build-7.example.com failed", "build-7"),
        ("connect 10.0.0.5:5432 refused", "10.0.0.5"),
        (
            "connect to [fe80::1]:5432 failed",
            "fe80::1",
        ),  # an IPv6 address is a host address
        # a single-label host with its port, a DSN with credentials
        ("cannot reach db01:5432", "db01"),
        ("cannot reach db01:5432", "5432"),
        ("connect postgres://admin:hunter2@db01/prod failed", "hunter2"),
        ("connect postgres://admin:hunter2@db01/prod failed", "admin"),
        ("fetch https://files.example/x?sig=abc failed", "sig=abc"),
        ("login admin:hunter2@db01 refused", "hunter2"),
        ("mail ops@corp failed", "ops@corp"),
        ("proxy localhost:8080 down", "localhost"),
    ],
    ids=repr,
)
def test_plain_message_hides_paths_hosts_addresses(text: str, leak: str) -> None:
    out = plain_message(text)
    assert leak not in out
    assert out  # still says something


def test_plain_message_is_capped() -> None:
    assert len(plain_message("x" * 5000)) == MAX_USER_MESSAGE
    assert MAX_USER_MESSAGE == 300


@pytest.mark.parametrize(
    "uri",
    [
        "javascript:alert(1)",
        "JavaScript:alert(1)",
        "data:text/html,<script>",
        "vbscript:x",
        "java\tscript:x",
        " https://x",
    ],
    ids=repr,
)
def test_result_uris_outside_the_allowed_schemes_are_refused(uri: str) -> None:
    """Security review, finding 12: artifact URIs accepted `javascript:`."""
    with pytest.raises(InvalidArgument) as raised:
        Artifact(uri=uri, size_bytes=1, sha256=SHA).verified(DEFAULT_RESULT_SCHEMES)
    assert raised.value.reason == "DELIVERABLE_INVALID"


@pytest.mark.parametrize("uri", ["https://files.example/r.csv", "S3://bucket/k", "file:///srv/r.csv", "results/r.csv"])
def test_result_uris_in_the_allowed_schemes_or_relative_pass(uri: str) -> None:
    assert Artifact(uri=uri, size_bytes=1, sha256=SHA).verified(DEFAULT_RESULT_SCHEMES).uri == uri


def test_a_configured_scheme_set_is_the_whole_set() -> None:
    assert Artifact(uri="minio://b/k", size_bytes=1, sha256=SHA).verified({"minio"})
    with pytest.raises(InvalidArgument):
        Artifact(uri="https://x/y", size_bytes=1, sha256=SHA).verified({"minio"})
