"""The workers page (admin tokens): each worker live or gone as the server decides (seen within
one lease and the stall grace), when it was last seen, what it serves and the leases it holds;
a shared fleet's workers are marked. Pages follow ListWorkers' tokens, forward and back.
"""

from __future__ import annotations

from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response

from jobwire.client.render import fmt_time, leases_cell
from jobwire.gateway.i18n import t
from jobwire.gateway.pages import locale_of, page
from jobwire.gateway.routes import calls_for


async def workers_page(request: Request) -> Response:
    token = request.query_params.get("page", "")
    back = request.query_params.get("back", "").split(",") if token else []
    async with calls_for(request) as calls:
        found = await calls.workers(token)
    stalled = t("leases_stalled", locale_of(request))
    return page(
        request,
        "workers.html",
        workers=[
            {
                "id": w.worker_id,
                "live": w.live,
                "last_seen": fmt_time(w.last_seen_at),
                "queues": ", ".join(w.queues),
                "job_types": ", ".join(w.job_types),
                "leases": leases_cell(w.leases_held, w.leases_stalled, stalled),
                "shared_fleet": w.shared_fleet,
            }
            for w in found.workers
        ],
        next_href=_href(found.next_page_token, [*back, token]) if found.next_page_token else "",
        previous_href=_href(back[-1], back[:-1]) if back else "",
    )


def _href(token: str, back: list[str]) -> str:
    return "/workers?" + urlencode({"page": token, "back": ",".join(back)}) if token else "/workers"
