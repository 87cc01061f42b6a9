"""What a handler returns, and how it becomes a verified, delivered artifact.

By default the runtime hands the bytes to the server (jobwire.worker.sdk._upload). A worker
that publishes results itself (`results_dir`, `results_url`) uses the ResultStore here: the
runtime copies a result into the results folder only after the handler returned,
hashing the bytes as it writes them, and moves the finished file into place atomically:
a crash, a cancellation or a lost lease never leaves a half-written or temporary file
where a result is expected.
"""

from __future__ import annotations

import hashlib
import io
import json
import mimetypes
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO
from urllib.parse import quote, urlsplit

from jobwire.domain.errors import JobwireError
from jobwire.domain.job import Artifact
from jobwire.worker.sdk._errors import DependencyFailed, ResultInvalid

CHUNK = 1 << 20
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True, kw_only=True)
class Result:
    """A handler's output: a file in its `ctx.tmp_dir`, or bytes.

    Build one with `Result.from_file`, `Result.from_bytes` or `Result.from_json`. The
    runtime computes size and sha256 and delivers it; the handler never writes to the
    results folder itself.
    """

    path: Path | None = None
    data: bytes | None = None
    content_type: str = "application/octet-stream"
    summary: str = ""
    filename: str | None = None

    def __post_init__(self) -> None:
        if (self.path is None) == (self.data is None):
            raise ValueError("a Result has either a path or data, not both or neither")

    @classmethod
    def from_file(
        cls,
        path: str | os.PathLike[str],
        *,
        content_type: str | None = None,
        summary: str = "",
        filename: str | None = None,
    ) -> Result:
        """A file the handler wrote inside `ctx.tmp_dir`; the content type is guessed if omitted."""
        path = Path(path)
        guessed = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        return cls(path=path, content_type=content_type or guessed, summary=summary, filename=filename)

    @classmethod
    def from_bytes(
        cls,
        data: bytes,
        *,
        content_type: str = "application/octet-stream",
        summary: str = "",
        filename: str | None = None,
    ) -> Result:
        """Bytes held in memory; fine for small results."""
        return cls(data=bytes(data), content_type=content_type, summary=summary, filename=filename)

    @classmethod
    def from_json(cls, value: object, *, summary: str = "", filename: str = "result.json") -> Result:
        """A JSON document (UTF-8, `application/json`)."""
        data = json.dumps(value, ensure_ascii=False, indent=2).encode()
        return cls(data=data, content_type="application/json", summary=summary, filename=filename)


@dataclass(frozen=True, kw_only=True)
class Delivered:
    """A result copied into the results folder, with the artifact that describes it."""

    artifact: Artifact
    path: Path


def check_base_url(url: str) -> str:
    """A results base URL must be absolute (``https://...``, ``s3://...``, ``file:///...``)."""
    parts = urlsplit(url)
    if not parts.scheme or not (parts.netloc or parts.path) or url != url.strip():
        raise ValueError(f"results_url must be an absolute URL such as https://files.example/jobwire/, not {url!r}")
    return url


class ResultStore:
    """A folder of delivered results: `<root>/<tenant>/<job_no>/attempt-<n>/<filename>`.

    Job numbers are per tenant, so the tenant comes first: a shared fleet's worker may deliver
    two tenants' jobs of one number. Any tenant name is one safe folder (percent-encoded, its
    dots too); a lease that names no tenant delivers to `<root>/<job_no>/...`.

    Args:
        root: The results folder on this machine.
        base_url: The URL under which `root` is published (``https://files.example/jobwire/``,
            ``s3://bucket/prefix/``); a result's URI is this base plus its path below
            `root`, so no worker path reaches users. None gives ``file://`` URIs of the
            worker's own disk, fit only where users and worker share one machine.
    """

    def __init__(self, root: Path, *, base_url: str | None = None) -> None:
        self.root = root.resolve()
        self.base_url = check_base_url(base_url) if base_url is not None else None

    def uri_of(self, path: Path) -> str:
        """The URI a user is given for a delivered file."""
        if self.base_url is None:
            return path.as_uri()
        relative = path.relative_to(self.root).as_posix()
        return f"{self.base_url.rstrip('/')}/{quote(relative)}"

    def deliver(self, result: object, *, tenant: str, job_no: str, attempt: int, tmp_dir: Path) -> Delivered:
        """Copy, hash and verify `result`; ResultInvalid or DependencyFailed if it cannot be.

        A dict or list is taken as a JSON document (`Result.from_json`).
        """
        result = as_result(result)
        name = _safe_name(result, job_no)
        final = self.root / quote(tenant, safe="").replace(".", "%2E") / job_no / f"attempt-{attempt}" / name
        with open_source(result, tmp_dir) as src:
            sha256, size = _copy(src, final)
        artifact = Artifact(
            uri=self.uri_of(final),
            size_bytes=size,
            sha256=sha256,
            content_type=result.content_type,
            summary=result.summary,
        )
        try:
            return Delivered(artifact=artifact.verified(), path=final)
        except JobwireError as exc:
            self.discard(final)
            raise ResultInvalid(str(exc)) from exc

    def discard(self, path: Path) -> None:
        """Remove a delivered file whose job was not completed by this worker."""
        path.unlink(missing_ok=True)
        for folder in path.relative_to(self.root).parents[:-1]:  # its attempt's, job's and tenant's; never root
            try:
                (self.root / folder).rmdir()  # only when empty: another attempt's result stays
            except OSError:
                break


def as_result(result: object) -> Result:
    """What a handler returned as a Result: a dict or list is a JSON document; else ResultInvalid."""
    if isinstance(result, dict | list):
        try:
            result = Result.from_json(result)
        except (TypeError, ValueError) as exc:
            raise ResultInvalid(f"the handler returned a {type(result).__name__} that is not JSON") from exc
    if not isinstance(result, Result):
        raise ResultInvalid(f"the handler returned {type(result).__name__}, not a Result")
    return result


def _safe_name(result: Result, job_no: str) -> str:
    raw = result.filename or (result.path.name if result.path else "")
    if not raw:
        raw = "result" + (mimetypes.guess_extension(result.content_type) or ".bin")
    name = _UNSAFE.sub("_", raw).strip("._") or job_no
    return name[:120]


@contextmanager
def open_source(result: Result, tmp_dir: Path) -> Iterator[BinaryIO]:
    if result.data is not None:
        yield io.BytesIO(result.data)
        return
    assert result.path is not None
    path = result.path if result.path.is_absolute() else tmp_dir / result.path
    path = path.resolve()
    # Only files the handler made for this attempt can become a result.
    if not path.is_relative_to(tmp_dir.resolve()):
        raise ResultInvalid("the result file must be inside the job's temporary folder")
    if not path.is_file():
        raise ResultInvalid("the result file does not exist")
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise ResultInvalid("the result file cannot be read") from exc
    with handle:
        yield handle


def _copy(src: BinaryIO, final: Path) -> tuple[str, int]:
    part = final.with_name(f".{final.name}.part")
    digest = hashlib.sha256()
    size = 0
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        with part.open("wb") as out:
            while chunk := src.read(CHUNK):
                digest.update(chunk)
                out.write(chunk)
                size += len(chunk)
            out.flush()
            os.fsync(out.fileno())
        os.replace(part, final)
    except OSError as exc:
        part.unlink(missing_ok=True)
        raise DependencyFailed("the result could not be stored") from exc
    return digest.hexdigest(), size


def remove_tree(path: Path) -> None:
    """Delete a temporary folder; a folder that is already gone is fine."""
    shutil.rmtree(path, ignore_errors=True)
