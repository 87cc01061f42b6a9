"""Turning JobService request messages into domain commands.

Submit, a SubmitBatch's jobs, a schedule's template when it is set and each of its firings
all decode a SubmitRequest here, so each is held to the same rules, and neither a use case
(firing) nor another servicer has to import JobService's servicer for it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from jobwire.domain import limits
from jobwire.domain.commands import NewJob
from jobwire.domain.errors import InvalidArgument
from jobwire.observe import tracing
from jobwire.rpc import convert
from jobwire.v1 import job_pb2


def decode_submit(request: job_pb2.SubmitRequest, tenant: str, default_attempt_s: float | None) -> NewJob:
    """A SubmitRequest as a NewJob; a field it breaks a rule of is refused by name (InvalidArgument)."""
    return NewJob(
        tenant=tenant,
        job_type=limits.name("job_type", request.job_type),
        queue=limits.queue("queue", request.queue),
        payload=limits.blob("payload", request.payload, limits.MAX_PAYLOAD_BYTES),
        idempotency_key=limits.key("idempotency_key", request.idempotency_key) or None,
        priority=request.priority,
        run_after=convert.from_timestamp(request.run_after, "run_after") if request.HasField("run_after") else None,
        retry=convert.retry_policy(request.retry_policy, request.HasField("retry_policy")),
        timeouts=convert.timeouts(request.timeouts, request.HasField("timeouts"), default_attempt_s),
        owner=limits.key("owner", request.owner),
        labels=limits.labels(request.labels),
        locale=limits.locale(request.locale) or "en",
        depends_on=limits.depends_on(request.depends_on),
        title=limits.short_text("title", request.title, limits.MAX_TITLE_CHARS),
        trace_context=tracing.traceparent(),  # the Submit call's span, for the worker's (None: tracing off)
    )


@contextmanager
def within(path: str) -> Iterator[None]:
    """A refusal of a field of a nested message names it by its path: `<path>.<field>`."""
    try:
        yield
    except InvalidArgument as refused:
        raise type(refused)(f"{path}.{refused.field}", refused.description) from None
