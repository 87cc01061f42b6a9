"""Whether a COMMIT whose reply was lost took effect: a marker row written by the transaction.

A connection can break after MySQL received COMMIT and before its reply arrived (a killed
connection, a network cut, a server that committed and then died). Rerunning the
transaction then would make a second job for a Submit, a second lease for a Claim; giving
up would answer "retry" for a change that happened. So every MySQL write transaction
inserts a marker row, in the same packet as its COMMIT (no extra round trip), and when
the COMMIT's reply is lost the writer asks, on a new connection, whether the marker is
there: yes, the transaction committed and its answers are the truth; no, nothing of it
happened and it runs again. The read locks in share mode, so a COMMIT still in flight
is waited for, not mistaken for one that failed.

Marker ids start with the hex time of day in nanoseconds, so inserts land at the end of
the primary key and housekeeping purges old ones by a key range.
"""

from __future__ import annotations

import secrets
import time

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from jobwire.db.tables import commit_marker

KEEP_S = 600.0  # a lost reply is resolved within seconds; ten minutes is plenty of margin
_TIME_DIGITS = 16  # time.time_ns() in hex, zero-padded: ids sort by creation time


def new_marker() -> str:
    return f"{time.time_ns():0{_TIME_DIGITS}x}{secrets.token_hex(4)}"


def insert_sql(marker: str) -> str:
    """The marker's INSERT, as text: `marker` is hex digits only, made here."""
    return f"INSERT INTO commit_marker (id) VALUES ('{marker}')"


def lookup_sql(marker: str) -> str:
    return f"SELECT 1 FROM commit_marker WHERE id = '{marker}' LOCK IN SHARE MODE"


def purge(conn: Connection, *, now_ns: int | None = None) -> int:
    """Delete markers older than KEEP_S; how many went."""
    cutoff = (now_ns if now_ns is not None else time.time_ns()) - int(KEEP_S * 1e9)
    result = conn.execute(sa.delete(commit_marker).where(commit_marker.c.id < f"{max(cutoff, 0):0{_TIME_DIGITS}x}"))
    return int(result.rowcount)
