"""jobwire-gateway's dependencies: the jobwire distributions it needs at its own version, from VERSION.

A fleet machine given --find-links and an index could otherwise mix two releases.
"""

from pathlib import Path

from setuptools import setup

VERSION = (Path(__file__).resolve().parent / "VERSION").read_text().strip()

setup(
    # No database and no server runtime: it speaks gRPC to jobapi with the person's own token.
    # prometheus-client: its own GET /metrics (JOBWIRE_GATEWAY_METRICS_LISTEN).
    install_requires=[
        f"jobwire-shared=={VERSION}",
        "starlette",
        "uvicorn",
        "jinja2",
        "python-multipart",
        "anyio",
        "prometheus-client>=0.20",
    ],
)
