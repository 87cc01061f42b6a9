"""jobwire-jobapi's dependencies: the jobwire distributions it needs at its own version, from VERSION.

A fleet machine given --find-links and an index could otherwise mix two releases.
"""

from pathlib import Path

from setuptools import setup

VERSION = (Path(__file__).resolve().parent / "VERSION").read_text().strip()

setup(
    install_requires=[f"jobwire-shared[db]=={VERSION}"],
)
