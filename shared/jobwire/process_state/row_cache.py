"""Rows of leased jobs as this process last wrote or read them: guesses that save a read.

A worker's calls reach the process that granted its lease (one gRPC connection carries
them all), so the row its last call left is nearly always the row its next call finds.
A guess is only ever the starting point of a guarded UPDATE (jobwire.db.changes): if the
job changed meanwhile the UPDATE matches nothing and the row is read again. A stale
entry therefore costs a read, never a wrong write.

Rows are kept by name, (tenant, job_no): two tenants' jobs may have one number. A shared
fleet's call names only the number; `holder` finds the row its token leases.

Only leased jobs are kept (a guess is offered to the token that holds the lease), and
at most `capacity` of them, least recently used out first.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Collection
from typing import Any

from jobwire.domain.job import Name
from jobwire.domain.states import LEASED

_LEASED = frozenset(s.value for s in LEASED)
CAPACITY = 20_000


class RowCache:
    def __init__(self, blobs: Collection[str], capacity: int = CAPACITY) -> None:
        self._blobs = frozenset(blobs)  # columns never kept: a guess needs none of them
        self._rows: OrderedDict[Name, dict[str, Any]] = OrderedDict()
        self._holders: dict[str, Name] = {}  # each kept row's lease token: the job it leases
        self._capacity = capacity
        # Transactions run on the event loop; the lock keeps the two maps in step for a caller off it.
        self._lock = threading.Lock()

    def guess(self, name: Name, tokens: Collection[str | None]) -> dict[str, Any] | None:
        """The row last seen for the job `name`, if every caller in `tokens` holds its lease."""
        with self._lock:
            row = self._rows.get(name)
            if row is None or any(t != row["worker_token"] for t in tokens):
                return None
            self._rows.move_to_end(name)
            return row

    def holder(self, job_no: str, token: str | None) -> Name | None:
        """The job numbered `job_no` whose lease `token` is, if its row is kept."""
        with self._lock:
            name = self._holders.get(token) if token is not None else None
            return name if name is not None and name[1] == job_no else None

    def put(self, row: dict[str, Any]) -> None:
        """Keep `row` (a leased job's, without its blobs); any other row leaves the cache."""
        name = (row["tenant"], row["job_no"])
        if not self._blobs.isdisjoint(row):
            row = {k: v for k, v in row.items() if k not in self._blobs}
        with self._lock:
            self._pop(name)
            if row["status"] not in _LEASED or row["worker_token"] is None:
                return
            self._rows[name] = row
            self._holders[row["worker_token"]] = name
            if len(self._rows) > self._capacity:
                self._pop(next(iter(self._rows)))

    def drop(self, name: Name) -> None:
        with self._lock:
            self._pop(name)

    def _pop(self, name: Name) -> None:
        row = self._rows.pop(name, None)
        if row is not None:
            self._holders.pop(row["worker_token"], None)

    def __len__(self) -> int:
        return len(self._rows)
