"""`--version` of every jobwire command: the version of the distribution that installed it.

All five distributions take their version from the repository's one VERSION file when they
are built, so jobctl, jobwire-worker, `python -m jobwire` and `python -m jobwire.gateway`
print the same line.
"""

from __future__ import annotations

import argparse
from importlib import metadata


def installed_version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:  # run from a checkout's folders without installing them
        return f"unknown: {distribution} is not installed (pip install it, or make install)"


def add_version_flag(parser: argparse.ArgumentParser, distribution: str) -> None:
    """`--version` prints `jobwire X.Y.Z`, the installed `distribution`'s version, and exits 0."""
    parser.add_argument("--version", action="version", version=f"jobwire {installed_version(distribution)}")
