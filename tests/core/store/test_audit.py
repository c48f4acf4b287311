"""Audit views (tokens, cost, tool latency/failures, lineage) and the audit/metrics reports."""

from __future__ import annotations

import json

import duckdb
import pytest

from deepresearch_dagster.core.config import ResearchSettings
from deepresearch_dagster.core.errors import ConfigError
from deepresearch_dagster.core.llm.pricing import DEFAULT_PRICES, Price, cost_usd, parse_prices, price_for
from deepresearch_dagster.core.pipeline import run_research
from deepresearch_dagster.core.store import audit
from deepresearch_dagster.core.store.lineage import LineageStore

KEY = "k-1"
PRICES = DEFAULT_PRICES


def _store(tmp_path) -> LineageStore:
    return LineageStore.at(tmp_path / "lineage.duckdb")


def _llm(lineage: LineageStore, role: str, model: str, status: str, prompt: int, completion: int, key: str = KEY):
    lineage.record_llm_call(key, "run", role, model, 1, status, prompt, completion, 10.0, None)


def _tool(lineage: LineageStore, call_id: str, tool: str, status: str, latency: float, key: str = KEY, useful=True):
    lineage.query(
        "INSERT INTO tool_calls (partition_key, call_id, run_id, step_id, seq, tool, arguments, artifact_file, "
        "artifact_path, bytes, sha256, raw_tokens, latency_ms, status, error, is_useful, injected_tokens) "
        "VALUES (?, ?, 'run', ?, 1, ?, '{}', ?, ?, 10, 'x', 100, ?, ?, ?, ?, ?)",
        [
            key,
            call_id,
            call_id.split(".")[0],
            tool,
            f"{call_id}.txt",
            f"{key}/p/{call_id}.txt",
            latency,
            status,
            "boom" if status == "error" else None,
            useful,
            20 if useful else 0,
        ],
    )


def test_price_lookup_prefers_exact_then_longest_dated_prefix():
    assert price_for("gpt-4o", PRICES) == PRICES["gpt-4o"]
    assert price_for("gpt-4o-mini-2024-07-18", PRICES) == PRICES["gpt-4o-mini"]
    assert price_for("gpt-4o-2024-08-06", PRICES) == PRICES["gpt-4o"]
    assert price_for("llama-local", PRICES) is None
    assert cost_usd("gpt-4o-mini", 1_000_000, 1_000_000, PRICES) == pytest.approx(0.75)


def test_price_override_from_env_json_and_file(tmp_path, monkeypatch):
    # The configured table (ResearchSettings.prices) is what the audit is given.
    monkeypatch.setenv("DEEPRESEARCH_PRICES", '{"qwen2.5:7b": [0.1, 0.2], "gpt-4o": {"input": 1, "output": 2}}')
    prices = ResearchSettings.from_env().prices
    assert prices["qwen2.5:7b"] == Price(input=0.1, output=0.2)
    assert prices["gpt-4o"].output == 2 and prices["gpt-4o-mini"] == PRICES["gpt-4o-mini"]
    path = tmp_path / "prices.json"
    path.write_text(json.dumps({"m": {"input": 3, "output": 4}}))
    monkeypatch.setenv("DEEPRESEARCH_PRICES", str(path))
    assert ResearchSettings.from_env().prices["m"].input == 3
    monkeypatch.setenv("DEEPRESEARCH_PRICES", '{"m": {"input": -1, "output": 0}}')
    with pytest.raises(ConfigError):
        ResearchSettings.from_env()


def test_audit_module_holds_no_price_table_of_its_own():
    for name in ("PRICES", "PRICES_ENV", "PriceConfigError", "load_prices", "price_for", "cost_usd"):
        assert not hasattr(audit, name), name


def test_views_aggregate_tokens_cost_latency_and_failures(tmp_path):
    lineage = _store(tmp_path)
    lineage.register_request(KEY, "q?", {})
    lineage.register_request("k-2", "other?", {})
    _llm(lineage, "compressor", "gpt-4o-mini-2024-07-18", "ok", 1_000_000, 1_000_000)
    _llm(lineage, "compressor", "gpt-4o-mini-2024-07-18", "retry", 500_000, 0)
    _llm(lineage, "reporter", "gpt-4o", "ok", 100_000, 10_000)
    _llm(lineage, "planner", "local-model", "ok", 5, 5)
    _llm(lineage, "planner", "gpt-4o", "ok", 1_000_000, 0, key="k-2")
    for i, latency in enumerate([10.0, 20.0, 30.0, 40.0, 100.0], start=1):
        _tool(lineage, f"1.{i}", "local_search", "error" if i == 5 else "ok", latency)
    _tool(lineage, "2.1", "read_document", "ok", 1.0, useful=False)

    usage = {(r["role"], r["model"]): r for r in lineage.query("SELECT * FROM llm_usage_by_research")}
    comp = usage[("compressor", "gpt-4o-mini-2024-07-18")]
    assert comp["calls"] == 2 and comp["failed_attempts"] == 1 and comp["ok_calls"] == 1
    # Failed attempts are billed too: 1.5M input and 1M output tokens of gpt-4o-mini.
    assert comp["cost_usd"] == pytest.approx(1.5 * 0.15 + 0.60)
    assert usage[("reporter", "gpt-4o")]["cost_usd"] == pytest.approx(0.1 * 2.5 + 0.01 * 10)
    assert usage[("planner", "local-model")]["cost_usd"] is None

    by_role = {(r["role"], r["model"]): r for r in lineage.query("SELECT * FROM llm_usage_by_role_model")}
    assert by_role[("planner", "gpt-4o")]["researches"] == 1
    assert by_role[("compressor", "gpt-4o-mini-2024-07-18")]["prompt_tokens"] == 1_500_000

    tools = {r["tool"]: r for r in lineage.query("SELECT * FROM tool_calls_by_tool")}
    assert tools["local_search"]["calls"] == 5 and tools["local_search"]["failures"] == 1
    assert tools["local_search"]["failure_pct"] == 20.0
    assert tools["local_search"]["p50_latency_ms"] == 30.0 and tools["local_search"]["max_latency_ms"] == 100.0
    assert tools["local_search"]["p95_latency_ms"] == pytest.approx(88.0)
    assert [r["call_id"] for r in lineage.query("SELECT * FROM tool_call_failures")] == ["1.5"]

    metrics = {r["partition_key"]: r for r in lineage.query("SELECT * FROM research_metrics")}
    assert metrics[KEY]["tool_calls"] == 6 and metrics[KEY]["tool_failures"] == 1 and metrics[KEY]["useful"] == 5
    assert metrics[KEY]["injected_tokens"] == 100 and metrics[KEY]["raw_tokens"] == 600
    assert metrics[KEY]["llm_calls"] == 4 and metrics[KEY]["unpriced_models"] == 1
    assert metrics[KEY]["cost_usd"] == pytest.approx(1.5 * 0.15 + 0.60 + 0.35)
    assert metrics["k-2"]["tool_calls"] == 0 and metrics["k-2"]["cost_usd"] == pytest.approx(2.5)

    total = audit.metrics(lineage, PRICES).totals
    assert total["researches"] == 2 and total["researched"] == 1 and total["llm_calls"] == 5
    assert total["cost_usd"] == pytest.approx(1.5 * 0.15 + 0.60 + 0.35 + 2.5)


def test_sync_prices_follows_configuration(tmp_path):
    lineage = _store(tmp_path)
    lineage.register_request(KEY, "q?", {})
    _llm(lineage, "planner", "local-model", "ok", 1_000_000, 0)
    # Unknown models stay unpriced, never charged as another model.
    assert audit.metrics(lineage, PRICES).totals["cost_usd"] is None
    configured = {**PRICES, **parse_prices({"local-model": [0.5, 0]})}
    assert audit.metrics(lineage, configured).totals["cost_usd"] == pytest.approx(0.5)
    assert audit.metrics(lineage, PRICES).totals["cost_usd"] is None


def test_views_exist_for_a_fresh_database_and_survive_reopening(tmp_path):
    path = tmp_path / "fresh.duckdb"
    LineageStore.at(path)
    with duckdb.connect(str(path), read_only=True) as conn:
        views = {r[0] for r in conn.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
        assert set(audit.AUDIT_VIEWS) <= views
        assert conn.execute("SELECT count(*) FROM model_prices").fetchone()[0] == len(DEFAULT_PRICES)


def test_audit_traces_every_citation_to_its_tool_call_and_raw_file(corpus_dir):
    settings = ResearchSettings.from_env(engine="offline", corpus_dir=str(corpus_dir))
    ctx, report = run_research("How do sodium-ion batteries work and what do they cost?", settings)
    lineage = LineageStore.at(settings.duckdb_file)
    result = audit.audit_research(lineage, settings.artifacts_path, ctx.partition_key, settings.prices)

    assert report.citations and len(result.citations) == len(report.citations)
    for link, citation in zip(result.citations, report.citations, strict=True):
        assert link.complete, link
        assert link.artifact_file == citation.artifact_file and link.tool == "read_document"
        assert link.arguments["path"] == citation.source
        assert link.compressor_model == result.compressor_model and link.is_useful
    assert [s["step_id"] for s in result.steps] == [s.step_id for s in lineage_plan_steps(lineage, ctx.partition_key)]
    assert sum(s["tool_calls"] for s in result.steps) == result.totals["tool_calls"] > 0
    assert {u["role"] for u in result.llm_usage} >= {"planner", "researcher", "compressor", "reporter"}

    # A raw file changed after the fact is flagged, not silently trusted.
    first = result.citations[0]
    (settings.artifacts_path / first.artifact_path).write_text("tampered")
    again = audit.audit_research(lineage, settings.artifacts_path, ctx.partition_key, settings.prices)
    assert again.citations[0].artifact_verified is False and not again.citations[0].complete

    with pytest.raises(audit.UnknownPartition):
        audit.audit_research(lineage, settings.artifacts_path, "no-such-partition", settings.prices)


def lineage_plan_steps(lineage: LineageStore, key: str):
    from types import SimpleNamespace

    rows = lineage.query("SELECT step_id FROM plan_steps WHERE partition_key = ? ORDER BY position", [key])
    return [SimpleNamespace(**r) for r in rows]
