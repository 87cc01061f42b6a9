"""``jobwire-worker``: run a fleet worker for the handlers in MODULE:OBJ.

    jobwire-worker --target HOST:PORT --handlers jobwire.examples:handlers [--queue Q ...]
                   [--concurrency N] [--worker-id ID] [--token-file PATH] [--lease-seconds S]

Every flag falls back to an environment variable, and a flag given wins (``--help`` pairs
each with its variable, ENVIRONMENT below): JOBWIRE_TARGET, JOBWIRE_HANDLERS, JOBWIRE_QUEUES
(comma-separated), JOBWIRE_TOKEN (the token itself, no flag) or JOBWIRE_TOKEN_FILE, and so on;
OTEL_* turn tracing on. The worker sends its calls on one WorkerService.Session stream (unary
calls against a server without one, or with --transport unary) and logs which it uses once.
By default the server keeps each result (inline when small, uploaded otherwise) and clients
fetch it with GetResult (`jobctl result`). To publish results yourself, set --results-dir and
--results-url (the URL under which that folder is published); --results-dir alone gives
file:// URIs of this machine, which only suit a single-machine setup. SIGTERM or SIGINT stops
claiming and gives running jobs the grace period to reach a safe point; a second signal ends
the grace period.

Exit status:
    0  a clean stop.
    1  a job had to be abandoned (it did not reach a safe point within the grace period).
    2  a usage or configuration error, a handler that enters a stage its plan lacks
       included; nothing was claimed.
    3  the server refused the worker's token on its first Claim (UNAUTHENTICATED: a wrong
       or missing JOBWIRE_TOKEN / JOBWIRE_TOKEN_FILE; PERMISSION_DENIED: a token without
       the worker role or the queues asked for). One line on stderr names the setting.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from jobwire.domain.errors import JobwireError
from jobwire.observe import logs, tracing
from jobwire.observe.version import add_version_flag
from jobwire.worker.sdk._config import DEFAULT_SESSION_GRACE_S, TRANSPORTS, WorkerConfig, default_worker_id
from jobwire.worker.sdk._handlers import Handlers
from jobwire.worker.sdk._rpc import WorkerRefused
from jobwire.worker.sdk._worker import Worker

DEFAULT_TARGET = "127.0.0.1:50051"  # the servers' JOBWIRE_LISTEN default


EXIT_USAGE, EXIT_REFUSED = 2, 3  # Worker.run() itself answers 0 (a clean stop) or 1 (a job abandoned)
ENVIRONMENT = """\
environment (a flag given wins):
  JOBWIRE_TARGET             --target
  JOBWIRE_TOKEN              the bearer token itself (a token of role "worker"); --token-file wins
  JOBWIRE_TOKEN_FILE         --token-file
  JOBWIRE_HANDLERS           --handlers
  JOBWIRE_QUEUES             --queue, comma-separated: a,b
  JOBWIRE_CONCURRENCY        --concurrency
  JOBWIRE_WORKER_ID          --worker-id
  JOBWIRE_LEASE_SECONDS      --lease-seconds (the server's default lease of that name)
  JOBWIRE_SHUTDOWN_GRACE_SECONDS  --grace-seconds
  JOBWIRE_CLAIM_WAIT_SECONDS --claim-wait
  JOBWIRE_RESULTS_DIR        --results-dir
  JOBWIRE_RESULTS_URL        --results-url
  JOBWIRE_TMP_DIR            --tmp-dir
  JOBWIRE_WORKER_TRANSPORT   --transport
  JOBWIRE_SESSION_GRACE_SECONDS  --session-grace-seconds
  JOBWIRE_TLS                --tls (1/true/yes or 0/false/no)
  JOBWIRE_TLS_CA             --tls-ca
  JOBWIRE_TLS_CLIENT_CERT    --tls-cert
  JOBWIRE_TLS_CLIENT_KEY     --tls-key
  JOBWIRE_LOG_LEVEL          --log-level
  JOBWIRE_LOG_FORMAT         --log-format
  OTEL_*                     OpenTelemetry tracing, e.g. OTEL_EXPORTER_OTLP_ENDPOINT (off when unset)

exit status: 0 stopped cleanly, 1 a job was abandoned, 2 usage or configuration error,
3 the server refused the token (wrong or missing token, role or queues)
"""
_YES, _NO = ("1", "true", "yes"), ("0", "false", "no")


def build_parser() -> argparse.ArgumentParser:
    """jobwire-worker's options, each defaulting to its environment variable (ENVIRONMENT)."""
    env = os.environ.get
    p = argparse.ArgumentParser(
        prog="jobwire-worker",
        description="Run jobwire handlers for a WorkerService.",
        epilog=ENVIRONMENT,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_version_flag(p, "jobwire-worker")
    p.add_argument(
        "--target",
        default=env("JOBWIRE_TARGET", DEFAULT_TARGET),
        help=f"HOST:PORT (env JOBWIRE_TARGET; default {DEFAULT_TARGET})",
    )
    p.add_argument(
        "--handlers",
        required=not env("JOBWIRE_HANDLERS"),
        default=env("JOBWIRE_HANDLERS") or None,
        metavar="MODULE:OBJ",
        help="a Handlers object, e.g. jobwire.examples:handlers (env JOBWIRE_HANDLERS)",
    )
    p.add_argument(
        "--queue",
        action="append",
        dest="queues",
        metavar="QUEUE",
        help="queue to claim from; repeatable (env JOBWIRE_QUEUES, comma-separated; default: default)",
    )  # no default here: `append` would add the flags to it; build_config reads the variable
    p.add_argument(
        "--concurrency",
        type=int,
        default=env("JOBWIRE_CONCURRENCY", "4"),  # a string: argparse converts it
        help="jobs run at once (env JOBWIRE_CONCURRENCY; default 4)",
    )
    p.add_argument(
        "--worker-id",
        default=env("JOBWIRE_WORKER_ID") or None,
        help="this process's name in the job's evidence (env JOBWIRE_WORKER_ID; default: host-pid-random)",
    )
    p.add_argument(
        "--token-file",
        type=Path,
        default=_env_path("JOBWIRE_TOKEN_FILE"),
        help="file holding the bearer token (env JOBWIRE_TOKEN_FILE); or put the token itself in JOBWIRE_TOKEN",
    )
    p.add_argument(
        "--lease-seconds",
        type=float,
        default=env("JOBWIRE_LEASE_SECONDS") or None,
        help="lease length to ask for, 1 to 3600 (env JOBWIRE_LEASE_SECONDS; default: the server's)",
    )
    p.add_argument(
        "--grace-seconds",
        type=float,
        default=env("JOBWIRE_SHUTDOWN_GRACE_SECONDS", "25"),
        help="shutdown grace period (env JOBWIRE_SHUTDOWN_GRACE_SECONDS; default 25)",
    )
    p.add_argument(
        "--claim-wait",
        type=float,
        default=env("JOBWIRE_CLAIM_WAIT_SECONDS", "5"),
        help="long-poll seconds per Claim (env JOBWIRE_CLAIM_WAIT_SECONDS; default 5)",
    )
    p.add_argument(
        "--results-dir",
        type=Path,
        default=_env_path("JOBWIRE_RESULTS_DIR"),
        help="publish results yourself: where they are written on this machine (env JOBWIRE_RESULTS_DIR);"
        " default: the server keeps them (jobwire://results/JOB_NO, fetched with GetResult)",
    )
    p.add_argument(
        "--results-url",
        default=env("JOBWIRE_RESULTS_URL") or None,
        metavar="URL",
        help="base URL under which --results-dir is published, e.g. https://files.example/jobwire/ or"
        " s3://bucket/prefix/ (env JOBWIRE_RESULTS_URL); with --results-dir alone: file:// URIs of"
        " this machine's disk, fit only for a single-machine setup",
    )
    p.add_argument(
        "--tmp-dir",
        type=Path,
        default=_env_path("JOBWIRE_TMP_DIR"),
        help="where per-attempt temporary folders go (env JOBWIRE_TMP_DIR; default: the system's)",
    )
    p.add_argument(
        "--transport",
        default=env("JOBWIRE_WORKER_TRANSPORT", "session"),
        choices=TRANSPORTS,
        help="session: every call on one WorkerService.Session stream (unary calls when the server has"
        " none); unary: one RPC per call (env JOBWIRE_WORKER_TRANSPORT; default session)",
    )
    p.add_argument(
        "--session-grace-seconds",
        type=float,
        default=env("JOBWIRE_SESSION_GRACE_SECONDS", str(DEFAULT_SESSION_GRACE_S)),
        metavar="S",
        help="a session broken longer than this: every lease held is taken as lost and its handler stopped"
        f" at its next check; the server's setting of that name (env JOBWIRE_SESSION_GRACE_SECONDS;"
        f" default {DEFAULT_SESSION_GRACE_S:g})",
    )
    _add_tls(p)
    p.add_argument(
        "--log-level",
        default=env("JOBWIRE_LOG_LEVEL", "INFO"),
        type=str.upper,
        choices=logs.LEVELS,
        help="how much to log (env JOBWIRE_LOG_LEVEL; default INFO)",
    )
    p.add_argument(
        "--log-format",
        default=env("JOBWIRE_LOG_FORMAT", "text"),
        choices=logs.FORMATS,
        help="text, or json: one JSON object per line (env JOBWIRE_LOG_FORMAT)",
    )
    return p


def _add_tls(p: argparse.ArgumentParser) -> None:
    tls = os.environ.get("JOBWIRE_TLS", "").strip().lower()
    if tls and tls not in _YES + _NO:
        p.error(f"JOBWIRE_TLS must be 1/true/yes or 0/false/no, not {tls!r}")
    p.add_argument(
        "--tls",
        action=argparse.BooleanOptionalAction,
        default=tls in _YES,
        help="use TLS with the system's roots (env JOBWIRE_TLS=1; default: plain text)",
    )
    p.add_argument(
        "--tls-ca",
        type=Path,
        default=_env_path("JOBWIRE_TLS_CA"),
        help="CA bundle to trust; turns TLS on (env JOBWIRE_TLS_CA, as jobctl reads it)",
    )
    p.add_argument(
        "--tls-cert",
        type=Path,
        default=_env_path("JOBWIRE_TLS_CLIENT_CERT"),
        help="client certificate for mutual TLS (env JOBWIRE_TLS_CLIENT_CERT)",
    )
    p.add_argument(
        "--tls-key",
        type=Path,
        default=_env_path("JOBWIRE_TLS_CLIENT_KEY"),
        help="client key for mutual TLS (env JOBWIRE_TLS_CLIENT_KEY)",
    )


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name)
    return Path(value) if value else None


def _env_list(name: str) -> tuple[str, ...]:
    """A comma-separated variable's items, blanks dropped: `a, b,` is (a, b)."""
    return tuple(item.strip() for item in os.environ.get(name, "").split(",") if item.strip())


def build_config(args: argparse.Namespace) -> WorkerConfig:
    token = os.environ.get("JOBWIRE_TOKEN") or None
    if args.token_file is not None:
        token = args.token_file.read_text().strip()
    return WorkerConfig(
        target=args.target,
        worker_id=args.worker_id or default_worker_id(),
        queues=tuple(args.queues or _env_list("JOBWIRE_QUEUES") or ("default",)),
        concurrency=args.concurrency,
        token=token,
        tls=args.tls,
        tls_ca=args.tls_ca,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        lease_duration=args.lease_seconds,
        grace_period=args.grace_seconds,
        claim_wait=args.claim_wait,
        results_dir=args.results_dir,
        results_url=args.results_url,
        tmp_root=args.tmp_dir,
        transport=args.transport,
        session_grace=args.session_grace_seconds,
    )


def load_handlers(spec: str) -> Handlers:
    """Import ``MODULE:OBJ``; OBJ is a Handlers object or a function returning one."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(f"--handlers must look like MODULE:OBJ, not {spec!r}")
    # Like celery and uvicorn: the current directory's modules are importable.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    obj: object = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    if callable(obj) and not isinstance(obj, Handlers):
        obj = obj()
    if not isinstance(obj, Handlers):
        raise ValueError(f"{spec} is a {type(obj).__name__}, not a jobwire Handlers object")
    return obj


async def serve(worker: Worker) -> int:
    """Run `worker` until SIGTERM or SIGINT; a second signal ends the grace period."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):  # no loop signal handlers on Windows
            loop.add_signal_handler(sig, worker.shutdown)
    return await worker.run()


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logs.configure(args.log_format, args.log_level)
    try:
        tracing.configure("jobwire-worker")
        worker = Worker(build_config(args), load_handlers(args.handlers))
    except (ValueError, JobwireError, ImportError, AttributeError, OSError) as exc:
        print(f"jobwire-worker: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        code = asyncio.run(serve(worker))
    except WorkerRefused as exc:
        print(f"jobwire-worker: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    if worker.abandoned_threads:
        # A sync handler that never reached a safe point cannot be stopped from outside its
        # thread, and the interpreter would wait for it at exit: leave without waiting.
        logging.shutdown()
        sys.stdout.flush()
        os._exit(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
