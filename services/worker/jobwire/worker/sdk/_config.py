"""The one frozen object that configures a Worker."""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from jobwire.client import ChannelConfig
from jobwire.domain import limits
from jobwire.worker.sdk._result import check_base_url

DEFAULT_LEASE_S = 30.0  # the server's JOBWIRE_LEASE_SECONDS default
DEFAULT_SESSION_GRACE_S = 3.0  # the server's JOBWIRE_SESSION_GRACE_SECONDS default
TRANSPORTS = ("session", "unary")


def default_worker_id() -> str:
    """host-pid-random: unique per process, readable in AdminService.ListWorkers."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True, kw_only=True)
class WorkerConfig:
    """How a worker connects, what it claims and how it stops.

    Attributes:
        target: WorkerService address, ``HOST:PORT``.
        worker_id: Names this process in the job's evidence; unique per process.
        queues: Queues to claim from.
        concurrency: Jobs run at once (and the size of the sync-handler thread pool).
        token: Bearer token of a ``worker`` role, or None on an open loopback server.
        tls: Use TLS with the system's trusted roots (implied by `tls_ca`).
        tls_ca: CA bundle to trust. `tls_cert` / `tls_key`: client certificate (mTLS).
        lease_duration: Seconds a lease lasts (1 s to 1 h); None takes the server's default.
        grace_period: Seconds running jobs get to reach a safe point on shutdown.
        claim_wait: Seconds one Claim long-polls for work.
        results_dir: None (the default): the server keeps each result (inline when small,
            uploaded otherwise; its URI is ``jobwire://results/<job_no>``, fetched with
            GetResult). Set it to publish results yourself: they are delivered into this
            folder on this machine.
        results_url: The base URL under which `results_dir` is published, e.g.
            ``https://files.example/jobwire/`` or ``s3://bucket/prefix/``: a result's URI is
            this base plus its path below `results_dir` (which defaults to ``var/results``
            when only this is set). With `results_dir` alone, URIs are ``file://`` URIs of
            this worker's disk, which only fit a single-machine setup.
        tmp_root: Where per-attempt temporary folders are made; None for the system's.
        report_interval: Minimum seconds between two progress reports in one stage.
        transport: ``session``: every call as a frame on one WorkerService.Session stream
            (unary calls when the server has none); ``unary``: one RPC per call.
        session_grace: Seconds a broken session may take to open again; past them every
            lease held is taken as lost and its handler stops at its next check. The
            server's JOBWIRE_SESSION_GRACE_SECONDS, after which it gives the leases away.
    """

    target: str
    worker_id: str = field(default_factory=default_worker_id)
    queues: tuple[str, ...] = (limits.DEFAULT_QUEUE,)
    concurrency: int = 4
    token: str | None = None
    tls: bool = False
    tls_ca: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    lease_duration: float | None = None
    grace_period: float = 25.0
    claim_wait: float = 5.0
    results_dir: Path | None = None
    results_url: str | None = None
    tmp_root: Path | None = None
    report_interval: float = 0.25
    transport: str = "session"
    session_grace: float = DEFAULT_SESSION_GRACE_S

    def __post_init__(self) -> None:
        if not self.target:
            raise ValueError("target is required (HOST:PORT)")
        if not self.worker_id or len(self.worker_id) > limits.MAX_KEY_CHARS:
            raise ValueError(f"worker_id must be 1 to {limits.MAX_KEY_CHARS} characters")
        queues = tuple(limits.queue("queues", q) for q in (self.queues or (limits.DEFAULT_QUEUE,)))
        object.__setattr__(self, "queues", queues)  # normalised: a list in, a tuple kept
        if not 1 <= self.concurrency <= 1024:
            raise ValueError("concurrency must be between 1 and 1024")
        if self.lease_duration is not None:
            limits.lease_seconds(self.lease_duration)
        if self.grace_period < 0 or self.claim_wait < 0 or self.report_interval < 0:
            raise ValueError("grace_period, claim_wait and report_interval must not be negative")
        if self.claim_wait > 60:
            raise ValueError("claim_wait is at most 60 seconds")
        if self.transport not in TRANSPORTS:
            raise ValueError(f"transport must be {' or '.join(TRANSPORTS)}, not {self.transport!r}")
        if not self.session_grace >= 0:  # nan too
            raise ValueError("session_grace must not be negative")
        if self.results_url is not None:
            check_base_url(self.results_url)
            if self.results_dir is None:
                object.__setattr__(self, "results_dir", Path("var/results"))

    @property
    def publishes_results(self) -> bool:
        """True when this worker publishes results itself rather than handing them to the server."""
        return self.results_dir is not None

    @property
    def heartbeat_interval(self) -> float:
        """Used only when a lease does not say: a third of the lease, as the server does."""
        return (self.lease_duration or DEFAULT_LEASE_S) / 3

    def channel_config(self) -> ChannelConfig:
        return ChannelConfig(
            target=self.target,
            token=self.token,
            tls=self.tls,
            tls_ca=self.tls_ca,
            tls_cert=self.tls_cert,
            tls_key=self.tls_key,
        )
