"""`python -m jobwire.jobapi`: JobService + AdminService."""

from __future__ import annotations

from jobwire.jobapi.app import add_jobapi
from jobwire.runtime.serving import run_server


def main() -> None:
    run_server("python -m jobwire.jobapi", add_jobapi)


if __name__ == "__main__":
    main()
