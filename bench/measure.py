"""What every bench section shares: percentiles, CPU meters, MariaDB counters, windows.

Throughput is counted inside a window: clients start, run `warmup` seconds uncounted,
then every completion stamped inside [t0, t1) counts. CPU and database counters are
sampled at t0 and t1, so "per job" figures divide deltas of the same window.
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import pymysql

MYSQL = {"host": "127.0.0.1", "port": 3306, "user": "root", "password": ""}

# Global MariaDB counters sampled around each window. Questions counts every statement a
# client sent (COM_PING excluded); the rest say where the statements and the waits went.
STATUS_VARS = (
    "Questions",
    "Com_select",
    "Com_insert",
    "Com_update",
    "Com_insert_select",
    "Com_commit",
    "Com_rollback",
    "Com_begin",
    "Innodb_row_lock_waits",
    "Innodb_row_lock_time",
    "Innodb_data_fsyncs",
    "Innodb_deadlocks",
    "Uptime",  # not a per-job figure: a drop means the server restarted inside the window
)
DB_BACK_TIMEOUT_S = 90.0


def pct(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) by nearest rank; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


def median(values: Iterable[float]) -> float:
    present = [v for v in values if v == v]  # drop NaN
    return statistics.median(present) if present else float("nan")


def connect(database: str | None = None, **extra: object) -> pymysql.connections.Connection:
    return pymysql.connect(**MYSQL, database=database, autocommit=True, **extra)  # type: ignore[arg-type]


def wait_for_db(timeout: float = DB_BACK_TIMEOUT_S) -> None:
    """Return once MariaDB accepts connections (other sessions on this machine restart it)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            connect().close()
            return
        except pymysql.err.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def drop_database(name: str) -> None:
    """Drop a bench database, waiting for MariaDB if another session is restarting it."""
    for attempt in (1, 2, 3):
        try:
            conn = connect()
            with conn.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
            conn.close()
            return
        except pymysql.err.OperationalError:
            if attempt == 3:
                raise
            wait_for_db()


class DbCounters:
    """Deltas of MariaDB's global status counters, from one monitoring connection."""

    def __init__(self) -> None:
        self.conn = connect()

    def sample(self) -> dict[str, int]:
        names = ",".join(f"'{n}'" for n in STATUS_VARS)
        for attempt in (1, 2):
            try:
                with self.conn.cursor() as cur:
                    cur.execute(f"SHOW GLOBAL STATUS WHERE Variable_name IN ({names})")
                    return {str(k): int(v) for k, v in cur.fetchall()}
            except pymysql.err.OperationalError:
                if attempt == 2:
                    raise
                wait_for_db()
                self.conn = connect()
        raise AssertionError("unreachable")

    @staticmethod
    def delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
        out = {k: after.get(k, 0) - before.get(k, 0) for k in STATUS_VARS}
        out["Questions"] -= 1  # the SHOW that took the second sample counts itself
        return out

    def close(self) -> None:
        self.conn.close()


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (and its reaped children) from /proc."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    # fields[0] is field 3 (state): utime=14, stime=15 -> indexes 11, 12
    return (int(fields[11]) + int(fields[12])) / ticks


def descendants(pid: int) -> list[int]:
    """`pid` and every process below it (a jobwire family: the parent and its serving children)."""
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        try:
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children", encoding="ascii") as f:
                    todo += [int(child) for child in f.read().split()]
        except OSError:
            continue
    return out


def find_pid(names: Sequence[str]) -> int | None:
    """The pid of the first running process whose command name is in `names` (read only)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/comm", encoding="utf-8") as f:
                if f.read().strip() in names:
                    return int(entry)
        except OSError:
            continue
    return None


@dataclass
class CpuMeter:
    """CPU seconds of named processes between two samples; `trees` count their descendants too."""

    pids: dict[str, int | None]
    trees: frozenset[str] = frozenset()
    start: dict[str, float] = field(default_factory=dict)

    def sample(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for name, pid in self.pids.items():
            if pid is None:
                continue
            try:
                out[name] = sum(_cpu_seconds(p) for p in (descendants(pid) if name in self.trees else [pid]))
            except OSError:
                continue
        return out

    @staticmethod
    def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
        return {k: after[k] - before[k] for k in after if k in before}


@dataclass
class Window:
    """The counted interval of one measurement, with the deltas taken across it."""

    t0: float
    t1: float
    cpu: dict[str, float]  # CPU seconds per process
    db: dict[str, int]  # MariaDB global status (every tenant of the server)
    sql: dict[str, int]  # commands the measured process sent (sqlcount.py)

    @property
    def seconds(self) -> float:
        return self.t1 - self.t0

    @property
    def db_restarted(self) -> bool:
        """MariaDB restarted inside the window (its Uptime went back): the figures are void."""
        return self.db.get("Uptime", 0) < int(self.seconds) - 1


def measure_window(
    meter: CpuMeter,
    counters: DbCounters,
    sql: Callable[[], dict[str, int]],
    warmup: float,
    seconds: float,
    done: list[float],
    cap: int,
) -> Window:
    """Wait out the warm-up, then count until `seconds` pass or `cap` completions land.

    `done` is the list the clients append completion times to (time.monotonic()).
    `sql` reads the measured process's command counts.
    """
    time.sleep(warmup)
    sql0, cpu0, db0 = sql(), meter.sample(), counters.sample()
    t0 = time.monotonic()
    base = len(done)
    deadline = t0 + seconds
    while time.monotonic() < deadline and len(done) - base < cap:
        time.sleep(0.02)
    t1 = time.monotonic()
    sql1, cpu1, db1 = sql(), meter.sample(), counters.sample()
    sql_delta = {k: sql1[k] - sql0[k] for k in sql1}
    return Window(t0, t1, CpuMeter.delta(cpu0, cpu1), DbCounters.delta(db0, db1), sql_delta)


def in_window(stamps: Iterable[float], w: Window) -> int:
    return sum(1 for t in stamps if w.t0 <= t < w.t1)


def latencies_in(samples: Iterable[tuple[float, float]], w: Window) -> list[float]:
    """Latencies (ms) of calls that started inside the window; samples are (start, seconds)."""
    return [d * 1000 for s, d in samples if w.t0 <= s < w.t1]


ROOT = Path(__file__).resolve().parents[1]


def describe_machine() -> list[str]:
    """The lines every report starts with: commit, CPUs, load, versions, MariaDB's durability."""

    def sh(*cmd: str) -> str:
        try:
            return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return "?"

    with connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT VERSION(), @@innodb_flush_log_at_trx_commit, @@innodb_buffer_pool_size")
        version, flush, pool = cur.fetchone()
    dirty = len([line for line in sh("git", "status", "--porcelain").splitlines() if line.strip()])
    return [
        f"commit {sh('git', 'rev-parse', '--short', 'HEAD')} ({dirty} paths changed or untracked in the work tree)",
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start; Python {platform.python_version()},"
        f" grpcio {metadata.version('grpcio')}, SQLAlchemy {metadata.version('SQLAlchemy')},"
        f" PyMySQL {metadata.version('PyMySQL')}, MariaDB {version}"
        f" (innodb_flush_log_at_trx_commit={flush}, innodb_buffer_pool_size={int(pool) >> 20} MiB)",
    ]
