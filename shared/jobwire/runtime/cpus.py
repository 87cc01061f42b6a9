"""How many CPUs this process may use: its cgroup's CPU quota, else the CPUs it may run on.

`JOBWIRE_PROCESSES` defaults to this. A container limited to 1.5 CPUs on a 64-core node
sees 64 cores in `os.cpu_count()`; 64 serving processes would then share 1.5 cores' worth
of time and be throttled in turns. The quota, rounded up, is what it may use.

The quota is read from the files the kernel shows at the usual mount points, under `root`
(tests point it at fixture folders):

- cgroup v2 (`/sys/fs/cgroup` holds `cgroup.controllers`): each cgroup's `cpu.max`,
  "QUOTA PERIOD" in microseconds, or "max PERIOD" for none;
- cgroup v1 (`/sys/fs/cgroup/cpu/cpu.cfs_quota_us` and `cpu.cfs_period_us`): a quota of -1
  for none.

The process's own cgroup (`/proc/self/cgroup`) and each of its parents are read, and the
smallest quota found applies (a parent's limit binds its children). A container with its own
cgroup namespace sees its cgroup as `/`, the mount's top, so that is read too.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

CGROUP_MOUNT = "sys/fs/cgroup"
V1_CPU_FOLDERS = ("cpu", "cpu,cpuacct", "cpuacct,cpu")


@dataclass(frozen=True, kw_only=True)
class Cpus:
    """How many CPUs to use, and why, in words for the start's log line."""

    count: int
    why: str


def usable_cpus(root: Path = Path("/"), *, runnable: int | None = None) -> Cpus:
    """The CPUs this process may use: its CPU quota rounded up, else those it may run on.

    Args:
        root: where `/proc` and `/sys` are (tests: a fixture folder).
        runnable: how many CPUs the process may run on (default: its affinity mask).
    """
    runnable = runnable if runnable is not None else _runnable()
    quota = cpu_quota(root)
    if quota is None:
        return Cpus(count=runnable, why=f"no CPU quota; this process may run on {_cpus(runnable)}")
    count = max(1, math.ceil(quota))
    if count > runnable:
        why = f"the cgroup's CPU quota is {_cores(quota)}, but this process may run on {_cpus(runnable)} only"
        return Cpus(count=runnable, why=why)
    return Cpus(count=count, why=f"the cgroup's CPU quota is {_cores(quota)}")


def cpu_quota(root: Path) -> float | None:
    """The cgroup's CPU quota in cores (1.5: one and a half), None when there is none."""
    paths = _cgroup_paths(root)
    mount = root / CGROUP_MOUNT
    if (mount / "cgroup.controllers").is_file():  # cgroup v2: the unified hierarchy is mounted there
        quotas = [_v2_quota(folder / "cpu.max") for folder in _folders(mount, paths.get("v2", "/"))]
    else:
        quotas = [
            _v1_quota(folder) for name in V1_CPU_FOLDERS for folder in _folders(mount / name, paths.get("cpu", "/"))
        ]
    found = [q for q in quotas if q is not None]
    return min(found) if found else None


def _runnable() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1  # macOS has no affinity mask


def _cgroup_paths(root: Path) -> dict[str, str]:
    """This process's cgroup path for v2 ("v2") and for v1's cpu controller ("cpu")."""
    try:
        lines = (root / "proc/self/cgroup").read_text().splitlines()
    except OSError:
        return {}
    paths: dict[str, str] = {}
    for line in lines:
        _, controllers, path = [*line.split(":", 2), "", ""][:3]
        if controllers == "":
            paths["v2"] = path
        elif "cpu" in controllers.split(","):
            paths["cpu"] = path
    return paths


def _folders(mount: Path, path: str) -> list[Path]:
    """The cgroup folder of `path` under `mount` and each of its parents there, up to the mount's top."""
    pure = PurePosixPath("/", path)
    chain = [pure, *pure.parents]
    return [folder for p in chain if (folder := mount / str(p).lstrip("/")).is_dir()]


def _v2_quota(file: Path) -> float | None:
    try:
        quota, period = [*file.read_text().split(), "100000"][:2]
    except OSError:
        return None
    if quota == "max":
        return None
    return _ratio(quota, period)


def _v1_quota(folder: Path) -> float | None:
    try:
        quota = (folder / "cpu.cfs_quota_us").read_text().strip()
        period = (folder / "cpu.cfs_period_us").read_text().strip()
    except OSError:
        return None
    return _ratio(quota, period)


def _ratio(quota: str, period: str) -> float | None:
    try:
        q, p = int(quota), int(period)
    except ValueError:
        return None
    return q / p if q > 0 and p > 0 else None  # v1's -1: no quota


def _cores(quota: float) -> str:
    return f"{quota:g} core" if quota == 1 else f"{quota:g} cores"


def _cpus(n: int) -> str:
    return "1 CPU" if n == 1 else f"{n} CPUs"
