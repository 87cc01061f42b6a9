"""deploy/grafana/jobwire.json and docs/operations.md's Metrics section name only series the code registers.

The names are read from a fresh `Metrics` registry (what GET /metrics exposes), so a
series renamed in the code fails here until the dashboard and the docs follow.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from jobwire.rpc.metrics import Metrics

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = json.loads((ROOT / "deploy" / "grafana" / "jobwire.json").read_text())
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKETS = re.compile(r"\{[^}]*\}|\[[^\]]*\]")
_LABEL_LISTS = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan"}


def families() -> dict[str, str]:
    """Every metric family the server registers, by name: its type."""
    return {family.name: family.type for family in Metrics().registry.collect()}


def registered() -> set[str]:
    """Every sample name a scrape can show."""
    return {name + suffix for name, kind in families().items() for suffix in SUFFIXES[kind]}


def expressions(node: Any) -> Iterator[str]:
    """Every PromQL expression of the dashboard: the panels' targets and the variables' queries."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("expr", "definition") and isinstance(value, str):
                yield value
            else:
                yield from expressions(value)
    elif isinstance(node, list):
        for item in node:
            yield from expressions(item)


def metric_names(expr: str) -> set[str]:
    """The series an expression selects: names not called as functions, outside strings, matchers and label lists."""
    expr = re.sub(r"label_values\(\s*([^,)]+)(?:,[^)]*)?\)", r"\1", expr)  # Grafana's: (metric, label)
    expr = _LABEL_LISTS.sub(" ", _BRACKETS.sub(" ", _STRING.sub(" ", expr)))
    names = set()
    for match in _NAME.finditer(expr):
        if expr[match.end() :].lstrip().startswith("(") or match.group().lower() in _KEYWORDS:
            continue  # a function (rate, histogram_quantile, sum...) or an operator
        names.add(match.group())
    return names


def test_the_parser_finds_names_and_skips_the_rest() -> None:
    expr = 'histogram_quantile(0.95, sum by (le, job_type) (rate(jobwire_x_bucket{queue=~"$q"}[5m]))) or up'
    assert metric_names(expr) == {"jobwire_x_bucket", "up"}
    assert metric_names("label_values(jobwire_jobs, queue)") == {"jobwire_jobs"}


def test_every_series_of_the_dashboard_is_one_the_code_registers() -> None:
    exprs = list(expressions(DASHBOARD))
    assert len(exprs) >= len(DASHBOARD["panels"])
    used = set().union(*(metric_names(e) for e in exprs))
    assert used, "no series found: the parser is broken"
    assert used <= registered(), f"not registered: {sorted(used - registered())}"


def test_the_dashboard_shows_the_job_series() -> None:
    used = set().union(*(metric_names(e) for e in expressions(DASHBOARD)))
    shown = {name for name in families() if any(u.startswith(name) for u in used)}
    assert shown == set(families()), f"not on the dashboard: {sorted(set(families()) - shown)}"


def documented(page: str) -> dict[str, str]:
    """The series the `## Metrics` table of docs/`page` names, by name as scraped: its type."""
    doc = (ROOT / "docs" / page).read_text()
    section = doc.split("## Metrics", 1)[1].split("\n## ", 1)[0]
    return dict(re.findall(r"^\| `(jobwire_\w+)` \| (\w+) \|", section, flags=re.MULTILINE))


def as_scraped(kinds: dict[str, str]) -> dict[str, str]:
    """Family names (and types) as a scrape shows them: a counter with `_total`."""
    return {name + SUFFIXES[kind][0] if kind == "counter" else name: kind for name, kind in kinds.items()}


def test_the_operations_doc_documents_every_series_with_its_type() -> None:
    assert documented("operations.md") == as_scraped(families())
