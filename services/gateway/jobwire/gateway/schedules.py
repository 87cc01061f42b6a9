"""The schedules pages: every schedule (cron or period, time zone, next and last firing, firings
skipped), and one schedule with the jobs its firings made; pause, resume and delete, each
behind the CSRF token and the role ScheduleService asks.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from jobwire.client.render import fmt_elapsed, fmt_time
from jobwire.gateway import session
from jobwire.gateway.calls import Calls
from jobwire.gateway.errors import csrf_refused
from jobwire.gateway.i18n import t
from jobwire.gateway.pages import locale_of, page
from jobwire.gateway.routes import calls_for
from jobwire.gateway.search import PAGE_SIZE, JobQuery, Paging
from jobwire.gateway.views import job_view
from jobwire.v1 import schedule_pb2


def schedule_view(s: schedule_pb2.Schedule, locale: str) -> dict[str, Any]:
    timing = (
        f"cron {s.cron}"
        if s.WhichOneof("timing") == "cron"
        else t("every", locale, span=fmt_elapsed(s.every.ToTimedelta()))
    )
    return {
        "id": s.schedule_id,
        "timing": timing,
        "time_zone": s.time_zone or "UTC",
        "next": fmt_time(s.next_fire_time) if s.HasField("next_fire_time") else "",
        "last": fmt_time(s.last_fire_time) if s.HasField("last_fire_time") else "",
        "last_job_no": s.last_job_no,
        "skipped": s.skipped_firings,
        "missed": s.missed_firings,
        "paused": s.paused,
        "title": s.template.title,  # the title each firing's job is given
        "job_type": s.template.job_type,
        "queue": s.template.queue or "default",
        "created": fmt_time(s.created_at),
    }


async def schedules_page(request: Request) -> Response:
    paging = Paging.of(request.query_params)
    locale = locale_of(request)
    async with calls_for(request) as calls:
        found = await calls.schedules(paging.token)
    path = "/schedules"
    return page(
        request,
        "schedules.html",
        schedules=[schedule_view(s, locale) for s in found.schedules],
        next_href=paging.next_href(JobQuery(), found.next_page_token, path) if found.next_page_token else "",
        previous_href=paging.previous_href(JobQuery(), path),
    )


async def schedule_page(request: Request) -> Response:
    schedule_id = request.path_params["schedule_id"]
    paging = Paging.of(request.query_params)
    locale = locale_of(request)
    async with calls_for(request) as calls:
        found = await calls.schedule(schedule_id)
        made = await calls.schedule_jobs(schedule_id, PAGE_SIZE, paging.token)
    path = f"/schedules/{schedule_id}"
    return page(
        request,
        "schedule.html",
        s=schedule_view(found, locale),
        jobs=[job_view(job, locale) for job in made.jobs],
        next_href=paging.next_href(JobQuery(), made.next_page_token, path) if made.next_page_token else "",
        previous_href=paging.previous_href(JobQuery(), path),
    )


async def pause(request: Request) -> Response:
    return await _act(request, Calls.pause_schedule)


async def resume(request: Request) -> Response:
    return await _act(request, Calls.resume_schedule)


async def delete(request: Request) -> Response:
    return await _act(request, Calls.delete_schedule, then="/schedules")


async def _act(request: Request, action: Callable[[Calls, str], Awaitable[None]], then: str = "") -> Response:
    form = await request.form()
    if not session.csrf_ok(request, form.get(session.CSRF_FIELD)):
        return csrf_refused(request)
    schedule_id = request.path_params["schedule_id"]
    async with calls_for(request) as calls:
        await action(calls, schedule_id)
    return RedirectResponse(then or f"/schedules/{schedule_id}", status_code=303)
