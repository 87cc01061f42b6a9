"""A bound on the late-call evidence one job collects, per process.

A zombie worker that keeps calling with its old token is refused every time; the first
refusals are worth a row each (who called late, with which lease), a loop of them is not:
it would grow job_event without bound and cost a write per call. Past `per_window` rows
per job in `window_s`, further late calls are refused without a row. The map of jobs is
bounded too (the least recently limited job goes first).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict

PER_WINDOW = 3
WINDOW_S = 60.0
CAPACITY = 10_000


class EvidenceLimit:
    def __init__(self, per_window: int = PER_WINDOW, window_s: float = WINDOW_S, capacity: int = CAPACITY) -> None:
        self._per_window, self._window_s, self._capacity = per_window, window_s, capacity
        self._seen: OrderedDict[int, tuple[float, int]] = OrderedDict()  # job id -> (window start, rows)
        self._lock = threading.Lock()

    def allow(self, job_id: int, now: float | None = None) -> bool:
        """True when one more evidence row may be written for `job_id` now."""
        at = time.monotonic() if now is None else now
        with self._lock:
            start, count = self._seen.pop(job_id, (at, 0))
            if at - start >= self._window_s:
                start, count = at, 0
            allowed = count < self._per_window
            self._seen[job_id] = (start, count + allowed)
            if len(self._seen) > self._capacity:
                self._seen.popitem(last=False)
            return allowed
