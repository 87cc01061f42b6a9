"""Every benchmark still imports against the code it measures.

The benches are not run by the suite (bench/README.md), so a rename in the product breaks
one silently until the next `make bench`; importing each catches that here. The peers'
tasks need bench/requirements.txt (Celery, RQ), which the suite does not install.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
NEEDS_BENCH_REQUIREMENTS = {"peer_tasks"}


@pytest.mark.parametrize("name", sorted(p.stem for p in BENCH.glob("*.py") if p.stem not in NEEDS_BENCH_REQUIREMENTS))
def test_the_bench_module_imports(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCH))
    monkeypatch.setattr(sys, "argv", [name])
    before = set(sys.modules)
    try:
        importlib.import_module(name)
    finally:  # bench/ names (e2e, measure, peers) must not shadow anything for later tests
        for added in set(sys.modules) - before:
            if Path(getattr(sys.modules[added], "__file__", None) or "/").parent == BENCH:
                del sys.modules[added]
