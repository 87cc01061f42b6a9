"""The gateway's pure parts: which language, which address, which filename, which redirect."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from test_dashboard import as_scraped, documented

from jobwire.client.channel import DEFAULT_TARGET
from jobwire.gateway.budget import LiveBudget, OverBudget, SharedReads
from jobwire.gateway.detail import by_whom
from jobwire.gateway.i18n import CATALOG, LOCALES, pick_locale
from jobwire.gateway.metrics import GatewayMetrics
from jobwire.gateway.routes import local_path
from jobwire.gateway.settings import GatewaySettings
from jobwire.gateway.sse import NewJobs
from jobwire.gateway.views import download_headers
from jobwire.v1 import admin_pb2, job_pb2


@pytest.mark.parametrize(
    ("cookie", "header", "expected"),
    [
        (None, "zh-CN,zh;q=0.9,en;q=0.8", "zh-CN"),
        (None, "en-US,en;q=0.9,zh;q=0.8", "en"),
        (None, "fr, zh-TW;q=0.5, en;q=0.4", "zh-CN"),  # the first we speak, by weight
        (None, "en;q=0.2, zh;q=0.9", "zh-CN"),
        (None, "zh;q=0, en", "en"),  # q=0 means "not this one"
        (None, "", "en"),
        ("zh-CN", "en", "zh-CN"),  # the language link wins
        ("klingon", "zh", "zh-CN"),  # a cookie we never set is ignored
    ],
)
def test_pick_locale(cookie: str | None, header: str, expected: str) -> None:
    assert pick_locale(cookie, header) == expected


def test_every_word_is_in_every_language() -> None:
    for key, texts in CATALOG.items():
        assert set(texts) == set(LOCALES), key
        assert all(texts.values()), key


def test_settings_read_the_listen_address_and_the_clients_target(tmp_path: Path) -> None:
    default = GatewaySettings.from_env({})
    assert (default.host, default.port, default.service.target) == ("127.0.0.1", 8080, DEFAULT_TARGET)
    ca = tmp_path / "ca.pem"
    chosen = GatewaySettings.from_env(
        {"JOBWIRE_GATEWAY_LISTEN": "0.0.0.0:9090", "JOBWIRE_TARGET": "jobapi:50051", "JOBWIRE_TLS_CA": str(ca)}
    )
    assert (chosen.host, chosen.port, chosen.service.target) == ("0.0.0.0", 9090, "jobapi:50051")
    assert chosen.service.uses_tls and chosen.service.token is None
    with pytest.raises(ValueError, match="host:port"):
        GatewaySettings.from_env({"JOBWIRE_GATEWAY_LISTEN": "8080"})


def test_settings_read_where_metrics_are_served() -> None:
    assert GatewaySettings.from_env({}).metrics_listen is None  # not served unless asked
    chosen = GatewaySettings.from_env({"JOBWIRE_GATEWAY_METRICS_LISTEN": "0.0.0.0:9090"})
    assert chosen.metrics_listen == "0.0.0.0:9090"
    with pytest.raises(ValueError, match="JOBWIRE_GATEWAY_METRICS_LISTEN must be host:port"):
        GatewaySettings.from_env({"JOBWIRE_GATEWAY_METRICS_LISTEN": "9090"})


def test_docs_gateway_md_documents_every_series_of_the_gateway_with_its_type() -> None:
    kinds = {family.name: family.type for family in GatewayMetrics().registry.collect()}
    assert documented("gateway.md") == as_scraped(kinds)


def test_download_headers_name_the_file_and_never_pass_a_bad_type_on() -> None:
    media, headers = download_headers("PT-20261008-001", "application/json; charset=utf-8")
    assert media == "application/json"
    assert headers["Content-Disposition"] == 'attachment; filename="PT-20261008-001.json"'
    assert headers["X-Content-Type-Options"] == "nosniff"
    media, headers = download_headers("PT-1", "text/html\r\nSet-Cookie: x=1")
    assert media == "application/octet-stream" and headers["Content-Disposition"].endswith('PT-1.bin"')


@pytest.mark.parametrize(
    ("target", "expected"),
    [("/jobs/PT-1", "/jobs/PT-1"), ("//evil.example/", "/jobs"), ("https://evil.example/", "/jobs"), (None, "/jobs")],
)
def test_language_link_returns_only_to_this_site(target: str | None, expected: str) -> None:
    assert local_path(target) == expected


def test_new_jobs_are_those_the_page_does_not_show_and_the_unended_are_watched() -> None:
    def job(job_no: str, status: int = job_pb2.Job.QUEUED) -> job_pb2.Job:
        return job_pb2.Job(job_no=job_no, status=status)  # type: ignore[arg-type]

    jobs = NewJobs(watching=["PT-2"], seen=["PT-1"])
    listed = [job("PT-4"), job("PT-3", job_pb2.Job.READY), job("PT-2"), job("PT-1", job_pb2.Job.READY)]
    assert [j.job_no for j in jobs.take(listed)] == ["PT-4", "PT-3"]
    assert jobs.watching == ["PT-4", "PT-2"]  # an ended job has nothing more to say
    assert jobs.take(listed) == []  # listed once, never again


def test_settings_read_the_origin_and_the_live_budget() -> None:
    chosen = GatewaySettings.from_env(
        {
            "JOBWIRE_GATEWAY_ORIGIN": "https://jobs.example.com/",
            "JOBWIRE_GATEWAY_MAX_STREAMS": "4",
            "JOBWIRE_GATEWAY_MAX_WATCHED": "300",
        }
    )
    assert (chosen.origin, chosen.max_streams, chosen.max_watched) == ("https://jobs.example.com", 4, 300)
    default = GatewaySettings.from_env({})
    assert (default.origin, default.max_streams, default.max_watched) == ("", 16, 2000)
    with pytest.raises(ValueError, match="scheme://host"):
        GatewaySettings.from_env({"JOBWIRE_GATEWAY_ORIGIN": "jobs.example.com"})
    with pytest.raises(ValueError, match="JOBWIRE_GATEWAY_MAX_WATCHED"):
        GatewaySettings.from_env({"JOBWIRE_GATEWAY_MAX_WATCHED": "0"})


def test_a_persons_budget_counts_streams_and_watched_jobs_and_gives_them_back() -> None:
    budget = LiveBudget(max_streams=2, max_watched=10)
    with budget.hold("ann", 6):
        with pytest.raises(OverBudget):
            budget.hold("ann", 5).__enter__()  # 6 + 5 jobs
        with budget.hold("ann", 4), pytest.raises(OverBudget):
            budget.hold("ann", 0).__enter__()  # a third stream
        with budget.hold("bob", 10):  # another person's budget is their own
            pass
    with budget.hold("ann", 10):  # all given back
        pass


async def test_pages_of_one_key_share_one_read_and_a_failed_read_is_not_shared() -> None:
    reads = SharedReads[int](fresh_s=60)
    started, release = 0, asyncio.Event()

    async def fetch() -> int:
        nonlocal started
        started += 1
        await release.wait()
        return started

    waiting = [asyncio.ensure_future(reads.read(("ann", "QUEUED"), fetch)) for _ in range(5)]
    other = asyncio.ensure_future(reads.read(("bob", "QUEUED"), fetch))
    await asyncio.sleep(0)
    release.set()
    assert await asyncio.gather(*waiting) == [1] * 5 and await other == 2  # one read per key
    assert await reads.read(("ann", "QUEUED"), fetch) == 1  # fresh: served again without a read

    async def broken() -> int:
        raise RuntimeError("the first page's channel closed")

    with pytest.raises(RuntimeError):
        await reads.read("carol", broken)
    assert await reads.read("carol", fetch) == 3  # a failed read is read again, not shared


@pytest.mark.parametrize(
    ("kind", "worker_id", "shown"),
    [
        ("REQUEUED", "w-7", "an operator"),  # the worker named held the job; an operator requeued it
        ("CANCEL_REQUESTED", "w-7", "a person"),
        ("CANCELLED", "w-7", "worker w-7"),  # the worker confirming the cancel at its safe point
        ("CANCELLED", "", "a person"),  # a queued job's cancel
        ("PROGRESS", "w-7", "worker w-7"),
        ("LEASE_EXPIRED", "", "the server"),
    ],
)
def test_the_trail_credits_each_event_to_whoever_made_it(kind: str, worker_id: str, shown: str) -> None:
    assert by_whom(admin_pb2.JobEvent(kind=kind, worker_id=worker_id), "en") == shown
