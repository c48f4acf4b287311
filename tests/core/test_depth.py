"""Reflection rounds, direct answers, budgets and fan-out (issue: research depth and quality)."""

from __future__ import annotations

import json
import threading
import time

from pydantic import BaseModel

from deepresearch_dagster.core.config import ResearchSettings
from deepresearch_dagster.core.heuristics.terms import names
from deepresearch_dagster.core.llm.budget import BudgetExceeded, BudgetLedger, BudgetLimits
from deepresearch_dagster.core.llm.engine import ToolCallRequest
from deepresearch_dagster.core.models import CriticVerdict, Gap
from deepresearch_dagster.core.pipeline import run_research
from deepresearch_dagster.core.roles import researcher
from deepresearch_dagster.core.roles.retrieval import rank_results, run_concurrently
from deepresearch_dagster.core.tools import Tool, Toolbox, ToolResult


def _settings(corpus_dir, **kw) -> ResearchSettings:
    return ResearchSettings.from_env(corpus_dir=str(corpus_dir), **kw)


def _verdict(score: int, *queries: str) -> str:
    gaps = [{"description": f"Missing {q}.", "severity": "high", "suggested_query": q} for q in queries]
    return json.dumps({"sufficiency": score, "gaps": gaps, "contradictions": [], "recommendation": "more"})


def test_iterates_until_sufficient(fake_openai):
    # The bundled corpus, so that the follow-up query can find documents the first pass did not read.
    fake_openai.script("critic", _verdict(4, "recycling solid-state batteries end of life"), _verdict(8))
    settings = ResearchSettings.from_env(engine="openai", depth=2)
    ctx, report = run_research("How do solid-state batteries work?", settings)
    outputs = json.loads(ctx.store.read_text("tool_outputs.json"))
    assert [r["decision"] for r in outputs["critic_rounds"]] == ["follow_up", "sufficient"]
    assert [s["step_id"] for s in outputs["followup_steps"]] == ["R1_1"]
    plan = json.loads(ctx.store.read_text("plan.json"))
    # The plan is never rewritten: follow-up steps live in the research outputs only.
    assert (
        "followup_steps" not in plan and [s["step_id"] for s in plan["steps"]] == ["1", "2", "3"][: len(plan["steps"])]
    )
    followup_files = [c["artifact_file"] for c in outputs["calls"] if c["step_id"] == "R1_1"]
    assert followup_files and all("__stepr1_1_" in f for f in followup_files)
    # … and the step audit counts the follow-up's tool calls under its own step.
    audited = ctx.lineage.query(
        "SELECT step_id, tool_calls FROM step_audit WHERE partition_key = ? ORDER BY position", [ctx.partition_key]
    )
    assert audited[-1]["step_id"] == "R1_1" and audited[-1]["tool_calls"] == len(followup_files)
    assert sum(r["tool_calls"] for r in audited) == len(outputs["calls"])
    assert report.sufficiency_scores == [4, 8] and report.complete
    assert "Research may be incomplete" not in report.markdown


def test_stops_at_max_iterations_and_says_incomplete(fake_openai):
    fake_openai.script("critic", _verdict(3, "recycling solid-state batteries end of life"), _verdict(3, "x y"))
    _, report = run_research("How do solid-state batteries work?", ResearchSettings.from_env(engine="openai", depth=1))
    assert report.sufficiency_scores == [3, 3] and not report.complete
    assert "Research may be incomplete: max iterations (1) reached at sufficiency 3/10" in report.markdown


def _chain_critic(next_hop):
    """A critic that asks for one follow-up, then for a next hop chosen from the memory the
    follow-up added (``next_hop(new memory)``), and records the memory size it saw each round."""
    seen: list[int] = []

    def critic(ctx, plan, memory, followups=None):
        seen.append(len(memory))
        query = "solid-state battery recycling" if len(seen) == 1 else next_hop(memory[seen[-2] :])
        gap = Gap(description=f"Missing {query}.", severity="high", suggested_query=query)
        return CriticVerdict(sufficiency=3, gaps=[gap]), False

    return critic, seen


def _first_new_name(added):
    return next(n for m in added for n in names(m["summary"]) if len(n.split()) > 1)


def test_a_chain_gets_rounds_beyond_the_depth_while_it_advances(monkeypatch):
    question = "How do solid-state batteries work?"
    followed: list[str] = []

    def next_name(added):  # a name the last round's sources state that no round followed yet
        name = next((n for m in added for n in names(m["summary"]) if len(n.split()) > 1 and n not in followed), "")
        followed.append(name)
        return f"{name} history"

    cases = ((next_name, 1 + 1 + researcher.CHAIN_ROUNDS), (lambda _: "Zorvath Quell", 2))
    for next_hop, rounds in cases:
        critic, seen = _chain_critic(next_hop)
        monkeypatch.setattr(researcher, "critique", critic)
        _, report = run_research(question, ResearchSettings.from_env(depth=1, max_steps=1))
        # Each follow-up's sources named a new next hop: a round more each time, up to CHAIN_ROUNDS
        # beyond the depth; a gap naming what no new source states is no progress, and the depth holds.
        assert len(seen) == rounds and report.sufficiency_scores == [3] * rounds and not report.complete, (
            seen,
            report.stop_reason,
        )


def test_budget_exhausted_mid_research_still_reports_within_the_cap(corpus_dir):
    settings = _settings(corpus_dir, engine="offline", budget_tool_calls=4, depth=1)
    ctx, report = run_research("How do sodium-ion batteries work and what do they cost?", settings)
    calls = ctx.lineage.query("SELECT count(*) AS n FROM tool_calls")[0]["n"]
    assert calls == 4  # never beyond the cap
    assert not report.complete and report.stop_reason.startswith("budget")
    assert "The budget stopped the research" in report.markdown
    assert ctx.store.exists("report.md")


def test_token_budget_is_never_exceeded_with_a_model(fake_openai, corpus_dir):
    settings = _settings(corpus_dir, engine="openai", budget_tokens=5_000, depth=1)
    ctx, report = run_research("How do sodium-ion batteries work?", settings)
    spent = ctx.lineage.query("SELECT sum(prompt_tokens + completion_tokens) AS t FROM llm_calls")[0]["t"]
    assert spent <= 5_000
    assert not report.complete and report.markdown  # stopped, and still a report


def test_the_offline_engine_researches_every_question_even_at_depth_zero(corpus_dir):
    # Issue 27: it has no knowledge of its own, so it never declares a question directly answerable.
    ctx, report = run_research("Who is Ada Lovelace?", _settings(corpus_dir, engine="offline", depth=0))
    assert ctx.lineage.query("SELECT count(*) AS n FROM tool_calls")[0]["n"] > 0
    assert "Answered without tool calls" not in report.markdown


def test_direct_answer_at_depth_zero_makes_no_tool_calls(fake_openai, corpus_dir):
    plan = {
        "plan_title": "Ada Lovelace",
        "direct_answer": True,
        "steps": [{"step_id": 1, "title": "Who she was", "description": "Who Ada Lovelace was.", "queries": []}],
    }
    fake_openai.script("planner", json.dumps(plan))
    ctx, report = run_research("Who is Ada Lovelace?", _settings(corpus_dir, engine="openai", depth=0))
    assert ctx.lineage.query("SELECT count(*) AS n FROM tool_calls")[0]["n"] == 0
    assert not ctx.store.raw_dir(report.plan_title).exists()
    assert "Answered without tool calls" in report.markdown


def test_hallucinated_citations_are_removed_and_counted(fake_openai, corpus_dir):
    bogus = json.dumps({"markdown": "- The moon is made of green cheese. [1]\n- Sodium is the rarest metal. [99]"})
    # Lookup, outline, the three sections that must cite, then Limitations: a section that need not
    # cite keeps its text, and its unverifiable citations are removed and counted.
    fake_openai.script("reporter", None, None, None, None, None, bogus)
    ctx, report = run_research("How do sodium-ion batteries work?", _settings(corpus_dir, engine="openai", depth=0))
    assert "[99]" not in report.markdown and "green cheese. [1]" not in report.markdown
    failed = [c for c in report.citation_checks if not c["verified"]]
    assert {c["n"] for c in failed} == {1, 99}
    assert report.unverified_citations == 2
    assert "2 citation(s) could not be verified" in report.markdown
    assert all(c.verified and c.quote for c in report.citations)
    stored = json.loads(ctx.store.read_text("report.json"))
    assert all({"source", "artifact_file", "quote", "verified"} <= set(c) for c in stored["citations"])


def test_a_section_that_must_cite_but_cites_nothing_verifiable_is_written_extractively(fake_openai, corpus_dir):
    bogus = json.dumps({"markdown": "The moon is made of green cheese. [1] Sodium is the rarest metal. [2]"})
    fake_openai.script("reporter", None, None, bogus)  # lookup, outline, then the executive summary
    _, report = run_research("How do sodium-ion batteries work?", _settings(corpus_dir, engine="openai", depth=0))
    summary = report.markdown.split("## Executive summary", 1)[1].split("\n## ", 1)[0]
    assert "green cheese" not in summary and "[1]" in summary
    assert report.fallbacks.get("reporter", 0) >= 1 and report.unverified_citations == 0


def test_offline_citations_are_verified_against_raw_artifacts(corpus_dir):
    ctx, report = run_research("How do sodium-ion batteries work?", _settings(corpus_dir, engine="offline"))
    assert report.verified_citations >= 3 and report.unverified_citations == 0
    for c in report.citations:
        raw = (ctx.store.raw_dir(report.plan_title) / c.artifact_file).read_text()
        assert " ".join(c.quote.split()).lower()[:40] in " ".join(raw.replace("*", "").split()).lower()


class _SlowArgs(BaseModel):
    n: int


def test_fan_out_respects_the_concurrency_limit():
    lock, state = threading.Lock(), {"now": 0, "peak": 0}

    def slow(args: _SlowArgs) -> ToolResult:
        with lock:
            state["now"] += 1
            state["peak"] = max(state["peak"], state["now"])
        time.sleep(0.05)
        with lock:
            state["now"] -= 1
        return ToolResult(content={"n": args.n}, kind="json")

    box = Toolbox([Tool("slow", "slow tool", _SlowArgs, slow)])
    results = run_concurrently(box, [ToolCallRequest("slow", {"n": i}) for i in range(9)], limit=3)
    assert [r[0].content["n"] for r in results] == list(range(9))  # request order kept
    assert state["peak"] == 3


def test_ranking_dedupes_by_normalized_url_and_prefers_relevance():
    a = json.dumps(
        {
            "results": [
                {
                    "url": "https://Example.com/a?utm_source=x#top",
                    "title": "Sodium batteries",
                    "snippet": "",
                    "score": 0.9,
                },
                {"url": "https://example.com/b", "title": "Roses", "snippet": "gardening", "score": 1.0},
            ]
        }
    )
    b = json.dumps({"results": [{"url": "https://example.com:443/a", "title": "Sodium", "snippet": "", "score": 2}]})
    ranked = rank_results([a, b], "sodium batteries")
    assert [r.source for r in ranked] == ["https://example.com/a", "https://example.com/b"]
    assert ranked[0].hits == 2
    demoted = rank_results([a, b], "sodium batteries", exclude={"https://example.com/a"})
    assert demoted[0].source == "https://example.com/b"


def test_ledger_never_exceeds_caps_under_concurrency():
    ledger = BudgetLedger(BudgetLimits(tool_calls=50))
    granted = []

    def worker() -> None:
        for _ in range(20):
            try:
                r = ledger.reserve(tool_calls=1)
            except BudgetExceeded:
                return
            ledger.settle(r, tool_calls=1)
            granted.append(1)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(granted) == 50 and ledger.spent["tool_calls"] == 50
    assert {"warning: 80% of the budget used", "90%: scope reduced"} <= set(ledger.events)
