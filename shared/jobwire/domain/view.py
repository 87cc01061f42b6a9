"""What a person sees: a status label, a stage label, one line of detail and the actions."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum

from jobwire.domain.flow import Held
from jobwire.domain.job import JobRecord
from jobwire.domain.states import LEASED, Status

LOCALES = ("en", "zh-CN")


class UserAction(StrEnum):
    VIEW = "VIEW"
    CANCEL = "CANCEL"
    PREVIEW = "PREVIEW"
    DOWNLOAD = "DOWNLOAD"
    RETRY = "RETRY"
    RESUBMIT = "RESUBMIT"


STATUS_LABELS: dict[Status, dict[str, str]] = {
    Status.QUEUED: {"en": "Queued", "zh-CN": "排队中"},
    Status.RUNNING: {"en": "Processing", "zh-CN": "正在处理"},
    Status.CANCEL_REQUESTED: {"en": "Stopping", "zh-CN": "正在停止"},
    Status.READY: {"en": "Done", "zh-CN": "处理完成"},
    Status.FAILED: {"en": "Not completed", "zh-CN": "未完成"},
    Status.CANCELLED: {"en": "Cancelled", "zh-CN": "已取消"},
    Status.WAITING: {"en": "Waiting for review", "zh-CN": "等待审核"},
}

_TEXT = {
    "stage": {"en": "{label}, stage {i}/{n}", "zh-CN": "{label}，第 {i}/{n} 步"},
    "units": {"en": "{done}/{total} ({pct}%)", "zh-CN": "{done}/{total}（{pct}%）"},
    "units_open": {"en": "{done} done", "zh-CN": "已完成 {done}"},
    "ahead": {"en": "{n} jobs ahead", "zh-CN": "前面还有 {n} 个任务"},
    "ahead_one": {"en": "1 job ahead", "zh-CN": "前面还有 1 个任务"},
    "next": {"en": "next in line", "zh-CN": "即将开始"},
    "waiting_for": {"en": "Waiting for {jobs}", "zh-CN": "等待 {jobs} 完成"},
    # Instead of the whole line: a place in line means nothing while the queue leases nothing.
    Held.PAUSED: {"en": "Queued: the queue is paused", "zh-CN": "排队中：队列已暂停"},
    Held.AT_LIMIT: {"en": "Queued: the queue is at its limit", "zh-CN": "排队中：队列已达到处理上限"},
    "no_worker": {"en": "No worker is serving this kind of job yet", "zh-CN": "暂时没有可处理此类任务的处理程序"},
    "review": {"en": "Waiting for review by {who}", "zh-CN": "等待 {who} 审核"},
    "stalled": {"en": "no news from the worker", "zh-CN": "处理程序暂无响应"},
    "no_progress": {"en": "no progress for {duration}", "zh-CN": "已 {duration}没有进展"},
    "seconds": {"en": "{n} s", "zh-CN": "{n} 秒"},
    "minutes": {"en": "{n} min", "zh-CN": "{n} 分钟"},
    "hours": {"en": "{h} h {m} min", "zh-CN": "{h} 小时 {m} 分钟"},
    "sep": {"en": " · ", "zh-CN": " · "},
}


# Every word that names a status, casefolded: its labels in every locale, then its name, so
# a name wins where a name and a label meet (none do: a unit test keeps each label naming one
# status, so no word a person reads means two).
_NAMED: dict[str, Status] = {
    **{label.casefold(): status for status, labels in STATUS_LABELS.items() for label in labels.values()},
    **{status.value.casefold(): status for status in Status},
}


def status_named(text: str) -> Status | None:
    """The status `text` names: its name (QUEUED) or the label a person reads for it in any
    locale (Queued, 排队中, waiting for review), in any case; None when it names none."""
    return _NAMED.get(" ".join(text.split()).casefold())


@dataclass(frozen=True, kw_only=True)
class View:
    locale: str
    status_label: str
    stage_label: str
    detail: str
    actions: tuple[UserAction, ...]


def normalize_locale(locale: str) -> str:
    """'zh', 'zh_CN', 'zh-cn' read as zh-CN; anything unknown reads as English."""
    return "zh-CN" if locale.lower().replace("_", "-").startswith("zh") else "en"


def actions_for(job: JobRecord) -> tuple[UserAction, ...]:
    if job.status in (Status.QUEUED, Status.WAITING):
        return (UserAction.VIEW, UserAction.CANCEL)
    if job.status is Status.RUNNING:
        return (UserAction.VIEW, UserAction.CANCEL) if job.cancellable else (UserAction.VIEW,)
    if job.status is Status.CANCEL_REQUESTED:
        return (UserAction.VIEW,)
    if job.status is Status.READY:
        return (UserAction.PREVIEW, UserAction.DOWNLOAD) if job.downloadable else (UserAction.VIEW,)
    if job.status is Status.FAILED:
        retry = job.error is not None and job.error.retryable
        return (UserAction.VIEW, UserAction.RETRY) if retry else (UserAction.VIEW,)
    return (UserAction.RESUBMIT,)


def render(job: JobRecord, locale: str) -> View:
    loc = normalize_locale(locale or job.locale)
    status_label = STATUS_LABELS[job.status][loc]
    stage = job.stage_def
    shows_stage = job.status in (Status.RUNNING, Status.CANCEL_REQUESTED)
    stage_label = stage.label(loc) if stage is not None and shows_stage else ""
    parts = [status_label]
    if job.status is Status.QUEUED and job.waiting_for:
        # Not in line yet: it runs once these are READY, however short the queue.
        parts.append(_TEXT["waiting_for"][loc].format(jobs=", ".join(job.waiting_for)))
    elif job.status is Status.QUEUED and job.held is not None:
        parts = [_TEXT[job.held][loc]]
    elif job.status is Status.QUEUED and job.no_worker:
        parts.append(_TEXT["no_worker"][loc])  # a place in line means nothing without a worker
    elif job.status is Status.QUEUED and job.queue_position is not None:
        n = job.queue_position
        ahead = _TEXT["ahead_one"][loc] if n == 1 else _TEXT["ahead"][loc].format(n=n)
        parts.append(ahead if n else _TEXT["next"][loc])
    if job.status is Status.WAITING:
        parts = [_TEXT["review"][loc].format(who=job.review_assignee), *job.review_items]
    if stage_label:
        parts = [_stage_line(job, stage_label, loc)]
        if job.status is Status.CANCEL_REQUESTED:
            parts.insert(0, status_label)
    if job.status is Status.FAILED and job.error is not None and job.error.message:
        parts.append(job.error.message)
    if job.stalled and job.status in LEASED:
        parts.append(_TEXT["stalled"][loc])
    if job.no_progress_for is not None and job.status in LEASED:
        parts.append(no_progress_text(job.no_progress_for, loc))
    return View(
        locale=loc,
        status_label=status_label,
        stage_label=stage_label,
        detail=_TEXT["sep"][loc].join(parts),
        actions=actions_for(job),
    )


def _stage_line(job: JobRecord, stage_label: str, loc: str) -> str:
    p = job.progress
    line = _TEXT["stage"][loc].format(label=stage_label, i=p.stage_index, n=p.stage_count)
    if p.percent is not None:
        units = _TEXT["units"][loc].format(done=p.processed_units, total=p.total_units, pct=p.percent)
        line += _TEXT["sep"][loc] + units
    elif p.processed_units:
        line += _TEXT["sep"][loc] + _TEXT["units_open"][loc].format(done=p.processed_units)
    return line


def no_progress_text(span: timedelta, locale: str) -> str:
    """ "no progress for 31 min", as a job's detail says it."""
    loc = normalize_locale(locale)
    return _TEXT["no_progress"][loc].format(duration=_duration(span, loc))


def _duration(span: timedelta, loc: str) -> str:
    """Whole seconds under a minute, whole minutes under two hours, then hours and minutes."""
    seconds = int(span.total_seconds())
    if seconds < 60:
        return _TEXT["seconds"][loc].format(n=seconds)
    if seconds < 7200:
        return _TEXT["minutes"][loc].format(n=seconds // 60)
    return _TEXT["hours"][loc].format(h=seconds // 3600, m=seconds % 3600 // 60)
