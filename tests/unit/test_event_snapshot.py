"""The snapshot each visible event carries (jobwire.db.rows.snapshot): written value by value,
it must be the very JSON that json's own encoder writes for the row, and read back as the row."""

from __future__ import annotations

import enum
import json
from datetime import datetime
from typing import Any

import pytest

from jobwire.db.rows import SNAPSHOT_COLUMNS, TIME_COLUMNS, row_from_snapshot, snapshot


class Shade(enum.StrEnum):
    LIGHT = "light"


def encoded_by_json(row: dict[str, Any]) -> str:
    """What json.dumps writes for the snapshot's columns of `row`: the format readers expect."""
    values = {name: row.get(name) for name in SNAPSHOT_COLUMNS}
    return json.dumps(values, separators=(",", ":"), ensure_ascii=False, default=datetime.isoformat)


ROWS = {
    "every kind of value": {
        "job_no": "PT-20261206-001",
        "title": 'quote " backslash \\ newline \n tab \t nul \x00 e-acute \u00e9 han \u4e2d emoji \U0001f600',
        "labels": '{"team":"a"}',
        "priority": -3,
        "input_size": 2**63 - 1,
        "stalled": True,
        "no_progress": False,
        "created_at": datetime(2026, 12, 6, 6, 0, 29),  # no microseconds: isoformat leaves them out
        "updated_at": datetime(2026, 12, 6, 6, 0, 29, 7),
        "total_units": None,
        "status": Shade.LIGHT,  # a str subclass: json writes its text
        "size_bytes": 1.5,  # no column holds a float today; json writes one all the same
    },
    "no columns at all": {},
}


@pytest.mark.parametrize("row", ROWS.values(), ids=list(ROWS))
def test_a_snapshot_is_the_json_the_encoder_writes(row: dict[str, Any]) -> None:
    assert snapshot(row) == encoded_by_json(row)


def test_a_snapshot_reads_back_as_the_row() -> None:
    row = {name: value for name, value in ROWS["every kind of value"].items() if name != "status"}
    back = row_from_snapshot(snapshot(row))
    assert {name: back[name] for name in row} == row
    assert all(isinstance(back[name], datetime) for name in TIME_COLUMNS & row.keys())
