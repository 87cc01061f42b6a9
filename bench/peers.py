"""Peers on Redis: RQ SimpleWorker and Celery --pool=solo, N no-op jobs end to end.

Both are timed the same way: the worker subprocess is started and proven ready with one
warm-up job (untimed), then the clock runs from the first enqueue until the last job's
result is in Redis. That is the "worker already running" shape of the reference figures (RQ SimpleWorker
304/s; Celery solo 688/s). Neither keeps state durably nor reports progress, so these
bound what a Redis queue does per job, not what jobwire promises.

Keys: a unique queue name per run on JWBENCH_REDIS_URL (default db 9); results expire
on their own (RQ result_ttl 60 s, Celery result_expires 300 s), and the queues are deleted.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from measure import CpuMeter

BENCH = Path(__file__).resolve().parent
VENV_BIN = Path(sys.executable).parent
READY_TIMEOUT_S = 60.0


@dataclass
class PeerResult:
    name: str
    jobs: int
    jobs_per_s: float
    enqueue_per_s: float
    worker_cpu_ms_per_job: float


def available() -> str | None:
    """None when the peers can run, else why not."""
    try:
        import celery  # noqa: F401
        import packaging  # noqa: F401 - kombu's Redis transport imports it undeclared
        import redis  # noqa: F401
        import rq  # noqa: F401
    except ImportError as exc:
        return f"{exc.name} is not installed: pip install -r bench/requirements.txt"
    import redis as redis_mod

    try:
        redis_mod.Redis.from_url(redis_url()).ping()
    except redis_mod.RedisError as exc:
        return f"Redis is not reachable at {redis_url()}: {exc}"
    return None


def redis_url() -> str:
    return os.environ.get("JWBENCH_REDIS_URL", "redis://127.0.0.1:6379/9")


def _env(**extra: str) -> dict[str, str]:
    path = os.pathsep.join([str(BENCH), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return {**os.environ, "PYTHONPATH": path, "JWBENCH_REDIS_URL": redis_url(), **extra}


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run_rq(jobs: int, log: Path) -> PeerResult:
    from redis import Redis
    from rq import Queue

    name = f"jwbench-rq-{secrets.token_hex(4)}"
    conn = Redis.from_url(redis_url())
    queue = Queue(name, connection=conn)
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [str(VENV_BIN / "rq"), "worker", "-w", "rq.worker.SimpleWorker", "-u", redis_url(), "--quiet", name],
            cwd=BENCH,
            env=_env(),
            stdout=out,
            stderr=out,
        )
    try:
        warm = queue.enqueue("peer_tasks.noop", result_ttl=60)
        _until(lambda: warm.get_status(refresh=True) == "finished", "the RQ worker to start")
        meter = CpuMeter({"worker": proc.pid})
        cpu0 = meter.sample()
        t0 = time.monotonic()
        enqueued = [queue.enqueue("peer_tasks.noop", result_ttl=60) for _ in range(jobs)]
        t_enq = time.monotonic()
        last = enqueued[-1]
        _until(lambda: last.get_status(refresh=True) == "finished", "RQ to finish")
        t1 = time.monotonic()
        cpu = CpuMeter.delta(cpu0, meter.sample()).get("worker", float("nan"))
        finished = queue.finished_job_registry.count
        if finished < jobs:
            raise RuntimeError(f"RQ finished {finished} of {jobs} jobs")
        return PeerResult("RQ SimpleWorker", jobs, jobs / (t1 - t0), jobs / (t_enq - t0), cpu * 1000 / jobs)
    finally:
        _stop(proc)
        queue.delete(delete_jobs=True)


def run_celery(jobs: int, log: Path) -> PeerResult:
    name = f"jwbench-celery-{secrets.token_hex(4)}"
    env = _env(JWBENCH_CELERY_QUEUE=name)
    os.environ["JWBENCH_CELERY_QUEUE"] = name
    os.environ["JWBENCH_REDIS_URL"] = redis_url()
    sys.path.insert(0, str(BENCH))
    import importlib

    import peer_tasks

    importlib.reload(peer_tasks)  # pick up this run's queue name
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [
                str(VENV_BIN / "celery"), "-A", "peer_tasks", "worker", "--pool=solo", "-Q", name,
                "--without-gossip", "--without-mingle", "--without-heartbeat", "--loglevel=WARNING",
                "-n", f"{name}@%h",
            ],
            cwd=BENCH,
            env=env,
            stdout=out,
            stderr=out,
        )  # fmt: skip
    try:
        task = peer_tasks.celery_noop
        task.delay().get(timeout=READY_TIMEOUT_S)  # the worker is up and consuming
        meter = CpuMeter({"worker": proc.pid})
        cpu0 = meter.sample()
        t0 = time.monotonic()
        results = [task.delay() for _ in range(jobs)]
        t_enq = time.monotonic()
        results[-1].get(timeout=READY_TIMEOUT_S)  # solo runs in order: the last one is the end
        t1 = time.monotonic()
        cpu = CpuMeter.delta(cpu0, meter.sample()).get("worker", float("nan"))
        unfinished = [r for r in results[:: max(1, jobs // 50)] if not r.successful()]
        if unfinished:
            raise RuntimeError(f"Celery left {len(unfinished)} sampled jobs unfinished")
        return PeerResult("Celery solo", jobs, jobs / (t1 - t0), jobs / (t_enq - t0), cpu * 1000 / jobs)
    finally:
        _stop(proc)
        from redis import Redis

        Redis.from_url(redis_url()).delete(name)


def _until(check: object, what: str) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.01)
    raise TimeoutError(f"timed out waiting for {what}")
