"""The jobs a schedule made (ScheduleService.ListScheduleJobs), read by their idempotency key.

Each firing submits with the key `<schedule_id>@<fire time, ISO 8601 UTC>` (jobwire.domain.
schedules.firing_key), so a schedule's jobs are one range of the unique (tenant,
idempotency_key) index, and that range in descending order is the latest firing first: a
page reads down the index, never the tenant's other jobs. The page token is the last key seen.
"""

from __future__ import annotations

import base64
import binascii
import json

from sqlalchemy.engine import Connection

from jobwire.db.reads import Row, job_rows, page_of, scoped, select_jobs
from jobwire.db.tables import job
from jobwire.domain.commands import Scope
from jobwire.domain.errors import InvalidArgument

_MAX_TOKEN = 800  # a key is at most 128 characters, 4 bytes each, JSON-escaped at worst 6 per character


def page(conn: Connection, scope: Scope, schedule_id: str, page_size: int, page_token: str) -> tuple[list[Row], str]:
    key = job.c.idempotency_key
    where = [*scoped(scope), key.startswith(f"{schedule_id}@", autoescape=True)]
    before = _decode(page_token)
    if before:
        where.append(key < before)
    query = select_jobs(*where).order_by(key.desc()).limit(page_size + 1)
    rows, last = page_of(job_rows(conn, query), page_size, key="idempotency_key")
    return rows, "" if last is None else _encode(last)


def _encode(last_key: str) -> str:
    return base64.urlsafe_b64encode(json.dumps({"before_key": last_key}).encode()).decode().rstrip("=")


def _decode(token: str) -> str:
    if not token:
        return ""
    if len(token) > _MAX_TOKEN:
        raise InvalidArgument("page_token", "is not a token this server issued")
    try:
        before = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))["before_key"]
    except (binascii.Error, ValueError, TypeError, KeyError, UnicodeDecodeError, RecursionError):
        raise InvalidArgument("page_token", "is not a token this server issued") from None
    if not isinstance(before, str) or not 0 < len(before) <= 128:
        raise InvalidArgument("page_token", "is not a token this server issued")
    return before
