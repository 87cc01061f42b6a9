"""Log lines: text for people, or one JSON object per line for machines (JOBWIRE_LOG_FORMAT).

The fields of the call or job at hand (tenant, job_no, method, worker_id) live in a
context variable that the server's handler wrapping sets for each call (`begin`) and the
worker SDK adds to for itself and each job (`bind`), so no log call has to name them and
every line of that call or job carries them.

The JSON lines hold only the fields named here (`FIELDS`) and the message: a payload,
token or checkpoint handed to a log call as `extra` is never written, whatever its name.
"""

from __future__ import annotations

import contextvars
import logging
import sys
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

from opentelemetry import trace
from pythonjsonlogger.json import JsonFormatter

FORMATS = ("text", "json")
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# The extras a log call may add to a JSON line; any other extra is dropped.
FIELDS = ("tenant", "job_no", "worker_id", "method", "code", "error_category", "duration_ms")

Fields = Mapping[str, str | int | float]
_bound: contextvars.ContextVar[Fields] = contextvars.ContextVar("jobwire_log_fields", default=MappingProxyType({}))


def jobs_named(jobs: Sequence[tuple[str, str]], most: int = 10) -> str:
    """(tenant, job_no) pairs for one log line: `acme/PT-20261206-001, ...`, the first `most`
    and how many more (a job number is its tenant's: alone it is ambiguous)."""
    named = ", ".join(f"{tenant}/{job_no}" for tenant, job_no in jobs[:most])
    return named + (f" and {len(jobs) - most} more" if len(jobs) > most else "")


def bind(**fields: str | int | float) -> None:
    """Add `fields` to every line logged from here on in this context (task, call, job).

    An asyncio task gets a copy of its creator's context, so a field bound inside one call
    or job never reaches another.
    """
    _bound.set({**_bound.get(), **fields})


def begin(**fields: str | int | float) -> None:
    """Bind exactly `fields` in this context: a call starts with nothing of any call before it."""
    _bound.set(fields)


class JsonLines(JsonFormatter):
    """One JSON object per record: time, level, message, logger, the bound fields, trace id."""

    def add_fields(self, log_data: dict[str, Any], record: logging.LogRecord, message_dict: dict[str, Any]) -> None:
        log_data["time"] = datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
        log_data["level"] = record.levelname
        log_data["message"] = record.getMessage()
        log_data["logger"] = record.name
        log_data.update(_bound.get())
        for name in FIELDS:
            value = record.__dict__.get(name)
            if value is not None:
                log_data[name] = value
        trace_id = _trace_id()
        if trace_id:
            log_data["trace_id"] = trace_id
        if record.exc_info:
            log_data["exc_info"] = self.formatException(record.exc_info)


def _trace_id() -> str:
    # Without tracing the current span is the API's invalid one: no id, nothing set up.
    context = trace.get_current_span().get_span_context()
    return format(context.trace_id, "032x") if context.is_valid else ""


def configure(log_format: str = "text", level: str = "INFO") -> None:
    """Send the root logger's lines to stderr as text or JSON lines (replacing any handler)."""
    if log_format not in FORMATS or level.upper() not in LEVELS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)} and level one of {', '.join(LEVELS)}")
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(JsonLines())
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
