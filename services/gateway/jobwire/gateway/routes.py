"""The person's pages: sign in and out, the language, the jobs list, one job and its actions."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable
from functools import partial

import anyio
import grpc
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from jobwire.client import (
    ClientError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    UnauthenticatedError,
    UnavailableError,
)
from jobwire.client.render import status_label
from jobwire.gateway import budget, session, sse
from jobwire.gateway.calls import Calls
from jobwire.gateway.detail import PREVIEW_BYTES, Preview, head, preview, timeline
from jobwire.gateway.errors import csrf_refused, error_response, not_valid
from jobwire.gateway.pages import locale_of, page
from jobwire.gateway.search import PAGE_SIZE, JobQuery, Paging
from jobwire.gateway.settings import GatewaySettings
from jobwire.gateway.views import download_headers, job_view
from jobwire.v1 import job_pb2

_STATUS_NAMES = [name for name in job_pb2.Job.Status.keys() if name != "STATUS_UNSPECIFIED"]  # noqa: SIM118


def calls_for(request: Request, *, fixed_window: bool = False) -> Calls:
    """Calls carrying the signed-in person's token; without one, the person is sent to sign in."""
    token = session.token_of(request)
    if token is None:
        raise UnauthenticatedError(grpc.StatusCode.UNAUTHENTICATED, "not signed in")
    settings: GatewaySettings = request.app.state.settings
    return Calls(settings.service, token, locale_of(request), fixed_window=fixed_window)


def local_path(target: str | None, fallback: str = "/jobs") -> str:
    """`target` when it is a path on this site; never another host (`//evil`, `https://…`)."""
    if target and target.startswith("/") and not target.startswith("//") and "\\" not in target:
        return target
    return fallback


async def signin_form(request: Request) -> Response:
    notice = "signin_expired" if request.query_params.get("expired") else ""
    csrf = session.signin_csrf(request)
    response = page(request, "signin.html", notice=notice, csrf=csrf)
    session.keep_csrf(request, response, csrf)
    return response


async def signin(request: Request) -> Response:
    form = await request.form()
    if not session.csrf_ok(request, form.get(session.CSRF_FIELD)):
        return csrf_refused(request)  # another site's form would sign this browser in as someone else
    token = str(form.get("token", "")).strip()
    settings: GatewaySettings = request.app.state.settings
    if not token:
        return page(request, "signin.html", status_code=401, notice="signin_refused")
    home = "/jobs"
    try:
        async with Calls(settings.service, token, locale_of(request)) as calls:
            await calls.list_jobs()  # proves the token before the browser keeps it
    except UnauthenticatedError:
        return page(request, "signin.html", status_code=401, notice="signin_refused")
    except PermissionDeniedError:
        home = "/evidence"  # a token the server knows, for another service: an operator's
    response = RedirectResponse(home, status_code=303)
    session.sign_in(request, response, token)
    return response


async def signout(request: Request) -> Response:
    form = await request.form()
    if not session.csrf_ok(request, form.get(session.CSRF_FIELD)):
        return csrf_refused(request)
    response = RedirectResponse("/signin", status_code=303)
    session.sign_out(response)
    return response


async def choose_language(request: Request) -> Response:
    response = RedirectResponse(local_path(request.query_params.get("next")), status_code=303)
    session.remember_locale(response, request.path_params["locale"])
    return response


async def jobs_page(request: Request) -> Response:
    query, paging = JobQuery.of(request.query_params), Paging.of(request.query_params)
    locale = locale_of(request)
    async with calls_for(request) as calls:
        if query.job_no:
            jobs, next_token = await _numbered(calls, query.job_no), ""
        else:
            reply = await calls.list_jobs(query, page_size=PAGE_SIZE, page_token=paging.token)
            jobs, next_token = list(reply.jobs), reply.next_page_token
    return page(
        request,
        "jobs.html",
        jobs=[job_view(job, locale) for job in jobs],
        options=[(name, status_label(job_pb2.Job.Status.Value(name), locale)) for name in _STATUS_NAMES],
        query=query,
        next_href=paging.next_href(query, next_token) if next_token else "",
        previous_href=paging.previous_href(query),
        # New jobs show on the first page of a list; any other page follows only its own rows.
        finds_new=paging.first and not query.job_no,
    )


async def _numbered(calls: Calls, job_no: str) -> list[job_pb2.Job]:
    """The job of that number, as a list of one; none when there is no such job of the caller's."""
    try:
        return [await calls.get(job_no)]
    except (NotFoundError, InvalidArgumentError):
        return []


async def job_page(request: Request) -> Response:
    """A job: its state (live until it ends), payload, result preview, links, and for an admin its timeline."""
    locale = locale_of(request)
    async with calls_for(request) as calls:
        job = await calls.get(request.path_params["job_no"])
        data, size = await calls.payload(job.job_no, PREVIEW_BYTES)
        result = await _result_preview(calls, job)
        events = await calls.admin_trail(job.job_no)  # an admin's page shows the timeline too
    # A FAILED job whose error is not retryable offers an admin a forced retry: its Display
    # offers RETRY only when the error is retryable; the forced Retry is checked again when it comes.
    force_retry = (
        job.status == job_pb2.Job.FAILED and job_pb2.Display.RETRY not in job.display.actions and events is not None
    )
    return page(
        request,
        "job.html",
        job=job_view(job, locale),
        force_retry=force_retry,
        payload=preview(data, size),
        result=result,
        result_type=job.result.content_type,
        depends_on=list(job.depends_on),
        batch_id=job.batch_id,
        events=timeline(events, locale) if events is not None else None,
    )


async def _result_preview(calls: Calls, job: job_pb2.Job) -> Preview | None:
    """A READY job's result as the page previews it: read only when the server keeps it and it is small."""
    if job.status != job_pb2.Job.READY:
        return None
    if job_pb2.Display.DOWNLOAD not in job.display.actions or job.result.size_bytes > PREVIEW_BYTES:
        return preview(b"", job.result.size_bytes, job.result.content_type)  # its size and type, and the download
    content_type, chunks = await calls.result(job.job_no)
    try:
        data = await head(chunks)
    finally:
        await chunks.aclose()
    return preview(data, job.result.size_bytes or len(data), content_type)


def _hold(request: Request, watched: int) -> sse.Hold:
    """The person's live budget (jobwire.gateway.budget), for a stream watching `watched` jobs."""
    person = budget.person_of(session.token_of(request) or "")
    return partial(request.app.state.budget.hold, person, watched)


async def jobs_stream(request: Request) -> Response:
    """Live updates of the jobs named (`?job=…` repeated), or of one job's page (`?job=…&one=1`).

    A stream of N jobs weighs N in the person's budget, as WatchJobs weighs it in the server's.
    """
    job_nos = list(dict.fromkeys(request.query_params.getlist("job")))[: sse.MAX_WATCHED]
    calls = calls_for(request)
    if not job_nos:
        await calls.close()
        return Response(status_code=204)  # nothing to watch: the browser stops asking
    one = request.query_params.get("one") == "1"
    events = sse.job_events(calls, calls.watch(job_nos), until_terminal=one, hold=_hold(request, len(job_nos)))
    return StreamingResponse(events, media_type=sse.MEDIA_TYPE, headers=sse.HEADERS)


async def jobs_page_stream(request: Request) -> Response:
    """The jobs page's updates: the listed jobs (`job=`, not ended; `seen=`, ended) and new ones
    its filters (the page's own address's) let through."""
    params = request.query_params
    jobs = sse.NewJobs(params.getlist("job")[: sse.MAX_WATCHED], params.getlist("seen")[: sse.MAX_WATCHED])
    calls = calls_for(request)
    events = sse.page_events(
        calls, JobQuery.of(params), jobs, hold=_hold(request, jobs.weight), listings=request.app.state.listings,
        person=budget.person_of(session.token_of(request) or ""),
    )  # fmt: skip
    return StreamingResponse(events, media_type=sse.MEDIA_TYPE, headers=sse.HEADERS)


async def cancel(request: Request) -> Response:
    return await _act(request, Calls.cancel)


async def retry(request: Request) -> Response:
    return await _act(request, Calls.retry)


async def force_retry(request: Request) -> Response:
    return await _act(request, lambda calls, job_no: calls.retry(job_no, force=True))


async def _act(request: Request, action: Callable[[Calls, str], Awaitable[job_pb2.Job]]) -> Response:
    """A job page's form, CSRF-checked; then back to the job."""
    form = await request.form()
    if not session.csrf_ok(request, form.get(session.CSRF_FIELD)):
        return csrf_refused(request)
    job_no = request.path_params["job_no"]
    async with calls_for(request) as calls:
        await action(calls, job_no)
    return RedirectResponse(f"/jobs/{job_no}", status_code=303)


async def bulk(request: Request) -> Response:
    """Cancel or retry the jobs ticked on the jobs page, one call each (the server checks each
    job and the role); a page then says what became of every one of them."""
    form = await request.form()
    if not session.csrf_ok(request, form.get(session.CSRF_FIELD)):
        return csrf_refused(request)
    action = form.get("action")
    job_nos = list(dict.fromkeys(str(v) for v in form.getlist("job")))
    if action not in _BULK or not job_nos or len(job_nos) > MAX_BULK:
        return not_valid(request)
    outcomes = []
    async with calls_for(request) as calls:
        for job_no in job_nos:
            try:
                job = await _BULK[action](calls, job_no)
                outcomes.append({"job_no": job_no, "title": job.title, "done": True, "said": job.display.status_label})
            except (UnauthenticatedError, UnavailableError):
                raise  # the whole page's trouble: sign in again, or try later
            except ClientError as error:
                outcomes.append({"job_no": job_no, "title": "", "done": False, "said": error.message})
    back = local_path(str(form.get("back", "")))
    return page(request, "bulk.html", action=action, outcomes=outcomes, back=back)


# Cancel and Retry are a person's own calls, job by job, as on a job's page.
_BULK: dict[object, Callable[[Calls, str], Awaitable[job_pb2.Job]]] = {"cancel": Calls.cancel, "retry": Calls.retry}
MAX_BULK = 2 * PAGE_SIZE


class _Download(StreamingResponse):
    """A result streamed from GetResult at the browser's pace, its call ended with the response.

    Each chunk is read from the gRPC stream only once the browser took the one before (the
    server's send waits for the socket), and the channel's window is fixed (Calls
    `fixed_window`): a stalled browser holds about one chunk here, never the result read
    ahead. However the response ends (done, a browser gone mid-send), the stream is cancelled
    and its channel closed now: left to the garbage collector, 200 closed downloads kept a
    gateway at 1.26 GB.
    """

    def __init__(self, calls: Calls, chunks: AsyncGenerator[bytes, None], media: str, headers: dict[str, str]) -> None:
        super().__init__(chunks, media_type=media, headers=headers)
        self._calls, self._chunks = calls, chunks

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._calls.close()  # cancels the stream; shielded, so a cancelled response still does it
            with anyio.CancelScope(shield=True):
                await self._chunks.aclose()


async def download(request: Request) -> Response:
    """The result's bytes, streamed from GetResult as the browser takes them."""
    job_no = request.path_params["job_no"]
    calls = calls_for(request, fixed_window=True)
    try:
        content_type, chunks = await calls.result(job_no)
    except ClientError as error:
        await calls.close()
        return error_response(request, error)
    media, headers = download_headers(job_no, content_type)
    return _Download(calls, chunks, media, headers)
