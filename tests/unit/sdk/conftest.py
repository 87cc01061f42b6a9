"""Fixtures for the worker SDK's unit tests: no server, no network."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from sdk_support import FakeWorkerService

from jobwire.worker.sdk import WorkerConfig


@pytest.fixture
def fake() -> FakeWorkerService:
    return FakeWorkerService()


@pytest.fixture
def config(tmp_path: Path) -> WorkerConfig:
    """A worker config with short timings and its own results and temp folders."""
    (tmp_path / "tmp").mkdir()
    return WorkerConfig(
        target="fake:0",
        worker_id="w-test",
        concurrency=2,
        lease_duration=3.0,
        grace_period=2.0,
        claim_wait=0.05,
        results_dir=tmp_path / "results",
        tmp_root=tmp_path / "tmp",
    )


@pytest.fixture(autouse=True)
def _sdk_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="jobwire.worker")
