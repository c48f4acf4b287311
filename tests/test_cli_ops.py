"""``deepresearch audit``, ``metrics`` and ``submit``."""

from __future__ import annotations

import json

import pytest

from deepresearch_dagster.cli import main
from deepresearch_dagster.core.config import ResearchSettings, load_settings
from deepresearch_dagster.core.naming import partition_key_for
from deepresearch_dagster.core.pipeline import run_research
from deepresearch_dagster.core.requests import RequestQueue
from tests.test_cli import run_cli

QUESTION = "How do sodium-ion batteries work and what do they cost?"


@pytest.fixture
def researched(corpus_dir):
    settings = ResearchSettings.from_env(engine="offline", corpus_dir=str(corpus_dir))
    ctx, report = run_research(QUESTION, settings)
    return ctx.partition_key, report, settings


def _json(capsys, *argv: str) -> dict:
    capsys.readouterr()
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_audit_prints_the_citation_chain_and_step_tables(researched, capsys, monkeypatch):
    key, report, settings = researched
    audit = _json(capsys, "audit", key, "--json")
    assert audit["partition_key"] == key and audit["question"] == QUESTION
    assert [c["n"] for c in audit["citations"]] == [c.n for c in report.citations]
    for link in audit["citations"]:
        assert link["call_id"] and link["artifact_verified"] is True and link["compressor_model"]
        assert (settings.artifacts_path / link["artifact_path"]).is_file()
    assert audit["steps"] and {u["role"] for u in audit["llm_usage"]} >= {"planner", "compressor", "reporter"}

    monkeypatch.setenv("COLUMNS", "400")  # rich wraps table cells to the terminal width
    capsys.readouterr()
    assert main(["audit", key]) == 0
    text = capsys.readouterr().out
    for heading in ("Citations → summary → raw artifact → tool call", "Steps", "LLM calls by role and model"):
        assert heading in text
    assert text.count("sha256 ok") == len(report.citations) and report.citations[0].source in text


def test_metrics_totals_match_the_research(researched, capsys):
    key, _, _ = researched
    metrics = _json(capsys, "metrics", "--json")
    totals = metrics["totals"]
    assert totals["researches"] == 1 and totals["tool_calls"] > 0
    (row,) = metrics["researches"]
    assert row["partition_key"] == key and row["tool_calls"] == totals["tool_calls"]
    assert totals["cost_usd"] == 0.0  # the offline engine is priced at zero, not "unpriced"
    assert sum(u["calls"] for u in metrics["llm_usage"]) == totals["llm_calls"]
    capsys.readouterr()
    assert main(["metrics"]) == 0
    assert "Totals across researches" in capsys.readouterr().out


def test_unknown_partition_and_bad_prices_exit_2_with_one_line(researched, monkeypatch):
    proc = run_cli("audit", "no-such-partition")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().count("\n") == 0 and "unknown research partition 'no-such-partition'" in proc.stderr
    monkeypatch.setenv("DEEPRESEARCH_PRICES", "{broken")
    proc = run_cli("metrics")
    assert proc.returncode == 2 and proc.stderr.startswith("error: DEEPRESEARCH_PRICES")


def test_audit_without_any_database_is_an_unknown_partition(capsys):
    assert main(["audit", "anything"]) == 2
    assert "unknown research partition" in capsys.readouterr().err


def test_submit_queues_a_validated_request(capsys, corpus_dir):
    out = _json(capsys, "submit", QUESTION, "--engine", "offline", "--corpus", str(corpus_dir), "--json")
    assert out["partition_key"] == partition_key_for(QUESTION)
    (path,) = RequestQueue.for_settings(load_settings()).pending()
    assert str(path) == out["request_file"]
    assert json.loads(path.read_text()) == {
        "question": QUESTION,
        "options": {"engine": "offline", "corpus_dir": str(corpus_dir)},
    }
    assert main(["submit", "   "]) == 2
    assert "question is empty" in capsys.readouterr().err
    assert len(RequestQueue.for_settings(load_settings()).pending()) == 1
