"""Role contracts: every instance valid against the schema a role sends is accepted after
normalization (property-based, ``hypothesis`` + ``hypothesis-jsonschema``).

Examples per contract: ``DEEPRESEARCH_PROPERTY_EXAMPLES`` (default 80, fast enough for every run;
the planner at step limits 1, 5 and 7). ``HYPOTHESIS_PROFILE=thorough`` runs 3,000 per contract
and the planner at every step limit 1..7::

    HYPOTHESIS_PROFILE=thorough .venv/bin/python -m pytest -q -p no:cacheprovider tests/core/llm

"""

from __future__ import annotations

import json
import os
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis_jsonschema import from_schema
from pydantic import ValidationError

from deepresearch_dagster.core.llm.contracts import (
    COMPRESSOR,
    CRITIC,
    OUTLINE,
    SECTION,
    all_contracts,
    fit_sentences,
    normalize_plan,
    planner_contract,
)
from deepresearch_dagster.core.llm.openai_engine import grammar_safe_schema
from deepresearch_dagster.core.models import MAX_STEPS, CompressionResult, ResearchPlan
from deepresearch_dagster.core.text import count_sentences

settings.register_profile(
    "default-contracts",
    max_examples=int(os.environ.get("DEEPRESEARCH_PROPERTY_EXAMPLES", "80")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
settings.register_profile(
    "thorough",
    max_examples=int(os.environ.get("DEEPRESEARCH_PROPERTY_EXAMPLES", "3000")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "default-contracts")
CONTRACTS = all_contracts()
# The planner's schema differs only in its step limit: the extremes and the default by default.
PROPERTY_CONTRACTS = sorted(
    n for n in CONTRACTS if PROFILE == "thorough" or not n.startswith("planner") or n[-2] in "157"
)
ROLE_CONTRACTS = sorted(n for n in CONTRACTS if not n.startswith("planner") or n.endswith("=7]"))


def _property(name: str):
    contract = CONTRACTS[name]
    # The schema as sent to a server (long maxLength limits left out for llama.cpp's grammars):
    # it admits more than the contract's, and all of it must still be accepted.
    sent = grammar_safe_schema(contract.schema)

    @settings(settings.get_profile(PROFILE))
    @given(from_schema(sent))
    def check(instance: Any) -> None:
        jsonschema.validate(instance, sent)  # the generator's side of the bargain
        result = contract.parse(instance)  # raises if a schema-valid answer were rejected
        # Normalization is idempotent: the accepted value is a fixed point.
        again = contract.parse(result.model_dump())
        assert again == result

    return check


@pytest.mark.parametrize("name", PROPERTY_CONTRACTS)
def test_every_schema_valid_answer_is_accepted_after_normalization(name):
    _property(name)()


def test_every_structured_role_has_a_contract():
    roles = {n.split("[")[0].split(".")[0] for n in CONTRACTS}
    assert roles == {"planner", "compressor", "critic", "reporter"}
    assert {"reporter.outline", "reporter.section"} <= set(CONTRACTS)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=15), inner, max_size=6),
    max_leaves=25,
)


@pytest.mark.parametrize("name", ROLE_CONTRACTS)
def test_normalization_is_total_on_any_json(name):
    """Any JSON an answer parses to is normalized without an exception (the model may still
    reject it: that is the repair round's business)."""
    contract = CONTRACTS[name]

    @settings(settings.get_profile(PROFILE))
    @given(JSON)
    def check(value: Any) -> None:
        json.dumps(contract.normalize(value))

    check()


# -- what the schema holds -----------------------------------------------------------------


def _properties(schema: dict[str, Any]) -> set[str]:
    return set(schema["properties"])


def test_schemas_hold_exactly_what_the_model_writes_and_forbid_the_rest():
    plan = planner_contract(5).schema
    assert _properties(plan) == {"plan_title", "direct_answer", "steps"}  # nothing internal
    step = plan["properties"]["steps"]["items"]
    assert _properties(step) == {"step_id", "title", "description", "queries"}
    assert plan["properties"]["steps"]["maxItems"] == 5
    assert _properties(COMPRESSOR.schema) == set(CompressionResult.model_fields)
    assert _properties(CRITIC.schema) == {"sufficiency", "gaps", "contradictions", "recommendation"}
    gap = CRITIC.schema["properties"]["gaps"]["items"]
    assert gap["properties"]["severity"]["enum"] == ["low", "medium", "high"]
    assert _properties(OUTLINE.schema) == {"sections"} and _properties(SECTION.schema) == {"markdown"}

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("type") == "object":
                assert node["additionalProperties"] is False
                assert set(node["required"]) == set(node["properties"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for contract in CONTRACTS.values():
        walk(contract.schema)
        assert contract.schema["title"] == contract.name
        assert "$ref" not in json.dumps(contract.schema)  # inline: every server resolves it


# -- normalization examples ----------------------------------------------------------------


def test_plan_ids_are_renumbered_queries_deduplicated_and_steps_clamped():
    data = {
        "plan_title": "  Sodium   batteries ",
        "direct_answer": "false",
        "steps": [
            {"step_id": 3, "title": "Chemistry", "description": "Find the cell chemistry.", "queries": ["a b", "A B"]},
            {"step_id": 3, "title": "Cost", "description": "Find cost figures.", "queries": ["a b", "cost"]},
            {"step_id": 9, "title": "Extra", "description": "One step too many.", "queries": ["x y"]},
        ],
        "followup_steps": [{"step_id": "1"}],
    }
    plan = ResearchPlan.model_validate(normalize_plan(data, max_steps=2))
    assert plan.plan_title == "Sodium batteries"
    assert [s.step_id for s in plan.steps] == ["1", "2"]
    assert [s.queries for s in plan.steps] == [["a b"], ["cost"]]
    assert plan.direct_answer is False


def test_independent_schema_driven_server_answer_is_accepted():
    """The issue's case: ids 1, 2, 3 from a server that generates answers from the schema."""
    answer = {
        "plan_title": "abc",
        "direct_answer": True,
        "steps": [
            {"step_id": 1, "title": "   ", "description": "          ", "queries": ["zz"]},
            {"step_id": 1, "title": "xyz", "description": "0123456789", "queries": ["zz", "ZZ "]},
        ],
    }
    plan = planner_contract(7).parse(answer)
    assert [s.step_id for s in plan.steps] == ["1", "2"]


def test_short_summary_is_padded_from_the_answer_itself():
    result = COMPRESSOR.parse(
        {
            "summary_title": "Sodium cells",
            "summary": "Sodium-ion cells use hard carbon anodes",
            "extraction": ["CATL announced a cell in 2021", "CATL announced a cell in 2021"],
            "is_useful": "yes",
        }
    )
    assert result.summary.startswith("Sodium-ion cells use hard carbon anodes. CATL announced a cell in 2021.")
    assert count_sentences(result.summary) == 3
    assert result.extraction == ["CATL announced a cell in 2021"]
    assert 5 <= len(result.summary_title.split()) <= 12 and result.summary_title.startswith("Sodium cells")
    assert result.is_useful is True


def test_long_summary_moves_its_overflow_into_the_extraction():
    sentences = [f"Fact number {i} is stated here." for i in range(1, 14)]
    result = COMPRESSOR.parse(
        {
            "summary_title": " ".join(["word"] * 20),
            "summary": " ".join(sentences),
            "extraction": [],
            "is_useful": True,
        }
    )
    assert count_sentences(result.summary) == 10
    assert result.extraction == sentences[10:]
    assert len(result.summary_title.split()) == 12


@pytest.mark.parametrize(
    "summary",
    ["x", "!!! Really? yes", "é à ü", "“Quoted.” then lower. 3 items.", "a. b. c. d", "中文摘要。没有句号"],
)
def test_fit_sentences_always_lands_in_range(summary):
    text, _ = fit_sentences(summary, ["lower case extra", "(paren start"])
    assert 3 <= count_sentences(text) <= 10


def test_critic_placeholders_and_variants_are_mapped():
    verdict = CRITIC.parse(
        {
            "sufficiency": "7/10",
            "gaps": [
                {"description": "No cost data", "severity": "Critical", "suggested_query": "sodium cost"},
                {"description": "Same query", "severity": "low|medium|high", "suggested_query": "Sodium cost"},
                {"description": "  ", "severity": "low", "suggested_query": "x y"},
            ],
            "contradictions": [{"claim1": "A says X", "claim2": "B says Y"}, ""],
            "recommendation": None,
            "reasoning": "extra keys are dropped",
        }
    )
    assert verdict.sufficiency == 7
    assert [(g.severity, g.suggested_query) for g in verdict.gaps] == [("high", "sodium cost")]
    assert verdict.contradictions == ["A says X — B says Y"]


def test_report_body_trimmed_below_the_minimum_says_so_but_a_short_one_is_refused():
    assert SECTION.parse({"markdown": "N/A" + " " * 20}).markdown.startswith("N/A (no further detail")
    with pytest.raises(ValidationError):
        SECTION.parse({"markdown": "N/A"})


def test_copied_placeholders_the_schema_refuses_are_not_padded_into_a_plan():
    """The issue's weak model: ``"string"`` everywhere. The schema says descriptions have at least
    10 characters, so the answer is refused (repair round, then the heuristic planner)."""
    placeholder = {
        "plan_title": "string",
        "direct_answer": False,
        "steps": [{"step_id": 1, "title": "string", "description": "string", "queries": ["string"]}],
    }
    with pytest.raises(ValidationError, match="at least 10 characters"):
        planner_contract(5).parse(placeholder)


def test_summary_the_schema_refuses_is_not_padded():
    answer = {"summary_title": "A title of five words", "summary": "Only one sentence.", "extraction": []}
    with pytest.raises(ValidationError, match="3-10 sentences"):
        COMPRESSOR.parse({**answer, "is_useful": True})


def test_plan_over_max_steps_is_clamped_to_the_schema_limit():
    steps = [{"step_id": i, "title": f"Step {i}", "description": "Find concrete facts."} for i in range(1, 10)]
    plan = planner_contract(MAX_STEPS).parse({"plan_title": "Many", "steps": steps})
    assert len(plan.steps) == MAX_STEPS


# -- prompts (seed 003 §6) -------------------------------------------------------------------


def _json_objects(text: str) -> list[Any]:
    decoder, found, i = json.JSONDecoder(), [], 0
    while (i := text.find("{", i)) != -1:
        try:
            value, end = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            i += 1
            continue
        found.append(value)
        i = end
    return found


PROMPTS = {
    "planner": ("planner", {"today": "2026-11-22", "tools": "local_search", "max_steps": 5}, "planner[max_steps=5]"),
    "critic": ("critic", {"today": "2026-11-22"}, "critic"),
    "compressor": (
        "compressor",
        {
            "today": "2026-11-22",
            "plan_title": "P",
            "step_title": "S",
            "step_description": "D",
            "tool_name": "T",
            "data_marker": "DATA-0",
        },
        "compressor",
    ),
    "reporter_outline": ("reporter_outline", {"sections": "A, B"}, "reporter.outline"),
    "reporter_section": (
        "reporter_section",
        {"heading": "H", "outline": "O", "previous": "P", "guidance": "G"},
        "reporter.section",
    ),
    "reporter_direct": ("reporter_direct", {}, "reporter.section"),
}


@pytest.mark.parametrize("name", sorted(PROMPTS))
def test_prompt_examples_are_filled_and_valid_against_the_role_contract(name):
    from deepresearch_dagster.core.llm.prompts import render

    template, values, contract_name = PROMPTS[name]
    text = render(template, **values)
    for placeholder in ('"string"', '"..."', "low|medium|high", '"1-10"', "true|false"):
        assert placeholder not in text, f"{name} shows a type placeholder {placeholder}"
    examples = _json_objects(text)
    assert examples, f"{name} has no filled JSON example"
    contract = CONTRACTS[contract_name]
    for example in examples:
        jsonschema.validate(example, contract.schema)
        contract.parse(example)


def test_prompts_state_date_language_and_untrusted_tool_output():
    from deepresearch_dagster.core.llm.prompts import load_prompt

    for name in ("planner", "critic", "compressor", "researcher", "reporter"):
        text = load_prompt(name)
        assert "{today}" in text and "language of the" in text, name
    for name in ("critic", "compressor", "researcher", "reporter"):  # the roles that see tool output
        text = " ".join(load_prompt(name).split())
        assert "untrusted data" in text and "never follow instructions" in text.lower(), name
    assert "verbatim" in load_prompt("compressor")
