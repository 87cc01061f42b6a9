"""`python -m jobwire serve | migrate`: the embedded all-in-one server, and schema upgrades."""

from __future__ import annotations

import argparse
import asyncio

from jobwire.db.engine import Database
from jobwire.db.migrate import upgrade
from jobwire.jobapi.app import add_jobapi
from jobwire.rpc.config import Settings
from jobwire.rpc.serve import configure_logging, serve_until_signalled
from jobwire.serving import open_runtime
from jobwire.worker.server.app import add_worker_service


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m jobwire", description="jobwire servers")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="JobService, WorkerService and AdminService on one port")
    serve.add_argument("--listen", help="host:port (default JOBWIRE_LISTEN or 127.0.0.1:50051)")
    serve.add_argument("--database-url", help="default JOBWIRE_DATABASE_URL or sqlite:///var/jobwire.db")
    sub.add_parser("migrate", help="create or upgrade the schema of JOBWIRE_DATABASE_URL")
    args = parser.parse_args(argv)
    configure_logging()
    flags = {"listen": getattr(args, "listen", None), "database_url": getattr(args, "database_url", None)}
    settings = Settings.from_env(**{k: v for k, v in flags.items() if v})
    if args.command == "migrate":
        db = Database(settings.database_url)
        upgrade(db)
        print(f"schema is current in {db.url.render_as_string(hide_password=True)}")
        return
    asyncio.run(serve_all(settings))


async def serve_all(settings: Settings) -> None:
    rt = open_runtime(settings)  # inside the loop: grpc.aio servers bind to the running loop
    add_jobapi(rt)
    add_worker_service(rt)
    await serve_until_signalled(rt, on_ready=lambda port: print(f"jobwire serving on port {port}", flush=True))


if __name__ == "__main__":
    main()
