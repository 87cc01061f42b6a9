"""`--processes N`: one parent, N serving children on one port, every core busy.

A Python server process runs on one core. The parent starts N children that each serve
the same services on the same port (SO_REUSEPORT, on purpose: the kernel spreads new
connections over them), restarts a child that dies, and on SIGTERM drains them all. The
children are the same command line run again, told by the environment that they belong
to this family.

Sharing a port must never happen by accident (grpc sets SO_REUSEPORT by default, so a
second server on a taken port used to start silently and split callers over two
databases). So a lone server binds without SO_REUSEPORT, and the parent first binds the
address without it too: if anything holds the port (another program, another jobwire)
that bind fails and the server refuses to start, naming the port. The parent then keeps
a bound, non-listening socket with SO_REUSEPORT for as long as it lives: its children may
join it, and nobody else's plain bind can.

With several processes, metrics go through prometheus-client's multiprocess mode: the
children write to files in a directory of the parent's, and the parent serves the sum
on JOBWIRE_METRICS_LISTEN.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import uvloop
from prometheus_client import multiprocess

from jobwire.db.engine import Database
from jobwire.db.migrate import check_current, upgrade
from jobwire.observe.metrics import MetricsEndpoint
from jobwire.rpc.metrics import FamilyMetrics
from jobwire.rpc.server import check_exposure
from jobwire.runtime.settings import Settings

log = logging.getLogger("jobwire.runtime.family")

PARENT_ENV = "JOBWIRE_FAMILY_PARENT"  # set in a child: its parent's pid
PORT_ENV = "JOBWIRE_FAMILY_PORT"  # set in a child: the port the family serves
INDEX_ENV = "JOBWIRE_FAMILY_INDEX"  # set in a child: its place, 0 to size - 1
SIZE_ENV = "JOBWIRE_FAMILY_SIZE"
METRICS_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"  # prometheus-client's multiprocess directory
READY = "jobwire serving on port "
START_TIMEOUT_S = 60.0
STOP_GRACE_S = 15.0  # a child's own drain (10 s) and a margin
RESTART_BACKOFF_S = (0.5, 30.0)  # first and longest wait before starting a dead child again
_NEWS = b"news"  # a relay's datagram that is not a (tenant, queue, job type): poll the event tail now
HEALTHY_AFTER_S = 30.0  # a child that lived this long resets the backoff


def announce_ready(port: int) -> None:
    """Print the line a parent or a test waits for, in one write.

    print() writes the text and its newline separately; with stdout and stderr in one pipe
    a log line from another thread can land between them and the port cannot be read.
    """
    sys.stdout.write(f"{READY}{port}\n")
    sys.stdout.flush()


class PortInUse(Exception):
    def __init__(self, listen: str, port: int) -> None:
        super().__init__(
            f"cannot listen on {listen}: port {port} is in use by another program or another jobwire server"
        )


def split_listen(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    return host.strip("[]"), int(port)


def _sockets(host: str, port: int) -> list[tuple[int, tuple[object, ...]]]:
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    seen: set[tuple[int, object]] = set()
    out: list[tuple[int, tuple[object, ...]]] = []
    for family, _, _, _, address in infos:
        if (family, address[0]) not in seen:
            seen.add((family, address[0]))
            out.append((family, address))
    return out


def _bind(family: int, address: tuple[object, ...], port: int, *, share: bool, after_close: bool) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_STREAM)
    if share:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    if after_close:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if family == socket.AF_INET6:
        # As grpc binds "[::]": both stacks, so an IPv4 holder of the port is seen too.
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    try:
        sock.bind((address[0], port, *address[2:]))
    except BaseException:
        sock.close()
        raise
    return sock


def reserve(listen: str) -> tuple[int, list[socket.socket]]:
    """The port `listen` names (a free one for port 0), held for this family; PortInUse if taken.

    A server stopped a moment ago leaves its closed connections in TIME_WAIT on the port, which
    refuses a plain bind for a minute; a port that only such connections name is free, and is
    then bound with SO_REUSEADDR (as grpc binds). Anything else on it, listening or merely
    bound, is another holder.
    """
    host, port = split_listen(listen)
    addresses = _sockets(host, port)
    after_close = bool(port) and _only_closed_connections(port)
    probes: list[socket.socket] = []
    try:
        for family, address in addresses:
            try:
                probe = _bind(family, address, port, share=False, after_close=after_close)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    raise PortInUse(listen, port) from None
                raise
            probes.append(probe)
            port = port or probe.getsockname()[1]
    finally:
        for probe in probes:
            probe.close()
    held = [_bind(family, address, port, share=True, after_close=after_close) for family, address in addresses]
    return port, held


_TIME_WAIT = "06"  # the state column of /proc/net/tcp


def _only_closed_connections(port: int) -> bool:
    """True when sockets name `port` locally and every one of them is in TIME_WAIT."""
    states = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table, encoding="ascii") as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if int(fields[1].rsplit(":", 1)[1], 16) == port:
                    states.append(fields[3])
    return bool(states) and all(state == _TIME_WAIT for state in states)


@dataclass
class _Child:
    index: int
    process: asyncio.subprocess.Process
    started: float


class Family:
    """The parent: starts, watches, restarts and stops the children."""

    def __init__(self, settings: Settings, command: Sequence[str], port: int, metrics_dir: str) -> None:
        self.settings = settings
        self.command = list(command)
        self.port = port
        self.metrics_dir = metrics_dir
        self.children: dict[int, _Child] = {}
        self._stop = asyncio.Event()
        self._backoff = [RESTART_BACKOFF_S[0]] * settings.processes

    def _environment(self, index: int) -> dict[str, str]:
        return {
            **os.environ,
            PARENT_ENV: str(os.getpid()),
            PORT_ENV: str(self.port),
            INDEX_ENV: str(index),
            SIZE_ENV: str(self.settings.processes),
            METRICS_DIR_ENV: self.metrics_dir,
        }

    async def _start(self, index: int) -> _Child:
        process = await asyncio.create_subprocess_exec(
            *self.command, env=self._environment(index), stdout=asyncio.subprocess.PIPE
        )
        child = _Child(index, process, time.monotonic())
        self.children[index] = child
        return child

    async def _ready(self, child: _Child) -> bool:
        """Wait for the child's ready line; then keep passing its output on."""
        assert child.process.stdout is not None
        try:
            async with asyncio.timeout(START_TIMEOUT_S):
                while line := await child.process.stdout.readline():
                    if line.decode(errors="replace").startswith(READY):
                        asyncio.get_running_loop().create_task(self._pass_on(child))
                        return True
                    sys.stdout.buffer.write(line)
        except TimeoutError:
            pass
        return False

    async def _pass_on(self, child: _Child) -> None:
        assert child.process.stdout is not None
        while line := await child.process.stdout.readline():
            sys.stdout.buffer.write(line)
            sys.stdout.flush()

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stop.set)
        loop.add_signal_handler(signal.SIGHUP, self._pass_hangup)
        children = [await self._start(i) for i in range(self.settings.processes)]
        ready = await asyncio.gather(*(self._ready(c) for c in children))
        if not all(ready):
            log.error("jobwire: %d of %d serving processes did not start", ready.count(False), len(ready))
            await self._stop_all()
            return 1
        announce_ready(self.port)
        log.info("jobwire: %d serving processes on port %d", len(children), self.port)
        await self._supervise()
        await self._stop_all()
        return 0

    def _pass_hangup(self) -> None:
        """SIGHUP re-reads the auth file: every serving process holds its own copy of the tokens."""
        for child in self.children.values():
            if child.process.returncode is None:
                child.process.send_signal(signal.SIGHUP)

    async def _supervise(self) -> None:
        stopping = asyncio.ensure_future(self._stop.wait())
        while not self._stop.is_set():
            waits = {asyncio.ensure_future(c.process.wait()): c for c in self.children.values()}
            done, _ = await asyncio.wait({stopping, *waits}, return_when=asyncio.FIRST_COMPLETED)
            for waiting in waits:
                waiting.cancel()
            for finished in done - {stopping}:
                child = waits[finished]
                if not self._stop.is_set():
                    await self._restart(child)

    async def _restart(self, dead: _Child) -> None:
        multiprocess.mark_process_dead(dead.process.pid, self.metrics_dir)  # type: ignore[no-untyped-call]
        lived = time.monotonic() - dead.started
        if lived > HEALTHY_AFTER_S:
            self._backoff[dead.index] = RESTART_BACKOFF_S[0]
        delay = self._backoff[dead.index]
        self._backoff[dead.index] = min(delay * 2, RESTART_BACKOFF_S[1])
        log.error("jobwire: serving process %d exited with %s; starting it again in %.1fs",
                  dead.process.pid, dead.process.returncode, delay)  # fmt: skip
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), delay)
        if self._stop.is_set():
            return
        child = await self._start(dead.index)
        if not await self._ready(child):
            log.error("jobwire: serving process %d did not start again", child.process.pid)

    async def _stop_all(self) -> None:
        """SIGTERM to every child (each drains its calls); SIGKILL for what outlives the grace."""
        for child in self.children.values():
            if child.process.returncode is None:
                child.process.send_signal(signal.SIGTERM)
        waits = [c.process.wait() for c in self.children.values()]
        try:
            async with asyncio.timeout(STOP_GRACE_S):
                await asyncio.gather(*waits)
        except TimeoutError:
            for child in self.children.values():
                if child.process.returncode is None:
                    log.error("jobwire: serving process %d did not stop in time; killing it", child.process.pid)
                    child.process.kill()
            await asyncio.gather(*(c.process.wait() for c in self.children.values()))


def child_settings(settings: Settings) -> Settings | None:
    """The settings of a family's child (its parent's port, shared; no migration), else None."""
    port = os.environ.get(PORT_ENV)
    if port is None:
        return None
    host, _ = split_listen(settings.listen)
    listen = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return replace(settings, listen=listen, processes=1, share_port=True, migrate=False, metrics_listen=None)


def parent_pid() -> int | None:
    value = os.environ.get(PARENT_ENV)
    return int(value) if value else None


class SiblingRelay:
    """Tells a family's other processes that a queue has work of a type, or that news a worker's
    Session waits for was committed (`news`): one datagram each, no database.

    Each child listens on an abstract Unix datagram socket named after its parent and its
    place; a submit in one child wakes the waiting claims of all the others at once, and a
    cancel has their event tails poll at once, where the change feed would take a poll
    interval. A sibling that is restarting misses nothing it needs: its feed reader catches
    up when it starts.
    """

    def __init__(
        self, parent: int, index: int, size: int, deliver: Callable[[str, str, str], None], on_news: Callable[[], None]
    ) -> None:
        self._names = [f"\0jobwire-family-{parent}-{i}" for i in range(size)]
        self._index = index
        self._deliver = deliver
        self._on_news = on_news
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._socket.setblocking(False)
        self._socket.bind(self._names[index])
        asyncio.get_running_loop().add_reader(self._socket.fileno(), self._receive)

    def __call__(self, tenant: str, queue: str, job_type: str) -> None:
        self._send(f"{tenant}\0{queue}\0{job_type}".encode())

    def news(self) -> None:
        self._send(_NEWS)

    def _send(self, message: bytes) -> None:
        for i, name in enumerate(self._names):
            if i != self._index:
                with contextlib.suppress(OSError):  # a sibling restarting, or a full buffer: its feed tells it
                    self._socket.sendto(message, name)

    def _receive(self) -> None:
        while True:
            try:
                message = self._socket.recv(1024)
            except (BlockingIOError, InterruptedError):
                return
            if message == _NEWS:
                self._on_news()
                continue
            parts = message.decode(errors="replace").split("\0")
            if len(parts) == 3:  # names are validated: none holds a NUL
                self._deliver(*parts)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            asyncio.get_running_loop().remove_reader(self._socket.fileno())
        self._socket.close()


def stands_for_chores() -> bool:
    """Whether this process stands to run the chores of all replicas (housekeeping, schedules:
    jobwire.runtime.leadership): a lone server or a family's first child.

    One candidate per family is enough: the database chooses among the replicas' candidates,
    and each more costs the database a statement per third of a lease. A restarted first
    child stands again.
    """
    return os.environ.get(INDEX_ENV, "0") == "0"


def sibling_relay(deliver: Callable[[str, str, str], None], on_news: Callable[[], None]) -> SiblingRelay | None:
    """The relay of this process, when it is a family's child."""
    parent, index, size = parent_pid(), os.environ.get(INDEX_ENV), os.environ.get(SIZE_ENV)
    if parent is None or index is None or size is None:
        return None
    return SiblingRelay(parent, int(index), int(size), deliver, on_news)


def run(settings: Settings) -> int:
    """Be the parent of `settings.processes` serving children; the exit code."""
    check_exposure(settings.listen, settings.auth_file)  # before the port is held and the schema migrated
    try:
        port, held = reserve(settings.listen)
    except PortInUse as exc:
        print(f"jobwire: {exc}", file=sys.stderr)
        return 1
    db = Database(settings.database_url)
    try:
        if settings.migrate:  # once, here: children starting together must not race on the schema
            upgrade(db)
        else:
            check_current(db)
    finally:
        db.dispose()
    metrics_dir = tempfile.mkdtemp(prefix="jobwire-metrics-")
    try:
        family = Family(settings, [sys.executable, *sys.orig_argv[1:]], port, metrics_dir)
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(_serve_family(family))
    finally:
        for sock in held:
            sock.close()
        shutil.rmtree(metrics_dir, ignore_errors=True)


async def _serve_family(family: Family) -> int:
    endpoint = None
    if family.settings.metrics_listen:
        endpoint = MetricsEndpoint(FamilyMetrics(family.metrics_dir))
        port = endpoint.start(family.settings.metrics_listen)
        log.info("jobwire metrics of all %d processes at GET /metrics on port %d", family.settings.processes, port)
    try:
        return await family.run()
    finally:
        if endpoint is not None:
            await endpoint.stop()
