"""What a job's page shows below its state: its payload, a preview of its result, its timeline.

Everything here is text for an autoescaping template: a payload or a result is never
executed or inlined as markup, only shown, and only its first PREVIEW_BYTES. JSON is shown
pretty when the whole of it is at hand; anything that is not UTF-8 text is described by its
size and type instead.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from dataclasses import dataclass

from jobwire.client.render import event_detail, fmt_size, fmt_time, status_label
from jobwire.gateway.i18n import t
from jobwire.v1 import admin_pb2

PREVIEW_BYTES = 64 * 1024
FOLD_CHARS = 160  # a detail longer than this, or of several lines, folds to its first line
_JSON_TYPES = ("application/json", "text/json")


@dataclass(frozen=True)
class Preview:
    kind: str  # "json", "text" or "" (nothing shown: empty, or not text)
    text: str
    size: str  # the whole thing's size, as people read it
    cut: bool  # `text` is only the first PREVIEW_BYTES
    empty: bool  # nothing at all (size 0)


def preview(data: bytes, size: int, content_type: str = "") -> Preview:
    """`data` (the first bytes of something `size` long) as the page shows it."""
    cut = len(data) < size
    text = _utf8(data, cut)
    shown = fmt_size(size)
    if not data or text is None:
        return Preview("", "", shown, cut, size == 0)
    media = content_type.split(";", 1)[0].strip().lower()
    if not cut and (media in _JSON_TYPES or not media or media.endswith("+json")):
        try:
            return Preview("json", json.dumps(json.loads(text), indent=2, ensure_ascii=False), shown, cut, False)
        except ValueError:
            pass  # text that is not JSON: shown as it is
    return Preview("text", text, shown, cut, False)


def _utf8(data: bytes, cut: bool) -> str | None:
    """The text of `data`, or None when it is not UTF-8 text; a cut may split the last character."""
    for trim in range(4 if cut else 1):
        try:
            text = data[: len(data) - trim].decode("utf-8")
        except UnicodeDecodeError:
            continue
        return None if any(c < " " and c not in "\n\r\t" for c in text) else text
    return None


async def head(chunks: AsyncGenerator[bytes, None], limit: int = PREVIEW_BYTES) -> bytes:
    """The first `limit` bytes of a result stream; the rest is never read."""
    data = b""
    async for chunk in chunks:
        data += chunk
        if len(data) >= limit:
            break
    return data[:limit]


@dataclass(frozen=True)
class Fold:
    """A free text that may be long (a traceback): its first line, and the whole when it has more."""

    first: str
    whole: str  # "" when the first line says it all

    @classmethod
    def of(cls, text: str) -> Fold:
        first = text.split("\n", 1)[0]
        if first == text and len(text) <= FOLD_CHARS:
            return cls(text, "")
        return cls(first[:FOLD_CHARS] + ("…" if len(first) > FOLD_CHARS else ""), text)


# Who makes an event happen, by its kind. An event names the worker that held the job then,
# so a person's cancel or an operator's requeue of a running job names one too: these kinds
# are theirs whatever worker is named. A CANCELLED naming a worker is that worker confirming.
_BY_PERSON = {"SUBMITTED", "CANCEL_REQUESTED", "RETRIED", "REVIEW_APPROVED", "REVIEW_REJECTED"}
_BY_OPERATOR = {"REQUEUED"}


def by_whom(event: admin_pb2.JobEvent, locale: str) -> str:
    if event.kind in _BY_OPERATOR:
        return t("by_operator", locale)
    if event.kind in _BY_PERSON:
        return t("by_person", locale)
    if event.worker_id:
        return t("by_worker", locale, worker=event.worker_id)
    if event.kind == "CANCELLED":
        return t("by_person", locale)
    return t("by_server", locale)


def change(event: admin_pb2.JobEvent, locale: str) -> str:
    before, after = event.from_status, event.to_status
    if not after:
        return ""
    if before in (0, after):
        return status_label(after, locale)
    return f"{status_label(before, locale)} → {status_label(after, locale)}"


def units(event: admin_pb2.JobEvent) -> str:
    if event.HasField("total_units"):
        return f"{event.processed_units}/{event.total_units}"
    return str(event.processed_units) if event.processed_units else ""


def timeline(events: list[admin_pb2.JobEvent], locale: str) -> list[dict[str, object]]:
    """A job's events as the pages' timeline rows, oldest first."""
    return [
        {
            "version": e.version,
            "time": fmt_time(e.created_at, short=True),
            "kind": e.kind,
            "change": change(e, locale),
            "stage": e.stage,
            "units": units(e),
            "worker": e.worker_id,
            "by": by_whom(e, locale),
            "attempt": e.attempt,
            "detail": Fold.of(event_detail(e)),  # a handler's key = value, a checkpoint's size and digest
        }
        for e in events
    ]
