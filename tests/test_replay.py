"""Replays: recompress (another prompt version or compressor model) and rewrite_report (another
reporter model) re-materialize one stage from stored artifacts and call no research tool."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deepresearch_dagster.cli import main
from deepresearch_dagster.core.llm.prompts import PROMPT_DIR
from deepresearch_dagster.core.pipeline import bundle_version_file
from deepresearch_dagster.core.roles import researcher as research_team
from deepresearch_dagster.core.store.lineage import LineageStore
from deepresearch_dagster.core.tools import web_tools
from deepresearch_dagster.core.tools.local_search import LocalCorpus
from deepresearch_dagster.core.web.search import FallbackSearch
from deepresearch_dagster.definitions import build_definitions
from tests.test_dagster_e2e import QUESTION, materialize_question


def _forbid_research_tools(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every research tool (and the research loop itself) records its use and fails."""
    used: list[str] = []

    def forbidden(name: str):
        def fail(*args, **kwargs):
            used.append(name)
            raise AssertionError(f"{name} was called during a replay")

        return fail

    monkeypatch.setattr(LocalCorpus, "search", forbidden("local_search"))
    monkeypatch.setattr(LocalCorpus, "get", forbidden("read_document"))
    monkeypatch.setattr(FallbackSearch, "search", forbidden("web_search"))
    monkeypatch.setattr(web_tools, "fetch_url", forbidden("fetch_url"))
    monkeypatch.setattr(research_team, "execute_plan", forbidden("research loop"))
    return used


def _tool_state(lineage: LineageStore, artifacts: Path, key: str) -> tuple[list[dict], dict[str, bytes]]:
    rows = lineage.query("SELECT * FROM tool_calls WHERE partition_key = ? ORDER BY call_id", [key])
    raw = {r["artifact_path"]: (artifacts / r["artifact_path"]).read_bytes() for r in rows}
    return rows, raw


def _count(lineage: LineageStore, sql: str, params: list) -> int:
    return lineage.query(f"SELECT count(*) AS n FROM ({sql})", params)[0]["n"]


def _cli_json(capsys, *argv: str) -> dict:
    capsys.readouterr()
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_recompress_with_a_new_prompt_version_then_rewrite_report(isolated_env, monkeypatch, capsys, tmp_path):
    result, key, settings, instance = materialize_question(QUESTION)
    assert result.success
    lineage = LineageStore.at(settings.duckdb_file)
    partition = settings.artifacts_path / key
    before_rows, before_raw = _tool_state(lineage, settings.artifacts_path, key)
    old_bundle = json.loads((partition / "compressed_summaries.json").read_text())
    old_file = partition / bundle_version_file(old_bundle["compressor_model"], old_bundle["prompt_version"])
    assert old_file.read_text() == (partition / "compressed_summaries.json").read_text()
    calls = len(before_rows)
    compressor_calls = _count(lineage, "SELECT * FROM llm_calls WHERE role = 'compressor'", [])
    used = _forbid_research_tools(monkeypatch)

    prompt = tmp_path / "compressor_v2.md"
    prompt.write_text((PROMPT_DIR / "compressor.md").read_text() + "\nPrefer numbers and dates in the extraction.\n")
    out = _cli_json(capsys, "recompress", key, "--prompt-file", str(prompt), "--json", "--quiet")
    assert out["tool_calls_unchanged"] is True
    assert out["prompt_version"] != old_bundle["prompt_version"] and out["prompt_version"].startswith("compressor-")
    assert out["summaries"] == calls

    # Nothing about the tool calls changed: same rows, same raw bytes, no tool invoked.
    assert _tool_state(lineage, settings.artifacts_path, key) == (before_rows, before_raw)
    assert used == []
    # A new prompt version is a new cache key: every call was compressed again ...
    assert _count(lineage, "SELECT * FROM llm_calls WHERE role = 'compressor'", []) == compressor_calls + calls
    versions = lineage.query(
        "SELECT prompt_version, count(*) AS n FROM summaries WHERE partition_key = ? GROUP BY ALL", [key]
    )
    assert {r["prompt_version"]: r["n"] for r in versions} == {
        old_bundle["prompt_version"]: calls,
        out["prompt_version"]: calls,
    }
    assert _count(lineage, "SELECT * FROM compressions WHERE prompt_version = ?", [out["prompt_version"]]) > 0
    # ... and both bundle versions are kept on disk, the current one also as compressed_summaries.json.
    new_bundle = json.loads((partition / "compressed_summaries.json").read_text())
    assert new_bundle["prompt_version"] == out["prompt_version"]
    assert Path(out["bundle_file"]).read_text() == (partition / "compressed_summaries.json").read_text()
    assert json.loads(old_file.read_text()) == old_bundle

    # The same replay again is served from the content-addressed cache: no compressor call.
    _cli_json(capsys, "recompress", key, "--prompt-file", str(prompt), "--json", "--quiet")
    assert _count(lineage, "SELECT * FROM llm_calls WHERE role = 'compressor'", []) == compressor_calls + calls

    reporter_calls = _count(lineage, "SELECT * FROM llm_calls WHERE role = 'reporter'", [])
    report_before = (partition / "report.md").stat().st_mtime_ns
    out = _cli_json(capsys, "rewrite-report", key, "--json", "--quiet")
    assert out["tool_calls_unchanged"] is True and out["citations"] > 0
    assert (partition / "report.md").stat().st_mtime_ns > report_before
    assert _count(lineage, "SELECT * FROM llm_calls WHERE role = 'reporter'", []) > reporter_calls
    assert _tool_state(lineage, settings.artifacts_path, key) == (before_rows, before_raw)
    assert used == []

    # Both jobs also run as launched from the UI with their prefilled launchpad config.
    defs = build_definitions()
    for name in ("recompress_job", "rewrite_report_job"):
        run = defs.resolve_job_def(name).execute_in_process(partition_key=key, instance=instance)
        assert run.success, name
        checks = [
            e.asset_check_evaluation_data for e in run.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"
        ]
        assert checks and all(c.passed for c in checks), name
    # Without overrides the configured prompt is current again; its bundle version was kept.
    assert json.loads((partition / "compressed_summaries.json").read_text()) == old_bundle
    assert _tool_state(lineage, settings.artifacts_path, key) == (before_rows, before_raw)
    assert used == []


def test_model_overrides_reach_the_model_and_are_recorded(fake_openai, corpus_dir, monkeypatch, capsys):
    result, key, settings, _ = materialize_question(
        "How do sodium-ion batteries work and what do they cost?", {"engine": "openai", "corpus_dir": str(corpus_dir)}
    )
    assert result.success
    lineage = LineageStore.at(settings.duckdb_file)
    calls = _count(lineage, "SELECT * FROM tool_calls WHERE partition_key = ?", [key])
    seen = {role: len(fake_openai.requests_for(role)) for role in ("planner", "researcher", "compressor", "reporter")}
    used = _forbid_research_tools(monkeypatch)

    out = _cli_json(capsys, "recompress", key, "--compressor-model", "cheap-compressor-2", "--json", "--quiet")
    assert out["compressor_model"] == "cheap-compressor-2" and out["tool_calls_unchanged"]
    new_compressions = fake_openai.requests_for("compressor")[seen["compressor"] :]
    assert len(new_compressions) == calls and {r["model"] for r in new_compressions} == {"cheap-compressor-2"}

    out = _cli_json(capsys, "rewrite-report", key, "--reporter-model", "strong-reporter-2", "--json", "--quiet")
    assert out["reporter_model"] == "strong-reporter-2"
    new_reports = fake_openai.requests_for("reporter")[seen["reporter"] :]
    assert new_reports and {r["model"] for r in new_reports} == {"strong-reporter-2"}
    # The replays never asked the planner or the researcher anything, and used no research tool.
    assert len(fake_openai.requests_for("planner")) == seen["planner"]
    assert len(fake_openai.requests_for("researcher")) == seen["researcher"]
    assert used == []
    models = lineage.query(
        "SELECT DISTINCT role, model FROM llm_calls WHERE partition_key = ? AND model LIKE '%-2'", [key]
    )
    assert {(r["role"], r["model"]) for r in models} == {
        ("compressor", "cheap-compressor-2"),
        ("reporter", "strong-reporter-2"),
    }


def test_replay_usage_errors(isolated_env, capsys, tmp_path):
    assert main(["recompress", "no-such-partition"]) == 2
    assert "unknown research partition" in capsys.readouterr().err
    lineage = LineageStore.at(tmp_path / "artifacts" / "lineage.duckdb")
    lineage.register_request("registered-only", "q?", {})
    assert main(["rewrite-report", "registered-only"]) == 2
    assert "nothing to replay" in capsys.readouterr().err
