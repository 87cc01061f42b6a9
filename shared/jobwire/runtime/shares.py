"""Per-tenant shares of a server's capacity: watch streams, long-polling claims.

One tenant's burst must not lock the others out (with three streams allowed, one tenant's
three WatchJobs made another's WatchStatus fail). A tenant may hold at most
capacity / min(tenants, 4) of it: half with two tenants, a quarter from four on, so a few
busy tenants still leave room. A server with one tenant (no auth file,
or an auth file naming one) gives it everything.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator

from jobwire.domain.errors import ResourceExhausted

MAX_SHARES = 4


class TenantShares:
    def __init__(self, capacity: int, tenants: int) -> None:
        self.capacity = capacity
        self.per_tenant = max(1, capacity // max(1, min(tenants, MAX_SHARES)))
        self._held: Counter[str] = Counter()
        self._total = 0

    @property
    def total(self) -> int:
        return self._total

    def held(self, tenant: str) -> int:
        return self._held[tenant]

    @contextlib.contextmanager
    def hold(self, tenant: str, full: type[ResourceExhausted] = ResourceExhausted) -> Iterator[None]:
        """One unit of capacity for `tenant` while the block runs; `full` when none is left to it."""
        if self._total >= self.capacity or self._held[tenant] >= self.per_tenant:
            raise full()
        self._held[tenant] += 1
        self._total += 1
        try:
            yield
        finally:
            self._total -= 1
            self._held[tenant] -= 1
            if not self._held[tenant]:
                del self._held[tenant]
