"""The console's batch page: counts by status, finished of total, its jobs paged, and cancel."""

from __future__ import annotations

import re

import pytest
from console_support import CLIENT, ZH, claim, complete, csrf
from gateway_support import signed_in
from served import Served

from jobwire.v1 import job_pb2

pytestmark = pytest.mark.timeout(60)


async def _batch(served: Served, n: int) -> job_pb2.SubmitBatchResponse:
    jobs = [job_pb2.SubmitRequest(job_type="frames", queue="batched")] * n
    return await served.jobs.SubmitBatch(job_pb2.SubmitBatchRequest(jobs=jobs), metadata=CLIENT.metadata)


def counts(html: str) -> dict[str, str]:
    return dict(re.findall(r'<td data-count="(\w+)">(\d+)</td>', html))


def rows(html: str) -> list[str]:
    return re.findall(r'<tr data-job="([^"]+)"', html.split('<table id="jobs"', 1)[1])


async def test_the_batch_page_counts_pages_and_cancels(served: Served, gateway: str) -> None:
    batch = await _batch(served, 60)
    made = [job.job_no for job in batch.jobs]
    (lease,) = await claim(served, queue="batched")
    await complete(served, lease, b"{}", "application/json")
    await claim(served, queue="batched")
    async with signed_in(gateway, CLIENT) as client:
        page = (await client.get(f"/batches/{batch.batch_id}")).text
        assert counts(page) == {
            "queued": "58", "waiting": "0", "running": "1", "cancel_requested": "0", "ready": "1", "failed": "0",
            "cancelled": "0",
        }  # fmt: skip
        assert "1 of 60 finished" in page and 'value="2"' in page  # 1/60 rounds to 2 %
        assert rows(page) == made[::-1][:50]
        next_href = re.search(r'<a href="([^"]+)" id="page-next">', page)
        assert next_href is not None and next_href.group(1).startswith(f"/batches/{batch.batch_id}?page=")
        rest = (await client.get(next_href.group(1).replace("&amp;", "&"))).text
        assert rows(rest) == made[::-1][50:]

        assert (await client.post(f"/batches/{batch.batch_id}/cancel", data={"csrf": "guessed"})).status_code == 403
        assert "Cancel its 59 unfinished jobs" in page
        done = await client.post(f"/batches/{batch.batch_id}/cancel", data=csrf(client))
        assert done.status_code == 303
        after = counts((await client.get(done.headers["location"])).text)
        assert (after["cancelled"], after["cancel_requested"], after["ready"]) == ("58", "1", "1")


async def test_an_unknown_or_malformed_batch_is_not_found(served: Served, gateway: str) -> None:
    async with signed_in(gateway, CLIENT) as client:
        assert (await client.get("/batches/B-" + "0" * 20)).status_code == 404
        assert (await client.get("/batches/nonsense")).status_code == 404


async def test_the_batch_page_speaks_zh_cn(served: Served, gateway: str) -> None:
    batch = await _batch(served, 2)
    async with signed_in(gateway, CLIENT, **ZH) as client:
        page = (await client.get(f"/batches/{batch.batch_id}")).text
        for word in ("批次", "已结束 0 / 2", "排队中", "取消其中 2 个未结束的任务", "批次中的任务"):
            assert word in page, word
