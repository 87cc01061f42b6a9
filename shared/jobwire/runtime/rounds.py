"""How a background loop of a server process (housekeeping, schedules) survives a failed round.

A round that meets a database outage logs it once, when it starts, and once when it ends;
any other failure is logged with its trace every time. Either way the loop goes on and
the next round tries again: a loop never dies of an error.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

from jobwire.domain.errors import StoreUnavailable


class Rounds:
    def __init__(self, log: logging.Logger, what: str) -> None:
        self.log = log
        self.what = what
        self._reachable = True

    @contextlib.contextmanager
    def round(self) -> Iterator[None]:
        """Run one round; an error ends it (logged) instead of the loop."""
        try:
            yield
        except StoreUnavailable:
            if self._reachable:
                self.log.warning("%s paused: the database is unreachable", self.what)
            self._reachable = False
            return
        except Exception:
            self.log.exception("%s round failed; retrying next round", self.what)
            return
        if not self._reachable:
            self.log.info("%s resumed: the database is reachable", self.what)
        self._reachable = True
