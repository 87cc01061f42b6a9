"""Rows of leased jobs as this process last wrote or read them: guesses that save a read.

A worker's calls reach the process that granted its lease (one gRPC connection carries
them all), so the row its last call left is nearly always the row its next call finds.
A guess is only ever the starting point of a guarded UPDATE (jobwire.db.changes): if the
job changed meanwhile the UPDATE matches nothing and the row is read again. A stale
entry therefore costs a read, never a wrong write.

Only leased jobs are kept (a guess is offered to the token that holds the lease), and
at most `capacity` of them, least recently used out first.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Collection
from typing import Any

from jobwire.db.sql import BLOBS
from jobwire.domain.commands import may_act_for
from jobwire.domain.states import LEASED

_LEASED = frozenset(s.value for s in LEASED)
_BLOBS = BLOBS
CAPACITY = 20_000


class RowCache:
    def __init__(self, capacity: int = CAPACITY) -> None:
        self._rows: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._capacity = capacity
        self._lock = threading.Lock()  # the store's transactions run on several threads

    def guess(self, job_no: str, tenant: str, tokens: Collection[str | None]) -> dict[str, Any] | None:
        """The row last seen for `job_no`, if every caller in `tokens` holds its lease."""
        with self._lock:
            row = self._rows.get(job_no)
            if row is None or not may_act_for(tenant, row["tenant"]) or any(t != row["worker_token"] for t in tokens):
                return None
            self._rows.move_to_end(job_no)
            return row

    def put(self, row: dict[str, Any]) -> None:
        """Keep `row` (a leased job's, without its blobs); any other row leaves the cache."""
        job_no = row["job_no"]
        if not _BLOBS.isdisjoint(row):
            row = {k: v for k, v in row.items() if k not in _BLOBS}
        with self._lock:
            if row["status"] not in _LEASED or row["worker_token"] is None:
                self._rows.pop(job_no, None)
                return
            self._rows[job_no] = row
            self._rows.move_to_end(job_no)
            if len(self._rows) > self._capacity:
                self._rows.popitem(last=False)

    def drop(self, job_no: str) -> None:
        with self._lock:
            self._rows.pop(job_no, None)

    def __len__(self) -> int:
        return len(self._rows)
