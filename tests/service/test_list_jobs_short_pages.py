"""Short and empty ListJobs pages that carry a token: every reader of the list follows them.

Where no index serves every filter (here owner and job type: the owner's index leads and the
job type is checked), one call looks at JOBWIRE_LIST_SCAN_ROWS rows at most and may answer
with fewer jobs than asked, or none, and a token to go on. The Python clients, `jobctl list`
and the gateway's /jobs pages must then show the later pages, not stop at the short one.
On SQLite: what they read is the wire; the store's bound is tested on both databases in
tests/store/test_store_list_pages.py.
"""

from __future__ import annotations

import asyncio
import io
import json
import re
from collections.abc import Awaitable, Callable

import pytest
from auth_files import Token
from gateway_support import running_gateway, signed_in
from rich.console import Console
from served import Served

from jobwire.client import AsyncJobClient, JobClient
from jobwire.client.cli import run
from jobwire.v1 import job_pb2

pytestmark = pytest.mark.timeout(60)
SCAN_ROWS = 4
OWNER = "ann"
ANYONE = Token("any-token", tenant="default")  # no auth file: every caller is tenant "default"


@pytest.fixture
async def served(serve: Callable[..., Awaitable[Served]]) -> Served:
    return await serve(list_scan_rows=SCAN_ROWS)


async def _reports_under_frames(served: Served) -> list[str]:
    """Two `report` jobs of OWNER under 20 `frames` jobs of OWNER: the reports, newest first."""
    reports = []
    for n in range(22):
        request = job_pb2.SubmitRequest(job_type="report" if n < 2 else "frames", owner=OWNER)
        job_no = (await served.jobs.Submit(request)).job.job_no
        reports += [job_no] if n < 2 else []
    return reports[::-1]


async def test_the_server_answers_short_and_empty_pages_with_a_token(served: Served) -> None:
    reports = await _reports_under_frames(served)
    request = job_pb2.ListJobsRequest(owner=OWNER, job_type="report", page_size=10)
    pages = []
    while True:
        reply = await served.jobs.ListJobs(request)
        pages.append([job.job_no for job in reply.jobs])
        if not reply.next_page_token:
            break
        request.page_token = reply.next_page_token
    assert [n for page in pages for n in page] == reports
    assert pages[0] == []  # 4 frames looked at, none a report: nothing yet, and a token
    assert len(pages) == 22 // SCAN_ROWS + 1


async def test_the_python_clients_list_every_job_across_short_pages(served: Served) -> None:
    reports = await _reports_under_frames(served)
    async with AsyncJobClient.connect(served.target) as client:
        assert [j.job_no async for j in client.list_jobs(owner=OWNER, job_type="report", page_size=10)] == reports
        pages = [page async for page in client.list_job_pages(owner=OWNER, job_type="report")]
        assert not pages[0].jobs and pages[0].next_page_token  # the first page: none yet, and a token
        assert [j.job_no for page in pages for j in page.jobs] == reports

    def listed() -> list[str]:
        with JobClient.connect(served.target) as sync:
            return [j.job_no for j in sync.list_jobs(owner=OWNER, job_type="report", limit=5)]

    assert await asyncio.to_thread(listed) == reports


async def test_jobctl_list_shows_the_jobs_of_later_pages(served: Served) -> None:
    reports = await _reports_under_frames(served)

    def jobctl(*argv: str) -> str:
        out = Console(file=io.StringIO(), width=300, color_system=None)
        assert run(["--target", served.target, *argv], out=out, err=out, env={}) == 0
        return out.file.getvalue()  # type: ignore[attr-defined,no-any-return]

    listed = json.loads(await asyncio.to_thread(jobctl, "--json", "list", "--owner", OWNER, "--type", "report"))
    assert [job["job_no"] for job in listed] == reports
    table = await asyncio.to_thread(jobctl, "list", "--owner", OWNER, "--type", "report")
    assert re.findall(r"PT-\d{8}-\d+", table) == reports


async def test_the_gateway_pages_on_past_a_page_with_no_jobs(served: Served) -> None:
    reports = await _reports_under_frames(served)
    seen: list[str] = []
    with running_gateway(served.target) as gateway:
        async with signed_in(gateway, ANYONE) as browser:
            page = await browser.get("/jobs", params={"owner": OWNER, "job_type": "report"})
            assert "No jobs on this page; the search goes on with the next page." in page.text
            for _ in range(22):
                seen += [n for n in dict.fromkeys(re.findall(r"PT-\d{8}-\d+", page.text)) if n not in seen]
                more = re.search(r'<a href="([^"]+)" id="page-next">', page.text)
                if more is None:
                    break
                page = await browser.get(more.group(1).replace("&amp;", "&"))
    assert seen == reports
