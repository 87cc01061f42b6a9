"""Idle replicas: the SQL each of two `python -m jobwire serve` on one database sends with no client.

    .venv/bin/python bench/replicas_idle.py                        # 3 runs of 30 s windows (~2 min)
    .venv/bin/python bench/replicas_idle.py --runs 1 --seconds 10  # a quick look

Housekeeping and the schedule loop run in the one process of all replicas that holds
their lease (jobwire.runtime.leadership); every other replica only asks who does. Two
servers, one serving process each (`--processes`), on a fresh MariaDB database, each
started through serve_counted.py so every statement it sends is counted exactly
(sqlcount.py: COM_QUERY, BEGIN and COMMIT included; COM_PING apart). After `--warmup`
seconds (the first server has started and taken the leases before the second starts),
`--seconds` are counted. Per run: statements/s of the server that leads (holds the
`housekeeping` lease, read from `chore_leader`) and of the standby; medians of `--runs`.
What every server sends whatever its role is in both: the event tail's poll once a
second, a reading of the database clock every 5 s. Needs MariaDB at 127.0.0.1:3306 (root,
no password); drops its database unless --keep.
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import e2e  # noqa: E402
from measure import connect  # noqa: E402


def leader_pid(database: str) -> int | None:
    """The pid in the `housekeeping` lease's holder (host:pid:token); None without one."""
    conn = connect(database)
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW TABLES LIKE 'chore_leader'")
            if cur.fetchone() is None:
                return None  # a server from before the chore leader: every replica keeps house
            cur.execute("SELECT holder FROM chore_leader WHERE name = 'housekeeping'")
            row = cur.fetchone()
    finally:
        conn.close()
    return None if row is None else int(row[0].split(":")[1])


def run_once(args: argparse.Namespace, logs: Path, n: int) -> tuple[float, float]:
    """Statements/s of (the leader, the standby); without a chore leader, of (the first, the second)."""
    database = f"jwbench_replicas_{secrets.token_hex(3)}"
    env = {"JOBWIRE_PROCESSES": str(args.processes)}
    first = e2e.Server(database, logs / f"run{n}-a.log", env)
    second = None
    try:
        time.sleep(args.warmup)
        second = e2e.Server(database, logs / f"run{n}-b.log", env, fresh=False)
        time.sleep(args.warmup)
        servers = (first, second)
        before = [s.sql_counts()["query"] for s in servers]
        started = time.monotonic()
        time.sleep(args.seconds)
        elapsed = time.monotonic() - started
        rates = [(s.sql_counts()["query"] - b) / elapsed for s, b in zip(servers, before, strict=True)]
        if leader_pid(database) == second.pid:
            rates.reverse()
        return rates[0], rates[1]
    finally:
        if second is not None:
            second.stop(drop=False)
        first.stop(drop=not args.keep)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=30.0, help="counted seconds per run")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds after each start, uncounted")
    parser.add_argument("--processes", type=int, default=1, help="JOBWIRE_PROCESSES of each server")
    parser.add_argument("--keep", action="store_true", help="keep the databases")
    args = parser.parse_args()
    logs = Path(tempfile.mkdtemp(prefix="jwbench-replicas-"))
    results = [run_once(args, logs, n) for n in range(args.runs)]
    for n, (leader, standby) in enumerate(results):
        print(f"run {n + 1}: leader {leader:.2f} statements/s, standby {standby:.2f} statements/s")
    print(
        f"median of {args.runs}: leader {statistics.median(r[0] for r in results):.2f} statements/s,"
        f" standby {statistics.median(r[1] for r in results):.2f} statements/s (server logs: {logs})"
    )


if __name__ == "__main__":
    main()
