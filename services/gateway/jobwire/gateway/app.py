"""The gateway's composition root: routes, static files, and failed calls turned into pages."""

from __future__ import annotations

from pathlib import Path

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from jobwire.client import ClientError
from jobwire.gateway import batches, evidence, queues, routes, schedules, sse, workers
from jobwire.gateway.budget import LiveBudget
from jobwire.gateway.errors import error_response, not_found
from jobwire.gateway.metrics import CountRequests, GatewayMetrics
from jobwire.gateway.settings import GatewaySettings


async def _home(request: Request) -> Response:
    return RedirectResponse("/jobs", status_code=303)


async def _client_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ClientError)
    return error_response(request, exc)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        return not_found(request)
    return Response(status_code=exc.status_code)


def build_app(settings: GatewaySettings) -> Starlette:
    """The ASGI app; `settings.service` is the job service every call goes to.

    Its numbers are in `app.state.metrics` (served apart, on JOBWIRE_GATEWAY_METRICS_LISTEN).
    """
    metrics = GatewayMetrics()
    app = Starlette(
        routes=[
            Route("/", _home),
            Route("/signin", routes.signin_form, methods=["GET"]),
            Route("/signin", routes.signin, methods=["POST"]),
            Route("/signout", routes.signout, methods=["POST"]),
            Route("/lang/{locale}", routes.choose_language),
            Route("/jobs", routes.jobs_page),
            Route("/live", routes.jobs_stream),
            Route("/live/jobs", routes.jobs_page_stream),
            Route("/jobs/bulk", routes.bulk, methods=["POST"]),
            Route("/jobs/{job_no}", routes.job_page),
            Route("/jobs/{job_no}/result", routes.download),
            Route("/jobs/{job_no}/cancel", routes.cancel, methods=["POST"]),
            Route("/jobs/{job_no}/retry", routes.retry, methods=["POST"]),
            Route("/jobs/{job_no}/force-retry", routes.force_retry, methods=["POST"]),
            Route("/queues", queues.queues_page),
            Route("/queues/{queue}/pause", queues.pause, methods=["POST"]),
            Route("/queues/{queue}/resume", queues.resume, methods=["POST"]),
            Route("/queues/{queue}/limits", queues.set_limits, methods=["POST"]),
            Route("/workers", workers.workers_page),
            Route("/schedules", schedules.schedules_page),
            Route("/schedules/{schedule_id}", schedules.schedule_page),
            Route("/schedules/{schedule_id}/pause", schedules.pause, methods=["POST"]),
            Route("/schedules/{schedule_id}/resume", schedules.resume, methods=["POST"]),
            Route("/schedules/{schedule_id}/delete", schedules.delete, methods=["POST"]),
            Route("/batches/{batch_id}", batches.batch_page),
            Route("/batches/{batch_id}/cancel", batches.cancel, methods=["POST"]),
            Route("/evidence", evidence.evidence_page),
            Route("/evidence/{job_no}/requeue", evidence.requeue, methods=["POST"]),
            Mount("/static", StaticFiles(directory=Path(__file__).parent / "static"), name="static"),
        ],
        exception_handlers={ClientError: _client_error, HTTPException: _http_error},
        middleware=[Middleware(CountRequests, metrics=metrics)],
    )
    app.state.settings = settings
    app.state.metrics = metrics
    app.state.budget = LiveBudget(max_streams=settings.max_streams, max_watched=settings.max_watched)
    # Pages re-read ListJobs every POLL_S; a read younger than half that serves every page of its key.
    app.state.listings = sse.Listings(fresh_s=sse.POLL_S / 2)
    return app
