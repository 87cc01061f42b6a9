"""A fleet machine installs plain jobwire-worker: the runtime must not import database code."""

from __future__ import annotations

import subprocess
import sys

FORBIDDEN = ("sqlalchemy", "pymysql", "alembic", "jobwire.db", "jobwire.rpc", "jobwire.worker.server", "jobwire.jobapi")


def test_the_worker_runtime_imports_no_database_code() -> None:
    # A fresh interpreter: this test process has long since imported everything.
    code = (
        "import sys\n"
        "import jobwire.worker.sdk, jobwire.worker.sdk.cli, jobwire.worker.sdk.testing, jobwire.examples\n"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r} or m.startswith({FORBIDDEN!r}))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == ""
