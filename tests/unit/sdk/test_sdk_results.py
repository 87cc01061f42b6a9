"""Result URIs name no worker path when a results URL is set; JSON values become results."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobwire.domain.job import ErrorCategory
from jobwire.worker.sdk import JobContext, Result, WorkerConfig
from jobwire.worker.sdk._result import ResultStore
from jobwire.worker.sdk.testing import EndKind, JobEnvironment


@pytest.mark.parametrize(
    "base",
    ["https://files.example/jobwire/", "https://files.example/jobwire", "s3://bucket/prefix/"],
)
def test_a_results_url_replaces_the_worker_path(tmp_path: Path, base: str) -> None:
    results = tmp_path / "secret-worker-dir" / "results"
    env = JobEnvironment(results_dir=results, results_url=base, job_no="PT-20260101-007", attempt=2)
    outcome = env.run(lambda ctx: Result.from_bytes(b"x", filename="report.html"))
    assert outcome.kind is EndKind.COMPLETE and outcome.artifact is not None
    assert outcome.artifact.uri == base.rstrip("/") + "/default/PT-20260101-007/attempt-2/report.html"
    assert str(tmp_path) not in outcome.artifact.uri and "secret-worker-dir" not in outcome.artifact.uri
    assert outcome.read_result() == b"x"  # still written below results_dir


def test_the_relative_path_is_url_quoted(tmp_path: Path) -> None:
    store = ResultStore(tmp_path, base_url="https://files.example/r/")
    assert store.uri_of(tmp_path / "job 1" / "attempt-1" / "a#b?.txt") == (
        "https://files.example/r/job%201/attempt-1/a%23b%3F.txt"
    )


def test_without_a_results_url_uris_stay_file_uris(tmp_path: Path) -> None:
    outcome = JobEnvironment(results_dir=tmp_path).run(lambda ctx: Result.from_bytes(b"x"))
    assert outcome.artifact is not None and outcome.result_path is not None
    assert outcome.artifact.uri == outcome.result_path.as_uri()


@pytest.mark.parametrize("url", ["", "files.example/jobwire", "/srv/results", " https://x/"])
def test_a_results_url_must_be_absolute(url: str) -> None:
    with pytest.raises(ValueError, match="results_url"):
        WorkerConfig(target="h:1", results_url=url)
    assert WorkerConfig(target="h:1", results_url="s3://bucket/prefix/").results_url == "s3://bucket/prefix/"


@pytest.mark.parametrize("value", [{"rows": 3, "name": "日本"}, [1, 2, {"a": None}], {}])
def test_a_returned_dict_or_list_is_delivered_as_json(value: object) -> None:
    def handler(ctx: JobContext) -> Result:
        return value  # type: ignore[return-value]

    outcome = JobEnvironment().run(handler)
    assert outcome.kind is EndKind.COMPLETE and outcome.artifact is not None
    assert outcome.artifact.content_type == "application/json"
    assert json.loads(outcome.read_result()) == value
    assert outcome.result_path is not None and outcome.result_path.name == "result.json"


def test_a_dict_that_is_not_json_is_result_invalid() -> None:
    outcome = JobEnvironment().run(lambda ctx: {"when": object()})  # type: ignore[arg-type]
    assert outcome.kind is EndKind.FAIL and outcome.failure is not None
    assert outcome.failure.category is ErrorCategory.RESULT_INVALID
    assert outcome.failure.message == "the handler returned a dict that is not JSON"


def test_two_tenants_results_of_one_number_and_attempt_are_kept_apart(tmp_path: Path) -> None:
    """Numbers are per tenant: a shared fleet's worker may deliver acme's and globex's PT-1."""
    store = ResultStore(tmp_path / "results", base_url="https://files.example/r/")
    made = {
        tenant: store.deliver(
            Result.from_bytes(tenant.encode(), filename="out.txt"), tenant=tenant, job_no="PT-1", attempt=1,
            tmp_dir=tmp_path,
        )
        for tenant in ("acme", "globex", "acme/eu", "..")
    }  # fmt: skip
    assert {t: d.path.read_bytes() for t, d in made.items()} == {t: t.encode() for t in made}
    assert made["acme"].artifact.uri == "https://files.example/r/acme/PT-1/attempt-1/out.txt"
    for delivered in made.values():  # any tenant's name is one folder below the root
        assert delivered.path.relative_to(store.root).parts[1:] == ("PT-1", "attempt-1", "out.txt")
    store.discard(made["globex"].path)
    assert sorted(p.name for p in store.root.iterdir()) == sorted(["acme", "acme%2Feu", "%2E%2E"])
