"""A failed call to the job service, as a page a person can read.

NOT_FOUND is 404, PERMISSION_DENIED 403 with the server's reason, UNAUTHENTICATED sends the
browser back to sign in, UNAVAILABLE is 503. The server's own message is shown only when it
came from a jobwire server (it carries an ErrorInfo reason); a transport error's text names
hosts and ports, so the person reads the catalog's words instead. Never a trace.
"""

from __future__ import annotations

import grpc
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from jobwire.client import ClientError
from jobwire.gateway import session
from jobwire.gateway.i18n import CATALOG
from jobwire.gateway.pages import page

_HTTP_STATUS = {
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 503,
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.FAILED_PRECONDITION: 409,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
}
_ADDRESSES = {"job_no", "batch_id", "schedule_id"}
_NOT_JOBS = {"BATCH_NOT_FOUND", "SCHEDULE_NOT_FOUND"}
_UNREACHABLE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED}


def signin_again(request: Request) -> Response:
    """Back to the sign-in form, with the stale token dropped; "sign in again" only to a
    browser that had one (a first visit is asked to sign in, not told it was signed out)."""
    had_token = session.token_of(request) is not None
    response = RedirectResponse("/signin?expired=1" if had_token else "/signin", status_code=303)
    session.sign_out(response)
    return response


def error_response(request: Request, error: ClientError) -> Response:
    if error.code is grpc.StatusCode.UNAUTHENTICATED:
        return signin_again(request)
    fields = {field for field, _ in error.violations}
    if error.code is grpc.StatusCode.INVALID_ARGUMENT and fields & _ADDRESSES:
        # A job number, batch or schedule id is the page's address: a malformed one names no page, as an unknown one.
        return not_found(request, job="job_no" in fields)
    key = f"error_{error.code.name}"
    if error.reason in _NOT_JOBS:
        key = "error_PAGE"  # no such batch or schedule: "no such job" would mislead
    if error.code in _UNREACHABLE:
        key = "error_UNAVAILABLE"
    heading_key = key if key in CATALOG else "error_OTHER"
    said = error.message if error.reason is not None and error.code not in _UNREACHABLE else ""
    return page(
        request,
        "error.html",
        status_code=_HTTP_STATUS.get(error.code, 502),
        heading_key=heading_key,
        message=said,
        reason=error.reason or "",
    )


def not_found(request: Request, *, job: bool = False) -> Response:
    heading_key = "error_NOT_FOUND" if job else "error_PAGE"
    return page(request, "error.html", status_code=404, heading_key=heading_key, message="", reason="")


def csrf_refused(request: Request) -> Response:
    return page(request, "error.html", status_code=403, heading_key="error_CSRF", message="", reason="")


def not_valid(request: Request) -> Response:
    """A form whose values the gateway cannot even send (a word where a number goes)."""
    return page(request, "error.html", status_code=400, heading_key="error_INVALID_ARGUMENT", message="", reason="")
