"""The web gateway in front of a real jobwire server: sign-in, tenancy, actions, CSRF, languages,
evidence, errors and live updates, over HTTP to a real uvicorn (tests/gateway_support.py).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import socket
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from auth_files import Token, write_auth_file
from gateway_support import browser, hidden_rows, running_gateway, sign_in, signed_in, visible_actions
from result_support import chunks, open_result_files
from served import Served, eventually, start_server

from jobwire.gateway import sse
from jobwire.gateway.session import CSRF_COOKIE, TOKEN_COOKIE
from jobwire.v1 import job_pb2, worker_pb2

pytestmark = pytest.mark.timeout(60)
ACME = Token("acme-client-token", tenant="acme")
GLOBEX = Token("globex-client-token", tenant="globex")
ADMIN = Token("acme-admin-token", tenant="acme", role="admin")
WORKER = Token("acme-worker-token", tenant="acme", role="worker")
OPERATOR = Token("acme-operator-token", tenant="acme", roles=("client", "admin"), name="olivia")


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    auth = write_auth_file(tmp_path / "auth.toml", [ACME, GLOBEX, ADMIN, WORKER, OPERATOR])
    s = await start_server(f"sqlite:///{tmp_path / 'jobwire.db'}", auth_file=auth)
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
def gateway(served: Served) -> Iterator[str]:
    with running_gateway(served.target) as url:
        yield url


async def _submit(served: Served, token: Token, job_type: str = "frames", **fields: object) -> job_pb2.Job:
    request = job_pb2.SubmitRequest(job_type=job_type, **fields)  # type: ignore[arg-type]
    return (await served.jobs.Submit(request, metadata=token.metadata)).job


async def _claim(served: Served, job_type: str = "frames", lease_s: int = 0) -> worker_pb2.Lease:
    request = worker_pb2.ClaimRequest(worker_id="w1", job_types=[worker_pb2.JobTypeSpec(name=job_type)], max_jobs=1)
    if lease_s:
        request.lease_duration.FromSeconds(lease_s)
    reply = await served.workers.Claim(request, metadata=WORKER.metadata)
    assert len(reply.leases) == 1
    return reply.leases[0]


async def test_sign_in_keeps_the_token_in_an_httponly_strict_cookie(gateway: str) -> None:
    async with browser(gateway) as client:
        reply = await sign_in(client, ACME.secret)
        assert reply.status_code == 303 and reply.headers["location"] == "/jobs"
        cookies = {c.split("=", 1)[0]: c.lower() for c in reply.headers.get_list("set-cookie")}
        for name in (TOKEN_COOKIE, CSRF_COOKIE):
            assert "httponly" in cookies[name] and "samesite=strict" in cookies[name]
        jobs = await client.get("/jobs")
        assert jobs.status_code == 200 and "frame-ancestors 'none'" in jobs.headers["content-security-policy"]

        out = await client.post("/signout", data={"csrf": client.cookies[CSRF_COOKIE]})
        assert out.status_code == 303 and TOKEN_COOKIE not in client.cookies
        assert (await client.get("/jobs")).headers["location"].startswith("/signin")


async def test_a_first_visit_is_asked_to_sign_in_and_a_stale_token_told_to_sign_in_again(gateway: str) -> None:
    async with browser(gateway) as client:
        first = await client.get("/jobs")
        assert first.status_code == 303 and first.headers["location"] == "/signin"
        assert "Please sign in again." not in (await client.get("/signin")).text
        client.cookies.set(TOKEN_COOKIE, "revoked-since")  # a token the server no longer knows
        stale = await client.get("/jobs")
        assert stale.status_code == 303 and stale.headers["location"] == "/signin?expired=1"
        assert "Please sign in again." in (await client.get(stale.headers["location"])).text


async def test_a_token_the_server_refuses_is_not_kept(gateway: str) -> None:
    async with browser(gateway) as client:
        for token in ("nobody-gave-me-this", "  "):
            reply = await sign_in(client, token)
            assert reply.status_code == 401
            assert "This token was not accepted." in reply.text
            assert TOKEN_COOKIE not in client.cookies


async def test_jobs_page_lists_only_the_tenants_jobs_and_filters_by_status(served: Served, gateway: str) -> None:
    mine = await _submit(served, ACME)
    stopped = await _submit(served, ACME)
    await served.jobs.Cancel(job_pb2.CancelRequest(job_no=stopped.job_no), metadata=ACME.metadata)
    theirs = [await _submit(served, GLOBEX) for _ in range(3)][-1]  # a number acme has none of (per tenant)
    async with signed_in(gateway, ACME) as client:
        listed = (await client.get("/jobs")).text
        assert mine.job_no in listed and stopped.job_no in listed
        assert theirs.job_no not in listed
        cancelled = (await client.get("/jobs", params={"status": "CANCELLED"})).text
        assert stopped.job_no in cancelled and mine.job_no not in cancelled
        assert 'value="CANCELLED" selected' in cancelled
        # another tenant's job is not theirs to open
        assert (await client.get(f"/jobs/{theirs.job_no}")).status_code == 404


async def test_job_page_offers_the_actions_its_state_allows(served: Served, gateway: str) -> None:
    queued = await _submit(served, ACME)
    async with signed_in(gateway, ACME) as client:
        page = (await client.get(f"/jobs/{queued.job_no}")).text
        assert visible_actions(page) == {"cancel"}
        assert "Queued" in page  # the server's Display label
        # Nothing to say yet about a result or a failure: those rows are not shown.
        assert hidden_rows(page) == {"result_summary", "error_message"}

        lease = await _claim(served)
        done = worker_pb2.CompleteRequest(job_no=lease.job_no, worker_token=lease.worker_token)
        done.inline_result = b'{"frames": 3}'
        done.result.content_type = "application/json"
        await served.workers.Complete(done, metadata=WORKER.metadata)
        page = (await client.get(f"/jobs/{queued.job_no}")).text
        assert "download" in visible_actions(page) and "cancel" not in visible_actions(page)

        result = await client.get(f"/jobs/{queued.job_no}/result")
        assert result.status_code == 200 and result.content == b'{"frames": 3}'
        assert result.headers["content-type"].startswith("application/json")
        assert f'filename="{queued.job_no}.json"' in result.headers["content-disposition"]


async def test_a_retryable_failure_offers_retry_and_queues_the_job_again(served: Served, gateway: str) -> None:
    job = await _submit(served, ACME, retry_policy=job_pb2.RetryPolicy(max_attempts=1))  # one attempt: it stays FAILED
    lease = await _claim(served)
    failed = worker_pb2.FailRequest(
        job_no=lease.job_no, worker_token=lease.worker_token, category=job_pb2.JobError.PROCESSING_ERROR,
        message="the source was busy", retryable=True,
    )  # fmt: skip
    await served.workers.Fail(failed, metadata=WORKER.metadata)
    async with signed_in(gateway, ACME) as client:
        page = (await client.get(f"/jobs/{job.job_no}")).text
        assert visible_actions(page) == {"retry"} and "the source was busy" in page
        assert hidden_rows(page) == {"result_summary"}
        done = await client.post(f"/jobs/{job.job_no}/retry", data={"csrf": client.cookies[CSRF_COOKIE]})
        assert done.status_code == 303
        assert "Queued" in (await client.get(done.headers["location"])).text


async def _failed(served: Served, *, retryable: bool) -> job_pb2.Job:
    await _submit(served, ACME, retry_policy=job_pb2.RetryPolicy(max_attempts=1))
    lease = await _claim(served)
    failed = worker_pb2.FailRequest(
        job_no=lease.job_no, worker_token=lease.worker_token, category=job_pb2.JobError.INPUT_INVALID,
        message="the file is not a CSV file", retryable=retryable,
    )  # fmt: skip
    return await served.workers.Fail(failed, metadata=WORKER.metadata)


async def test_an_admin_may_retry_a_job_whose_error_is_not_retryable(served: Served, gateway: str) -> None:
    final = await _failed(served, retryable=False)
    async with signed_in(gateway, ACME) as client:
        page = (await client.get(f"/jobs/{final.job_no}")).text
        assert visible_actions(page) == set() and 'id="force-retry"' not in page  # a client has no button
        denied = await client.post(f"/jobs/{final.job_no}/force-retry", data={"csrf": client.cookies[CSRF_COOKIE]})
        assert denied.status_code == 403  # nor may it post the form
    async with signed_in(gateway, OPERATOR) as client:
        page = (await client.get(f"/jobs/{final.job_no}")).text
        assert visible_actions(page) == set()  # the job's own actions: RETRY only when retryable
        assert 'id="force-retry"' in page and "Retry anyway (admin)" in page
        forged = await client.post(f"/jobs/{final.job_no}/force-retry", data={"csrf": "guessed"})
        assert forged.status_code == 403
        done = await client.post(f"/jobs/{final.job_no}/force-retry", data={"csrf": client.cookies[CSRF_COOKIE]})
        assert done.status_code == 303 and done.headers["location"] == f"/jobs/{final.job_no}"
        assert "Queued" in (await client.get(done.headers["location"])).text
        trail = (await client.get("/evidence", params={"job": final.job_no})).text
        assert "forced by admin olivia: error was INPUT_INVALID" in trail

        retryable = await _failed(served, retryable=True)
        page = (await client.get(f"/jobs/{retryable.job_no}")).text
        assert visible_actions(page) == {"retry"} and 'id="force-retry"' not in page  # the plain button is enough


async def test_cancel_needs_the_sessions_csrf_token(served: Served, gateway: str) -> None:
    job = await _submit(served, ACME)
    async with signed_in(gateway, ACME) as client:
        forged = await client.post(f"/jobs/{job.job_no}/cancel", data={"csrf": "guessed"})
        bare = await client.post(f"/jobs/{job.job_no}/cancel")
        assert forged.status_code == bare.status_code == 403
        assert "This form is out of date" in forged.text
        still = await served.jobs.Get(job_pb2.GetRequest(job_no=job.job_no), metadata=ACME.metadata)
        assert still.status == job_pb2.Job.QUEUED

        ok = await client.post(f"/jobs/{job.job_no}/cancel", data={"csrf": client.cookies[CSRF_COOKIE]})
        assert ok.status_code == 303
        page = (await client.get(ok.headers["location"])).text
        assert "Cancelled" in page and visible_actions(page) == set()


async def test_labels_follow_accept_language_and_the_language_link(served: Served, gateway: str) -> None:
    job = await _submit(served, ACME)
    async with signed_in(gateway, ACME, **{"Accept-Language": "zh-CN,zh;q=0.9,en;q=0.5"}) as client:
        page = (await client.get(f"/jobs/{job.job_no}")).text
        assert "排队中" in page and "取消" in page and "Queued" not in page
        listed = (await client.get("/jobs")).text
        assert "我的任务" in listed and "已取消" in listed  # the status filter's labels too

        switched = await client.get("/lang/en", params={"next": f"/jobs/{job.job_no}"})
        assert switched.headers["location"] == f"/jobs/{job.job_no}"
        page = (await client.get(f"/jobs/{job.job_no}")).text
        assert "Queued" in page and "排队中" not in page
        assert (await client.get("/lang/en", params={"next": "//evil.example/"})).headers["location"] == "/jobs"


async def test_evidence_is_refused_for_a_client_token_and_shown_to_an_admin(served: Served, gateway: str) -> None:
    job = await _submit(served, ACME, title='Re-import <Q4> & "late" rows')
    async with signed_in(gateway, ACME) as client:
        refused = await client.get("/evidence")
        assert refused.status_code == 403
        assert "Your token may not see this page." in refused.text
        assert "Traceback" not in refused.text
    await _claim(served, lease_s=30)
    async with signed_in(gateway, ADMIN) as client:
        page = await client.get("/evidence", params={"job": job.job_no})
        assert page.status_code == 200
        assert "w1" in page.text  # the worker, with its lease
        assert "CLAIMED" in page.text.upper()  # the trail's claim event

        form = {"reason": "the worker's host is gone"}
        assert (await client.post(f"/evidence/{job.job_no}/requeue", data=form)).status_code == 403  # no CSRF token
        form["csrf"] = client.cookies[CSRF_COOKIE]
        alive = await client.post(f"/evidence/{job.job_no}/requeue", data=form)
        assert alive.status_code == 409 and "LEASE_ACTIVE" in alive.text  # the server's reason, in words

        served.clock.advance(timedelta(seconds=31))  # the lease has run out, whatever the machine's pace

        async def stalled() -> str | None:
            text = (await client.get("/evidence")).text
            return text if "Lease expired" in text else None

        findings = await eventually(stalled, what="the expired lease shows as a STALLED finding")
        row = findings.split(f'<tr data-job="{job.job_no}">', 1)[1].split("</tr>", 1)[0]
        assert row.lstrip().startswith('<td class="title">Re-import &lt;Q4&gt; &amp; &#34;late&#34; rows</td>')
        done = await client.post(f"/evidence/{job.job_no}/requeue", data=form)
        assert done.status_code == 303, done.text
        trail = (await client.get(done.headers["location"])).text
        assert "the worker&#39;s host is gone" in trail  # who did what, in the trail
    again = await served.jobs.Get(job_pb2.GetRequest(job_no=job.job_no), metadata=ACME.metadata)
    assert again.status == job_pb2.Job.QUEUED


async def test_bad_job_numbers_and_pages_are_404_in_words(gateway: str) -> None:
    async with signed_in(gateway, ACME) as client:
        for path in ("/jobs/XX-20260101-999", "/jobs/not a job", "/no/such/page"):
            reply = await client.get(path)
            assert reply.status_code == 404, path
            assert "Traceback" not in reply.text and "127.0.0.1" not in reply.text
        assert "There is no such job for you." in (await client.get("/jobs/XX-20260101-999")).text


async def test_an_unreachable_job_service_is_503_without_hosts() -> None:
    with running_gateway("127.0.0.1:1") as gateway:
        async with httpx.AsyncClient(base_url=gateway, cookies={TOKEN_COOKIE: "t"}) as client:
            reply = await client.get("/jobs")
        assert reply.status_code == 503
        assert "cannot be reached" in reply.text and "127.0.0.1:1" not in reply.text


async def test_the_live_stream_sends_an_event_when_the_job_changes(served: Served, gateway: str) -> None:
    job = await _submit(served, ACME)
    live = {"job": job.job_no, "one": "1"}
    async with signed_in(gateway, ACME) as client, client.stream("GET", "/live", params=live) as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        events = _events(stream.aiter_lines())
        first = await anext(events)
        assert first["job_no"] == job.job_no and first["status"] == "QUEUED"
        await _claim(served)
        changed = await anext(events)
        assert changed["status"] == "RUNNING" and changed["status_label"] == "Processing"


async def _named_events(lines: AsyncIterator[str]) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """Each event of an SSE stream: its name and its data."""
    name = ""
    async for line in lines:
        if line.startswith("event: "):
            name = line.removeprefix("event: ")
        elif line.startswith("data: "):
            yield name, json.loads(line.removeprefix("data: "))


async def _events(lines: AsyncIterator[str]) -> AsyncIterator[dict[str, Any]]:
    """The data of each `job` event of an SSE stream."""
    async for name, data in _named_events(lines):
        if name == "job":
            yield data


async def _next_listed(events: AsyncIterator[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    async for name, data in events:
        if name == "listed":
            return data
    raise AssertionError("the stream ended before it listed a new job")


async def test_the_jobs_page_stream_brings_a_job_submitted_after_the_page(served: Served, gateway: str) -> None:
    """A job submitted after the page was read arrives as a row, newest first, then updates live."""
    shown = await _submit(served, ACME)
    page = {"job": shown.job_no}
    async with signed_in(gateway, ACME) as client, client.stream("GET", "/live/jobs", params=page) as stream:
        events = _named_events(stream.aiter_lines())
        assert (await anext(events))[1]["job_no"] == shown.job_no  # the watched job, as it is
        await _submit(served, GLOBEX, "thumbs")  # another tenant's: never on acme's page
        new = await _submit(served, ACME, "thumbs")
        listed = await _next_listed(events)
        assert [row["job_no"] for row in listed["rows"]] == [new.job_no]
        # exactly acme's two: globex's job (whose number may be one of acme's) is no row of it
        assert listed["order"] == [new.job_no, shown.job_no]
        row = listed["rows"][0]["html"]
        assert row.startswith(f'<tr data-job="{new.job_no}" data-status="QUEUED">') and "Queued" in row

        await _claim(served, "thumbs")  # acme's worker token: the new job
        async for name, data in events:
            if name == "job" and data["job_no"] == new.job_no and data["status"] == "RUNNING":
                break
        else:
            raise AssertionError("the stream ended before the new job's change")


async def test_the_jobs_page_stream_lists_only_new_jobs_its_filter_lets_through(served: Served, gateway: str) -> None:
    """On a page of CANCELLED jobs (none yet, so nothing watched) a new queued job stays away."""
    page = {"status": "CANCELLED"}
    async with signed_in(gateway, ACME) as client, client.stream("GET", "/live/jobs", params=page) as stream:
        events = _named_events(stream.aiter_lines())
        queued = await _submit(served, ACME)
        stopped = await _submit(served, ACME)
        await served.jobs.Cancel(job_pb2.CancelRequest(job_no=stopped.job_no), metadata=ACME.metadata)
        listed = await _next_listed(events)
        assert listed["order"] == [stopped.job_no] and queued.job_no not in json.dumps(listed)
        assert 'data-status="CANCELLED"' in listed["rows"][0]["html"]


@pytest.mark.parametrize("path", ["/live", "/live/jobs"])
async def test_a_browser_that_leaves_ends_its_stream_without_an_error(served: Served, gateway: str, path: str) -> None:
    """Leaving cancels the response mid-read of WatchJobs; the hang-up must end that read before
    it closes the stream (once it logged "aclose(): asynchronous generator is already running")."""
    job = await _submit(served, ACME)
    errors: list[logging.LogRecord] = []
    handler = logging.Handler(logging.ERROR)
    handler.emit = errors.append  # type: ignore[method-assign]
    logging.getLogger("uvicorn.error").addHandler(handler)
    try:
        async with signed_in(gateway, ACME) as client:
            for _ in range(3):
                async with client.stream("GET", path, params={"job": job.job_no}) as stream:
                    assert (await anext(_events(stream.aiter_lines())))["job_no"] == job.job_no
            assert (await client.get("/jobs")).status_code == 200  # the gateway got through the hang-ups
    finally:
        logging.getLogger("uvicorn.error").removeHandler(handler)
    assert [r.getMessage() for r in errors] == []


async def test_the_live_stream_of_another_tenants_job_says_gone(served: Served, gateway: str) -> None:
    theirs = await _submit(served, GLOBEX)
    async with signed_in(gateway, ACME) as client:
        reply = await client.get("/live", params={"job": theirs.job_no})  # the stream ends at once
    assert "event: gone" in reply.text and "NOT_FOUND" in reply.text
    assert theirs.job_no not in reply.text


async def test_a_quiet_jobs_page_stream_sends_a_keepalive_now_and_then_not_in_a_spin(
    gateway: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reads and keepalives each wait for their own deadline (the loop may wake a hair early)."""
    monkeypatch.setattr(sse, "POLL_S", 0.05)
    monkeypatch.setattr(sse, "KEEPALIVE_S", 0.5)
    lines: list[str] = []
    async with signed_in(gateway, ACME) as client, client.stream("GET", "/live/jobs") as stream:
        with anyio.move_on_after(2.2):
            async for line in stream.aiter_lines():
                lines.append(line)
    assert 3 <= lines.count(": keepalive") <= 5, lines


async def test_a_post_from_another_origin_is_refused_whatever_cookies_it_carries(served: Served, gateway: str) -> None:
    """Security review, finding 12: with an injected cookie, a cross-site POST (Origin
    https://evil.example) cancelled a job; the check compared the cookie and the form only."""
    job = await _submit(served, ACME)
    async with signed_in(gateway, ACME) as client:
        form = {"csrf": client.cookies[CSRF_COOKIE]}  # the attacker injected the cookie: it matches
        for headers in (
            {"Origin": "https://evil.example"},
            {"Origin": "null"},  # a sandboxed frame or a data: page
            {"Origin": "", "Referer": "https://evil.example/page"},
            {"Origin": ""},  # neither header: no browser sends a POST so
        ):
            refused = await client.post(f"/jobs/{job.job_no}/cancel", data=form, headers=headers)
            assert refused.status_code == 403, headers
        still = await served.jobs.Get(job_pb2.GetRequest(job_no=job.job_no), metadata=ACME.metadata)
        assert still.status == job_pb2.Job.QUEUED
        # a browser without Origin but with our own page as Referer is one of ours
        ok = await client.post(
            f"/jobs/{job.job_no}/cancel", data=form, headers={"Origin": "", "Referer": f"{gateway}/jobs/{job.job_no}"}
        )
        assert ok.status_code == 303


async def test_sign_in_needs_the_forms_csrf_token_and_our_origin(gateway: str) -> None:
    """Finding 12: /signin had no CSRF check, so another site's form could sign a browser in
    with the attacker's token (and the person's jobs would then go to the attacker)."""
    async with browser(gateway) as client:
        bare = await client.post("/signin", data={"token": ACME.secret})  # no form read first: no CSRF token
        assert bare.status_code == 403 and TOKEN_COOKIE not in client.cookies
        form = await client.get("/signin")
        csrf = client.cookies[CSRF_COOKIE]
        assert f'name="csrf" value="{csrf}"' in form.text  # the form carries the pre-session token
        assert "httponly" in form.headers["set-cookie"].lower()
        wrong = await client.post("/signin", data={"token": ACME.secret, "csrf": "guessed"})
        assert wrong.status_code == 403 and TOKEN_COOKIE not in client.cookies
        elsewhere = await client.post(
            "/signin", data={"token": ACME.secret, "csrf": csrf}, headers={"Origin": "https://evil.example"}
        )
        assert elsewhere.status_code == 403 and TOKEN_COOKIE not in client.cookies
        signed = await client.post("/signin", data={"token": ACME.secret, "csrf": csrf})
        assert signed.status_code == 303 and client.cookies[CSRF_COOKIE] != csrf  # a fresh token for the session


async def test_results_and_pages_are_never_cached(served: Served, gateway: str) -> None:
    job = await _submit(served, ACME)
    lease = await _claim(served)
    done = worker_pb2.CompleteRequest(job_no=lease.job_no, worker_token=lease.worker_token, inline_result=b"42")
    await served.workers.Complete(done, metadata=WORKER.metadata)
    async with signed_in(gateway, ACME) as client:
        result = await client.get(f"/jobs/{job.job_no}/result")
        assert result.status_code == 200 and result.content == b"42"
        assert result.headers["cache-control"] == "no-store"
        for path in (f"/jobs/{job.job_no}", "/jobs", "/jobs/PT-20000101-999999"):
            assert (await client.get(path)).headers["cache-control"] == "no-store", path


async def _event_names(client: httpx.AsyncClient, path: str, wanted: int) -> list[str]:
    """The first `wanted` event names of a live stream (then it is left)."""
    names: list[str] = []
    async with client.stream("GET", path) as reply:
        async for line in reply.aiter_lines():
            if line.startswith("event: "):
                names.append(line.removeprefix("event: "))
                if len(names) == wanted:
                    break
    return names


async def test_a_persons_live_streams_are_bounded_by_the_jobs_they_watch(served: Served, tmp_path: Path) -> None:
    """Finding 6, the gateway's half: a stream of N jobs weighs N; a person watches at most
    JOBWIRE_GATEWAY_MAX_WATCHED jobs in all and the stream over it is told `gone`."""
    jobs = [(await _submit(served, ACME)).job_no for _ in range(3)]
    with running_gateway(served.target, max_watched=4) as gateway:
        async with signed_in(gateway, ACME) as client:
            three = "/live?" + "&".join(f"job={no}" for no in jobs)
            async with client.stream("GET", three) as held:  # 3 of 4 held while it is open
                lines = held.aiter_lines()
                while not (await anext(lines)).startswith("event: job"):
                    pass
                assert await _event_names(client, f"/live?job={jobs[0]}", 1) == ["job"]  # 3 + 1 fits
                assert await _event_names(client, f"/live?job={jobs[0]}&job={jobs[1]}", 1) == ["gone"]  # 3 + 2 does not

            # Given back once the gateway learns the stream closed, which it learns after the
            # client has gone on (a disconnect is noticed, not announced): asked until then.
            async def three_fit() -> bool:
                return await _event_names(client, three, 3) == ["job", "job", "job"]

            await eventually(three_fit, what="the closed stream's three jobs given back")
        async with signed_in(gateway, GLOBEX) as other:  # another person's budget is their own
            theirs = (await _submit(served, GLOBEX)).job_no
            assert await _event_names(other, f"/live?job={theirs}", 1) == ["job"]


async def _kept_result(served: Served, data: bytes) -> str:
    job = await _submit(served, ACME)
    lease = await _claim(served)
    up = await served.workers.UploadResult(chunks(lease.job_no, lease.worker_token, data), metadata=WORKER.metadata)
    await served.workers.Complete(worker_pb2.CompleteRequest(
        job_no=lease.job_no, worker_token=lease.worker_token, upload_id=up.upload_id
    ), metadata=WORKER.metadata)  # fmt: skip
    return job.job_no


def _socket_send_buffer_max() -> int:
    """The most the kernel keeps in a TCP socket's send buffer (the gateway's, to the browser)."""
    return int(Path("/proc/sys/net/ipv4/tcp_wmem").read_text().split()[2])


@asynccontextmanager
async def _stalled_download(gateway: str, cookies: httpx.Cookies, job_no: str) -> AsyncIterator[None]:
    """A browser that takes the headers and 64 KiB of a download, then reads nothing more."""
    host, port = gateway.removeprefix("http://").split(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 << 10)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (host, int(port)))
    reader, writer = await asyncio.open_connection(sock=sock, limit=64 << 10)
    cookie = "; ".join(f"{name}={value}" for name, value in cookies.items())
    writer.write(f"GET /jobs/{job_no}/result HTTP/1.1\r\nHost: {host}\r\nCookie: {cookie}\r\n\r\n".encode())
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    await reader.readexactly(64 << 10)
    try:
        yield
    finally:
        writer.close()


async def test_a_stalled_download_holds_a_bounded_buffer_and_its_call_ends_with_it(
    served: Served, gateway: str
) -> None:
    """Security review, issue 22, finding 2: 200 stalled downloads took a gateway from 280 MB
    to 5.67 GB, and 1.26 GB stayed after they closed. The gateway reads GetResult only as the
    browser takes the bytes, and a browser that leaves ends the call and its channel."""
    job_no = await _kept_result(served, os.urandom(64 << 20))
    async with signed_in(gateway, ACME) as client:
        cookies = client.cookies
    read_so_far: list[int] = []
    async with _stalled_download(gateway, cookies, job_no):
        for _ in range(20):  # a while of the browser taking nothing
            read_so_far.extend(open_result_files(served).values())
            await asyncio.sleep(0.05)
    # The server read what fits the gateway's fixed window, a few chunks, and what the kernel
    # holds in the gateway's socket to the browser; with a window grown by BDP probing the
    # gateway itself took in megabytes more (10 MiB within this test's second).
    assert read_so_far and max(read_so_far) <= _socket_send_buffer_max() + (2 << 20)

    async def call_ended() -> bool:
        return served.runtime.transfers.shares.total == 0 and not open_result_files(served)

    await eventually(call_ended, what="the download's GetResult ended when the browser left")


async def test_handler_evidence_is_on_the_evidence_page_and_an_admins_timeline_never_a_clients(
    served: Served, gateway: str
) -> None:
    job = await _submit(served, ACME, title="Charge order 42")
    lease = await _claim(served)
    entry = worker_pb2.EvidenceEntry(key="payment_request_id", value="pi_3NxQ2f")
    record = worker_pb2.RecordEvidenceRequest(job_no=job.job_no, worker_token=lease.worker_token, entries=[entry])
    await served.workers.RecordEvidence(record, metadata=WORKER.metadata)
    async with signed_in(gateway, ACME) as client:
        mine = (await client.get(f"/jobs/{job.job_no}")).text
        assert "Charge order 42" in mine
        assert "pi_3NxQ2f" not in mine and 'id="timeline"' not in mine  # a client sees no evidence
    async with signed_in(gateway, OPERATOR) as client:
        theirs = (await client.get(f"/jobs/{job.job_no}")).text
        assert 'id="timeline"' in theirs and "payment_request_id = pi_3NxQ2f" in theirs
        trail = (await client.get("/evidence", params={"job": job.job_no})).text
        assert (
            'id="handler-evidence"' in trail
            and '<td class="detail">payment_request_id</td><td class="detail">pi_3NxQ2f</td>' in trail
        )
        assert "Charge order 42" in trail  # the trail's heading: its title
        assert 'id="checkpoint"' not in trail  # none saved yet

    async def save(checkpoint: bytes) -> str:
        report = worker_pb2.ReportStageRequest(
            job_no=job.job_no, worker_token=lease.worker_token, stage="PROCESSING", checkpoint=checkpoint
        )
        await served.workers.ReportStage(report, metadata=WORKER.metadata)
        async with signed_in(gateway, OPERATOR) as client:
            return (await client.get("/evidence", params={"job": job.job_no})).text

    text = await save(b'{"row": 2500}')
    assert '<pre id="checkpoint-text">{&#34;row&#34;: 2500}</pre>' in text
    assert hashlib.sha256(b'{"row": 2500}').hexdigest() in text and "CHECKPOINT_SAVED" in text
    binary = await save(b"\xff\xfe\x00")
    assert 'id="checkpoint-binary"' in binary and 'id="checkpoint-text"' not in binary
    assert hashlib.sha256(b"\xff\xfe\x00").hexdigest() in binary and "3 bytes" in binary
