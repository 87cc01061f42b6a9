"""docs/ARCHITECTURE.md names files and symbols: each must exist, or the page has gone stale."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
# Where a short path in the page may start: the repository, or one of the packages.
PACKAGES = (
    "shared/jobwire", "shared/jobwire/db", "services/jobapi/jobwire", "services/jobapi/jobwire/jobapi",
    "services/worker/jobwire", "services/worker/jobwire/worker/server", "services/server/jobwire",
)  # fmt: skip
BASES = [ROOT, *(ROOT / p for p in PACKAGES)]


def test_every_file_the_page_names_exists() -> None:
    named = set(re.findall(r"`([\w/.]+\.(?:py|proto|md))`", DOC))
    assert len(named) > 15
    missing = sorted(n for n in named if not any((base / n).exists() for base in BASES))
    assert missing == []


def _defines(text: str, name: str) -> bool:
    return re.search(rf"^\s*(?:async def|def|class) {name}\b", text, re.M) is not None


def test_every_function_and_method_the_page_names_exists_where_it_says() -> None:
    # `module.function` (`changes._changed`) and `Class.method` (`Leasing.claim`) pairs.
    pairs = {p for p in re.findall(r"`(\w+)\.(\w+)`", DOC) if p[1] not in {"py", "md", "toml", "proto"}}
    pairs.discard(("jobwire", "db"))  # a package, not a function
    files = [*ROOT.glob("shared/jobwire/**/*.py"), *ROOT.glob("services/*/jobwire/**/*.py")]
    texts = {p: p.read_text() for p in files if "/v1/" not in str(p)}
    unknown = []
    for owner, name in sorted(pairs):
        if owner[0].islower():  # a module
            homes = [t for p, t in texts.items() if p.stem == owner]
        elif owner.endswith("Service"):  # a gRPC service: the servicer class that implements it
            homes = [t for t in texts.values() if re.search(rf"class \w+\(\w+\.{owner}Servicer\)", t)]
        else:
            homes = [t for t in texts.values() if _defines(t, owner)]
        if not any(_defines(t, name) for t in homes):
            unknown.append(f"{owner}.{name}")
    assert len(pairs) > 6
    assert unknown == []
