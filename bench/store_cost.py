"""The store's own cost per progress report: JobStore.apply of ReportStage's op, no gRPC, no server.

    .venv/bin/python bench/store_cost.py                     # 8 reports a transaction, 3 runs
    .venv/bin/python bench/store_cost.py --jobs 1            # one report a transaction
    .venv/bin/python bench/store_cost.py --instructions      # instructions per report (valgrind)

A fresh SQLite file in a temporary folder, the store as a server opens it (migrations, the
row cache, the evidence limit), `--jobs` jobs submitted and claimed, then `--rounds` rounds in
which every job reports once, all of a round's reports in one `store.apply` (one transaction,
as group commit makes of reports arriving together). Printed per run: this process's CPU per
report (user + system), then the median over `--runs`.

Everything a report costs below the RPC layer is in it: the decision, the guarded UPDATE, the
event with its JSON snapshot, the COMMIT. A time here moves with the machine's load;
`--instructions` runs this script twice under `valgrind --tool=callgrind` (`--rounds` and three
times as many) and prints the difference per report: the same figure whatever else the
machine does, for a before/after of a change to the write path. No test asserts either.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

from measure import median

from jobwire.db.leases import Report
from jobwire.db.store import Call, Claim, JobStore, Submit, open_store
from jobwire.domain.commands import Claimant, NewJob
from jobwire.domain.lease import Lease
from jobwire.domain.stages import DEFAULT_PLAN

TENANT = "bench"
JOB_TYPE = "bench.store"
WARM_ROUNDS = 50


def cpu_seconds() -> float:
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime + used.ru_stime


async def leased(store: JobStore, jobs: int) -> list[Lease]:
    new = NewJob(tenant=TENANT, job_type=JOB_TYPE, queue="default", payload=b"{}")
    for _ in range(jobs):
        await store.apply([Submit([new])])
    who = Claimant(
        tenant=TENANT, worker_id="bench", queues=("default",), plans={JOB_TYPE: DEFAULT_PLAN}, lease_seconds=600.0
    )
    (leases,) = await store.apply([Claim(who, jobs)])
    if len(leases) != jobs:
        raise RuntimeError(f"claimed {len(leases)} of {jobs} jobs")
    return list(leases)


async def one_run(jobs: int, rounds: int) -> float:
    """CPU ms per report over `rounds` rounds of `jobs` reports, one transaction each."""
    with tempfile.TemporaryDirectory(prefix="jw-store-") as folder:
        store = open_store(f"sqlite:///{Path(folder) / 'jobwire.db'}")
        try:
            leases = await leased(store, jobs)
            units = 0

            async def round_of_reports() -> None:
                nonlocal units
                units += 1  # a report never goes back: each one's units are the last one's + 1
                await store.apply([
                    Call([Report(tenant=TENANT, job_no=x.job_no, token=x.worker_token, stage="PROCESSING",
                                 processed=units)])
                    for x in leases
                ])  # fmt: skip

            for _ in range(WARM_ROUNDS):
                await round_of_reports()
            before = cpu_seconds()
            for _ in range(rounds):
                await round_of_reports()
            return (cpu_seconds() - before) * 1000 / (jobs * rounds)
        finally:
            await store.db.close()


def instructions(jobs: int, rounds: int) -> float:
    """Instructions per report: callgrind's totals of 3x and 1x `rounds`, their difference."""
    totals = []
    for n in (rounds, 3 * rounds):
        command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, __file__,
                   "--jobs", str(jobs), "--rounds", str(n), "--runs", "1"]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, check=True)
        found = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
        if found is None:
            raise RuntimeError("valgrind printed no instruction count:\n" + done.stderr[-2000:])
        totals.append(int(found.group(1).replace(",", "")))
    return (totals[1] - totals[0]) / (jobs * 2 * rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--jobs", type=int, default=8, help="leased jobs, each reporting once a round: reports a transaction"
    )
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--instructions", action="store_true", help="instructions per report under valgrind instead")
    args = parser.parse_args()
    if args.instructions:
        rounds = min(args.rounds, 300)  # under valgrind each round is ~50x slower
        print(
            f"{args.jobs} reports a transaction, SQLite: {instructions(args.jobs, rounds):,.0f} instructions per report"
        )
        return
    figures = []
    for n in range(args.runs):
        figures.append(asyncio.run(one_run(args.jobs, args.rounds)))
        print(f"run {n + 1}: {figures[-1]:.4f} ms of CPU per report", flush=True)
    print(f"{args.jobs} reports a transaction x {args.rounds} rounds, SQLite, in process:"
          f" median {median(figures):.4f} ms of CPU per report")  # fmt: skip


if __name__ == "__main__":
    main()
