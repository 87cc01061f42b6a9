"""The (queue, job type) pairs this process records in `worker_claim` for each tenant (NO_WORKER).

A Claim records the pairs it names, each at most every `every_s`, so the writes grow with the
kinds of job served, not with the workers serving them. A tenant's distinct pairs are bounded
too: a Claim names at most 1,000, but five Claims of new names each once wrote 5,000 rows,
kept for the worker retention. Past `per_tenant` pairs recorded within `keep_s` (the rows'
retention), this process records no new pair for the tenant (and says so once) until old
ones age out. Its Claims go on as before, and the pairs already recorded are kept fresh: a
pair left out only shows its jobs as NO_WORKER, which is all these rows are read for.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable

Kind = tuple[str, str]  # (queue, job type)


class ClaimKinds:
    def __init__(
        self,
        *,
        every_s: float,
        keep_s: float,
        per_tenant: int,
        full: Callable[[str, int], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.every_s, self.keep_s, self.per_tenant = every_s, keep_s, per_tenant
        self._full = full  # told (tenant, bound) when a tenant's first pair is left out
        self._clock = clock
        self._recorded: dict[str, OrderedDict[Kind, float]] = {}  # tenant -> pair -> last recorded, oldest first
        self._told: set[str] = set()

    def due(self, tenant: str, queues: Iterable[str], job_types: Iterable[str]) -> list[Kind]:
        """The pairs of a Claim to record now (each counted as recorded from now on)."""
        now = self._clock()
        kinds = self._recorded.setdefault(tenant, OrderedDict())
        while kinds and now - next(iter(kinds.values())) > self.keep_s:
            kinds.popitem(last=False)  # its row is purged by now: its place is free again
        if len(kinds) < self.per_tenant:
            self._told.discard(tenant)
        due = []
        for queue in queues:
            for job_type in job_types:
                key = (queue, job_type)
                last = kinds.get(key)
                if last is None and len(kinds) >= self.per_tenant:
                    self._left_out(tenant)
                elif last is None or now - last >= self.every_s:
                    kinds[key] = now
                    kinds.move_to_end(key)
                    due.append(key)
        if not kinds:
            del self._recorded[tenant]
        return due

    def _left_out(self, tenant: str) -> None:
        if tenant not in self._told:
            self._told.add(tenant)
            self._full(tenant, self.per_tenant)
