"""`python -m jobwire serve`, with PyMySQL's commands counted into JWBENCH_SQLCOUNT (see sqlcount.py).

JWBENCH_PRELOAD, when set, names a Python file run in the server process before it
serves: a what-if experiment (monkeypatch a candidate fix, measure it with the same
bench) without touching the server's code. See bench/README.md.
"""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path

import sqlcount

if __name__ == "__main__":
    sqlcount.install(Path(os.environ["JWBENCH_SQLCOUNT"]))
    if os.environ.get("JWBENCH_PRELOAD"):
        runpy.run_path(os.environ["JWBENCH_PRELOAD"], run_name="jwbench_preload")
    sys.argv = ["jobwire", "serve"]
    runpy.run_module("jobwire", run_name="__main__", alter_sys=True)
