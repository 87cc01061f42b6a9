"""Helpers the result tests share: upload chunks, read a result back, the store's files, open result files."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

from served import Served

from jobwire.domain.kept_results import RESULT_CHUNK_BYTES
from jobwire.v1 import job_pb2


def store_files(s: Served) -> list[Path]:
    root = Path(s.runtime.settings.result_store_url)
    return sorted(p for p in root.rglob("*") if p.is_file())


async def chunks(
    job_no: str, token: str, data: bytes, content_type: str = "application/octet-stream"
) -> AsyncIterator[job_pb2.ResultChunk]:
    first = True
    for at in range(0, len(data), RESULT_CHUNK_BYTES):
        piece = data[at : at + RESULT_CHUNK_BYTES]
        if first:
            yield job_pb2.ResultChunk(job_no=job_no, worker_token=token, content_type=content_type, data=piece)
            first = False
        else:
            yield job_pb2.ResultChunk(data=piece)


async def fetch(s: Served, job_no: str) -> tuple[str, bytes]:
    content_type, out = "", bytearray()
    async for chunk in s.jobs.GetResult(job_pb2.GetResultRequest(job_no=job_no)):
        content_type = content_type or chunk.content_type
        out += chunk.data
    return content_type, bytes(out)


def open_result_files(s: Served) -> dict[str, int]:
    """The result store's files this process holds open (the server runs in the test's process),
    each with how far it has been read."""
    root = str(Path(s.runtime.settings.result_store_url).resolve())
    found: dict[str, int] = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith(root):
                with open(f"/proc/self/fdinfo/{fd}") as info:
                    found[target] = int(next(line for line in info if line.startswith("pos:")).split()[1])
        except (FileNotFoundError, StopIteration):
            continue  # closed meanwhile
    return found
