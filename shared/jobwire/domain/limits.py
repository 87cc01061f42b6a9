"""Input limits and name rules shared by every entry point."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from jobwire.domain.errors import InvalidArgument

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}")
JOB_NO = re.compile(r"[A-Z][A-Z0-9]{0,15}-[0-9]{8}-[0-9]{3,12}")
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")  # C0, DEL and C1: one scan in C, not a loop per character
MAX_KEY_CHARS = 128
MAX_LABELS = 32
MAX_LABEL_KEY_CHARS = 63
MAX_LABEL_VALUE_CHARS = 256
MAX_PAYLOAD_BYTES = 1 << 20
MAX_CHECKPOINT_BYTES = 64 << 10
MAX_MESSAGE_CHARS = 1000
MAX_DETAIL_CHARS = 16_000
MAX_TITLE_CHARS = 200  # SubmitRequest.title: what a person reads as the job's name
MIN_LEASE_S = 1.0
MAX_LEASE_S = 3600.0
MAX_TIMEOUT_S = 30 * 86_400.0  # an attempt, a job, or a stage without progress (jobwire.domain.timeouts)
MAX_PAGE_SIZE = 500
MAX_JOBS_PER_CLAIM = 100  # a Claim's max_jobs, and what a standing claim may owe at once
# Rows one ListJobs call looks at where no index serves every filter (JOBWIRE_LIST_SCAN_ROWS,
# jobwire.db.job_pages): ~1 ms on SQLite, ~5 ms on MariaDB, for a label no job has.
LIST_SCAN_ROWS = 1000
MAX_DEPENDENCIES = 100  # jobs one job may depend on (SubmitRequest.depends_on)
MAX_BATCH_JOBS = 1000  # jobs one SubmitBatch makes, in one transaction
BATCH_ID = re.compile(r"B-[0-9a-f]{20}")
# What one gRPC message may carry, either way (jobwire.rpc.server, jobwire.client.channel):
# every reply is built to fit it (a Claim leases no more jobs than its reply can carry).
MAX_GRPC_MESSAGE_BYTES = 4 << 20
DEFAULT_QUEUE = "default"


def name(field: str, value: str) -> str:
    if not NAME.fullmatch(value):
        raise InvalidArgument(field, "must match [A-Za-z0-9][A-Za-z0-9_.:-]{0,63}")
    return value


def queue(field: str, value: str) -> str:
    return name(field, value or DEFAULT_QUEUE)


def short_text(field: str, value: str, limit: int = MAX_KEY_CHARS) -> str:
    if len(value) > limit:
        raise InvalidArgument(field, f"at most {limit} characters")
    if CONTROL.search(value):
        raise InvalidArgument(field, "must not contain control characters")
    return value


def key(field: str, value: str) -> str:
    """An identifier a caller chose (idempotency key, owner): compared exactly everywhere.

    MySQL's PAD SPACE collations treat "k " and "k" as equal while SQLite does not, so
    leading or trailing white space is refused rather than meaning different things.
    """
    if value != value.strip():
        raise InvalidArgument(field, "must not start or end with white space")
    return short_text(field, value)


def job_no(value: str, field: str = "job_no") -> str:
    if not JOB_NO.fullmatch(value):
        raise InvalidArgument(field, "is not a job number like PT-20261008-001")
    return value


def batch_id(value: str, field: str = "batch_id") -> str:
    if not BATCH_ID.fullmatch(value):
        raise InvalidArgument(field, "is not a batch id like B-0123456789abcdef0123")
    return value


def depends_on(values: Sequence[str]) -> tuple[str, ...]:
    """Job numbers a job waits for, each once in the order first given."""
    if len(values) > MAX_DEPENDENCIES:
        raise InvalidArgument("depends_on", f"at most {MAX_DEPENDENCIES} jobs")
    return tuple(dict.fromkeys(job_no(v, "depends_on") for v in values))


def labels(value: Mapping[str, str]) -> dict[str, str]:
    if len(value) > MAX_LABELS:
        raise InvalidArgument("labels", f"at most {MAX_LABELS} labels")
    for key, text in value.items():
        if not key or len(key) > MAX_LABEL_KEY_CHARS:
            raise InvalidArgument("labels", f"keys are 1 to {MAX_LABEL_KEY_CHARS} characters")
        short_text("labels", key, MAX_LABEL_KEY_CHARS)
        short_text("labels", text, MAX_LABEL_VALUE_CHARS)
    return dict(value)


def blob(field: str, value: bytes, limit: int) -> bytes:
    if len(value) > limit:
        raise InvalidArgument(field, f"at most {limit} bytes")
    return value


def lease_seconds(value: float) -> float:
    if not MIN_LEASE_S <= value <= MAX_LEASE_S:
        raise InvalidArgument("lease_duration", "must be between 1 s and 1 h")
    return value


def page_size(value: int, default: int = 50) -> int:
    if value < 0:
        raise InvalidArgument("page_size", "must not be negative")
    return min(value or default, MAX_PAGE_SIZE)


MAX_LOCALE_CHARS = 35  # a BCP 47 tag with its extensions; the view picks en or zh-CN from it


def locale(value: str) -> str:
    return short_text("locale", value, MAX_LOCALE_CHARS)
