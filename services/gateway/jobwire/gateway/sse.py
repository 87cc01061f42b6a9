"""Server-Sent Events fed by one WatchJobs stream, opened with the person's token.

Each change of a watched job is one `job` event whose data is the JobView as JSON. A comment
line goes out when nothing happened for a while, so proxies keep the connection open and a
browser that left is noticed. The stream of one job ends after its terminal update. When
the job service goes away (a restart) the stream just ends, and the browser's EventSource
reconnects by itself; WatchJobs then sends each job as it is before any change.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, AsyncIterator

import anyio
import grpc

from jobwire.client import ClientError
from jobwire.gateway.calls import Calls
from jobwire.gateway.views import job_view
from jobwire.v1 import job_pb2

KEEPALIVE_S = 15.0
_TRANSIENT = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED}  # a server restarting
MEDIA_TYPE = "text/event-stream"
HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}


def event(name: str, data: object) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


async def job_events(
    calls: Calls, jobs: AsyncGenerator[job_pb2.Job, None], *, until_terminal: bool
) -> AsyncIterator[bytes]:
    """The events for `jobs` (a WatchJobs stream); closes `calls` when the browser leaves."""
    async with calls:
        yield b"retry: 3000\n\n"  # how long a browser waits before it reconnects
        next_job = asyncio.ensure_future(anext(jobs))
        try:
            while True:
                done, _ = await asyncio.wait({next_job}, timeout=KEEPALIVE_S)
                if not done:
                    yield b": keepalive\n\n"
                    continue
                try:
                    job = next_job.result()
                except StopAsyncIteration:
                    return
                except ClientError as error:
                    if error.code not in _TRANSIENT:
                        # Not the page's to see (any more): live.js stops; a reload says why.
                        yield event("gone", {"code": error.code.name})
                    return  # else the browser reconnects after `retry` and gets each job afresh
                view = job_view(job, calls.locale)
                yield event("job", view.as_json())
                if until_terminal and view.terminal:
                    return
                next_job = asyncio.ensure_future(anext(jobs))
        finally:
            # The browser left (this is cancelled) or the job ended: end the pending read
            # first, since a generator cannot be closed while a read of it runs, then the
            # stream. Shielded, so leaving does not cut the hang-up short.
            next_job.cancel()
            with anyio.CancelScope(shield=True):
                await asyncio.gather(next_job, return_exceptions=True)
                await jobs.aclose()
