"""`python -m jobwire.worker.server`: WorkerService."""

from __future__ import annotations

from jobwire.runtime.serving import run_server
from jobwire.worker.server.app import add_worker_service


def main() -> None:
    run_server("python -m jobwire.worker.server", add_worker_service)


if __name__ == "__main__":
    main()
