"""Paged listings and the cached across-research summary of `deepresearch ls` / `metrics`."""

from __future__ import annotations

import duckdb
import pytest

from deepresearch_dagster.core.llm.pricing import DEFAULT_PRICES
from deepresearch_dagster.core.store import audit
from deepresearch_dagster.core.store.lineage import LineageStore

KEYS = [f"r{i}" for i in range(5)]  # r0 oldest … r4 newest


@pytest.fixture
def lineage(tmp_path) -> LineageStore:
    store = LineageStore.at(tmp_path / "lineage.duckdb")
    for i, key in enumerate(KEYS):
        store.query(
            "INSERT INTO research_requests (partition_key, question, options, created_at) "
            "VALUES (?, ?, '{}', TIMESTAMP '2026-01-01' + to_seconds(?)) RETURNING partition_key",
            [key, f"question {i}?", i * 60],
        )
        store.run_started(f"run-{i}", key, "research_plan")
        if i % 2 == 0:
            store.run_finished(f"run-{i}", "research_plan")
        for c in range(i):  # r0 has no tool call, r4 has four
            _tool(store, key, f"1.{c + 1}", "error" if c == 2 else "ok", 10.0 * (c + 1))
        store.record_llm_call(key, f"run-{i}", "planner", "gpt-4o-mini", 1, "ok", 1000 * (i + 1), 100, 5.0, None)
        store.record_llm_call(key, f"run-{i}", "reporter", "local-model", 1, "ok", 10, 10, 5.0, None)
    return store


def _tool(store: LineageStore, key: str, call_id: str, status: str, latency: float) -> None:
    store.query(
        "INSERT INTO tool_calls (partition_key, call_id, run_id, step_id, seq, tool, arguments, artifact_file, "
        "artifact_path, bytes, sha256, raw_tokens, latency_ms, status, is_useful, injected_tokens) "
        "VALUES (?, ?, 'run', '1', 1, 'web_search', '{}', ?, ?, 10, 'x', 1000, ?, ?, true, 50) RETURNING call_id",
        [key, call_id, f"{call_id}.txt", f"{key}/{call_id}.txt", latency, status],
    )


def test_research_page_is_newest_first_and_matches_the_full_listing(lineage):
    full = {r["partition_key"]: r for r in lineage.list_researches()}
    rows, total = audit.research_page(lineage, limit=2, offset=1)
    assert total == 5 and [r["partition_key"] for r in rows] == ["r3", "r2"]
    for row in rows:
        assert row == full[row["partition_key"]]  # same figures as LineageStore.list_researches
    assert [r["partition_key"] for r in audit.research_page(lineage, limit=None)[0]] == KEYS[::-1]
    assert audit.research_page(lineage, limit=10, offset=5) == ([], 5)


def test_metrics_page_rows_equal_the_research_metrics_view(lineage):
    view = {r["partition_key"]: r for r in audit._plain(lineage.query("SELECT * FROM research_metrics"))}
    result = audit.metrics(lineage, DEFAULT_PRICES, limit=3, offset=1)
    assert result.researches_total == 5 and (result.limit, result.offset) == (3, 1)
    assert [r["partition_key"] for r in result.researches] == ["r3", "r2", "r1"]
    for row in result.researches:
        assert row == view[row["partition_key"]]
    assert row["unpriced_models"] == 1 and view["r4"]["tool_failures"] == 1
    everything = audit.metrics(lineage, DEFAULT_PRICES, limit=None)
    assert [r["partition_key"] for r in everything.researches] == KEYS[::-1]
    assert everything.totals == audit._plain(lineage.query("SELECT * FROM research_totals"))[0]


def test_summary_is_cached_until_a_row_changes(lineage):
    first = audit.metrics(lineage, DEFAULT_PRICES)
    (cached,) = lineage.query("SELECT fingerprint FROM audit_cache WHERE name = 'metrics_summary'")
    assert audit.metrics(lineage, DEFAULT_PRICES) == first  # served from audit_cache
    assert lineage.query("SELECT fingerprint FROM audit_cache")[0] == cached

    # An insert, an update and a delete each change the summary's inputs, so it is recomputed.
    _tool(lineage, "r0", "9.1", "ok", 500.0)
    after_insert = audit.metrics(lineage, DEFAULT_PRICES)
    assert after_insert.totals["tool_calls"] == first.totals["tool_calls"] + 1
    lineage.query("UPDATE tool_calls SET status = 'error' WHERE call_id = '9.1' RETURNING call_id")
    after_update = audit.metrics(lineage, DEFAULT_PRICES)
    assert after_update.totals["tool_failures"] == first.totals["tool_failures"] + 1
    lineage.clear_research_calls("r4")
    after_delete = audit.metrics(lineage, DEFAULT_PRICES)
    assert after_delete.totals["tool_calls"] == first.totals["tool_calls"] + 1 - 4
    web = {t["tool"]: t for t in after_delete.tools}["web_search"]
    assert web["calls"] == after_delete.totals["tool_calls"] and web["max_latency_ms"] == 500.0
    lineage.record_llm_call("r1", "run", "critic", "gpt-4o", 1, "ok", 5, 5, 1.0, None)
    assert audit.metrics(lineage, DEFAULT_PRICES).totals["llm_calls"] == first.totals["llm_calls"] + 1


def test_a_cache_that_cannot_be_written_is_only_a_recomputation(lineage, monkeypatch):
    calls = []
    real = lineage.query

    def failing(sql, params=None):
        calls.append(sql)
        if sql.startswith("INSERT OR REPLACE INTO audit_cache"):
            raise duckdb.TransactionException("conflict")
        return real(sql, params)

    monkeypatch.setattr(lineage, "query", failing)
    assert audit.metrics(lineage, DEFAULT_PRICES).totals["researches"] == 5
    assert any(s.startswith("INSERT OR REPLACE INTO audit_cache") for s in calls)
