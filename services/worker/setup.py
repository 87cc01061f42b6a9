"""jobwire-worker's dependencies: the jobwire distributions it needs at its own version, from VERSION.

A fleet machine given --find-links and an index could otherwise mix two releases.
"""

from pathlib import Path

from setuptools import setup

VERSION = (Path(__file__).resolve().parent / "VERSION").read_text().strip()

setup(
    # Plain jobwire-worker is what fleet machines install: gRPC only, no database code.
    install_requires=[f"jobwire-shared=={VERSION}"],
    extras_require={"server": [f"jobwire-shared[db]=={VERSION}"]},
)
