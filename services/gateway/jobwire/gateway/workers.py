"""The workers page (admin tokens): each worker live or gone as the server decides (seen within
one lease and the stall grace), when it was last seen, what it serves and the leases it holds;
a shared fleet's workers are marked. Pages follow ListWorkers' tokens, forward and back.
"""

from __future__ import annotations

from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response

from jobwire.client.render import fmt_time
from jobwire.gateway.pages import page
from jobwire.gateway.routes import calls_for


async def workers_page(request: Request) -> Response:
    token = request.query_params.get("page", "")
    back = request.query_params.get("back", "").split(",") if token else []
    async with calls_for(request) as calls:
        found = await calls.workers(token)
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
                "leases": w.leases_held,
                "shared_fleet": w.shared_fleet,
            }
            for w in found.workers
        ],
        next_href=_href(found.next_page_token, [*back, token]) if found.next_page_token else "",
        previous_href=_href(back[-1], back[:-1]) if back else "",
    )


def _href(token: str, back: list[str]) -> str:
    return "/workers?" + urlencode({"page": token, "back": ",".join(back)}) if token else "/workers"
