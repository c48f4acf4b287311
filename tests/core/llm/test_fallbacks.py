"""Fallbacks for every role, the per-role circuit breaker, and invalid answers kept on disk."""

from __future__ import annotations

import json

import pytest

from deepresearch_dagster.core.config import ResearchSettings
from deepresearch_dagster.core.errors import CredentialsError
from deepresearch_dagster.core.heuristics import OFFLINE_MODEL
from deepresearch_dagster.core.llm.structured import BREAKER_THRESHOLD
from deepresearch_dagster.core.models import ToolCallRecord
from deepresearch_dagster.core.pipeline import plan_stage, research_stage, run_research
from deepresearch_dagster.core.roles.compressor import StepContext, compress
from deepresearch_dagster.core.text import estimate_tokens

STEP = StepContext("Sodium plan", "Sodium-ion basics", "Find how sodium-ion cells work.", "read_document")
VALID = json.dumps(
    {
        "summary_title": "Sodium-ion cells and their energy density figures",
        "summary": "Sodium-ion cells use hard carbon anodes. Sodium is abundant. Cells reached 160 Wh/kg.",
        "extraction": ["CATL announced a cell in 2021."],
        "is_useful": True,
    }
)


def _record(ctx, n: int) -> tuple[ToolCallRecord, str]:
    raw = f"Sodium-ion document number {n}. Sodium is abundant. Cells reached 160 Wh/kg in 2023.\n"
    name = f"raw_{n}.txt"
    stored = ctx.store.write_raw(STEP.plan_title, name, raw)
    record = ToolCallRecord(
        call_id=f"1.{n}",
        step_id="1",
        step_title=STEP.step_title,
        step_description=STEP.step_description,
        seq=n,
        tool="read_document",
        arguments={},
        artifact_file=name,
        artifact_path=stored.relpath,
        bytes=stored.bytes,
        sha256=stored.sha256,
        raw_tokens=estimate_tokens(raw),
    )
    return record, raw


def _rows(ctx, role: str) -> list[dict]:
    return ctx.lineage.query("SELECT status, error, artifact FROM llm_calls WHERE role = ? ORDER BY id", [role])


def test_breaker_opens_after_consecutive_invalid_answers(fake_openai, make_context):
    ctx = make_context(engine="openai")
    fake_openai.script("compressor", *["not json"] * (2 * BREAKER_THRESHOLD))
    summaries = [compress(ctx, STEP, *_record(ctx, n), "text") for n in range(1, 5)]
    assert all(s.fallback for s in summaries)
    # Two calls of two answers each reached the model; the breaker spared the last two calls.
    assert len(fake_openai.requests_for("compressor")) == 2 * BREAKER_THRESHOLD
    rows = _rows(ctx, "compressor")
    assert [r["status"] for r in rows] == [
        *["invalid", "invalid", "fallback"] * BREAKER_THRESHOLD,
        "fallback",
        "fallback",
    ]
    assert [r["error"].split(":")[0] for r in rows if r["status"] == "fallback"] == [
        "invalid",
        "invalid",
        "circuit open",
        "circuit open",
    ]
    # Every invalid answer is stored verbatim and linked from its row.
    invalid = [r["artifact"] for r in rows if r["status"] == "invalid"]
    assert invalid == [f"invalid_answers/compressor_{i}.txt" for i in range(1, 5)]
    assert all(ctx.store.read_text(path) == "not json" for path in invalid)


def test_an_accepted_answer_closes_the_streak(fake_openai, make_context):
    ctx = make_context(engine="openai")
    fake_openai.script("compressor", "bad", "bad", VALID, "bad", "bad", VALID)
    results = [compress(ctx, STEP, *_record(ctx, n), "text") for n in range(1, 5)]
    assert [s.fallback for s in results] == [True, False, True, False]
    assert len(fake_openai.requests_for("compressor")) == 6


def test_deterministic_errors_open_the_breaker_transient_ones_do_not(fake_openai, make_context):
    ctx = make_context(engine="openai", llm_max_attempts=1)
    bad_request = {"status": 400, "error": {"message": "invalid request: unsupported value", "type": "bad"}}
    fake_openai.script("compressor", bad_request, bad_request)
    results = [compress(ctx, STEP, *_record(ctx, n), "text") for n in range(1, 4)]
    assert all(s.fallback for s in results)
    assert len(fake_openai.requests_for("compressor")) == 2
    kinds = [r["error"].split(":")[0] for r in _rows(ctx, "compressor") if r["status"] == "fallback"]
    assert kinds == ["error", "error", "circuit open"]


def test_unparseable_planner_answers_fall_back_to_the_heuristic_plan(fake_openai, make_context):
    ctx = make_context(engine="openai", max_steps=3)
    fake_openai.script("planner", "not json", '{"plan_title": "string", "steps": "string"}')
    plan = plan_stage(ctx)
    assert 1 <= len(plan.steps) <= 3
    assert [s.step_id for s in plan.steps] == [str(i) for i in range(1, len(plan.steps) + 1)]
    assert [r["status"] for r in _rows(ctx, "planner")] == ["invalid", "invalid", "fallback"]


def test_planner_engine_failure_falls_back(make_context, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")  # refused at once
    ctx = make_context(engine="openai", llm_timeout_s=2.0, llm_max_attempts=1)
    plan = plan_stage(ctx)
    assert plan.steps
    assert _rows(ctx, "planner")[-1]["status"] == "fallback"


def test_researcher_model_error_skips_its_optional_calls(fake_openai, make_context):
    ctx = make_context(engine="openai", depth=0, llm_max_attempts=1)
    bad_request = {"status": 400, "error": {"message": "invalid request", "type": "bad"}}
    fake_openai.script("researcher", *[bad_request] * 5)
    from tests.core.test_research_team import _plan

    outputs = research_stage(ctx, _plan())
    assert outputs.calls  # the searches and reads of every step stand
    rows = _rows(ctx, "researcher")
    fallbacks = [r for r in rows if r["status"] == "fallback"]
    # Two steps' errors opened the breaker: the third step did not call the model.
    assert [r["error"].split(":")[0] for r in fallbacks] == ["error", "error", "circuit open"]
    assert len(fake_openai.requests_for("researcher")) == 2


def test_report_written_by_fallbacks_names_no_model_and_says_so(fake_openai, corpus_dir):
    settings = ResearchSettings.from_env(engine="openai", corpus_dir=str(corpus_dir), depth=0)
    # Lookups answered, then the outline and the first section stay invalid: the breaker opens.
    fake_openai.script("reporter", {"content": "no lookups"}, "bad", "bad", "bad", "bad")
    ctx, report = run_research("How do sodium-ion batteries work?", settings, log=lambda m: None)
    assert report.reporter_model == OFFLINE_MODEL
    # The outline and the four sections the model writes (next steps come from the critic's gaps).
    assert report.fallbacks == {"reporter": 5}
    assert len(fake_openai.requests_for("reporter")) == 5
    assert "fell back to deterministic heuristics instead of the model (reporter 5×)" in report.markdown
    limitations = report.markdown.split("## Limitations", 1)[1]
    assert "reporter 5×" in limitations.split("\n## ", 1)[0]
    stored = json.loads(ctx.store.read_text("report.json"))
    assert stored["fallbacks"] == {"reporter": 5} and stored["reporter_model"] == OFFLINE_MODEL


def test_a_clean_research_reports_no_fallbacks(make_context, corpus_dir):
    settings = ResearchSettings.from_env(engine="offline", corpus_dir=str(corpus_dir), depth=0)
    _, report = run_research("How do sodium-ion batteries work?", settings, log=lambda m: None)
    assert report.fallbacks == {}
    assert "fell back" not in report.markdown


def test_sections_that_must_cite_but_cite_nothing_are_written_extractively(fake_openai, corpus_dir):
    settings = ResearchSettings.from_env(engine="openai", corpus_dir=str(corpus_dir), depth=0)
    uncited = json.dumps({"markdown": "A fluent paragraph that cites nothing at all."})
    outline = json.dumps({"sections": [{"heading": "Executive summary", "points": []}]})
    fake_openai.script("reporter", {"content": "no lookups"}, outline, *[uncited] * 4)  # the model's four sections
    _, report = run_research("How do sodium-ion batteries work?", settings, log=lambda m: None)
    # Of the three sections that must cite, those whose extractive version cites verifiably (two
    # with this corpus); where the extractive section would cite nothing either, the model's stands.
    assert report.fallbacks == {"reporter": 2}
    assert report.reporter_model.endswith(f"(2 section(s) by {OFFLINE_MODEL})")
    assert "[1]" in report.markdown and report.verified_citations >= 1
    assert "A fluent paragraph that cites nothing at all" in report.markdown  # analysis, limitations


def test_rejected_credentials_are_never_absorbed_by_a_fallback(fake_openai, make_context):
    ctx = make_context(engine="openai")
    fake_openai.script("compressor", {"status": 401, "error": {"message": "Incorrect API key provided"}})
    with pytest.raises(CredentialsError, match="OPENAI_API_KEY"):
        compress(ctx, STEP, *_record(ctx, 1), "text")
    assert [r["status"] for r in _rows(ctx, "compressor")] == ["error"]  # no fallback row


def test_raw_newlines_inside_json_strings_are_accepted():
    from deepresearch_dagster.core.llm.structured import parse_json_object

    # As a small model on a real llama.cpp server wrote it: a literal newline inside the string.
    assert parse_json_object('{"markdown": "First line.\nSecond line."}') == {"markdown": "First line.\nSecond line."}
    assert parse_json_object('Sure!\n```json\n{"a": "x\ty"}\n```') == {"a": "x\ty"}
