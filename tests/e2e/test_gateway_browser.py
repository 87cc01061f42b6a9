"""The web gateway in a real headless Chromium (Debian's package, driven by Playwright).

A real server process (`python -m jobwire serve` with an auth file), a real fleet worker
process running the example handlers, and the gateway on a real uvicorn. A person signs in,
watches a job's stage and units change without a reload, cancels it, downloads a result,
reads the page in zh-CN, and is refused the evidence page with a client token. The
operator's console: a queue's counts and a pause that holds the next claim, a schedule's
next firing, a batch's counts, search, filters and paging to the 150th job, a bulk cancel of
exactly the 3 ticked, a job's payload, result preview and timeline, a killed worker marked
gone, a traceback, a long title, error message and evidence value that do not widen the
page, zh-CN on each. A job's title is what each page shows first; an admin reads the
handler's evidence and the latest checkpoint.
Screenshots of the pages land in docs/ when JOBWIRE_GATEWAY_SCREENSHOTS=1 (docs/gateway.md
shows them).

The browser is never downloaded: without /usr/bin/chromium (or Playwright) this skips on a
laptop and fails under CI (`.ci/run` installs chromium first).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from auth_files import Token, write_auth_file
from gateway_support import running_gateway
from google.protobuf import duration_pb2
from processes import ServerProcess, start_server_process

from jobwire.client import AdminClient, JobClient
from jobwire.v1 import job_pb2, schedule_pb2, schedule_pb2_grpc, worker_pb2, worker_pb2_grpc

pytestmark = pytest.mark.timeout(180)

CHROMIUM = Path("/usr/bin/chromium")
BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]
REQUIRED = os.environ.get("JOBWIRE_REQUIRE_MYSQL") == "1" or bool(os.environ.get("CI"))
CLIENT = Token("browser-client-token", tenant="acme")
ADMIN = Token("browser-admin-token", tenant="acme", role="admin")
WORKER = Token("browser-worker-token", tenant="acme", role="worker")
NEWCOMER = Token("browser-newcomer-token", tenant="initech")  # a tenant with no job yet
OPERATOR = Token("browser-operator-token", tenant="acme", roles=("client", "admin"), name="olivia")
WAIT_MS = 60_000
PERCENT = re.compile(r"^\d+%$")


def _absent(why: str) -> None:
    if REQUIRED:
        pytest.fail(why)
    pytest.skip(why)


@dataclass
class Stack:
    root: Path
    server: ServerProcess
    gateway: str
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def client(self, token: Token = CLIENT) -> JobClient:
        return JobClient.connect(self.server.target, token=token.secret, timeout=10)

    def start_worker(self) -> None:
        """The example fleet worker (frames and friends), as compose runs it; once."""
        if self.workers:
            return
        env = {**os.environ, "JOBWIRE_TOKEN": WORKER.secret}
        for name in ("JOBWIRE_TARGET", "JOBWIRE_RESULTS_DIR", "JOBWIRE_RESULTS_URL"):
            env.pop(name, None)
        host = self.root / "worker-host"
        host.mkdir()
        args = [str(BIN / "jobwire-worker"), "--target", self.server.target, "--handlers", "jobwire.examples:handlers",
                "--claim-wait", "1", "--grace-seconds", "5"]  # fmt: skip
        log = (self.root / "worker.log").open("wb")
        self.workers.append(subprocess.Popen(args, env=env, cwd=host, stdout=log, stderr=subprocess.STDOUT))


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("gateway-browser")
    auth = write_auth_file(root / "auth.toml", [CLIENT, ADMIN, WORKER, NEWCOMER, OPERATOR])
    env = {
        "JOBWIRE_DATABASE_URL": f"sqlite:///{root / 'jobwire.db'}",
        "JOBWIRE_LISTEN": "127.0.0.1:0",
        "JOBWIRE_AUTH_FILE": str(auth),
        "JOBWIRE_PROCESSES": "1",
    }
    server = start_server_process(["jobwire", "serve"], env)
    try:
        with running_gateway(server.target) as gateway:
            s = Stack(root, server, gateway)
            try:
                yield s
            finally:
                for proc in s.workers:
                    proc.terminate()
                    proc.wait(30)
    finally:
        server.kill()
        print(f"----- server\n{server.tail()}")
        log = root / "worker.log"
        if log.exists():
            print(f"----- worker\n{log.read_text(errors='replace')[-4000:]}")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists():
        _absent(f"Debian's chromium is not installed at {CHROMIUM} (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _absent("Playwright for Python is not installed (make install)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Any, stack: Stack) -> Iterator[Any]:
    context = browser.new_context(
        base_url=stack.gateway, locale="en-US", viewport={"width": 1000, "height": 620}, accept_downloads=True
    )
    context.set_default_timeout(WAIT_MS)
    try:
        yield context.new_page()
    finally:
        context.close()


def sign_in(page: Any, token: Token) -> None:
    page.goto("/signin")
    page.fill("#token", token.secret)
    page.click("#signin")
    page.wait_for_load_state()


def screenshot(page: Any, name: str, tmp: Path) -> None:
    """Into docs/ for the README when asked; into the test's folder otherwise. Never empty."""
    folder = ROOT / "docs" if os.environ.get("JOBWIRE_GATEWAY_SCREENSHOTS") == "1" else tmp
    path = folder / f"gateway-{name}.png"
    page.screenshot(path=str(path))
    assert path.stat().st_size > 1000


def expect(locator: Any) -> Any:
    from playwright.sync_api import expect as playwright_expect  # imported once the browser fixture found it

    return playwright_expect(locator)


def text(page: Any, selector: str) -> str:
    return str(page.locator(selector).inner_text()).strip()


def test_a_job_moves_on_the_page_without_a_reload_then_ends_cancelled(page: Any, stack: Stack, tmp_path: Path) -> None:
    with stack.client() as client:
        job_no = client.submit("frames", {"frames": 600, "frame_ms": 40}, title="Render the launch trailer").job.job_no
        client.submit("frames", {"frames": 3, "frame_ms": 0}, title="Render the teaser")  # a second row
    sign_in(page, CLIENT)
    assert page.url.endswith("/jobs") and job_no in page.content()
    page.goto(f"/jobs/{job_no}")
    assert text(page, "h1") == "Render the launch trailer"
    assert text(page, "#status") == "Queued" and text(page, "#stage-text") == "Not started"
    page.evaluate("window.stillTheSamePage = true")  # gone if the page reloads

    stack.start_worker()
    # Playwright's own waits: the pages' Content-Security-Policy forbids the eval that
    # page.wait_for_function would need.
    expect(page.locator("#stage-text")).to_contain_text("Stage 2 of", timeout=WAIT_MS)
    assert text(page, "#status") == "Processing"
    expect(page.locator("#units")).to_contain_text(" of 600", timeout=WAIT_MS)
    first = text(page, "#units")
    expect(page.locator("#units")).not_to_have_text(first, timeout=WAIT_MS)
    assert text(page, "#percent").endswith("%")
    assert page.evaluate("window.stillTheSamePage") is True
    screenshot(page, "job", tmp_path)
    page.goto("/jobs")
    expect(page.locator(f'[data-job="{job_no}"] [data-field=percent]')).to_have_text(PERCENT, timeout=WAIT_MS)
    screenshot(page, "jobs", tmp_path)

    page.goto(f"/jobs/{job_no}")
    page.click("#cancel")
    expect(page.locator("#status")).to_have_text("Cancelled", timeout=WAIT_MS)
    assert page.locator("#cancel").is_hidden()
    with stack.client() as client:
        assert client.get(job_no).status == job_pb2.Job.CANCELLED


def test_a_job_submitted_after_the_page_loaded_shows_first_then_updates(page: Any, stack: Stack) -> None:
    with stack.client() as client:
        older = client.submit("frames", {"frames": 1}, queue="nobody-serves-this").job.job_no
    sign_in(page, CLIENT)
    assert text(page, "#jobs tbody tr:first-child a") == older
    page.evaluate("window.stillTheSamePage = true")  # gone if the page reloads

    with stack.client() as client:
        new = client.submit("frames", {"frames": 1}, queue="nobody-serves-this").job.job_no
    first = page.locator("#jobs tbody tr").first
    expect(first).to_have_attribute("data-job", new, timeout=WAIT_MS)
    assert text(page, f'[data-job="{new}"] [data-field=status_label]') == "Queued"
    assert page.locator(f'#jobs tbody a[href="/jobs/{new}"]').count() == 1
    assert page.locator("#jobs tbody tr").nth(1).get_attribute("data-job") == older

    with stack.client() as client:
        client.cancel(new)  # the new row is watched like the others
    expect(page.locator(f'[data-job="{new}"] [data-field=status_label]')).to_have_text("Cancelled", timeout=WAIT_MS)
    assert page.locator(f'[data-job="{new}"]').count() == 1
    assert page.evaluate("window.stillTheSamePage") is True


def test_an_empty_jobs_page_shows_its_first_job_without_a_reload(page: Any, stack: Stack) -> None:
    sign_in(page, NEWCOMER)
    assert page.locator("#empty").is_visible() and page.locator("#jobs").is_hidden()
    with stack.client(NEWCOMER) as client:
        first = client.submit("frames", {"frames": 1}, queue="nobody-serves-this").job.job_no
    expect(page.locator(f'#jobs tbody tr[data-job="{first}"]')).to_be_visible(timeout=WAIT_MS)
    assert page.locator("#empty").is_hidden()


def test_a_result_downloads_with_the_bytes_the_client_gets(page: Any, stack: Stack) -> None:
    with stack.client() as client:
        job_no = client.submit("frames", {"frames": 5, "frame_ms": 0}).job.job_no
        stack.start_worker()
        for job in client.watch(job_no):
            final = job
        assert final.status == job_pb2.Job.READY, final
        expected = client.result(job_no)
    sign_in(page, CLIENT)
    page.goto(f"/jobs/{job_no}")
    with page.expect_download() as got:
        page.click("#download")
    download = got.value
    assert download.suggested_filename == f"{job_no}.zip"
    assert Path(download.path()).read_bytes() == expected


def test_the_language_link_switches_the_labels_to_zh_cn(page: Any, stack: Stack) -> None:
    with stack.client() as client:
        job_no = client.submit("frames", {"frames": 1}, queue="nobody-serves-this").job.job_no
    sign_in(page, CLIENT)
    page.click("#lang-zh-CN")
    page.wait_for_load_state()
    assert page.locator("html").get_attribute("lang") == "zh-CN"
    assert text(page, "h1") == "我的任务" and "状态" in text(page, "#jobs thead")
    assert text(page, f'[data-job="{job_no}"] [data-field=status_label]') == "排队中"
    page.goto(f"/jobs/{job_no}")
    assert text(page, "#cancel") == "取消" and text(page, "#stage-text") == "尚未开始"


def test_evidence_refuses_a_client_token_and_shows_an_admin_the_trail(page: Any, stack: Stack, tmp_path: Path) -> None:
    stack.start_worker()  # the page lists workers: one known to the server, whichever test ran before
    with AdminClient.connect(stack.server.target, token=ADMIN.secret, timeout=10) as admin:
        deadline = time.monotonic() + 60
        while not list(admin.list_workers()):
            assert time.monotonic() < deadline, "the fleet worker never claimed"
            time.sleep(0.1)
    with stack.client() as client:
        job_no = client.submit("frames", queue="nobody-serves-this", title="Nightly invoice export").job.job_no
        client.cancel(job_no)
    sign_in(page, CLIENT)
    refused = page.goto("/evidence")
    assert refused is not None and refused.status == 403
    assert text(page, "#error") == "Your token may not see this page."
    assert "Traceback" not in page.content()

    page.click("#signout")
    sign_in(page, ADMIN)
    page.goto(f"/evidence?job={job_no}")
    assert "CANCEL" in text(page, "#events").upper() and text(page, "#workers")
    screenshot(page, "evidence", tmp_path)
    print(json.dumps({"evidence_rows": page.locator("#events tbody tr").count()}))


def worker_call(stack: Stack, method: str, request: Any) -> Any:
    """One WorkerService call with the worker's token, as the test's own worker."""
    with grpc.insecure_channel(stack.server.target) as channel:
        call = getattr(worker_pb2_grpc.WorkerServiceStub(channel), method)
        return call(request, metadata=WORKER.metadata, timeout=10)


def claim_from(stack: Stack, queue: str, job_type: str = "frames") -> list[worker_pb2.Lease]:
    """One Claim of `queue` with the worker's token, waiting for nothing: the leases it got."""
    request = worker_pb2.ClaimRequest(
        worker_id="browser-test", job_types=[worker_pb2.JobTypeSpec(name=job_type)], queues=[queue], max_jobs=5
    )
    return list(worker_call(stack, "Claim", request).leases)


def cell(page: Any, queue: str, field: str) -> str:
    return text(page, f'#queues tr[data-queue="{queue}"] [data-field={field}]')


def test_the_queue_page_counts_the_jobs_made_and_its_pause_holds_the_next_claim(
    page: Any, stack: Stack, tmp_path: Path
) -> None:
    queue = "console-held"  # no fleet worker serves it: the test's claims are the only ones
    with stack.client() as client:
        for _ in range(3):
            client.submit("frames", {"frames": 1}, queue=queue)
    sign_in(page, ADMIN)
    page.goto("/queues")
    assert [cell(page, queue, f) for f in ("queued", "running", "waiting", "state")] == ["3", "0", "0", "Active"]
    assert page.locator(f'section.queue[data-queue="{queue}"] svg polyline').count() == 3
    assert (
        page.locator(f'section.queue[data-queue="{queue}"] [data-series=submitted]').get_attribute("data-total") == "3"
    )

    page.click(f'#queues tr[data-queue="{queue}"] [data-action=pause]')
    page.wait_for_load_state()
    assert cell(page, queue, "state") == "Paused"
    assert claim_from(stack, queue) == []  # paused: the next claim leases nothing
    page.evaluate("window.scrollTo(0, 0)")  # back from the row's anchor, for the picture
    screenshot(page, "queues", tmp_path)

    page.click(f'#queues tr[data-queue="{queue}"] [data-action=resume]')
    page.wait_for_load_state()
    assert cell(page, queue, "state") == "Active"
    assert len(claim_from(stack, queue)) == 3
    page.reload()
    assert [cell(page, queue, f) for f in ("queued", "running")] == ["0", "3"]

    page.click("#lang-zh-CN")
    page.wait_for_load_state()
    assert text(page, "h1") == "队列" and "排队中" in text(page, "#queues thead")
    assert cell(page, queue, "state") == "正常"


def listed(page: Any) -> list[str]:
    return [str(row.get_attribute("data-job")) for row in page.locator("#jobs tbody tr").all()]


def test_search_by_number_filters_and_paging_reach_the_150th_job(page: Any, stack: Stack) -> None:
    queue = "console-pages"  # no fleet worker serves it: the jobs stay as made
    with stack.client() as client:
        made = [
            client.submit("frames", {"frames": 1}, queue=queue, labels={"part": "tail" if i < 3 else "head"}).job.job_no
            for i in range(150)
        ]
    sign_in(page, CLIENT)
    page.fill("#f-queue", queue)
    page.click("#search-go")
    page.wait_for_load_state()
    assert listed(page) == made[::-1][:50]
    page.click("#page-next")
    page.wait_for_load_state()
    page.click("#page-next")
    page.wait_for_load_state()
    assert listed(page) == made[::-1][100:] and listed(page)[-1] == made[0]  # the 150th newest
    assert page.locator("#page-next").count() == 0
    page.click("#page-previous")
    page.wait_for_load_state()
    assert listed(page) == made[::-1][50:100]

    page.fill("#f-label", "part=tail")
    page.click("#search-go")
    page.wait_for_load_state()
    assert listed(page) == made[2::-1]  # the label narrows the queue's 150 to its 3

    page.goto("/jobs")
    page.fill("#f-job-no", made[75])
    page.click("#search-go")
    page.wait_for_load_state()
    assert listed(page) == [made[75]]


def test_bulk_cancel_of_three_ticked_jobs_cancels_exactly_those(page: Any, stack: Stack, tmp_path: Path) -> None:
    queue = "console-bulk"
    with stack.client() as client:
        made = [client.submit("frames", {"frames": 1}, queue=queue).job.job_no for _ in range(5)]
    sign_in(page, CLIENT)
    page.goto(f"/jobs?queue={queue}")
    ticked = made[1:4]
    for job_no in ticked:
        page.check(f'#jobs tr[data-job="{job_no}"] input[type=checkbox]')
    page.click("#bulk-cancel")
    page.wait_for_load_state()
    assert page.locator('#outcomes tr[data-done="yes"]').count() == 3
    screenshot(page, "bulk", tmp_path)
    with stack.client() as client:
        statuses = {job_no: client.get(job_no).status for job_no in made}
    assert statuses == {n: job_pb2.Job.CANCELLED if n in ticked else job_pb2.Job.QUEUED for n in made}
    page.click("#back")
    page.wait_for_load_state()
    assert page.url.endswith(f"/jobs?queue={queue}")


TRACEBACK = (
    "Traceback (most recent call last):\n"
    + "".join(f'  File "/srv/app/{"deep/" * 30}step_{i}.py", line {i}, in run\n    {"y" * 400}\n' for i in range(60))
    + "ValueError: "
    + "z" * 2000
)  # long lines and a word no line break can split


def page_width(page: Any) -> int:
    return int(page.evaluate("document.documentElement.scrollWidth"))


def right_edge(page: Any, selector: str) -> int:
    """Where `selector`'s box ends: a table wider than its `.wide` box scrolls in it, the page keeps its width."""
    return int(page.locator(selector).evaluate("element => element.getBoundingClientRect().right"))


def test_a_job_page_shows_payload_result_preview_and_timeline_and_a_traceback_keeps_to_the_page(
    page: Any, stack: Stack, tmp_path: Path
) -> None:
    queue = "console-detail"
    with stack.client() as client:
        done = client.submit(
            "frames", {"source": "<b>bold?</b>", "frames": 2}, queue=queue, title="Thumbnails of album 7"
        ).job.job_no
        broken = client.submit("frames", {"frames": 1}, queue=queue, title="Transcode lecture 12").job.job_no
    leases = {lease.job_no: lease for lease in claim_from(stack, queue)}
    finished = worker_pb2.CompleteRequest(
        job_no=done, worker_token=leases[done].worker_token, inline_result=b'{"rows": 2, "ok": true}'
    )
    finished.result.content_type = "application/json"
    worker_call(stack, "Complete", finished)
    worker_call(stack, "Fail", worker_pb2.FailRequest(
        job_no=broken, worker_token=leases[broken].worker_token, category=job_pb2.JobError.PROCESSING_ERROR,
        message="the codec gave up", retryable=False, detail=TRACEBACK,
    ))  # fmt: skip

    sign_in(page, OPERATOR)
    page.goto(f"/jobs/{done}")
    assert json.loads(text(page, "#payload-preview")) == {"frames": 2, "source": "<b>bold?</b>"}
    assert page.locator("#payload-preview b").count() == 0  # shown as text, never as markup
    assert json.loads(text(page, "#result-preview")) == {"ok": True, "rows": 2}
    kinds = [str(k) for k in page.locator("#events tbody tr").evaluate_all("rows => rows.map(r => r.dataset.kind)")]
    assert kinds[:2] == ["SUBMITTED", "CLAIMED"] and kinds[-1] == "COMPLETED"
    assert "worker browser-test" in text(page, "#events")
    screenshot(page, "job-detail", tmp_path)

    viewport = page.viewport_size["width"]
    for path in (f"/jobs/{broken}", f"/evidence?job={broken}"):
        page.goto(path)
        failed = page.locator('#events tr[data-kind="FAILED"] details')
        assert text(page, '#events tr[data-kind="FAILED"] summary') == "PROCESSING_ERROR: the codec gave up"
        assert not failed.locator("pre").is_visible()  # folded to its first line
        assert page_width(page) <= viewport, path
        page.click('#events tr[data-kind="FAILED"] summary')
        assert failed.locator("pre").is_visible()  # opens on a click
        assert "Traceback (most recent call last)" in text(page, '#events tr[data-kind="FAILED"] pre')
        assert page_width(page) <= viewport, path  # open, the traceback wraps inside the page
        print(
            json.dumps({"page": path.split("/")[1].split("?")[0], "width_open": page_width(page), "viewport": viewport})
        )
    screenshot(page, "evidence-traceback", tmp_path)

    page.click("#lang-zh-CN")
    page.wait_for_load_state()
    page.goto(f"/jobs/{done}")
    assert text(page, "#payload h2") == "输入数据" and text(page, "#timeline h2") == "时间线"


def test_long_unbroken_words_keep_to_the_page(page: Any, stack: Stack) -> None:
    """A title, an error message and a handler's evidence entry at their bounds, each one word."""
    queue = "console-long"  # no fleet worker serves it: the test's claim is the only one
    with stack.client() as client:
        job_no = client.submit("frames", {"frames": 1}, queue=queue, title="T" * 200).job.job_no
        # Never claimed: a finding (no worker serves it) whose title is one long word.
        unserved = client.submit("unserved-long", {}, queue="console-long-unserved", title="U" * 200).job.job_no
    (lease,) = claim_from(stack, queue)
    entry = worker_pb2.EvidenceEntry(key="k" * 64, value="v" * 1000)
    worker_call(stack, "RecordEvidence", worker_pb2.RecordEvidenceRequest(
        job_no=job_no, worker_token=lease.worker_token, entries=[entry]
    ))  # fmt: skip
    worker_call(stack, "Fail", worker_pb2.FailRequest(
        job_no=job_no, worker_token=lease.worker_token, category=job_pb2.JobError.PROCESSING_ERROR,
        message="m" * 2000, retryable=False,
    ))  # fmt: skip

    sign_in(page, OPERATOR)
    viewport = page.viewport_size["width"]
    page.goto(f"/jobs/{job_no}")
    shown = text(page, "[data-field=error_message]")
    assert set(shown) == {"m"} and len(shown) >= 300  # what a user is shown of it (MAX_USER_MESSAGE)
    widths = {"job": page_width(page), "job_timeline": right_edge(page, "#events")}
    page.goto(f"/evidence?job={job_no}")
    assert "v" * 1000 in text(page, "#handler-evidence")
    assert "U" * 200 in text(page, f'#findings tr[data-job="{unserved}"]')
    widths |= {"evidence": page_width(page), "evidence_timeline": right_edge(page, "#events")}
    print(json.dumps({**widths, "viewport": viewport}))
    assert max(widths.values()) <= viewport, widths


def reload_until(page: Any, selector: str, value: str, attribute: str, timeout_s: float = 30.0) -> None:
    """Reload `page` until `selector`'s `attribute` is `value`: the server decides, the page only shows."""
    deadline = time.monotonic() + timeout_s
    while (page.locator(selector).get_attribute(attribute) if page.locator(selector).count() else None) != value:
        if time.monotonic() > deadline:
            raise AssertionError(f"{selector} never had {attribute}={value}")
        page.wait_for_timeout(250)  # the gap between two reads of the page, not a wait for the answer
        page.reload()


def test_the_workers_page_marks_a_killed_worker_gone(browser: Any, tmp_path: Path) -> None:
    """A server of its own with short leases (2 s, grace 1 s): a worker killed is gone within 3 s."""
    auth = write_auth_file(tmp_path / "auth.toml", [ADMIN, WORKER])
    env = {
        "JOBWIRE_DATABASE_URL": f"sqlite:///{tmp_path / 'jobwire.db'}", "JOBWIRE_LISTEN": "127.0.0.1:0",
        "JOBWIRE_AUTH_FILE": str(auth), "JOBWIRE_PROCESSES": "1",
        "JOBWIRE_LEASE_SECONDS": "2", "JOBWIRE_STALL_GRACE_SECONDS": "1",
    }  # fmt: skip
    server = start_server_process(["jobwire", "serve"], env)
    worker_env = {**os.environ, "JOBWIRE_TOKEN": WORKER.secret}
    args = [str(BIN / "jobwire-worker"), "--target", server.target, "--handlers", "jobwire.examples:handlers",
            "--worker-id", "doomed-worker", "--claim-wait", "0.5", "--queue", "doomed"]  # fmt: skip
    (tmp_path / "host").mkdir()
    doomed = subprocess.Popen(
        args, env=worker_env, cwd=tmp_path / "host", stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
    )
    try:
        with running_gateway(server.target) as gateway:
            context = browser.new_context(base_url=gateway, locale="en-US", viewport={"width": 1000, "height": 620})
            context.set_default_timeout(WAIT_MS)
            page = context.new_page()
            sign_in(page, ADMIN)
            page.goto("/workers")
            row = '#workers tr[data-worker="doomed-worker"]'
            reload_until(page, row, "live", "data-state")
            assert text(page, f"{row} [data-field=state]") == "Live" and "doomed" in text(page, row)
            doomed.kill()  # no goodbye: only its silence tells
            doomed.wait(10)
            reload_until(page, row, "gone", "data-state")
            assert text(page, f"{row} [data-field=state]") == "Gone"
            screenshot(page, "workers", tmp_path)
            page.click("#lang-zh-CN")
            page.wait_for_load_state()
            assert text(page, "h1") == "处理程序" and text(page, f"{row} [data-field=state]") == "已离线"
            context.close()
    finally:
        if doomed.poll() is None:
            doomed.kill()
            doomed.wait(10)
        server.kill()


def test_a_batch_page_shows_its_counts_and_cancels(page: Any, stack: Stack, tmp_path: Path) -> None:
    with stack.client() as client:
        made = client.submit_batch(
            [client.submit_request("frames", {"frames": i}, queue="console-batch", title=f"Page {i} of the catalogue")
             for i in range(1, 5)]
        )  # fmt: skip
        client.cancel(made.jobs[0].job_no)
    sign_in(page, CLIENT)
    page.goto(f"/batches/{made.batch_id}")
    count = {name: text(page, f"#counts [data-count={name}]") for name in ("queued", "cancelled", "ready")}
    assert count == {"queued": "3", "cancelled": "1", "ready": "0"}
    assert text(page, "#batch-finished") == "1 of 4 finished"
    titles = page.locator("#jobs tbody tr td.title").all_inner_texts()
    assert titles == [f"Page {i} of the catalogue" for i in range(4, 0, -1)]  # each job by its title, newest first
    screenshot(page, "batch", tmp_path)
    page.click("#cancel-batch")
    page.wait_for_load_state()
    assert text(page, "#counts [data-count=cancelled]") == "4" and text(page, "#batch-finished") == "4 of 4 finished"
    page.click("#lang-zh-CN")
    page.wait_for_load_state()
    assert text(page, "#batch-finished") == "已结束 4 / 4" and "已取消" in text(page, "#counts")


def test_a_schedule_page_shows_its_next_firing(page: Any, stack: Stack, tmp_path: Path) -> None:
    request = schedule_pb2.CreateScheduleRequest(
        schedule_id="console-nightly", cron="30 2 * * *", time_zone="Asia/Shanghai",
        template=job_pb2.SubmitRequest(job_type="frames", queue="console-nightly", title="Nightly thumbnails"),
    )  # fmt: skip
    hourly = schedule_pb2.CreateScheduleRequest(
        schedule_id="console-hourly-sync", every=duration_pb2.Duration(seconds=3600),
        template=job_pb2.SubmitRequest(job_type="frames", queue="console-nightly", title="Sync the catalogue"),
    )  # fmt: skip
    with grpc.insecure_channel(stack.server.target) as channel:
        schedules = schedule_pb2_grpc.ScheduleServiceStub(channel)
        made = schedules.CreateSchedule(request, metadata=CLIENT.metadata, timeout=10)
        schedules.CreateSchedule(hourly, metadata=CLIENT.metadata, timeout=10)  # the list's second row
    next_fire = made.next_fire_time.ToDatetime().strftime("%Y-%m-%d %H:%M:%SZ")
    sign_in(page, CLIENT)
    page.click("#nav-schedules")
    page.wait_for_load_state()
    row = '#schedules tr[data-schedule="console-nightly"]'
    assert text(page, f"{row} [data-field=next]") == next_fire
    assert text(page, f"{row} [data-field=missed]") == "0" and text(page, f"{row} [data-field=state]") == "Active"
    screenshot(page, "schedules", tmp_path)
    page.click('#schedules a[href="/schedules/console-nightly"]')
    page.wait_for_load_state()
    assert text(page, "#next") == next_fire and text(page, "#timing") == "cron 30 2 * * *"
    assert text(page, "#time-zone") == "Asia/Shanghai" and text(page, "#state") == "Active"
    assert text(page, "#template .title") == "Nightly thumbnails"
    screenshot(page, "schedule", tmp_path)
    page.click("#pause")
    page.wait_for_load_state()
    assert text(page, "#state") == "Paused" and text(page, "#next") == ""
    page.click("#lang-zh-CN")
    page.wait_for_load_state()
    assert text(page, "h1") == "定时任务 console-nightly" and text(page, "#state") == "已暂停"
    page.click("#nav-schedules")
    page.wait_for_load_state()
    assert text(page, "h1") == "定时任务" and text(page, f"{row} [data-field=state]") == "已暂停"
    assert all(word in text(page, "#schedules thead") for word in ("时区", "下次触发", "上次触发", "已跳过", "已错过"))


def test_a_title_is_what_the_jobs_page_and_the_job_page_show_first_with_the_inputs_digest(
    page: Any, stack: Stack
) -> None:
    title = "Import customers-2026-11.csv"
    payload = b'{"file": "customers-2026-11.csv"}'
    with stack.client() as client:
        job_no = client.submit("frames", payload, queue="nobody-serves-this", title=title).job.job_no
    sign_in(page, CLIENT)
    page.goto("/jobs")
    row = page.locator(f'#jobs tr[data-job="{job_no}"]')
    cells = [cell.strip() for cell in row.locator("td").all_inner_texts()]
    assert cells[:3] == ["", title, job_no]  # the title first after the row's tick box
    page.goto(f"/jobs/{job_no}")
    assert text(page, "h1") == title
    assert job_no in text(page, ".job-no")
    assert text(page, "#input-sha256") == hashlib.sha256(payload).hexdigest()
    assert f"{len(payload)} bytes" in text(page, "#input")


def test_an_admin_reads_the_handlers_evidence_and_the_latest_checkpoint_a_client_neither(
    page: Any, stack: Stack
) -> None:
    with stack.client() as client:
        job_no = client.submit("manual-charge", queue="by-hand", title="Charge order 42").job.job_no
    with grpc.insecure_channel(stack.server.target) as channel:
        workers = worker_pb2_grpc.WorkerServiceStub(channel)
        claim = worker_pb2.ClaimRequest(
            worker_id="by-hand", queues=["by-hand"], job_types=[worker_pb2.JobTypeSpec(name="manual-charge")]
        )
        (lease,) = workers.Claim(claim, metadata=WORKER.metadata, timeout=10).leases
        entry = worker_pb2.EvidenceEntry(key="payment_request_id", value="pi_3NxQ2f")
        workers.RecordEvidence(
            worker_pb2.RecordEvidenceRequest(job_no=job_no, worker_token=lease.worker_token, entries=[entry]),
            metadata=WORKER.metadata, timeout=10,
        )  # fmt: skip
        workers.ReportStage(
            worker_pb2.ReportStageRequest(
                job_no=job_no, worker_token=lease.worker_token, stage="PROCESSING", checkpoint=b"row 2500 of 9000"
            ),
            metadata=WORKER.metadata, timeout=10,
        )  # fmt: skip
    sign_in(page, CLIENT)
    page.goto(f"/jobs/{job_no}")
    assert text(page, "h1") == "Charge order 42"
    assert page.locator("#timeline").count() == 0 and "pi_3NxQ2f" not in page.content()

    page.click("#signout")
    sign_in(page, ADMIN)
    page.goto(f"/evidence?job={job_no}")
    assert text(page, "#trail-title") == "Charge order 42"
    assert "payment_request_id" in text(page, "#handler-evidence") and "pi_3NxQ2f" in text(page, "#handler-evidence")
    assert text(page, "#checkpoint-text") == "row 2500 of 9000"
    assert text(page, "#checkpoint-sha256") == hashlib.sha256(b"row 2500 of 9000").hexdigest()
    assert "CHECKPOINT_SAVED" in text(page, "#events") and "HANDLER_EVIDENCE" in text(page, "#events")
