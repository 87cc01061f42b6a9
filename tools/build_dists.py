"""Builds the sdist and wheel of every jobwire distribution into one folder.

    python tools/build_dists.py OUTDIR

The one recipe `make dist` (OUTDIR dist/), the Dockerfile's build stage and
tests/e2e/test_wheels.py run. Each wheel is built from its sdist, so an sdist that misses a
file fails here; each build gets a fresh environment holding what its pyproject.toml's
[build-system] requires (jobwire-shared's compiles protos/ into jobwire.v1). Needs `build`.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DISTRIBUTIONS = ("shared", "services/worker", "services/jobapi", "services/server", "services/gateway")


def build_all(outdir: Path) -> bool:
    """Builds all five at once (each mostly waits on the package index); prints each one's output."""
    outdir.mkdir(parents=True, exist_ok=True)
    builds = {folder: _start(folder, outdir) for folder in DISTRIBUTIONS}
    failed = []
    for folder, build in builds.items():
        output, _ = build.communicate()
        print(f"----- {folder}\n{output}", flush=True)
        if build.returncode != 0:
            failed.append(folder)
    if failed:
        print(f"build_dists.py: could not build {', '.join(failed)}: see above", file=sys.stderr)
    return not failed


def _start(folder: str, outdir: Path) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "build", "--outdir", str(outdir), str(ROOT / folder)]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="build_dists.py", description=__doc__.splitlines()[0])
    parser.add_argument("outdir", type=Path, help="where the sdists and wheels go")
    return 0 if build_all(parser.parse_args(argv).outdir.resolve()) else 1


if __name__ == "__main__":
    sys.exit(main())
