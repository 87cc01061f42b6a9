"""A server or a migration that cannot reach its database says so in one line and exits 1.

Found in an operator's first hour: a MySQL database not created yet, or a server down,
printed two SQLAlchemy tracebacks (some 135 lines) where a port in use or an old schema
gets one sentence.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(60)


def _closed_port() -> int:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        return int(unused.getsockname()[1])


@pytest.mark.parametrize(("command", "processes"), [("serve", "1"), ("serve", "2"), ("migrate", "1")])
def test_a_database_out_of_reach_is_one_line_naming_what_to_check(tmp_path: Path, command: str, processes: str) -> None:
    cases = {
        f"mysql+pymysql://jw:s3cret@127.0.0.1:{_closed_port()}/jobs": "that the server is up",
        f"sqlite:///{tmp_path}/no-such-folder/jobwire.db": "the file's folder exists",
    }
    for url, advice in cases.items():
        env = {**os.environ, "JOBWIRE_DATABASE_URL": url, "JOBWIRE_LISTEN": "127.0.0.1:0",
               "JOBWIRE_PROCESSES": processes}  # fmt: skip
        done = subprocess.run([sys.executable, "-m", "jobwire", command], env=env, capture_output=True, text=True,
                              timeout=45)  # fmt: skip
        said = done.stderr.strip().splitlines()
        assert done.returncode == 1, done.stderr
        assert "Traceback" not in done.stderr, done.stderr
        assert said[-1].startswith("jobwire: cannot reach the database ") and advice in said[-1], said[-1]
        assert "s3cret" not in done.stderr  # the password is never printed
