"""`python -m jobwire serve | migrate`: the embedded all-in-one server, and schema upgrades."""

from __future__ import annotations

import argparse

from jobwire.db.engine import Database
from jobwire.db.migrate import NotServable, upgrade
from jobwire.jobapi.app import add_jobapi
from jobwire.observe import logs
from jobwire.observe.version import add_version_flag
from jobwire.runtime.serving import serve_processes, server_flags, settings_from
from jobwire.worker.server.app import add_worker_service


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m jobwire", description="jobwire servers")
    add_version_flag(parser, "jobwire-server")
    sub = parser.add_subparsers(dest="command", required=True)
    server_flags(sub.add_parser("serve", help="JobService, WorkerService and AdminService on one port"))
    migrate = sub.add_parser("migrate", help="create or upgrade the schema of JOBWIRE_DATABASE_URL")
    migrate.add_argument("--database-url", help="JOBWIRE_DATABASE_URL, default sqlite:///var/jobwire.db")
    args = parser.parse_args(argv)
    settings = settings_from(args)
    if args.command == "migrate":
        logs.configure(settings.log_format, settings.log_level)
        db = Database(settings.database_url)
        try:
            upgrade(db)
        except NotServable as exc:
            raise SystemExit(f"jobwire: {exc}") from None
        print(f"schema is current in {db.url.render_as_string(hide_password=True)}")
        return
    serve_processes(settings, add_jobapi, add_worker_service)


if __name__ == "__main__":
    main()
