"""A batch's page: its jobs counted by status, finished of total, its jobs (paged, live), and
cancel. GetBatch counts, ListJobs(batch_id) lists; CancelBatch cancels each unfinished job
as Cancel would, so the counts after it say which ran on.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from jobwire.gateway import session
from jobwire.gateway.errors import csrf_refused
from jobwire.gateway.pages import locale_of, page
from jobwire.gateway.routes import calls_for
from jobwire.gateway.search import PAGE_SIZE, JobQuery, Paging
from jobwire.gateway.views import job_view

# The counts in the order a batch moves through them.
COUNTS = ("queued", "waiting", "running", "cancel_requested", "ready", "failed", "cancelled")


async def batch_page(request: Request) -> Response:
    batch_id = request.path_params["batch_id"]
    query, paging = JobQuery(batch_id=batch_id), Paging.of(request.query_params)
    locale = locale_of(request)
    async with calls_for(request) as calls:
        batch = await calls.batch(batch_id)
        listed = await calls.list_jobs(query, page_size=PAGE_SIZE, page_token=paging.token)
    path = f"/batches/{batch_id}"
    return page(
        request,
        "batch.html",
        batch=batch,
        counts=[(name, getattr(batch.counts, name)) for name in COUNTS],
        percent=round(batch.progress * 100),
        unfinished=batch.total - batch.finished,
        jobs=[job_view(job, locale) for job in listed.jobs],
        next_href=paging.next_href(JobQuery(), listed.next_page_token, path) if listed.next_page_token else "",
        previous_href=paging.previous_href(JobQuery(), path),
    )


async def cancel(request: Request) -> Response:
    form = await request.form()
    if not session.csrf_ok(request, form.get(session.CSRF_FIELD)):
        return csrf_refused(request)
    batch_id = request.path_params["batch_id"]
    async with calls_for(request) as calls:
        await calls.cancel_batch(batch_id)
    return RedirectResponse(f"/batches/{batch_id}", status_code=303)
