import pytest
from pydantic import ValidationError

from deepresearch_dagster.core.models import CompressionResult, ResearchPlan

GOOD = {
    "summary_title": "Sodium-ion cells use hard carbon anodes",
    "summary": "Sodium-ion cells use hard carbon. Sodium is abundant. Energy density is about 160 Wh/kg.",
    "extraction": ["CATL announced a cell in 2021."],
    "is_useful": True,
}


def test_valid_compression_is_accepted():
    assert CompressionResult.model_validate(GOOD).is_useful is True


@pytest.mark.parametrize(
    "change",
    [
        {"summary_title": "Too short title"},
        {"summary_title": " ".join(["word"] * 13)},
        {"summary": "One sentence only."},
        {"summary": "Two sentences. Not enough."},
        {"summary": " ".join(f"Sentence {i} here." for i in range(11))},
        {"extraction": "not a list"},
        {"extraction": ["", "x"]},
        {"is_useful": "yes"},
        {"is_useful": 1},
        {"artifact_file": "extra keys are forbidden"},
    ],
)
def test_field_rules_are_enforced(change):
    with pytest.raises(ValidationError):
        CompressionResult.model_validate({**GOOD, **change})


def test_missing_field_is_rejected():
    data = dict(GOOD)
    del data["is_useful"]
    with pytest.raises(ValidationError):
        CompressionResult.model_validate(data)


def _plan(ids):
    return {
        "plan_title": "A plan",
        "steps": [{"step_id": i, "title": f"Step {i}", "description": "Search for concrete facts."} for i in ids],
    }


def test_plan_accepts_sequential_ids_as_ints_or_strings():
    plan = ResearchPlan.model_validate(_plan([1, "2", 3]))
    assert [s.step_id for s in plan.steps] == ["1", "2", "3"]


@pytest.mark.parametrize("ids", [[], [1, 1], [1, 3], [2, 1], list(range(1, 9))])
def test_plan_rejects_bad_step_lists(ids):
    with pytest.raises(ValidationError):
        ResearchPlan.model_validate(_plan(ids))


def test_plan_rejects_empty_titles():
    data = _plan([1])
    data["steps"][0]["title"] = "   "
    with pytest.raises(ValidationError):
        ResearchPlan.model_validate(data)
