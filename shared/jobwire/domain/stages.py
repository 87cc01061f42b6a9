"""Stage plans: the ordered stages a job runs through, with labels per locale."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from jobwire.domain.errors import InvalidArgument
from jobwire.domain.limits import CONTROL

STAGE_CODE = re.compile(r"[A-Z][A-Z0-9_]{0,31}")
MAX_STAGES = 32
MAX_LABEL_CHARS = 200
MAX_LABELS_PER_STAGE = 8
MAX_PLAN_CHARS = 8000  # the plan is stored with the job: keep it well inside a TEXT column


@dataclass(frozen=True, kw_only=True)
class StageDef:
    code: str
    labels: Mapping[str, str] = field(default_factory=dict)
    cancellable: bool = True

    def label(self, locale: str) -> str:
        return self.labels.get(locale) or self.labels.get("en") or self.code.title()


DEFAULT_PLAN: tuple[StageDef, ...] = (
    StageDef(code="PREPARING", labels={"en": "Preparing input", "zh-CN": "正在准备输入"}),
    StageDef(code="PROCESSING", labels={"en": "Processing", "zh-CN": "正在执行处理"}),
    StageDef(code="VERIFYING", labels={"en": "Verifying result", "zh-CN": "正在验证结果"}),
    StageDef(
        code="DELIVERING",
        labels={"en": "Delivering result", "zh-CN": "正在提交结果"},
        cancellable=False,
    ),
)


def validate_plan(stages: Sequence[StageDef], *, field_name: str = "stages") -> tuple[StageDef, ...]:
    """Check a handler's declared plan; an empty plan means the default one."""
    if not stages:
        return DEFAULT_PLAN
    if len(stages) > MAX_STAGES:
        raise InvalidArgument(field_name, f"at most {MAX_STAGES} stages")
    seen: set[str] = set()
    for stage in stages:
        if not STAGE_CODE.fullmatch(stage.code):
            raise InvalidArgument(field_name, "stage codes are UPPER_SNAKE_CASE, at most 32 chars")
        if stage.code in seen:
            raise InvalidArgument(field_name, f"stage {stage.code} appears twice")
        if any(len(k) > 35 or len(v) > MAX_LABEL_CHARS for k, v in stage.labels.items()):
            raise InvalidArgument(field_name, "stage labels are too long")
        # Labels are shown to people as they are: ESC would drive their terminal, NUL cut the text.
        if any(CONTROL.search(k) or CONTROL.search(v) for k, v in stage.labels.items()):
            raise InvalidArgument(field_name, "stage labels must not contain control characters")
        if len(stage.labels) > MAX_LABELS_PER_STAGE:
            raise InvalidArgument(field_name, f"at most {MAX_LABELS_PER_STAGE} labels per stage")
        seen.add(stage.code)
    size = sum(len(s.code) + sum(len(k) + len(v) for k, v in s.labels.items()) for s in stages)
    if size > MAX_PLAN_CHARS:
        raise InvalidArgument(field_name, f"the plan is larger than {MAX_PLAN_CHARS} characters")
    return tuple(stages)


def index_of(plan: Sequence[StageDef], code: str) -> int:
    """1-based index of `code` in `plan`, or InvalidArgument for an unknown stage."""
    for i, stage in enumerate(plan, start=1):
        if stage.code == code:
            return i
    raise InvalidArgument("stage", f"unknown stage code {code!r}", reason="UNKNOWN_STAGE")


def to_json(plan: Sequence[StageDef]) -> list[dict[str, object]]:
    return [{"code": s.code, "labels": dict(s.labels), "cancellable": s.cancellable} for s in plan]


def from_json(raw: Sequence[Mapping[str, object]]) -> tuple[StageDef, ...]:
    return tuple(
        StageDef(
            code=str(item["code"]),
            labels={str(k): str(v) for k, v in dict(item.get("labels") or {}).items()},  # type: ignore[call-overload]
            cancellable=bool(item.get("cancellable", True)),
        )
        for item in raw
    )
