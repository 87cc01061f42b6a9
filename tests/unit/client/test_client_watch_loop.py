"""The resumable watch loop, driven by scripted streams: no network, no sleeping."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import grpc
import pytest

from jobwire.client.errors import NotFoundError, UnavailableError
from jobwire.client.retry import Backoff, RetrySettings
from jobwire.client.watch import watch_job
from jobwire.v1 import job_pb2

pytestmark = pytest.mark.timeout(10)
MakeError = Callable[..., grpc.RpcError]
Q, R, READY = job_pb2.Job.QUEUED, job_pb2.Job.RUNNING, job_pb2.Job.READY
FAST = RetrySettings(watch_backoff=Backoff(initial=0.01, maximum=0.02))


def job(version: int, status: int = R) -> job_pb2.Job:
    return job_pb2.Job(job_no="PT-20261008-001", version=version, status=status)  # type: ignore[arg-type]


class Stream:
    """One scripted stream: these jobs, then `error` (or a clean end)."""

    def __init__(self, jobs: list[job_pb2.Job], error: grpc.RpcError | None = None) -> None:
        self.jobs, self.error, self.cancelled = jobs, error, False

    def __iter__(self) -> Iterator[job_pb2.JobUpdate]:
        for j in self.jobs:
            yield job_pb2.JobUpdate(job=j)
        if self.error is not None:
            raise self.error

    def cancel(self) -> bool:
        self.cancelled = True
        return True


class Server:
    """Hands out scripted streams in order and records each after_version asked for."""

    def __init__(self, *streams: Stream, current: job_pb2.Job | None = None) -> None:
        self.streams = list(streams)
        self.after: list[int] = []
        self.current = current

    def open(self, after: int) -> Stream:
        self.after.append(after)
        return self.streams.pop(0)

    def get(self) -> job_pb2.Job:
        assert self.current is not None
        return self.current


def run(server: Server, after: int = 0, settings: RetrySettings = FAST) -> list[int]:
    pauses: list[float] = []
    seen = watch_job(
        server.open,
        server.get,
        after_version=after,
        settings=settings,
        sleep=pauses.append,
    )
    return [j.version for j in seen]


def test_reconnects_after_unavailable_and_resumes_after_the_last_version(
    rpc_error: MakeError,
) -> None:
    drop = rpc_error(grpc.StatusCode.UNAVAILABLE, "server going away")
    server = Server(
        Stream([job(1, Q), job(2), job(3)], drop),
        Stream([job(4), job(5, READY)]),
    )
    assert run(server) == [1, 2, 3, 4, 5]
    assert server.after == [0, 3]


def test_replayed_versions_are_never_delivered_twice(rpc_error: MakeError) -> None:
    drop = rpc_error(grpc.StatusCode.UNAVAILABLE, "gone")
    # A confused replica replays 2 and 3 after the reconnect; the caller sees each once.
    server = Server(Stream([job(1), job(2), job(3)], drop), Stream([job(2), job(3), job(4, READY)]))
    assert run(server) == [1, 2, 3, 4]


def test_ends_after_the_terminal_state_and_hangs_up() -> None:
    first = Stream([job(1), job(2, READY), job(3)])
    assert run(Server(first)) == [1, 2]
    assert first.cancelled


def test_not_found_is_raised_at_once(rpc_error: MakeError) -> None:
    server = Server(
        Stream(
            [],
            rpc_error(grpc.StatusCode.NOT_FOUND, "no such job", reason="JOB_NOT_FOUND"),
        )
    )
    with pytest.raises(NotFoundError) as caught:
        run(server)
    assert caught.value.reason == "JOB_NOT_FOUND"
    assert server.after == [0]


def test_resuming_at_the_terminal_version_ends_at_once() -> None:
    server = Server(Stream([]), current=job(7, READY))
    assert run(server, after=7) == []
    assert server.after == [7]


def test_a_clean_end_before_the_terminal_state_reconnects() -> None:
    server = Server(Stream([job(1), job(2)]), Stream([job(3, READY)]), current=job(2))
    assert run(server) == [1, 2, 3]
    assert server.after == [0, 2]


def test_gives_up_after_the_configured_reconnects(rpc_error: MakeError) -> None:
    down = [Stream([], rpc_error(grpc.StatusCode.UNAVAILABLE, "down")) for _ in range(4)]
    settings = RetrySettings(watch_backoff=Backoff(initial=0.01), watch_max_reconnects=2)
    with pytest.raises(UnavailableError):
        run(Server(*down), settings=settings)


def test_closing_the_iterator_hangs_up_the_stream() -> None:
    first = Stream([job(1), job(2), job(3, READY)])
    server = Server(first)
    seen = watch_job(server.open, server.get, after_version=0, settings=FAST, sleep=lambda _: None)
    assert next(seen).version == 1
    seen.close()
    assert first.cancelled
