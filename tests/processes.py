"""jobwire servers as real child processes: start one, learn its port, stop or kill it.

Every server entry (`python -m jobwire serve`, `python -m jobwire.jobapi`,
`python -m jobwire.worker.server`) prints `jobwire serving on port N` once it serves; this
reads that line and keeps the rest of the output for a failing test to show. Beside
tests/conftest.py, so every test folder imports this one copy.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from jobwire.runtime.family import READY

READY_TIMEOUT_S = 60.0


@dataclass
class ServerProcess:
    proc: subprocess.Popen[str]
    port: int
    output: list[str] = field(default_factory=list)

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def terminate(self, timeout: float = 15.0) -> int:
        """SIGTERM: the graceful stop."""
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        """SIGKILL: a crash, nothing ends cleanly."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)

    def tail(self, chars: int = 4000) -> str:
        return "".join(self.output)[-chars:]


def start_server_process(
    module_args: Sequence[str], env: Mapping[str, str], *, timeout: float = READY_TIMEOUT_S
) -> ServerProcess:
    """Start `python -m <module_args>` with `env` added to this environment; return once it serves."""
    proc = subprocess.Popen(
        [sys.executable, "-m", *module_args], env={**os.environ, "PYTHONUNBUFFERED": "1", **env},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    lines: queue.Queue[str] = queue.Queue()
    output: list[str] = []

    def pump() -> None:  # keeps the pipe drained for the life of the process
        assert proc.stdout is not None
        for line in proc.stdout:
            output.append(line)
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=0.2)
        except queue.Empty:
            if proc.poll() is not None:
                break
            continue
        if line.startswith(READY):
            return ServerProcess(proc, int(line.removeprefix(READY)), output)
    proc.kill()
    proc.wait(10)
    raise AssertionError(f"{' '.join(module_args)} did not start:\n" + "".join(output)[-4000:])
