"""Results the server keeps: inline bytes stored with the job, or an upload in the result store.

Such a result's Artifact names `jobwire://results/<job_no>`; a client fetches its bytes with
GetResult. The server computes the size and sha256; a worker's claimed ones must match.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from jobwire.domain.errors import InvalidArgument
from jobwire.domain.job import Artifact

RESULT_URI_PREFIX = "jobwire://results/"
RESULT_CHUNK_BYTES = 1 << 20  # one ResultChunk's data at most, each way
# What GetResult sends per chunk. gRPC holds a few messages per stream that the reader has
# not taken yet: a stalled reader of 1 MiB chunks cost the server ~4.7 MB, of 64 KiB chunks
# ~0.3 MB, and a download still runs at hundreds of MB/s.
DOWNLOAD_CHUNK_BYTES = 64 << 10
DEFAULT_MAX_INLINE_RESULT = 1 << 20
DEFAULT_MAX_RESULT_BYTES = 5 << 30  # one upload (JOBWIRE_MAX_RESULT_BYTES)
UPLOAD_ID = re.compile(r"[0-9a-f]{32}")


@dataclass(frozen=True, kw_only=True)
class KeptResult:
    """Where the server keeps a Complete's bytes: inline with the job, or under a key of the result store."""

    inline: bytes | None = None
    stored_key: str | None = None


@dataclass(frozen=True, slots=True)
class EndedLease:
    """A lease a committed change ended (any ending, a revocation, an expiry), and the key of
    the upload its Complete kept, if it named one: the lease's other uploads can go."""

    tenant: str  # the job's
    job_no: str
    token: str
    kept_key: str | None = None


def result_uri(job_no: str) -> str:
    """The Artifact uri of a result the server keeps."""
    return RESULT_URI_PREFIX + job_no


def kept_by_server(uri: str) -> bool:
    return uri.startswith(RESULT_URI_PREFIX)


def upload_id(value: str, field: str = "upload_id") -> str:
    if not UPLOAD_ID.fullmatch(value):
        raise InvalidArgument(field, "must be the upload_id an UploadResult answered")
    return value


def kept_artifact(job_no: str, claimed: Artifact | None, size_bytes: int, sha256: str) -> Artifact:
    """The Artifact of bytes the server keeps: its own size and digest; a worker's claim must agree."""
    if claimed is not None:
        if claimed.uri and claimed.uri != result_uri(job_no):
            raise InvalidArgument(
                "result.uri", "must be empty with inline_result or upload_id", reason="DELIVERABLE_INVALID"
            )
        if claimed.sha256 and claimed.sha256.lower() != sha256:
            raise InvalidArgument("result.sha256", "does not match the bytes received", reason="DELIVERABLE_INVALID")
        if claimed.size_bytes and claimed.size_bytes != size_bytes:
            raise InvalidArgument(
                "result.size_bytes", "does not match the bytes received", reason="DELIVERABLE_INVALID"
            )
    return Artifact(
        uri=result_uri(job_no), size_bytes=size_bytes, sha256=sha256,
        content_type=claimed.content_type if claimed else "", summary=claimed.summary if claimed else "",
    ).verified()  # fmt: skip
