"""The console's workers page: live or gone as the server decides, last seen, what each serves,
the leases it holds, a shared fleet's workers marked; an admin's page, paged."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
import sqlalchemy as sa
from console_support import ADMIN, CLIENT, FLEET, ZH, claim, submit
from db_edits import db_execute
from gateway_support import signed_in
from served import Served

from jobwire.db.tables import worker

pytestmark = pytest.mark.timeout(60)


def states(html: str) -> dict[str, str]:
    return dict(re.findall(r'<tr data-worker="([^"]+)" data-state="(\w+)"', html))


async def test_each_worker_is_live_or_gone_with_its_leases_and_a_shared_fleet_marked(
    served: Served, gateway: str
) -> None:
    await submit(served, queue="exports")
    await claim(served, queue="exports", worker_id="w-busy")
    await claim(served, queue="mail", worker_id="w-old")
    await claim(served, queue="exports", worker_id="fleet-1", token=FLEET)
    # w-old was last seen an hour ago: past a lease and the stall grace, the server calls it gone
    long_ago = served.clock.now() - timedelta(hours=1)
    await db_execute(served, sa.update(worker).where(worker.c.worker_id == "w-old").values(last_seen_at=long_ago))
    async with signed_in(gateway, ADMIN) as client:
        html = (await client.get("/workers")).text
        assert states(html) == {"fleet-1": "live", "w-busy": "live", "w-old": "gone"}
        busy = html.split('data-worker="w-busy"', 1)[1].split("</tr>", 1)[0]
        assert '<td data-field="leases">1</td>' in busy and "exports" in busy and "frames" in busy
        fleet = html.split('data-worker="fleet-1"', 1)[1].split("</tr>", 1)[0]
        assert 'data-field="shared">shared fleet</span>' in fleet
        assert "Gone" in html and "Live" in html
    async with signed_in(gateway, ADMIN, **ZH) as client:
        html = (await client.get("/workers")).text
        assert "在线" in html and "已离线" in html and "共享处理程序组" in html and "持有租约" in html


async def test_the_workers_page_pages_forward_and_back(served: Served, gateway: str) -> None:
    for i in range(105):
        await claim(served, queue="idle", worker_id=f"w-{i:03}")
    async with signed_in(gateway, ADMIN) as client:
        first = (await client.get("/workers")).text
        assert list(states(first)) == [f"w-{i:03}" for i in range(100)]
        next_href = re.search(r'<a href="([^"]+)" id="page-next">', first)
        assert next_href is not None
        second = (await client.get(next_href.group(1).replace("&amp;", "&"))).text
        assert list(states(second)) == [f"w-{i:03}" for i in range(100, 105)] and 'id="page-next"' not in second
        back = re.search(r'<a href="([^"]+)" id="page-previous">', second)
        assert back is not None and back.group(1) == "/workers"


async def test_a_client_token_is_refused_the_workers_page(gateway: str) -> None:
    async with signed_in(gateway, CLIENT) as client:
        assert (await client.get("/workers")).status_code == 403
