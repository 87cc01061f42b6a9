"""The console's job page: the payload (pretty JSON, cut at 64 KiB, escaped), a READY job's
result preview, its dependencies and batch as links, and for an admin its timeline with
tracebacks folded to their first line."""

from __future__ import annotations

import json
import re

import pytest
from console_support import ADMIN, CLIENT, ZH, claim, complete, fail, submit
from gateway_support import signed_in
from served import Served

from jobwire.v1 import job_pb2

pytestmark = pytest.mark.timeout(60)
TRACEBACK = (
    "Traceback (most recent call last):\n"
    + "".join(f'  File "/srv/app/step_{i}.py", line {i}, in run\n    {"x" * 300}\n' for i in range(40))
    + "ValueError: the codec gave up"
)


def pre(html: str, id_: str) -> str:
    found = re.search(rf'<pre class="preview" id="{id_}" data-kind="\w+">(.*?)</pre>', html, re.S)
    assert found, id_
    return found.group(1)


async def test_the_payload_shows_as_pretty_json_escaped(served: Served, gateway: str) -> None:
    payload = {"name": "<script>alert(1)</script>", "frames": [1, 2]}
    job = await submit(served, payload=json.dumps(payload, separators=(",", ":")).encode())
    async with signed_in(gateway, CLIENT) as client:
        page = (await client.get(f"/jobs/{job.job_no}")).text
        shown = pre(page, "payload-preview")
        assert shown == json.dumps(payload, indent=2).replace("<", "&lt;").replace(">", "&gt;").replace('"', "&#34;")
        assert "<script>alert" not in page
        assert 'data-kind="json"' in page


async def test_a_long_payload_is_cut_and_bytes_that_are_not_text_are_described(served: Served, gateway: str) -> None:
    long = await submit(served, payload=b"line of text\n" * 20_000)  # 260 KB
    binary = await submit(served, payload=bytes(range(256)))
    empty = await submit(served)
    async with signed_in(gateway, CLIENT) as client:
        page = (await client.get(f"/jobs/{long.job_no}")).text
        assert len(pre(page, "payload-preview")) == 64 * 1024 and "The first 64 KiB of 253.9 KiB" in page
        page = (await client.get(f"/jobs/{binary.job_no}")).text
        assert "payload-preview" not in page and "256 bytes, not text: not shown." in page
        assert "No payload." in (await client.get(f"/jobs/{empty.job_no}")).text


async def test_a_ready_jobs_result_is_previewed_when_small_and_described_when_not(served: Served, gateway: str) -> None:
    results = {
        "json": (b'{"rows": 3, "ok": true}', "application/json"),
        "text": (b"3 rows imported\n", "text/plain"),
        "large": (b"x" * (64 * 1024 + 1), "text/plain"),
        "zip": (b"PK\x03\x04" + bytes(100), "application/zip"),
    }
    jobs = {}
    for name, (data, content_type) in results.items():
        await submit(served, queue=name)
        (lease,) = await claim(served, queue=name)
        jobs[name] = (await complete(served, lease, data, content_type)).job_no
    async with signed_in(gateway, CLIENT) as client:
        page = (await client.get(f"/jobs/{jobs['json']}")).text
        assert pre(page, "result-preview") == "{\n  &#34;rows&#34;: 3,\n  &#34;ok&#34;: true\n}"
        assert pre((await client.get(f"/jobs/{jobs['text']}")).text, "result-preview") == "3 rows imported\n"
        large = (await client.get(f"/jobs/{jobs['large']}")).text
        assert "result-preview" not in large and "64.0 KiB (65,537 bytes), text/plain: too large" in large
        assert f'href="/jobs/{jobs["large"]}/result" id="download" data-action="download">' in large
        binary = (await client.get(f"/jobs/{jobs['zip']}")).text
        assert "result-preview" not in binary and "104 bytes, application/zip" in binary
        queued = await submit(served, queue="later")
        assert 'id="result"' not in (await client.get(f"/jobs/{queued.job_no}")).text


async def test_dependencies_and_the_batch_are_links(served: Served, gateway: str) -> None:
    first = await submit(served)
    second = await submit(served, depends_on=[first.job_no])
    batch = await served.jobs.SubmitBatch(
        job_pb2.SubmitBatchRequest(jobs=[job_pb2.SubmitRequest(job_type="frames")]), metadata=CLIENT.metadata
    )
    async with signed_in(gateway, CLIENT) as client:
        page = (await client.get(f"/jobs/{second.job_no}")).text
        assert f'<dd id="depends-on"><a href="/jobs/{first.job_no}">{first.job_no}</a></dd>' in page
        page = (await client.get(f"/jobs/{batch.jobs[0].job_no}")).text
        assert f'<a href="/batches/{batch.batch_id}" id="batch">' in page


async def test_an_admin_reads_the_timeline_with_the_traceback_folded(served: Served, gateway: str) -> None:
    job = await submit(served, queue="tb")
    (lease,) = await claim(served, queue="tb", worker_id="w-7")
    await fail(served, lease, "the codec gave up", detail=TRACEBACK)
    async with signed_in(gateway, CLIENT) as client:
        page = (await client.get(f"/jobs/{job.job_no}")).text
        assert 'id="timeline"' not in page and "Traceback" not in page  # evidence is an operator's
    async with signed_in(gateway, ADMIN) as client:
        page = (await client.get(f"/jobs/{job.job_no}")).text
        kinds = re.findall(r'<tr data-kind="(\w+)">', page)
        assert kinds[:2] == ["SUBMITTED", "CLAIMED"] and "FAILED" in kinds
        assert "worker w-7" in page and "a person" in page
        folded = re.search(r'<details class="fold"><summary>([^<]*)</summary><pre>([^<]*)</pre></details>', page)
        assert folded is not None, "the traceback is folded"
        first, whole = folded.groups()
        assert first == "PROCESSING_ERROR: the codec gave up"  # the first line only
        assert whole.startswith(first) and "ValueError: the codec gave up" in whole  # the rest, on a click
        assert 'id="force-retry"' in page  # an admin, a failure that is not retryable
        evidence = (await client.get("/evidence", params={"job": job.job_no})).text
        assert '<details class="fold">' in evidence  # the evidence page folds the same way


async def test_the_job_page_speaks_zh_cn(served: Served, gateway: str) -> None:
    job = await submit(served, payload=b"{}")
    async with signed_in(gateway, ADMIN, **ZH) as client:
        page = (await client.get(f"/jobs/{job.job_no}")).text
        for word in ("输入数据", "时间线", "执行者", "用户", "队列", "开始时间", "耗时"):
            assert word in page, word
