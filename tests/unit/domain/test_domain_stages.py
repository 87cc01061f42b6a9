"""Stage plans: the default plan, labels, and validation of declared plans."""

from __future__ import annotations

import pytest

from jobwire.domain.errors import InvalidArgument
from jobwire.domain.stages import (
    DEFAULT_PLAN,
    MAX_STAGES,
    StageDef,
    from_json,
    index_of,
    to_json,
    validate_plan,
)


def test_default_plan_codes_in_order() -> None:
    assert [s.code for s in DEFAULT_PLAN] == [
        "PREPARING",
        "PROCESSING",
        "VERIFYING",
        "DELIVERING",
    ]


@pytest.mark.parametrize(
    ("code", "en", "zh"),
    [
        ("PREPARING", "Preparing input", "正在准备输入"),
        ("PROCESSING", "Processing", "正在执行处理"),
        ("VERIFYING", "Verifying result", "正在验证结果"),
        ("DELIVERING", "Delivering result", "正在提交结果"),
    ],
)
def test_default_plan_labels(code: str, en: str, zh: str) -> None:
    stage = DEFAULT_PLAN[index_of(DEFAULT_PLAN, code) - 1]
    assert stage.labels["en"] == en
    assert stage.labels["zh-CN"] == zh
    assert stage.label("en") == en
    assert stage.label("zh-CN") == zh


@pytest.mark.parametrize(
    ("code", "cancellable"),
    [
        ("PREPARING", True),
        ("PROCESSING", True),
        ("VERIFYING", True),
        ("DELIVERING", False),
    ],
)
def test_default_plan_cancellable(code: str, cancellable: bool) -> None:
    assert DEFAULT_PLAN[index_of(DEFAULT_PLAN, code) - 1].cancellable is cancellable


def test_default_plan_is_immutable_tuple() -> None:
    assert isinstance(DEFAULT_PLAN, tuple)
    with pytest.raises(AttributeError):
        DEFAULT_PLAN[0].code = "X"  # type: ignore[misc]


def test_stage_def_defaults() -> None:
    s = StageDef(code="FETCH")
    assert s.cancellable is True
    assert dict(s.labels) == {}


def test_label_falls_back_to_english_then_code() -> None:
    assert StageDef(code="FETCH", labels={"en": "Fetching"}).label("zh-CN") == "Fetching"
    assert StageDef(code="FETCH", labels={"en": "Fetching"}).label("fr") == "Fetching"
    assert StageDef(code="FETCH_DATA").label("en") == "Fetch_Data"
    assert StageDef(code="FETCH", labels={"en": ""}).label("en") == "Fetch"


# ---------------------------------------------------------------- index_of


@pytest.mark.parametrize(
    ("code", "index"),
    [("PREPARING", 1), ("PROCESSING", 2), ("VERIFYING", 3), ("DELIVERING", 4)],
)
def test_index_is_one_based(code: str, index: int) -> None:
    assert index_of(DEFAULT_PLAN, code) == index


@pytest.mark.parametrize("code", ["", "NOPE", "verifying", " VERIFYING"])
def test_index_of_unknown_stage(code: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        index_of(DEFAULT_PLAN, code)
    assert info.value.code == "INVALID_ARGUMENT"
    assert info.value.field == "stage"
    assert info.value.reason == "UNKNOWN_STAGE"


# ---------------------------------------------------------------- validate_plan


def test_empty_plan_means_default() -> None:
    assert validate_plan([]) is DEFAULT_PLAN
    assert validate_plan(()) is DEFAULT_PLAN


def test_default_plan_validates() -> None:
    assert validate_plan(list(DEFAULT_PLAN)) == DEFAULT_PLAN


@pytest.mark.parametrize(
    "code",
    ["A", "FETCH", "STEP_2", "A" * 32, "X_", "A1_B2"],
)
def test_good_codes(code: str) -> None:
    assert validate_plan([StageDef(code=code)])[0].code == code


@pytest.mark.parametrize(
    "code",
    [
        "",
        "fetch",
        "Fetch",
        "1FETCH",
        "_FETCH",
        "FE-TCH",
        "FE TCH",
        "FE.TCH",
        "A" * 33,
        "ÄBC",
        "FETCH\n",  # a trailing newline is not UPPER_SNAKE_CASE
        "\nFETCH",
    ],
    ids=repr,
)
def test_bad_codes_refused(code: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        validate_plan([StageDef(code=code)], field_name="job_types[0].stages")
    assert info.value.field == "job_types[0].stages"
    assert info.value.code == "INVALID_ARGUMENT"


def test_duplicate_codes_refused() -> None:
    with pytest.raises(InvalidArgument) as info:
        validate_plan([StageDef(code="A"), StageDef(code="B"), StageDef(code="A")])
    assert info.value.field == "stages"
    assert "A" in info.value.description


def test_max_stages_accepted() -> None:
    plan = [StageDef(code=f"S{i}") for i in range(MAX_STAGES)]
    assert MAX_STAGES == 32
    assert len(validate_plan(plan)) == MAX_STAGES


def test_too_many_stages_refused() -> None:
    with pytest.raises(InvalidArgument) as info:
        validate_plan([StageDef(code=f"S{i}") for i in range(MAX_STAGES + 1)])
    assert info.value.field == "stages"


def test_label_lengths() -> None:
    assert validate_plan([StageDef(code="A", labels={"en": "x" * 200})])
    with pytest.raises(InvalidArgument):
        validate_plan([StageDef(code="A", labels={"en": "x" * 201})])
    with pytest.raises(InvalidArgument):
        validate_plan([StageDef(code="A", labels={"x" * 36: "label"})])


def test_validate_plan_returns_tuple_and_keeps_order_and_flags() -> None:
    plan = [StageDef(code="B", cancellable=False), StageDef(code="A")]
    out = validate_plan(plan)
    assert isinstance(out, tuple)
    assert [(s.code, s.cancellable) for s in out] == [("B", False), ("A", True)]


# ---------------------------------------------------------------- json snapshot round trip


def test_json_round_trip_default() -> None:
    assert from_json(to_json(DEFAULT_PLAN)) == DEFAULT_PLAN


def test_json_shape() -> None:
    assert to_json(DEFAULT_PLAN)[3] == {
        "code": "DELIVERING",
        "labels": {"en": "Delivering result", "zh-CN": "正在提交结果"},
        "cancellable": False,
    }


def test_from_json_defaults() -> None:
    assert from_json([{"code": "X"}]) == (StageDef(code="X", labels={}, cancellable=True),)


@pytest.mark.parametrize("label", ["\x1b[2JCleared", "Cut\x00here", "bell\x07", "\x9bCSI"], ids=repr)
def test_stage_labels_with_control_characters_are_refused(label: str) -> None:
    """Security review, finding 12: stage labels from workers accepted ESC and NUL."""
    with pytest.raises(InvalidArgument, match="control characters"):
        validate_plan([StageDef(code="PROCESSING", labels={"en": label})])
