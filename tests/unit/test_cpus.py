"""JOBWIRE_PROCESSES' default: the cgroup's CPU quota rounded up, else the CPUs the process may
run on, never more than those; read from cgroup v1 and v2 files laid out under a fixture root."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobwire.runtime.cpus import cpu_quota, usable_cpus
from jobwire.runtime.settings import MAX_PROCESSES, Settings


def _files(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def v2(root: Path, cpu_max: str | None, *, path: str = "/", **more: str) -> Path:
    """A cgroup v2 machine: the process in `path`, its cpu.max there (None: no file, as at the top)."""
    files = {"proc/self/cgroup": f"0::{path}\n", "sys/fs/cgroup/cgroup.controllers": "cpuset cpu io memory pids\n"}
    if cpu_max is not None:
        files[f"sys/fs/cgroup{path.rstrip('/')}/cpu.max"] = cpu_max + "\n"
    return _files(root, {**files, **more})


def v1(root: Path, quota: int, period: int = 100_000, *, folder: str = "cpu,cpuacct", path: str = "/") -> Path:
    """A cgroup v1 machine (with the empty unified hierarchy of a hybrid one beside it)."""
    cgroup = f"sys/fs/cgroup/{folder}{path.rstrip('/')}"
    return _files(root, {
        "proc/self/cgroup": f"12:memory:/x\n4:cpu,cpuacct:{path}\n0::/\n",
        "sys/fs/cgroup/unified/cgroup.controllers": "",
        f"{cgroup}/cpu.cfs_quota_us": f"{quota}\n",
        f"{cgroup}/cpu.cfs_period_us": f"{period}\n",
    })  # fmt: skip


@pytest.mark.parametrize(
    ("cpu_max", "runnable", "count", "why"),
    [
        ("150000 100000", 64, 2, "the cgroup's CPU quota is 1.5 cores"),
        ("100000 100000", 64, 1, "the cgroup's CPU quota is 1 core"),
        ("10000 100000", 64, 1, "the cgroup's CPU quota is 0.1 cores"),  # a tenth still gets one process
        ("400000 100000", 4, 4, "the cgroup's CPU quota is 4 cores"),
        ("max 100000", 8, 8, "no CPU quota; this process may run on 8 CPUs"),
        # a quota larger than the CPUs the process may run on: those
        ("1600000 100000", 2, 2, "the cgroup's CPU quota is 16 cores, but this process may run on 2 CPUs only"),
    ],
)
def test_cgroup_v2_quota(tmp_path: Path, cpu_max: str, runnable: int, count: int, why: str) -> None:
    cpus = usable_cpus(v2(tmp_path, cpu_max), runnable=runnable)
    assert (cpus.count, cpus.why) == (count, why)


@pytest.mark.parametrize(
    ("quota", "period", "count"),
    [(150_000, 100_000, 2), (50_000, 100_000, 1), (300_000, 100_000, 3), (250_000, 50_000, 5)],
)
def test_cgroup_v1_quota(tmp_path: Path, quota: int, period: int, count: int) -> None:
    assert usable_cpus(v1(tmp_path, quota, period), runnable=64).count == count


def test_cgroup_v1_without_a_quota_is_the_cpus_it_may_run_on(tmp_path: Path) -> None:
    cpus = usable_cpus(v1(tmp_path, -1), runnable=6)
    assert (cpus.count, cpus.why) == (6, "no CPU quota; this process may run on 6 CPUs")


def test_cgroup_v1_mounted_as_cpu_alone(tmp_path: Path) -> None:
    assert cpu_quota(v1(tmp_path, 200_000, folder="cpu")) == 2.0


def test_no_cgroup_files_at_all_is_the_cpus_it_may_run_on(tmp_path: Path) -> None:
    cpus = usable_cpus(tmp_path, runnable=1)
    assert (cpus.count, cpus.why) == (1, "no CPU quota; this process may run on 1 CPU")


def test_the_smallest_quota_of_the_process_cgroup_and_its_parents_applies(tmp_path: Path) -> None:
    """Without a cgroup namespace /proc/self/cgroup names the full path: a parent's limit binds too."""
    parent = {"sys/fs/cgroup/kubepods/pod1/cpu.max": "250000 100000"}
    root = v2(tmp_path, "400000 100000", path="/kubepods/pod1/c1", **parent)
    assert cpu_quota(root) == 2.5
    assert usable_cpus(root, runnable=64).count == 3


def test_a_path_the_mount_does_not_show_falls_back_to_the_mount_top(tmp_path: Path) -> None:
    """A v1 container without a cgroup namespace: /proc names /docker/ID, mounted as the top."""
    root = v1(tmp_path, 150_000)
    (root / "proc/self/cgroup").write_text("4:cpu,cpuacct:/docker/0123abcd\n")
    assert cpu_quota(root) == 1.5


def test_v2_at_the_top_with_no_cpu_max_has_no_quota(tmp_path: Path) -> None:
    assert cpu_quota(v2(tmp_path, None)) is None


def test_settings_default_to_the_usable_cpus_and_say_why() -> None:
    expected = usable_cpus()
    settings = Settings.from_env({})
    assert settings.processes == min(expected.count, MAX_PROCESSES)
    assert settings.processes_why.startswith(expected.why)
    chosen = Settings.from_env({"JOBWIRE_PROCESSES": "3"})
    assert (chosen.processes, chosen.processes_why) == (3, "set by JOBWIRE_PROCESSES")
