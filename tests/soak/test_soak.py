"""The short soak `make test` runs: 32 s of faults on MariaDB, one every 4 s (tests/soak/soak.py), every count 0.

`make soak` runs the long one and prints the same table.
"""

from __future__ import annotations

import pytest
import soak

pytestmark = [pytest.mark.mysql, pytest.mark.timeout(300)]


def test_under_a_nemesis_no_promise_is_broken(mysql_server: str) -> None:
    # A fault every 4 s: the five kinds (the pause alone takes ~9 s) fit in 32 s with ~5 s to spare.
    config = soak.Config(seconds=32, rate=3.0, fault_every=4.0, drain_seconds=90)
    found = soak.run(config)
    assert found.submits["ok"] + found.submits["ok after retrying"] >= 60, found.submits
    assert len(found.faults) == 5, found.faults  # every kind of fault, once at least
    assert found.outcomes["READY"] >= len(found.outcomes) and found.outcomes["READY"] > found.outcomes["FAILED"], (
        found.outcomes
    )
    assert found.broken == dict.fromkeys(found.broken, 0), found.table(config, 0)
