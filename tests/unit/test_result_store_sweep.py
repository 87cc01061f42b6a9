"""The abandoned-upload sweep's view of a result store (jobwire.runtime.result_store.stale_keys)."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

import pytest

from jobwire.runtime.blocking import Blocking
from jobwire.runtime.result_store import ResultStore


def store_with(tmp_path: Path, files: dict[str, float]) -> ResultStore:
    """A store on the local disk holding `files` (key: seconds since last written)."""
    store = ResultStore(str(tmp_path / "results"), Blocking(1))
    for key, age in files.items():
        path = Path(store.path(key))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")
        then = time.time() - age
        os.utime(path, (then, then))
    return store


def test_only_uploads_older_than_the_limit_are_stale(tmp_path: Path) -> None:
    store = store_with(tmp_path, {"lease-a/old": 7200, "lease-b/fresh": 10})
    assert store.stale_keys(3600) == ["lease-a/old"]


def test_a_store_that_keeps_no_times_removes_nothing_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = store_with(tmp_path, {"lease-a/old": 7200})

    def no_times(path: Any) -> Any:
        raise NotImplementedError

    monkeypatch.setattr(store.fs, "modified", no_times)
    with caplog.at_level(logging.WARNING, logger="jobwire.runtime.result_store"):
        assert store.stale_keys(3600) == []
    assert "keeps no modification times" in caplog.text
