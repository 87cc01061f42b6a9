"""Builds the sdist and wheel of every jobwire distribution into one folder.

    python tools/build_dists.py OUTDIR

The one recipe `make dist` (OUTDIR dist/), the Dockerfile's build stage and
tests/e2e/test_wheels.py run. Each wheel is built from its sdist, so an sdist that misses a
file fails here; each build gets a fresh environment holding what its pyproject.toml's
[build-system] requires (jobwire-shared's compiles protos/ into jobwire.v1). Needs `build`.
constraints.txt goes beside them: a machine that gets only the folder installs with the
versions jobwire is tested with (`pip install -c dist/constraints.txt --find-links dist/ ...`).
A build's log (about 300 lines) is printed only when it fails, with its command; the last
lines name the files written.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DISTRIBUTIONS = ("shared", "services/worker", "services/jobapi", "services/server", "services/gateway")


def build_all(outdir: Path) -> bool:
    """Builds all five at once (each mostly waits on the package index); True when all were built."""
    outdir.mkdir(parents=True, exist_ok=True)
    before = _files(outdir)
    builds = {folder: _start(_command(folder, outdir)) for folder in DISTRIBUTIONS}
    failed = []
    for folder, build in builds.items():
        output, _ = build.communicate()
        if build.returncode != 0:
            failed.append(folder)
            command = shlex.join(_command(folder, outdir))
            print(f"----- {folder}: exit {build.returncode} from\n{command}\n{output}", flush=True)
    if failed:
        print(f"build_dists.py: could not build {', '.join(failed)}: see above", file=sys.stderr)
        return False
    shutil.copyfile(ROOT / "constraints.txt", outdir / "constraints.txt")
    written = sorted(path for path, stamp in _files(outdir).items() if before.get(path) != stamp)
    print(f"built {len(DISTRIBUTIONS)} distributions, {len(written)} files in {_shown(outdir)}:")
    for path in written:
        print(f"  {path.name}")
    return True


def _files(folder: Path) -> dict[Path, int]:
    """The folder's files and when each was last written (a rebuild rewrites a file of the same name)."""
    return {path: path.stat().st_mtime_ns for path in folder.iterdir() if path.is_file()}


def _shown(folder: Path) -> str:
    return str(folder.relative_to(Path.cwd())) if folder.is_relative_to(Path.cwd()) else str(folder)


def _command(folder: str, outdir: Path) -> list[str]:
    return [sys.executable, "-m", "build", "--outdir", str(outdir), str(ROOT / folder)]


def _start(command: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="build_dists.py", description=__doc__.splitlines()[0])
    parser.add_argument("outdir", type=Path, help="where the sdists and wheels go")
    return 0 if build_all(parser.parse_args(argv).outdir.resolve()) else 1


if __name__ == "__main__":
    sys.exit(main())
