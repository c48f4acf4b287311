"""The named queries of LineageStore (callers outside core/store never write SQL) and the tool cache."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from deepresearch_dagster.core.models import CompressionResult, SummaryRecord, ToolCallRecord
from deepresearch_dagster.core.store.artifacts import ArtifactStore
from deepresearch_dagster.core.store.lineage import LineageStore
from deepresearch_dagster.core.store.tool_cache import ToolCache, tool_cache_key
from deepresearch_dagster.core.tools import ToolResult

PACKAGE = Path(__file__).resolve().parents[3] / "deepresearch_dagster"


def _call(call_id: str, raw_tokens: int, sha256: str = "x", artifact_path: str | None = None) -> ToolCallRecord:
    return ToolCallRecord(
        call_id=call_id,
        step_id=call_id.split(".")[0],
        step_title="t",
        step_description="d",
        seq=1,
        tool="local_search",
        arguments={"query": call_id},
        artifact_file=f"{call_id}.txt",
        artifact_path=artifact_path or f"k/p/{call_id}.txt",
        bytes=1,
        sha256=sha256,
        raw_tokens=raw_tokens,
    )


def _summary(call_id: str, injected: int, model: str = "m", version: str = "v1") -> SummaryRecord:
    return SummaryRecord(
        call_id=call_id,
        step_id=call_id.split(".")[0],
        artifact_file=f"{call_id}.txt",
        source=None,
        source_title=None,
        result=CompressionResult.model_construct(is_useful=injected > 0, summary_title="s", summary="s", extraction=[]),
        injected_tokens=injected,
        cache_key=f"{call_id}-{model}-{version}",
        compressor_model=model,
        prompt_version=version,
    )


@pytest.fixture
def lineage(tmp_path) -> LineageStore:
    return LineageStore.at(tmp_path / "lineage.duckdb")


def test_tool_call_and_summary_queries(lineage):
    lineage.register_request("k", "q?", {})
    for call in (_call("1.1", 300, "a"), _call("1.2", 100, "b")):
        lineage.record_tool_call("k", "run", call)
    lineage.record_summaries("k", [_summary("1.1", 30), _summary("1.2", 10)])
    lineage.record_summaries("k", [_summary("1.1", 100, version="v2"), _summary("1.2", 0, version="v2")])

    assert lineage.tool_call_ids("k") == {"1.1", "1.2"}
    assert lineage.tool_call_hashes("k") == {"1.1.txt": "a", "1.2.txt": "b"}
    assert lineage.tool_call_count("k") == 2 and lineage.tool_call_count("other") == 0
    assert lineage.summary_versions("k") == {
        ("1.1", "m", "v1"),
        ("1.2", "m", "v1"),
        ("1.1", "m", "v2"),
        ("1.2", "m", "v2"),
    }

    # One reduction per summary version, the same formula as the Python it replaced.
    v1 = lineage.summary_reduction("k", "m", "v1")
    assert v1 == {"tool_calls": 2, "raw_tokens": 400, "injected_tokens": 40, "reduction_pct": 90.0}
    assert v1["reduction_pct"] == round(100 * (1 - 40 / 400), 2)
    assert lineage.summary_reduction("k", "m", "v2")["reduction_pct"] == 75.0
    assert lineage.summary_reduction("k", "m", "nope")["reduction_pct"] is None


def test_research_listing_status_and_prefix(lineage):
    for key in ("topic--2026-11-20", "topic--2026-11-21", "topicx--2026-11-21", "other"):
        lineage.register_request(key, f"{key}?", {})
    lineage.run_started("r1", "topic--2026-11-20", "research_plan")
    lineage.run_finished("r1", "research_plan", "boom")
    assert lineage.partitions_with_prefix("topic--") == ["topic--2026-11-20", "topic--2026-11-21"]
    listed = {r["partition_key"]: r for r in lineage.list_researches()}
    assert listed["topic--2026-11-20"]["status"] == "failed"
    assert listed["other"]["status"] == "registered" and listed["other"]["tool_calls"] is None
    assert lineage.research_status("topic--2026-11-20") == "failed"


def test_latest_budget_takes_the_newest_entry_of_each_dimension(lineage):
    def snapshot(spent: float) -> dict:
        return {"limits": {"usd": 1.0, "tool_calls": 10}, "spent": {"usd": spent}, "fraction": spent, "events": []}

    lineage.record_budget("k", "run-1", "research_report", snapshot(0.25))
    lineage.record_budget("k", "run-2", "research_report", snapshot(0.5))
    lineage.record_budget("k", "run-2", "tool_outputs", snapshot(0.9))
    assert lineage.latest_budget("k", "research_report") == {
        "tool_calls": {"spent": 0.0, "cap": 10.0},
        "usd": {"spent": 0.5, "cap": 1.0},
    }


def test_tool_cache_serves_a_verified_artifact_and_misses_a_changed_one(tmp_path, lineage):
    store = ArtifactStore(tmp_path / "artifacts", "k")
    stored = store.write_raw("p", "1.1.txt", "cached text")
    record = _call("1.1", 3, stored.sha256, stored.relpath).model_copy(update={"source": "s", "source_title": "t"})
    cache = ToolCache(lineage, tmp_path / "artifacts", ttl_s=3600)
    cache.put(record, ToolResult(content="cached text", kind="text", source="s", source_title="t"))
    assert lineage.tool_cache_lookup(tool_cache_key(record.tool, record.arguments), 3600) is not None

    hit = cache.get(record.tool, record.arguments)
    assert hit is not None and hit.content == "cached text" and hit.source == "s"
    (tmp_path / "artifacts" / stored.relpath).write_text("changed")
    assert cache.get(record.tool, record.arguments) is None
    (tmp_path / "artifacts" / stored.relpath).unlink()
    assert cache.get(record.tool, record.arguments) is None
    assert ToolCache(lineage, tmp_path / "artifacts", ttl_s=0).get(record.tool, record.arguments) is None


def test_a_fan_outs_calls_are_looked_up_in_one_query(tmp_path, lineage, monkeypatch):
    store = ArtifactStore(tmp_path / "artifacts", "k")
    cache = ToolCache(lineage, tmp_path / "artifacts", ttl_s=3600)
    for i in (1, 2):
        stored = store.write_raw("p", f"1.{i}.txt", f"text {i}")
        record = _call(f"1.{i}", i, stored.sha256, stored.relpath)
        cache.put(record, ToolResult(content=f"text {i}", kind="text"))
    calls = [("local_search", {"query": f"1.{i}"}, "") for i in (1, 2, 3)]
    queries = []
    query = lineage.query
    monkeypatch.setattr(lineage, "query", lambda *a, **k: queries.append(a) or query(*a, **k))
    hits = cache.get_many([calls[1], None, calls[2], calls[0], calls[1]])
    assert len(queries) == 1
    assert [h and h.content for h in hits] == ["text 2", None, None, "text 1", "text 2"]
    assert [cache.get(*c) and cache.get(*c).content for c in calls] == ["text 1", "text 2", None]


def test_the_tool_cache_serves_a_call_another_host_made_from_the_object_store(tmp_path, lineage):
    from tests.fakes.shared_root import DictRoot

    shared = DictRoot()
    stored = ArtifactStore(tmp_path / "host-a", "k", shared).write_raw("p", "1.1.txt", "fetched once")
    record = _call("1.1", 3, stored.sha256, stored.relpath)
    ToolCache(lineage, tmp_path / "host-a", 3600, shared).put(record, ToolResult(content="fetched once", kind="text"))
    other = ToolCache(lineage, tmp_path / "host-b", 3600, shared)  # an empty working copy
    hit = other.get(record.tool, record.arguments)
    assert hit is not None and hit.content == "fetched once"
    assert (tmp_path / "host-b" / stored.relpath).read_text() == "fetched once"
    shared.objects[stored.relpath] = b"changed in the store"  # verified against the recorded sha256
    (tmp_path / "host-b" / stored.relpath).unlink()
    assert other.get(record.tool, record.arguments) is None


def test_no_sql_outside_core_store():
    out = subprocess.run(
        ["grep", "-rnwE", "SELECT|INSERT|DELETE", str(PACKAGE)], capture_output=True, text=True, check=False
    ).stdout
    offenders = [line for line in out.splitlines() if "/core/store/" not in line and not line.endswith(".pyc")]
    offenders = [line for line in offenders if not re.search(r"Binary file", line)]
    assert offenders == []
