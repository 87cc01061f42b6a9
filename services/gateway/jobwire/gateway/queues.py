"""The queue overview (admin tokens): each queue's jobs, oldest runnable age, last hour and
limits, with pause, resume and limits for the admin. AdminService.ListQueues gives the
figures; a client token is refused by the server (PERMISSION_DENIED), on a 403 page.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from jobwire.client.render import fmt_elapsed, fmt_time
from jobwire.gateway import session
from jobwire.gateway.calls import Calls
from jobwire.gateway.chart import chart
from jobwire.gateway.errors import csrf_refused, not_valid
from jobwire.gateway.pages import page
from jobwire.gateway.routes import calls_for
from jobwire.v1 import admin_pb2


def _row(q: admin_pb2.QueueSummary) -> dict[str, Any]:
    oldest = q.oldest_runnable_age.ToTimedelta() if q.HasField("oldest_runnable_age") else None
    return {
        "queue": q.queue,
        "queued": q.queued,
        "running": q.running,
        "waiting": q.waiting,
        "oldest": fmt_elapsed(oldest) if oldest is not None else "",
        "oldest_s": int(oldest.total_seconds()) if oldest is not None else "",
        "finished": q.finished,
        "failed": q.failed,
        "max_running": q.limits.max_running,
        "rate": f"{q.limits.rate_per_second:g}",
        "burst": q.limits.burst,
        "paused": q.paused,
        "chart": chart(q.minutes),
    }


async def queues_page(request: Request) -> Response:
    async with calls_for(request) as calls:
        found = await calls.queues()
    return page(
        request,
        "queues.html",
        queues=[_row(q) for q in found.queues],
        read_at=fmt_time(found.read_at),
        omitted=found.queues_omitted,
    )


async def pause(request: Request) -> Response:
    return await _act(request, Calls.pause_queue)


async def resume(request: Request) -> Response:
    return await _act(request, Calls.resume_queue)


async def set_limits(request: Request) -> Response:
    """The limits form: empty fields are 0 (no limit); the server checks the values and the role."""
    form = await request.form()
    if not session.csrf_ok(request, form.get(session.CSRF_FIELD)):
        return csrf_refused(request)
    try:
        limits = admin_pb2.QueueLimits(
            max_running=int(str(form.get("max_running") or 0)),
            rate_per_second=float(str(form.get("rate_per_second") or 0)),
            burst=int(str(form.get("burst") or 0)),
        )
    except (ValueError, OverflowError):
        return not_valid(request)
    queue = request.path_params["queue"]
    async with calls_for(request) as calls:
        await calls.set_queue_limits(queue, limits)
    return _back(queue)


async def _act(request: Request, action: Callable[[Calls, str], Awaitable[None]]) -> Response:
    """Pause or resume, CSRF-checked (the server checks the role); then back to the queue's row."""
    form = await request.form()
    if not session.csrf_ok(request, form.get(session.CSRF_FIELD)):
        return csrf_refused(request)
    queue = request.path_params["queue"]
    async with calls_for(request) as calls:
        await action(calls, queue)
    return _back(queue)


def _back(queue: str) -> Response:
    return RedirectResponse(f"/queues#queue-{quote(queue)}", status_code=303)
