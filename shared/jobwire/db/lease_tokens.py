"""Lease tokens: `<epoch>.<signature>`, the epoch signed with the job's own key (HMAC).

A token names the lease it was issued for: the epoch counts the job's leases, so a revoked
lease's token never matches again, and the signature lets a late call with a token this job
once issued be told apart from a forged or foreign one (evidence, not a write).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

from jobwire.db.changes import Row


def new_token(epoch: int, key: str | None) -> str:
    """The token of a lease: its epoch, and the job's key's signature of it (random without a key)."""
    return f"{epoch}.{_signature(key, epoch) if key else secrets.token_urlsafe(18)}"


def new_lease_key() -> str:
    return secrets.token_hex(16)


def _signature(key: str, epoch: int) -> str:
    digest = hmac.new(bytes.fromhex(key), str(epoch).encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest[:18]).decode()


def was_issued(row: Row, token: str, epoch: int) -> bool:
    """True when `token` is the token this job's lease of `epoch` had (jobs made before keys: never)."""
    key = row.get("lease_key")
    if not key or not 0 < epoch <= row["lease_epoch"]:
        return False
    return hmac.compare_digest(token.partition(".")[2], _signature(key, epoch))


def issued(row: Row, token: str) -> bool:
    """True when `token` is or was a lease of this job: the one held, the one that ended it, or one it signed."""
    if token in (row["worker_token"], row["ended_token"]):
        return True
    epoch = token_epoch(token)
    return epoch is not None and was_issued(row, token, epoch)


def token_epoch(token: str) -> int | None:
    head, _, secret = token.partition(".")
    # ASCII digits only: str.isdigit() also accepts "²" or "١", which int() refuses or reads as 1.
    return int(head) if head.isascii() and head.isdigit() and len(head) < 19 and secret else None
