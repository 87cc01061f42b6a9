"""The console's jobs page: search by number, filters, paging both ways, the new columns, and
cancel or retry of several ticked jobs at once (CSRF, each job checked by the server)."""

from __future__ import annotations

import json
import re

import pytest
from console_support import CLIENT, OTHER, ZH, claim, complete, csrf, fail, submit
from gateway_support import signed_in
from served import Served

from jobwire.v1 import job_pb2

pytestmark = pytest.mark.timeout(90)


def rows(html: str) -> list[str]:
    """The job numbers of the jobs table, in order."""
    body = html.split('<table id="jobs"', 1)[1].split("</table>", 1)[0]
    return re.findall(r'<tr data-job="([^"]+)"', body)


def link(html: str, anchor: str) -> str:
    found = re.search(rf'<a href="([^"]+)" id="{anchor}">', html)
    return found.group(1).replace("&amp;", "&") if found else ""


async def _status(served: Served, job_no: str) -> int:
    return (await served.jobs.Get(job_pb2.GetRequest(job_no=job_no), metadata=CLIENT.metadata)).status


async def test_a_job_number_finds_that_job_and_filters_narrow_the_list(served: Served, gateway: str) -> None:
    red = await submit(served, queue="exports", owner="ann", labels={"team": "red"})
    blue = await submit(served, queue="exports", owner="bob", labels={"team": "blue"})
    mail = await submit(served, job_type="report", queue="mail", owner="ann")
    await submit(served, OTHER, queue="exports")  # another tenant's: never listed
    async with signed_in(gateway, CLIENT) as client:
        assert rows((await client.get("/jobs")).text) == [mail.job_no, blue.job_no, red.job_no]
        assert rows((await client.get("/jobs", params={"job_no": blue.job_no})).text) == [blue.job_no]
        assert rows((await client.get("/jobs", params={"job_no": f" {blue.job_no} "})).text) == [blue.job_no]
        nothing = (await client.get("/jobs", params={"job_no": "PT-20000101-999"})).text
        assert rows(nothing) == [] and 'id="empty"' in nothing and 'id="empty" hidden' not in nothing
        assert rows((await client.get("/jobs", params={"job_no": "not a number"})).text) == []
        assert rows((await client.get("/jobs", params={"queue": "exports"})).text) == [blue.job_no, red.job_no]
        assert rows((await client.get("/jobs", params={"job_type": "report"})).text) == [mail.job_no]
        assert rows((await client.get("/jobs", params={"owner": "ann"})).text) == [mail.job_no, red.job_no]
        assert rows((await client.get("/jobs", params={"label": "team=red"})).text) == [red.job_no]
        both = {"owner": "ann", "queue": "exports", "status": "QUEUED"}
        page = (await client.get("/jobs", params=both)).text
        assert rows(page) == [red.job_no]
        assert 'id="f-owner" name="owner" value="ann"' in page and 'value="QUEUED" selected' in page
        # the page's live stream asks for the same filters, so new rows are the ones a reload lists
        assert "/live/jobs?status=QUEUED&amp;queue=exports&amp;owner=ann&amp;" in page


async def test_the_first_pages_stream_brings_only_new_jobs_its_filters_let_through(
    served: Served, gateway: str
) -> None:
    page = {"queue": "wanted", "label": "team=red"}
    async with signed_in(gateway, CLIENT) as client, client.stream("GET", "/live/jobs", params=page) as stream:
        await submit(served, queue="other", labels={"team": "red"})
        await submit(served, queue="wanted", labels={"team": "blue"})
        match = await submit(served, queue="wanted", labels={"team": "red"})
        name = ""
        async for line in stream.aiter_lines():
            if line.startswith("event: "):
                name = line.removeprefix("event: ")
            elif line.startswith("data: ") and name == "listed":
                listed = json.loads(line.removeprefix("data: "))
                break
        assert listed["order"] == [match.job_no] and [r["job_no"] for r in listed["rows"]] == [match.job_no]
        assert "<td>wanted</td>" in listed["rows"][0]["html"]


async def test_the_columns_say_title_queue_type_created_started_and_duration(served: Served, gateway: str) -> None:
    await submit(served, queue="exports", title="Export March invoices")
    (lease,) = await claim(served, queue="exports")
    await complete(served, lease, b"{}", "application/json")
    async with signed_in(gateway, CLIENT) as client:
        page = (await client.get("/jobs")).text
        row = page.split(f'<tr data-job="{lease.job_no}"', 1)[1].split("</tr>", 1)[0]
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
        assert cells[1] == "Export March invoices"  # the title first, after the tick box
        assert cells[3:5] == ["exports", "frames"]
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ", cells[9]) and re.fullmatch(r"\d{4}-.*Z", cells[10])
        assert re.fullmatch(r"\d+:\d\d", cells[11])
        for heading in ("Title", "Queue", "Type", "Created", "Started", "Duration"):
            assert f"<th>{heading}</th>" in page


async def test_paging_goes_forward_to_the_last_job_and_back(served: Served, gateway: str) -> None:
    made = [(await submit(served, queue="pages")).job_no for _ in range(120)]
    newest_first = made[::-1]
    async with signed_in(gateway, CLIENT) as client:
        first = (await client.get("/jobs", params={"queue": "pages"})).text
        assert rows(first) == newest_first[:50] and not link(first, "page-previous")
        second = (await client.get(link(first, "page-next"))).text
        assert rows(second) == newest_first[50:100]
        third = (await client.get(link(second, "page-next"))).text
        assert rows(third) == newest_first[100:] and not link(third, "page-next")
        assert made[0] in rows(third)  # the first job made, 120th newest, is reached
        assert "queue=pages" in link(third, "page-previous")  # the filter rides along
        back = (await client.get(link(third, "page-previous"))).text
        assert rows(back) == newest_first[50:100]
        assert rows((await client.get(link(back, "page-previous"))).text) == newest_first[:50]


async def test_bulk_cancel_cancels_exactly_the_ticked_jobs(served: Served, gateway: str) -> None:
    await submit(served, queue="ended")
    (lease,) = await claim(served, queue="ended")
    ended = (await complete(served, lease, b"{}", "application/json")).job_no
    jobs = [(await submit(served, queue="bulk", title=f"Export <{i}> & more")).job_no for i in range(5)]
    ticked = jobs[1:4]
    async with signed_in(gateway, CLIENT) as client:
        page = (await client.get("/jobs")).text
        assert page.count('form="bulk"') == 6 and 'id="bulk-cancel"' in page
        refused = await client.post("/jobs/bulk", data={"csrf": "guessed", "action": "cancel", "job": ticked})
        assert refused.status_code == 403
        assert {await _status(served, n) for n in jobs} == {job_pb2.Job.QUEUED}

        form = {**csrf(client, action="cancel", back="/jobs?queue=bulk"), "job": ticked}
        done = await client.post("/jobs/bulk", data=form)
        assert done.status_code == 200
        assert re.findall(r'<tr data-job="([^"]+)" data-done="yes"', done.text) == ticked
        titles = re.findall(r'data-done="yes">\s*<td class="title">([^<]*)</td>', done.text)  # first, escaped
        assert titles == [f"Export &lt;{i}&gt; &amp; more" for i in (1, 2, 3)]
        assert 'href="/jobs?queue=bulk" id="back"' in done.text
        for n in jobs:
            assert await _status(served, n) == (job_pb2.Job.CANCELLED if n in ticked else job_pb2.Job.QUEUED)

        again = await client.post("/jobs/bulk", data={**csrf(client, action="cancel"), "job": [jobs[0], ended]})
        outcome = dict(re.findall(r'<tr data-job="([^"]+)" data-done="(\w+)"', again.text))
        assert outcome == {jobs[0]: "yes", ended: "no"}  # a READY job is refused, and the page says so
        assert await _status(served, jobs[0]) == job_pb2.Job.CANCELLED

        assert (await client.post("/jobs/bulk", data=csrf(client, action="cancel"))).status_code == 400  # none ticked
        unknown = await client.post("/jobs/bulk", data={**csrf(client, action="delete"), "job": jobs[4]})
        assert unknown.status_code == 400


async def test_bulk_retry_queues_the_failed_jobs_again(served: Served, gateway: str) -> None:
    failed = []
    for _ in range(2):
        await submit(served, queue="flaky", retry_policy=job_pb2.RetryPolicy(max_attempts=1))
        (lease,) = await claim(served, queue="flaky")
        await fail(served, lease, retryable=True)
        failed.append(lease.job_no)
    async with signed_in(gateway, CLIENT) as client:
        done = await client.post("/jobs/bulk", data={**csrf(client, action="retry"), "job": failed})
        assert re.findall(r'data-done="(\w+)"', done.text) == ["yes", "yes"] and "Retry: each selected job" in done.text
    assert [await _status(served, n) for n in failed] == [job_pb2.Job.QUEUED] * 2


async def test_the_jobs_page_speaks_zh_cn(served: Served, gateway: str) -> None:
    await submit(served, queue="exports")
    async with signed_in(gateway, CLIENT, **ZH) as client:
        page = (await client.get("/jobs")).text
        words = (
            "任务编号",
            "队列",
            "所有者",
            "标签（键=值）",
            "创建时间",
            "开始时间",
            "耗时",
            "取消所选",
            "重试所选",
            "搜索",
        )
        for word in words:
            assert word in page, word
