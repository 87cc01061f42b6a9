"""`make run` and `make demo`: the embedded server, one example worker, and how to use them.

    python -m jobwire.devrun           serve until Ctrl-C, printing the jobctl lines to try
    python -m jobwire.devrun --demo    submit the three examples, watch them, show a cancel, stop

Both processes are real: `python -m jobwire serve` on the SQLite default and a
`jobwire-worker` running examples:handlers, stopped with SIGTERM like any deployment.
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
WATCH_INTERVAL_S = 0.5  # how soon the launcher notices that one of its processes died


def _tool(name: str) -> str:
    found = BIN / name
    return str(found) if found.exists() else name


@dataclass
class ServicePair:
    """The server and the example worker, started by `service_pair`."""

    target: str
    server: subprocess.Popen[str]
    worker: subprocess.Popen[bytes]

    def ended(self) -> str | None:
        """Which process exited on its own, and how; None while both run."""
        for name, proc in (("server", self.server), ("example worker", self.worker)):
            code = proc.poll()
            if code is not None:
                return f"the {name} exited (code {code})"
        return None


@contextmanager
def service_pair(listen: str, database_url: str) -> Iterator[ServicePair]:
    """Start the server, then an example worker against it; stop both on exit."""
    env = {**os.environ, "JOBWIRE_DATABASE_URL": database_url, "JOBWIRE_LISTEN": listen}
    server = subprocess.Popen([sys.executable, "-m", "jobwire", "serve"], env=env, stdout=subprocess.PIPE, text=True)
    worker = None
    try:
        port = _wait_for_port(server)
        # The rest of the server's output passes through; an unread pipe would fill and stall it.
        threading.Thread(target=_pass_through, args=(server.stdout,), daemon=True).start()
        target = f"{listen.rsplit(':', 1)[0]}:{port}"
        worker = subprocess.Popen([_tool("jobwire-worker"), "--target", target, "--handlers", "examples:handlers"])
        yield ServicePair(target, server, worker)
    finally:
        # The worker first, so it can still Release its running jobs to the server.
        for proc in (worker, server):
            if proc is not None and proc.poll() is None:
                proc.terminate()
            if proc is not None:
                proc.wait(timeout=60)


def _pass_through(stream: IO[str]) -> None:
    for line in stream:
        sys.stdout.write(line)
        sys.stdout.flush()


def _wait_for_port(server: subprocess.Popen[str]) -> int:
    assert server.stdout is not None
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        line = server.stdout.readline()
        if not line:
            raise SystemExit("the server exited before it was ready; see the log above")
        if line.startswith("jobwire serving on port"):
            return int(line.rsplit(" ", 1)[1])
    raise SystemExit("the server did not start in time")


def _stop_on_sigterm() -> None:
    """SIGTERM (a service manager, `kill`) stops both processes as Ctrl-C does."""

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)


def examples(results: Path) -> dict[str, dict[str, object]]:
    # A fresh target database per run, so each demo imports every row itself.
    target_db = results / f"imported-{time.strftime('%Y%m%d-%H%M%S')}.db"
    return {
        "frames": {"frames": 900, "frame_ms": 5},
        "csv_import": {"rows": 25_000, "batch_ms": 100, "target_db": str(target_db)},
        "report": {"seconds": 4},
    }


def print_howto(target: str, results: Path) -> None:
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
    print("\nThe pages (jobs, one job live, evidence): in a third terminal")
    print(f"  JOBWIRE_TARGET={target} .venv/bin/python -m jobwire.gateway")
    print("  then open http://127.0.0.1:8080 and sign in with any token (this server has no auth file)")
    print("\nCtrl-C (or SIGTERM) stops both processes; if either dies, this stops too.\n", flush=True)


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
    args = parser.parse_args(argv)
    results = Path("var/demo").resolve()
    results.mkdir(parents=True, exist_ok=True)
    _stop_on_sigterm()
    try:
        with service_pair(args.listen, args.database_url) as pair:
            if args.demo:
                return demo(pair.target, results)
            print_howto(pair.target, results)
            while (ended := pair.ended()) is None:
                time.sleep(WATCH_INTERVAL_S)
            print(f"\n{ended}; stopping", file=sys.stderr, flush=True)
            return 1
    except KeyboardInterrupt:
        print("\nstopping", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
