"""`python -m jobwire.worker.server`: WorkerService."""

from __future__ import annotations

import asyncio

from jobwire.rpc.config import Settings
from jobwire.rpc.serve import configure_logging, serve_until_signalled
from jobwire.serving import open_runtime
from jobwire.worker.server.app import add_worker_service


async def run(settings: Settings) -> None:
    rt = open_runtime(settings)  # inside the loop: grpc.aio servers bind to the running loop
    add_worker_service(rt)
    await serve_until_signalled(rt)


def main() -> None:
    configure_logging()
    asyncio.run(run(Settings.from_env()))


if __name__ == "__main__":
    main()
