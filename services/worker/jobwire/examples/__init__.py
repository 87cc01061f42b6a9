"""Example handlers doing real work on real files, one module per job type.

    jobwire-worker --target 127.0.0.1:50051 --handlers jobwire.examples:handlers

* ``frames``: renders N image frames (default 900), then packs them; a known total, so a percent.
* ``csv_import``: imports a CSV into a SQLite database in batches of 1,000 rows with a
  checkpoint after each batch; a later attempt resumes from it and no row is imported twice.
* ``report``: waits on an external report engine of unknown duration; stages, no percent.
"""

from __future__ import annotations

from jobwire.examples import csv_import, frames, report
from jobwire.worker.sdk import Handlers

handlers = Handlers().include(frames.handlers).include(csv_import.handlers).include(report.handlers)

__all__ = ["handlers"]
