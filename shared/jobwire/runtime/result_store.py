"""The result store: where uploaded results are written, read back and removed (fsspec).

JOBWIRE_RESULT_STORE is a directory or any fsspec URL (`s3://bucket/prefix` with s3fs
installed). An upload is written to `<lease>/<upload_id>`, `<lease>` a digest of its tenant
(as the worker's token names it: a shared fleet's is `*`), job and lease token, so a
Complete finds only an upload of its own lease and a lease's uploads can go together; its
size, sha256 and the time it finished go beside it in `<key>.sum` once every byte is
written. File calls run on a thread pool of their own (FILE_THREADS), so downloads never
queue a tenant's store reads behind them.

Running out of open files or of room (EMFILE, ENFILE, ENOSPC, EDQUOT) is the asking call's
RESOURCE_EXHAUSTED, never INTERNAL: the log names the key, the caller's message names no path.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import secrets
import time
from collections.abc import AsyncGenerator, AsyncIterable, Iterable, Iterator
from typing import Any

import fsspec

from jobwire.db.retention import ArtifactDeleter, ExpiredArtifact
from jobwire.domain.commands import EVERY_TENANT
from jobwire.domain.errors import InvalidArgument, ResourceExhausted, ResultNotAvailable
from jobwire.domain.kept_results import DOWNLOAD_CHUNK_BYTES, EndedLease
from jobwire.runtime.blocking import Blocking

log = logging.getLogger(__name__)
_SUM = ".sum"
FILE_THREADS = 4
_OUT_OF_FILES = {errno.EMFILE, errno.ENFILE}
_OUT_OF_ROOM = {errno.ENOSPC, errno.EDQUOT}


class StoreExhausted(ResourceExhausted):
    """The server's result store cannot take this now; try again in a while."""

    reason = "RESULT_STORE_EXHAUSTED"


class ResultTooLarge(ResourceExhausted):
    """The result is larger than this server keeps."""

    reason = "RESULT_TOO_LARGE"

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"the result is over the {limit:,} bytes this server keeps (JOBWIRE_MAX_RESULT_BYTES):"
            " nothing was kept; publish it yourself and complete with its uri"
        )


def lease_folder(tenant: str, job_no: str, token: str) -> str:
    """Where one lease's uploads go: a digest, so the store's names say nothing of tenants or jobs."""
    return hashlib.sha256(f"{tenant}\0{job_no}\0{token}".encode()).hexdigest()[:32]


def upload_key(tenant: str, job_no: str, token: str, upload_id: str) -> str:
    return f"{lease_folder(tenant, job_no, token)}/{upload_id}"


def ended_folders(lease: EndedLease) -> set[str]:
    """Where an ended lease's uploads may be: its tenant's worker's folder, or a shared fleet's
    (the job's row does not say which kind of worker held it)."""
    return {lease_folder(tenant, lease.job_no, lease.token) for tenant in (lease.tenant, EVERY_TENANT)}


@contextlib.contextmanager
def _refusing_exhaustion(key: str) -> Iterator[None]:
    """An OSError for want of files or room, as the caller's RESOURCE_EXHAUSTED (the key only in the log)."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in _OUT_OF_FILES | _OUT_OF_ROOM:
            raise
        log.warning("result store: %s at %s", errno.errorcode.get(exc.errno or 0, exc.errno), key)
        if exc.errno in _OUT_OF_FILES:
            raise StoreExhausted("the server has no file to spare for this result now; try again in a while") from None
        raise StoreExhausted("the server's result store is full; try again later") from None


class ResultStore:
    """Uploaded results under one root of one fsspec filesystem."""

    def __init__(self, url: str, blocking: Blocking) -> None:
        fs, root = fsspec.core.url_to_fs(url)
        self.fs: Any = fs
        self.root = root.rstrip("/")
        self.blocking = blocking
        self.fs.makedirs(self.root, exist_ok=True)

    def path(self, key: str) -> str:
        return f"{self.root}/{key}"

    async def receive(
        self, key: str, chunks: AsyncIterable[bytes], content_type: str = "", *, limit: int | None = None
    ) -> tuple[int, str]:
        """Write the chunks under `key`, hashing as they go; past `limit` bytes RESULT_TOO_LARGE.

        On any failure nothing is left: what was written is removed.
        """
        try:
            return await self._write(key, chunks, content_type, limit)
        except BaseException:
            await self.blocking(self._discard, key)
            raise

    async def _write(
        self, key: str, chunks: AsyncIterable[bytes], content_type: str, limit: int | None
    ) -> tuple[int, str]:
        digest, size = hashlib.sha256(), 0
        path = self.path(key)
        with _refusing_exhaustion(key):
            await self.blocking(self.fs.makedirs, path.rsplit("/", 1)[0], exist_ok=True)
            out = await self.blocking(self.fs.open, path, "wb")
            try:
                async for data in chunks:
                    size += len(data)
                    if limit is not None and size > limit:
                        raise ResultTooLarge(limit)  # stop reading here: the rest is never taken
                    digest.update(data)
                    await self.blocking(out.write, data)
            finally:
                await self.blocking(out.close)
            summed = {
                "size_bytes": size, "sha256": digest.hexdigest(), "content_type": content_type,
                "finished_ns": time.time_ns(),  # which of a lease's uploads is the newest (keep_newest_now)
            }  # fmt: skip
            await self.blocking(self.fs.pipe_file, path + _SUM, json.dumps(summed).encode())
        return size, digest.hexdigest()

    def _discard(self, key: str) -> None:
        """Remove a failed upload's bytes; a failure here is logged, never raised over the first one."""
        try:
            self.remove_now(key)
        except OSError:
            log.exception("result store: could not remove the failed upload %s", key)

    async def summed(self, key: str) -> tuple[int, str, str]:
        """The size, sha256 and content type of a finished upload; INVALID_ARGUMENT when there is none."""
        try:
            summed = json.loads(await self.blocking(self.fs.cat_file, self.path(key) + _SUM))
        except FileNotFoundError:
            raise InvalidArgument("upload_id", "no finished upload of this lease has that id") from None
        return int(summed["size_bytes"]), str(summed["sha256"]), str(summed["content_type"])

    async def read(self, key: str) -> AsyncGenerator[bytes, None]:
        """The upload's bytes in DOWNLOAD_CHUNK_BYTES pieces; its file is open until the iterator is closed."""
        try:
            with _refusing_exhaustion(key):
                src = await self.blocking(self.fs.open, self.path(key), "rb")
        except FileNotFoundError:
            # A server whose JOBWIRE_RESULT_STORE is not the one the upload went to.
            log.error("result %s is not in the result store %s", key, self.root)
            raise ResultNotAvailable("the result's bytes are not in this server's result store") from None
        try:
            while True:
                with _refusing_exhaustion(key):
                    data = await self.blocking(src.read, DOWNLOAD_CHUNK_BYTES)
                if not data:
                    return
                yield data
        finally:
            await self.blocking(src.close)

    async def remove(self, key: str) -> None:
        await self.blocking(self.remove_now, key)

    def remove_now(self, key: str) -> None:
        for path in (self.path(key), self.path(key) + _SUM):
            with contextlib.suppress(FileNotFoundError):  # never written, or removed meanwhile
                self.fs.rm_file(path)

    def keep_newest_now(self, folder: str) -> str | None:
        """Remove each finished upload of one lease (its `lease_folder`) but the last to finish
        (blocking); the upload id kept, None when none has finished.

        Uploads still being written stay: the first of them to finish removes the others. Two
        processes finishing uploads of one lease at once keep the same one.
        """
        finished = []
        for name in self._names(folder):
            if name.endswith(_SUM):
                upload_id = name.removesuffix(_SUM)
                at = self._finished_at(f"{folder}/{upload_id}")
                if at is not None:
                    finished.append((at, upload_id))
        if not finished:
            return None
        newest = max(finished)[1]
        for _, upload_id in finished:
            if upload_id != newest:
                self.remove_now(f"{folder}/{upload_id}")
        return newest

    def _finished_at(self, key: str) -> int | None:
        """When the upload finished (0: before uploads said so); None if its sum is gone or half-written."""
        try:
            summed = json.loads(self.fs.cat_file(self.path(key) + _SUM))
            return int(summed.get("finished_ns", 0))
        except (FileNotFoundError, ValueError, TypeError, AttributeError):
            return None

    def remove_ended_now(self, leases: Iterable[EndedLease]) -> int:
        """Remove the uploads of leases that ended, but the one each one's Complete kept
        (blocking); how many files went."""
        removed = 0
        for lease in leases:
            kept_folder, _, kept = (lease.kept_key or "").rpartition("/")
            for folder in ended_folders(lease):
                removed += self._remove_lease_now(folder, kept if kept_folder == folder else None)
        return removed

    def _remove_lease_now(self, folder: str, keep: str | None) -> int:
        kept = {keep, f"{keep}{_SUM}"} if keep else set()
        gone = [name for name in self._names(folder) if name not in kept]
        for name in gone:
            with contextlib.suppress(FileNotFoundError):  # removed meanwhile by another process
                self.fs.rm_file(self.path(f"{folder}/{name}"))
        return len(gone)

    def _names(self, folder: str) -> list[str]:
        """The names of the files in one lease's folder ([] for none)."""
        try:
            paths = self.fs.ls(self.path(folder), detail=False)
        except FileNotFoundError:
            return []
        return [str(path).rstrip("/").rsplit("/", 1)[-1] for path in paths]

    def stale_keys(self, older_than_s: float) -> list[str]:
        """Keys of uploads last written more than `older_than_s` ago (blocking)."""
        cutoff, out = time.time() - older_than_s, []
        for path in self.fs.find(self.root):
            name = path.rstrip("/")
            if name.endswith(_SUM):
                continue
            try:
                modified = self.fs.modified(name).timestamp()
            except FileNotFoundError:
                continue  # removed meanwhile (its job's Complete or retention)
            except NotImplementedError:
                # A store that keeps no times (some fsspec backends) cannot tell an abandoned
                # upload from a fresh one: none is removed, and the operator is told once a sweep.
                log.warning("result store %s keeps no modification times: abandoned uploads stay", self.fs.protocol)
                return []
            if modified < cutoff:
                out.append(name[len(self.root) :].lstrip("/"))
        return out

    def deleter(self, then: ArtifactDeleter) -> ArtifactDeleter:
        """Retention's deleter: a kept result's upload goes here, any other artifact to `then`."""

        def delete(expired: ExpiredArtifact) -> None:
            if expired.stored_key is not None:
                self.remove_now(expired.stored_key)
            else:
                then(expired)

        return delete


def new_upload_id() -> str:
    return secrets.token_hex(16)
