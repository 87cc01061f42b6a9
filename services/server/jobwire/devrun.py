"""`make run` and `make demo`: the embedded server, one example worker, and how to use them.

    python -m jobwire.devrun           serve until Ctrl-C, with the web gateway, printing the
                                       jobctl lines to try and where the pages are
    python -m jobwire.devrun --demo    submit the three examples, watch them, show a cancel, stop

Every process is real: `python -m jobwire serve` on the SQLite default, a `jobwire-worker`
running jobwire.examples:handlers and (not for --demo) `python -m jobwire.gateway`, stopped with
SIGTERM like any deployment. The gateway takes JOBWIRE_GATEWAY_LISTEN (127.0.0.1:8080);
when another program holds that port the launcher says so and takes a free one instead.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

BIN = Path(sys.executable).parent
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 60.0  # a child that takes longer to stop (a worker past its grace, hung) is killed
# Ctrl-C, `kill` or a service manager, and the terminal closing: the children, in process
# groups of their own, hear none of these, so the launcher stops them.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
WATCH_INTERVAL_S = 0.5  # how soon the launcher notices that one of its processes died
GATEWAY_LISTEN = "127.0.0.1:8080"  # jobwire.gateway's default
GATEWAY_PORT_TAKEN = 3  # jobwire.gateway's exit code when another program holds its port


def _tool(name: str) -> str:
    found = BIN / name
    return str(found) if found.exists() else name


@dataclass
class ServicePair:
    """The server and the example worker, started by `service_pair`, and the gateway when asked."""

    target: str
    server: subprocess.Popen[str]
    worker: subprocess.Popen[bytes]
    gateway: subprocess.Popen[str] | None = None
    gateway_url: str | None = None

    def ended(self) -> str | None:
        """Which process exited on its own, and how; None while all run."""
        for name, proc in (("server", self.server), ("example worker", self.worker), ("web gateway", self.gateway)):
            code = proc.poll() if proc is not None else None
            if code is not None:
                return f"the {name} exited (code {code})"
        return None


@contextmanager
def service_pair(listen: str, database_url: str, gateway_listen: str | None = None) -> Iterator[ServicePair]:
    """Start the server, then an example worker against it (and the gateway); stop them all on exit."""
    env = {**os.environ, "JOBWIRE_DATABASE_URL": database_url, "JOBWIRE_LISTEN": listen}
    server = subprocess.Popen(
        [sys.executable, "-m", "jobwire", "serve"], env=env, stdout=subprocess.PIPE, text=True, process_group=0
    )
    worker = gateway = None
    try:
        port = _announced(server, "server", "jobwire serving on port ")
        if port is None:
            raise SystemExit("the server exited before it was ready; see the log above")
        target = f"{listen.rsplit(':', 1)[0]}:{port}"
        worker = subprocess.Popen(
            [_tool("jobwire-worker"), "--target", target, "--handlers", "jobwire.examples:handlers"], process_group=0
        )
        pair = ServicePair(target, server, worker)
        if gateway_listen is not None:
            gateway, pair.gateway_url = _start_gateway(target, gateway_listen)
            pair.gateway = gateway
        yield pair
    finally:
        # The gateway first (its pages' streams end), then the worker, so it can still
        # Release its running jobs to the server. Each child has a process group of its own:
        # a terminal's Ctrl-C reaches only this launcher, never the children at once (a
        # worker told twice gives up its grace and abandons its jobs; a server stopped with
        # it refuses their Release).
        for proc in (gateway, worker, server):
            if proc is not None and proc.poll() is None:
                proc.terminate()
            if proc is not None:
                try:
                    proc.wait(timeout=STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:  # hung: the others must still be stopped
                    proc.kill()
                    proc.wait()


def _start_gateway(target: str, listen: str) -> tuple[subprocess.Popen[str] | None, str | None]:
    """The web gateway on `listen`, else on a free port of its host; (None, None), said, when it cannot start."""
    gateway, url = _gateway(target, listen)
    if url is None and gateway.wait() == GATEWAY_PORT_TAKEN:
        host = listen.rsplit(":", 1)[0]
        print(f"\n{listen} is taken by another program: the web gateway takes a free port instead", flush=True)
        gateway, url = _gateway(target, f"{host}:0")
    if url is None:
        print(
            f"\nthe web gateway did not start (code {gateway.wait()}, see its log above); "
            "the server and the worker run without it",
            flush=True,
        )
        return None, None
    return gateway, url


def _gateway(target: str, listen: str) -> tuple[subprocess.Popen[str], str | None]:
    env = {**os.environ, "JOBWIRE_TARGET": target, "JOBWIRE_GATEWAY_LISTEN": listen}
    gateway = subprocess.Popen(
        [sys.executable, "-m", "jobwire.gateway"], env=env, stdout=subprocess.PIPE, text=True, process_group=0
    )
    return gateway, _announced(gateway, "web gateway", "jobwire gateway serving on ")


def _announced(proc: subprocess.Popen[str], name: str, prefix: str) -> str | None:
    """What `proc` prints after `prefix` once it serves (a port, a URL); None if it exits first.

    The rest of its output then passes through; an unread pipe would fill and stall it.
    """
    assert proc.stdout is not None
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            return None
        if line.startswith(prefix):
            threading.Thread(target=_pass_through, args=(proc.stdout,), daemon=True).start()
            return line.removeprefix(prefix).strip()
    raise SystemExit(f"the {name} did not start in time")


def _pass_through(stream: IO[str]) -> None:
    for line in stream:
        sys.stdout.write(line)
        sys.stdout.flush()


def _stop_on_signals() -> None:
    """Ctrl-C, SIGTERM (a service manager, `kill`) and SIGHUP (the terminal closed) stop
    every process, in order. Set even where inherited as ignored: a shell without job
    control starts a background command with SIGINT ignored."""

    def stop(signum: int, frame: object) -> None:
        for each in STOP_SIGNALS:  # once: a second Ctrl-C must not cut the stopping short
            signal.signal(each, signal.SIG_IGN)
        raise KeyboardInterrupt

    for each in STOP_SIGNALS:
        signal.signal(each, stop)


def examples(results: Path) -> dict[str, dict[str, object]]:
    # A fresh target database per run, so each demo imports every row itself.
    target_db = results / f"imported-{time.strftime('%Y%m%d-%H%M%S')}.db"
    return {
        "frames": {"frames": 900, "frame_ms": 5},
        "csv_import": {"rows": 25_000, "batch_ms": 100, "target_db": str(target_db)},
        "report": {"seconds": 4},
    }


def print_howto(target: str, results: Path, gateway_url: str | None) -> None:
    jobctl = f"jobctl --target {target}"
    print("\njobwire is running: JobService, WorkerService and AdminService on", target)
    print("with one example worker (frames, csv_import, report). In another terminal:\n")
    print("  source .venv/bin/activate")
    for job_type, payload in examples(results).items():
        print(f"  {jobctl} submit {job_type} --payload '{json.dumps(payload)}' --watch")
    print(f"  {jobctl} list")
    print(f"  {jobctl} get JOB_NO            {jobctl} cancel JOB_NO")
    print(f"  {jobctl} result JOB_NO -o FILE  (a READY job's result, kept by the server)")
    print(f"  {jobctl} events JOB_NO         {jobctl} inspect         {jobctl} workers")
    if gateway_url is not None:
        print(f"\nThe pages (my jobs, one job live, evidence): open {gateway_url}")
        print(f"  and {signin_hint(os.environ.get('JOBWIRE_AUTH_FILE'))}")
    print("\nCtrl-C (or SIGTERM) stops every process; if one dies, this stops too.\n", flush=True)


def signin_hint(auth_file: str | None) -> str:
    """How to sign in to the gateway in front of this server (the server reads JOBWIRE_AUTH_FILE too)."""
    if auth_file:
        return f"sign in with a client token from {auth_file} (an admin one for the evidence page)"
    # Without an auth file the server takes any bearer token as the tenant "default" with
    # every role; the sign-in form only needs one that is not empty.
    return 'sign in with any token, such as dev (no auth file: every token is the tenant "default", evidence included)'


def demo(target: str, results: Path) -> int:
    jobctl = [_tool("jobctl"), "--target", target]
    failures = 0
    for job_type, payload in examples(results).items():
        print(f"\n== {job_type}: submit, watch to the end, fetch its result from the server", flush=True)
        job_no = _submit(jobctl, job_type, payload)
        failures += subprocess.call([*jobctl, "watch", job_no]) != 0
        out = results / f"{job_no}.result"
        # The worker kept nothing: the server holds the bytes (jobwire://results/JOB_NO).
        if subprocess.call([*jobctl, "result", job_no, "-o", str(out)]) == 0:
            print(f"   jobctl result {job_no} -o {out}: {out.stat().st_size} bytes", flush=True)
        else:
            failures += 1
    print("\n== cancel: a slow frames job, cancelled while it runs", flush=True)
    job_no = _submit(jobctl, "frames", {"frames": 900, "frame_ms": 20})
    _wait_running(jobctl, job_no)
    subprocess.call([*jobctl, "cancel", job_no])
    code = subprocess.call([*jobctl, "watch", job_no])
    failures += code != 3  # jobctl watch exits 3 when the job ended CANCELLED
    return 1 if failures else 0


def _submit(jobctl: list[str], job_type: str, payload: dict[str, object]) -> str:
    out = subprocess.check_output([*jobctl, "--json", "submit", job_type, "--payload", json.dumps(payload)], text=True)
    job = json.loads(out)
    job = job.get("job", job)
    return str(job.get("job_no") or job.get("jobNo"))


def _wait_running(jobctl: list[str], job_no: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        job = json.loads(subprocess.check_output([*jobctl, "--json", "get", job_no], text=True))
        if job.get("status") == "RUNNING":
            return
        time.sleep(0.2)
    raise SystemExit(f"{job_no} did not start running")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobwire.devrun", description=__doc__.splitlines()[0])
    parser.add_argument("--demo", action="store_true", help="run the examples and a cancel, then stop")
    parser.add_argument("--listen", default=os.environ.get("JOBWIRE_LISTEN", "127.0.0.1:50051"))
    parser.add_argument("--database-url", default=os.environ.get("JOBWIRE_DATABASE_URL", "sqlite:///var/jobwire.db"))
    parser.add_argument(
        "--gateway-listen",
        default=os.environ.get("JOBWIRE_GATEWAY_LISTEN") or GATEWAY_LISTEN,
        help="where the web gateway serves the pages (a free port instead if another program holds it)",
    )
    parser.add_argument("--no-gateway", action="store_true", help="do not start the web gateway")
    args = parser.parse_args(argv)
    results = Path("var/demo").resolve()
    results.mkdir(parents=True, exist_ok=True)
    _stop_on_signals()
    try:
        gateway_listen = None if args.demo or args.no_gateway else args.gateway_listen
        with service_pair(args.listen, args.database_url, gateway_listen) as pair:
            if args.demo:
                return demo(pair.target, results)
            print_howto(pair.target, results, pair.gateway_url)
            while (ended := pair.ended()) is None:
                time.sleep(WATCH_INTERVAL_S)
            print(f"\n{ended}; stopping", file=sys.stderr, flush=True)
            return 1
    except KeyboardInterrupt:
        print("\nstopping", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
