"""The operator's page (admin tokens): Inspect findings, workers and their leases, a job's
event trail, and Requeue. A client token is refused by the server (PERMISSION_DENIED), and
the person reads why on a 403 page.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from jobwire.client.render import fmt_time, leases_cell, status_label
from jobwire.gateway import session
from jobwire.gateway.detail import timeline
from jobwire.gateway.errors import csrf_refused
from jobwire.gateway.i18n import t
from jobwire.gateway.pages import locale_of, page
from jobwire.gateway.routes import calls_for
from jobwire.gateway.views import HANDLER_EVIDENCE, checkpoint_view
from jobwire.v1 import admin_pb2


async def evidence_page(request: Request) -> Response:
    job_no = request.query_params.get("job", "").strip()
    locale = locale_of(request)
    async with calls_for(request) as calls:
        findings = await calls.inspect()  # first: a client token stops here, with the reason
        workers = (await calls.workers()).workers
        title, events = await calls.events(job_no) if job_no else ("", [])
        saved = await calls.checkpoint(job_no) if job_no else None
    return page(
        request,
        "evidence.html",
        job_no=job_no,
        job_title=title,
        findings=[
            {
                "title": f.title,
                "kind": admin_pb2.Finding.Kind.Name(f.kind),
                "job_no": f.job_no,
                "status": status_label(f.status, locale),
                "worker": f.worker_id,
                "heartbeat": fmt_time(f.heartbeat_at, short=True),
                "detail": f.detail,
            }
            for f in findings
        ],
        workers=[
            {
                "id": w.worker_id,
                "queues": ", ".join(w.queues),
                "job_types": ", ".join(w.job_types),
                "last_seen": fmt_time(w.last_seen_at, short=True),
                "leases": leases_cell(w.leases_held, w.leases_stalled, t("leases_stalled", locale)),
                "shared_fleet": w.shared_fleet,
            }
            for w in workers
        ],
        events=timeline(events, locale),
        checkpoint=checkpoint_view(saved),
        entries=[
            {
                "time": fmt_time(e.created_at, short=True),
                "attempt": e.attempt,
                "stage": e.stage,
                "key": e.key,
                "value": e.detail,
            }
            for e in events
            if e.kind == HANDLER_EVIDENCE
        ],
    )


async def requeue(request: Request) -> Response:
    form = await request.form()
    if not session.csrf_ok(request, form.get(session.CSRF_FIELD)):
        return csrf_refused(request)
    job_no = request.path_params["job_no"]
    async with calls_for(request) as calls:
        await calls.requeue(job_no, str(form.get("reason", "")).strip())
    return RedirectResponse(f"/evidence?job={job_no}", status_code=303)
