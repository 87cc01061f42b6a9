"""What each worker's last claim named, per process: the kinds its heartbeats keep served.

A worker whose every slot runs a long job claims nothing; NO_WORKER would then read its kinds
(queue, job type) as served by nobody while it runs them. Its heartbeats record them as its
claims do (jobwire.process_state.claim_kinds rates both), and need to know them: the last
claim this process saw, or, for a worker that claimed through another process or before this
one started, its ListWorkers row (read once). Bounded: the least recently heard go first.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

Serves = tuple[tuple[str, ...], tuple[str, ...]]  # queues, job types


class LastClaims:
    def __init__(self, bound: int) -> None:
        self._bound = bound
        self._serves: OrderedDict[tuple[str, str], Serves] = OrderedDict()

    def claimed(self, tenant: str, worker_id: str, queues: Iterable[str], job_types: Iterable[str]) -> Serves:
        """Record what a worker's claim (or its row) names; what is recorded."""
        key = (tenant, worker_id)
        serves = self._serves[key] = (tuple(queues), tuple(job_types))
        self._serves.move_to_end(key)
        if len(self._serves) > self._bound:
            self._serves.popitem(last=False)  # the least recently heard: read again if it comes back
        return serves

    def heard(self, tenant: str, worker_id: str) -> Serves | None:
        """What a worker serves, as last recorded here (None: not known here)."""
        key = (tenant, worker_id)
        serves = self._serves.get(key)
        if serves is not None:
            self._serves.move_to_end(key)
        return serves
