"""The result store: where uploaded results are written, read back and removed (fsspec).

JOBWIRE_RESULT_STORE is a directory or any fsspec URL (`s3://bucket/prefix` with s3fs
installed). An upload is written to `<digest>/<upload_id>`, the digest naming its tenant, job
and lease, so a Complete finds only an upload of its own lease; its size and sha256 go beside
it in `<key>.sum` once every byte is written. File calls run on the blocking pool.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
import time
from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

import fsspec

from jobwire.db.retention import ArtifactDeleter, ExpiredArtifact
from jobwire.domain.errors import InvalidArgument, ResultNotAvailable
from jobwire.domain.results import RESULT_CHUNK_BYTES
from jobwire.runtime.blocking import Blocking

log = logging.getLogger(__name__)
_SUM = ".sum"


def upload_key(tenant: str, job_no: str, token: str, upload_id: str) -> str:
    lease = hashlib.sha256(f"{tenant}\0{job_no}\0{token}".encode()).hexdigest()[:32]
    return f"{lease}/{upload_id}"


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

    async def receive(self, key: str, chunks: AsyncIterable[bytes], content_type: str = "") -> tuple[int, str]:
        """Write the chunks under `key`, hashing as they go; on any failure nothing is left."""
        digest, size = hashlib.sha256(), 0
        path = self.path(key)
        await self.blocking(self.fs.makedirs, path.rsplit("/", 1)[0], exist_ok=True)
        out = await self.blocking(self.fs.open, path, "wb")
        try:
            async for data in chunks:
                digest.update(data)
                size += len(data)
                await self.blocking(out.write, data)
            await self.blocking(out.close)
            summed = {"size_bytes": size, "sha256": digest.hexdigest(), "content_type": content_type}
            await self.blocking(self.fs.pipe_file, path + _SUM, json.dumps(summed).encode())
        except BaseException:
            await self.blocking(out.close)
            await self.remove(key)
            raise
        return size, digest.hexdigest()

    async def summed(self, key: str) -> tuple[int, str, str]:
        """The size, sha256 and content type of a finished upload; INVALID_ARGUMENT when there is none."""
        try:
            summed = json.loads(await self.blocking(self.fs.cat_file, self.path(key) + _SUM))
        except FileNotFoundError:
            raise InvalidArgument("upload_id", "no finished upload of this lease has that id") from None
        return int(summed["size_bytes"]), str(summed["sha256"]), str(summed["content_type"])

    async def read(self, key: str) -> AsyncIterator[bytes]:
        try:
            src = await self.blocking(self.fs.open, self.path(key), "rb")
        except FileNotFoundError:
            # A server whose JOBWIRE_RESULT_STORE is not the one the upload went to.
            log.error("result %s is not in the result store %s", key, self.root)
            raise ResultNotAvailable("the result's bytes are not in this server's result store") from None
        try:
            while data := await self.blocking(src.read, RESULT_CHUNK_BYTES):
                yield data
        finally:
            await self.blocking(src.close)

    async def remove(self, key: str) -> None:
        await self.blocking(self.remove_now, key)

    def remove_now(self, key: str) -> None:
        for path in (self.path(key), self.path(key) + _SUM):
            if self.fs.exists(path):
                self.fs.rm_file(path)

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
