"""The console's queue page: counts from ListQueues, the last hour drawn as an SVG by the
server, pause, resume and limits behind the admin role and the CSRF token, en and zh-CN."""

from __future__ import annotations

import re

import pytest
from console_support import ADMIN, CLIENT, OTHER, ZH, claim, complete, csrf, submit
from gateway_support import signed_in
from served import Served

from jobwire.gateway.chart import chart, nice_top
from jobwire.v1 import admin_pb2

pytestmark = pytest.mark.timeout(60)


def _cell(html: str, queue: str, field: str) -> str:
    row = re.search(rf'<tr data-queue="{queue}".*?</tr>', html, re.S)
    assert row, queue
    found = re.search(rf'data-field="{field}"[^>]*>([^<]*)<', row.group(0))
    assert found, field
    return found.group(1).strip()


async def _limits(served: Served, queue: str) -> admin_pb2.QueueLimitsResponse:
    return await served.admin.GetQueueLimits(admin_pb2.GetQueueLimitsRequest(queue=queue), metadata=ADMIN.metadata)


async def test_an_admin_sees_each_queues_counts_and_its_hour_drawn(served: Served, gateway: str) -> None:
    for _ in range(3):
        await submit(served, queue="exports")
    await submit(served, queue="mail")
    await submit(served, OTHER, queue="secret")  # another tenant's queue
    (lease,) = await claim(served, queue="exports")
    await complete(served, lease, b"{}", "application/json")
    await claim(served, queue="exports")
    async with signed_in(gateway, ADMIN) as client:
        page = await client.get("/queues")
        assert page.status_code == 200
        html = page.text
        assert 'data-queue="secret"' not in html
        assert [_cell(html, "exports", f) for f in ("queued", "running", "finished", "failed")] == ["1", "1", "1", "0"]
        assert [_cell(html, "mail", f) for f in ("queued", "running")] == ["1", "0"]
        assert re.fullmatch(r"\d+:\d\d", _cell(html, "exports", "oldest"))
        assert _cell(html, "exports", "state") == "Active"
        # the chart: three lines of 60 points each, their totals the page's figures
        exports = html[html.index('<section class="queue" data-queue="exports"') :]
        lines = re.findall(r'data-series="(\w+)" data-total="(\d+)" points="([^"]*)"', exports)[:3]
        assert {series: total for series, total, _ in lines} == {"submitted": "3", "finished": "1", "failed": "0"}
        assert [len(points.split()) for _, _, points in lines] == [60, 60, 60]
        assert "<script" not in exports and "http" not in exports.split("</figure>")[0]  # drawn here, nothing fetched


async def test_a_client_token_is_refused_the_queue_page(served: Served, gateway: str) -> None:
    async with signed_in(gateway, CLIENT) as client:
        page = await client.get("/queues")
        assert page.status_code == 403 and "Your token may not see this page." in page.text
        refused = await client.post("/queues/exports/pause", data=csrf(client))
        assert refused.status_code == 403
    assert not (await _limits(served, "exports")).paused


async def test_pause_resume_and_limits_through_the_page(served: Served, gateway: str) -> None:
    await submit(served, queue="exports")
    async with signed_in(gateway, ADMIN) as client:
        forged = await client.post("/queues/exports/pause", data={"csrf": "guessed"})
        assert forged.status_code == 403 and not (await _limits(served, "exports")).paused

        paused = await client.post("/queues/exports/pause", data=csrf(client))
        assert paused.status_code == 303 and paused.headers["location"] == "/queues#queue-exports"
        assert (await _limits(served, "exports")).paused
        assert await claim(served, queue="exports") == []  # held: nothing leased from a paused queue
        html = (await client.get("/queues")).text
        assert _cell(html, "exports", "state") == "Paused" and 'data-action="resume"' in html

        assert (await client.post("/queues/exports/resume", data=csrf(client))).status_code == 303
        assert not (await _limits(served, "exports")).paused

        form = csrf(client, max_running="2", rate_per_second="1.5", burst="3")
        assert (await client.post("/queues/exports/limits", data=form)).status_code == 303
        limits = (await _limits(served, "exports")).limits
        assert (limits.max_running, limits.rate_per_second, limits.burst) == (2, 1.5, 3)
        html = (await client.get("/queues")).text
        assert 'name="max_running" type="number" min="0" step="1" value="2"' in html

        word = await client.post("/queues/exports/limits", data=csrf(client, max_running="two"))
        assert word.status_code == 400
        refused = await client.post("/queues/exports/limits", data=csrf(client, burst="4"))  # a burst needs a rate
        assert refused.status_code == 400 and "a burst needs a rate_per_second" in refused.text
        assert (await _limits(served, "exports")).limits.max_running == 2  # unchanged by either


async def test_the_queue_page_speaks_zh_cn(served: Served, gateway: str) -> None:
    await submit(served, queue="exports")
    async with signed_in(gateway, ADMIN, **ZH) as client:
        html = (await client.get("/queues")).text
        for word in (
            "队列",
            "排队中",
            "运行中",
            "等待审核",
            "最久可运行",
            "暂停",
            "设置限制",
            "已提交",
            "已完成",
            "失败",
        ):
            assert word in html, word
        assert _cell(html, "exports", "state") == "正常"


def test_the_scale_tops_at_a_round_number_over_the_busiest_minute() -> None:
    assert [nice_top(n) for n in (0, 1, 2, 3, 7, 10, 11, 60, 101)] == [1, 1, 2, 5, 10, 10, 20, 100, 200]
    minutes = [admin_pb2.QueueMinute(submitted=n, finished=0, failed=0) for n in (0, 5, 10)]
    drawn = chart(minutes)
    submitted = drawn.lines[0].points.split()
    assert drawn.top == 10 and drawn.lines[0].total == 15
    ys = [float(p.split(",")[1]) for p in submitted]
    assert ys[0] == drawn.bottom_y and ys[2] == drawn.top_y and ys[1] == (drawn.top_y + drawn.bottom_y) / 2
