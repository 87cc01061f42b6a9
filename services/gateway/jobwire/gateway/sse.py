"""Server-Sent Events fed by WatchJobs streams, opened with the person's token.

Each change of a watched job is one `job` event whose data is the JobView as JSON. A comment
line goes out when nothing happened for a while, so proxies keep the connection open and a
browser that left is noticed. The stream of one job ends after its terminal update. When
the job service goes away (a restart) the stream just ends, and the browser's EventSource
reconnects by itself; WatchJobs then sends each job as it is before any change.

The jobs page's stream also meets jobs submitted after the page was read. WatchJobs by job
number cannot know them and the tenant has no watch of its own (an owner's watch would first
send every job the owner ever had), so every `POLL_S` the stream re-reads the first
`POLL_PAGE` jobs of ListJobs, with the page's filters: one indexed read of a few rows,
shared by every open page of the person that shows that filter (jobwire.gateway.budget).
Jobs the page does not show yet go out as one `listed` event (their rows, and the order the
server lists them in, newest first), and the WatchJobs stream is opened again with them
added, so they update live like the others.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from functools import partial

import anyio
import grpc

from jobwire.client import ClientError
from jobwire.client.convert import is_terminal
from jobwire.gateway.budget import OverBudget, SharedReads
from jobwire.gateway.calls import Calls
from jobwire.gateway.pages import fragment
from jobwire.gateway.search import JobQuery
from jobwire.gateway.views import job_view
from jobwire.v1 import job_pb2

KEEPALIVE_S = 15.0
POLL_S = 3.0  # how soon a new job shows on an open jobs page
POLL_PAGE = 20  # more new jobs than this between two reads show on the next reload
MAX_WATCHED = 1000  # WatchJobs' own limit per stream
_TRANSIENT = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED}  # a server restarting
MEDIA_TYPE = "text/event-stream"
HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
_RETRY = b"retry: 3000\n\n"  # how long a browser waits before it reconnects
_KEEPALIVE = b": keepalive\n\n"


def event(name: str, data: object) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


class _Ended(Exception):
    """The WatchJobs stream ended."""


class _Reader:
    """A WatchJobs stream (or none) read one job at a time, so a wait for the next can time out."""

    def __init__(self, jobs: AsyncGenerator[job_pb2.Job, None] | None) -> None:
        self._jobs = jobs
        self._next = asyncio.ensure_future(anext(jobs)) if jobs is not None else None

    async def next(self, timeout: float) -> job_pb2.Job | None:
        """The next job, or None when none came within `timeout`; a failed call is raised, an end is `_Ended`."""
        if self._jobs is None or self._next is None:
            await asyncio.sleep(timeout)
            return None
        done, _ = await asyncio.wait({self._next}, timeout=timeout)
        if not done:
            return None
        try:
            job = self._next.result()
        except StopAsyncIteration:
            raise _Ended() from None
        self._next = asyncio.ensure_future(anext(self._jobs))
        return job

    async def close(self) -> None:
        # The browser left (our caller is cancelled) or the stream is replaced: end the pending
        # read first, since a generator cannot be closed while a read of it runs, then the
        # stream. Shielded, so leaving does not cut the hang-up short.
        with anyio.CancelScope(shield=True):
            if self._next is not None:
                self._next.cancel()
                await asyncio.gather(self._next, return_exceptions=True)
            if self._jobs is not None:
                await self._jobs.aclose()


Hold = Callable[[], AbstractContextManager[None]]  # a person's budget, held while a stream runs
Listings = SharedReads[list[job_pb2.Job]]  # ListJobs pages shared by a person's open pages


class NewJobs:
    """Which listed jobs a page does not show yet, and the job numbers its stream watches.

    A page's stream weighs what it may watch: the jobs it was opened with and room for one
    poll's new ones (`weight`); the newest are watched within it.
    """

    def __init__(self, watching: Sequence[str], seen: Iterable[str]) -> None:
        self.watching = list(dict.fromkeys(watching))[: MAX_WATCHED - POLL_PAGE]
        self.weight = len(self.watching) + POLL_PAGE
        self._shown = {*watching, *seen}

    def take(self, listed: Sequence[job_pb2.Job]) -> list[job_pb2.Job]:
        """The jobs of `listed` not shown before; those not ended are watched from now on."""
        new = [job for job in listed if job.job_no not in self._shown]
        self._shown.update(job.job_no for job in new)
        added = [job.job_no for job in new if not is_terminal(job)]
        self.watching = (added + self.watching)[: self.weight]
        return new


async def _served(calls: Calls, changes: AsyncGenerator[bytes, None], hold: Hold) -> AsyncIterator[bytes]:
    """`changes` as the browser gets them while `hold` holds; closes `calls` when the browser
    leaves or they end. Over the person's budget the stream says `gone` at once: live.js stops."""
    async with calls:
        try:
            with hold():
                yield _RETRY
                async for chunk in changes:
                    yield chunk
        except OverBudget:
            yield event("gone", {"code": "RESOURCE_EXHAUSTED"})
        except _Ended:
            return
        except ClientError as error:
            if error.code not in _TRANSIENT:
                # Not the page's to see (any more): live.js stops; a reload says why.
                yield event("gone", {"code": error.code.name})
            # else the browser reconnects after `retry` and gets each job afresh
        finally:
            with anyio.CancelScope(shield=True):
                await changes.aclose()


def job_events(
    calls: Calls, jobs: AsyncGenerator[job_pb2.Job, None], *, until_terminal: bool, hold: Hold
) -> AsyncIterator[bytes]:
    """The events for `jobs` (a WatchJobs stream); closes `calls` when the browser leaves."""
    return _served(calls, _job_changes(calls.locale, jobs, until_terminal=until_terminal), hold)


async def _job_changes(
    locale: str, jobs: AsyncGenerator[job_pb2.Job, None], *, until_terminal: bool
) -> AsyncGenerator[bytes, None]:
    reader = _Reader(jobs)
    try:
        while True:
            job = await reader.next(KEEPALIVE_S)
            if job is None:
                yield _KEEPALIVE
                continue
            view = job_view(job, locale)
            yield event("job", view.as_json())
            if until_terminal and view.terminal:
                return
    finally:
        await reader.close()


def page_events(
    calls: Calls,
    query: JobQuery,
    jobs: NewJobs,
    *,
    hold: Hold,
    listings: SharedReads[list[job_pb2.Job]],
    person: str,
) -> AsyncIterator[bytes]:
    """The jobs page's events: each watched job's changes, and the new jobs `query` lets through."""
    key = (person, query, calls.locale)  # what the pages that share one ListJobs have alike

    async def first_jobs() -> list[job_pb2.Job]:
        return list((await calls.list_jobs(query, page_size=POLL_PAGE)).jobs)

    listing = partial(listings.read, key, first_jobs)
    return _served(calls, _page_changes(calls, listing, jobs), hold)


async def _page_changes(
    calls: Calls, listing: Callable[[], Awaitable[list[job_pb2.Job]]], jobs: NewJobs
) -> AsyncGenerator[bytes, None]:
    loop = asyncio.get_running_loop()
    reader = _Reader(calls.watch(jobs.watching) if jobs.watching else None)
    next_poll = last_sent = loop.time()  # the first read at once: a job may have come since the page
    try:
        while True:
            # Act on the deadline waited for, never on a reading of the clock: the loop may
            # wake a hair before a deadline, and the other branch would then run in a spin.
            poll_due = next_poll <= last_sent + KEEPALIVE_S
            wait = (next_poll if poll_due else last_sent + KEEPALIVE_S) - loop.time()
            job = await reader.next(max(0.0, wait))
            if job is not None:
                yield event("job", job_view(job, calls.locale).as_json())
            elif poll_due:
                next_poll = loop.time() + POLL_S
                listed = await listing()
                new = jobs.take(listed)
                if not new:
                    continue
                yield event("listed", _listed(listed, new, calls.locale))
                await reader.close()  # WatchJobs' job numbers are fixed: watch again, the new ones too
                reader = _Reader(calls.watch(jobs.watching))
            else:
                yield _KEEPALIVE
            last_sent = loop.time()
    finally:
        await reader.close()


def _listed(listed: Sequence[job_pb2.Job], new: Sequence[job_pb2.Job], locale: str) -> dict[str, object]:
    """The `listed` event: the new rows, and where they go among the page's (the server's order)."""
    rows = [{"job_no": job.job_no, "html": fragment("_job_row.html", job=job_view(job, locale))} for job in new]
    return {"order": [job.job_no for job in listed], "rows": rows}
