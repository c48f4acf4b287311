"""Real partitions materialized in a temporary DAGSTER_HOME with the offline engine."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import duckdb
from dagster import AssetKey, DagsterInstance

from deepresearch_dagster.core.checks import read_checks
from deepresearch_dagster.core.config import ResearchSettings
from deepresearch_dagster.core.naming import METADATA_FOLDERS
from deepresearch_dagster.core.pipeline import register
from deepresearch_dagster.core.store.artifacts import ArtifactStore, sha256_bytes
from deepresearch_dagster.core.store.lineage import LineageStore
from deepresearch_dagster.definitions import build_definitions
from deepresearch_dagster.defs.partitions import RESEARCH_PARTITIONS_NAME
from deepresearch_dagster.defs.runs import failure_reasons
from deepresearch_dagster.launcher import run_job
from tests.conftest import make_dagster_home

FIXTURES = Path(__file__).parent / "fixtures"
QUESTION = "What limits solid-state battery manufacturing, and how are companies scaling production?"


def materialize_question(question: str, options: dict | None = None):
    settings = ResearchSettings.from_env()
    lineage = LineageStore.at(settings.duckdb_file)
    key = register(lineage, question, options or {})
    instance = DagsterInstance.get()
    result = run_job("research_job", key, instance, quiet=False)
    return result, key, settings, instance


def test_offline_research_materializes_all_four_assets(isolated_env, monkeypatch):
    # Outside tools in the UI (issue 29): the fixture notes server configured (the file isolated_env
    # names) and the glossary plugin installed are listed on tool_outputs' definition (listing a
    # server's own tools means starting it: the materialization lists those, below with the plugin's;
    # the server is configured for the definition only, which keeps the research as fast as before).
    server = FIXTURES / "mcp" / "notes_server.py"
    config = isolated_env / "no-config.toml"
    config.write_text(
        f'[mcp_servers.notes]\ncommand = "{sys.executable}"\nargs = ["{server}"]\nallow = ["search_notes"]\n'
    )
    config.chmod(0o600)
    monkeypatch.syspath_prepend(str(FIXTURES / "plugin"))
    specs = build_definitions(schedules=False).resolve_assets_def(AssetKey("tool_outputs")).specs_by_key
    definition = specs[AssetKey("tool_outputs")].metadata
    assert "mcp server notes (stdio: " in definition["mcp_servers"].value
    assert "allow search\\_notes" in definition["mcp_servers"].value  # Markdown-escaped
    assert "`glossary`" in definition["plugin_tools"].value and definition["mcp_server_count"] == 1
    config.unlink()
    result, key, settings, instance = materialize_question(QUESTION)
    assert result.success
    for name in ("research_plan", "tool_outputs", "compressed_summaries", "research_report"):
        event = instance.get_latest_materialization_event(AssetKey(name))
        assert event is not None and event.dagster_event.partition == key
    report_meta = instance.get_latest_materialization_event(AssetKey("research_report")).asset_materialization.metadata
    assert report_meta["context_reduction_pct"].value > 80
    assert "## References" in report_meta["report"].value
    # The UI reads as a person would: the question beside the key on every asset, the short answer
    # above the whole report, one figure per meaning, each call's verdict and injected tokens.
    metas = {
        name: instance.get_latest_materialization_event(AssetKey(name)).asset_materialization.metadata
        for name in ("research_plan", "tool_outputs", "compressed_summaries", "research_report")
    }
    assert all(m["question"].value == QUESTION for m in metas.values())
    keys = list(report_meta)
    assert keys.index("executive_summary") < keys.index("report")
    assert report_meta["executive_summary"].value.strip() and "## " not in report_meta["executive_summary"].value
    assert "llm_calls_all_runs" in report_meta and "llm_calls_all_runs" not in metas["tool_outputs"]
    calls_table = metas["tool_outputs"]["calls"].value
    assert "| useful | injected tokens |" in calls_table and "| yes |" in calls_table
    # Each materialization: the outside tools this research was offered, with their calls, and
    # what the defences against untrusted content did (issue 28; non-zero in tests/redteam).
    offered = metas["tool_outputs"]["outside_tools"].value
    assert "| `glossary` | plugin:dr-glossary-plugin |" in offered and "| `broken` | plugin:" in offered
    counts = LineageStore.at(settings.duckdb_file).untrusted_counts(key)
    assert {name: metas["tool_outputs"][name].value for name in counts} == counts
    assert set(counts) == {"tainted_calls", "refused_calls", "flagged_sources"}

    partition = settings.artifacts_path / key
    report = json.loads((partition / "report.json").read_text())
    assert report["citations"], "the offline report must cite sources"
    body = (partition / "report.md").read_text()
    for c in report["citations"]:
        assert f"[{c['n']}]" in body and c["artifact_file"]

    checks = {
        e.asset_check_evaluation_data.check_name: e.asset_check_evaluation_data.passed
        for e in result.events
        if e.event_type_value == "ASSET_CHECK_EVALUATION"
    }
    assert checks == {
        "plan_is_valid": True,
        "raw_artifacts_match_lineage": True,
        "context_reduction_above_threshold": True,
        "summaries_match_lineage": True,
        "citations_resolve": True,
        "report_cites_sources": True,
    }
    # The CLI reads the same outcomes (core/checks.py), so it says what the UI shows.
    stored = read_checks(partition)
    assert {name: c["passed"] for name, c in stored.items()} == checks
    assert stored["context_reduction_above_threshold"]["severity"] == "WARN"
    assert stored["citations_resolve"]["severity"] == "ERROR"

    with duckdb.connect(str(settings.duckdb_file), read_only=True) as conn:
        rows = conn.execute("SELECT artifact_path, sha256 FROM tool_calls WHERE partition_key = ?", [key]).fetchall()
        llm = conn.execute("SELECT count(*) FROM llm_calls WHERE partition_key = ?", [key]).fetchone()[0]
        reduction = conn.execute(
            "SELECT reduction_pct FROM context_reduction_by_research WHERE partition_key = ?", [key]
        ).fetchone()[0]
    raw_files = [
        p
        for p in partition.rglob("*")
        if p.is_file() and p.parent.name not in METADATA_FOLDERS and p.parent != partition
    ]
    assert len(rows) == len(raw_files) > 0
    for path, digest in rows:
        assert sha256_bytes((settings.artifacts_path / path).read_bytes()) == digest
    assert llm > 0 and reduction > 80


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_same_research_twice_gives_identical_names_and_bytes(isolated_env, monkeypatch):
    trees = []
    for run in ("a", "b"):
        monkeypatch.setenv("DEEPRESEARCH_ARTIFACTS_DIR", str(isolated_env / f"artifacts_{run}"))
        monkeypatch.setenv("DAGSTER_HOME", str(make_dagster_home(isolated_env / f"home_{run}")))
        result, key, settings, _ = materialize_question(QUESTION)
        assert result.success
        trees.append(_tree(settings.artifacts_path / key))
    assert trees[0].keys() == trees[1].keys()
    assert trees[0] == trees[1]


def test_rematerializing_compression_reuses_stored_raw_outputs(isolated_env):
    result, key, settings, instance = materialize_question(QUESTION)
    assert result.success
    lineage = LineageStore.at(settings.duckdb_file)
    calls_before = lineage.query("SELECT count(*) AS n FROM tool_calls")[0]["n"]
    llm_before = lineage.query("SELECT count(*) AS n FROM llm_calls WHERE role = 'compressor'")[0]["n"]
    again = (
        build_definitions()
        .resolve_job_def("research_job")
        .execute_in_process(partition_key=key, instance=instance, asset_selection=[AssetKey("compressed_summaries")])
    )
    assert again.success
    assert lineage.query("SELECT count(*) AS n FROM tool_calls")[0]["n"] == calls_before
    # Same model and prompt version: every compression is a cache hit, no new compressor call.
    assert lineage.query("SELECT count(*) AS n FROM llm_calls WHERE role = 'compressor'")[0]["n"] == llm_before


def test_partition_added_in_the_ui_researches_its_key(isolated_env):
    """UI: "add partition" with the question as the key, then materialize."""
    key = "How do solid-state batteries fail?"
    instance = DagsterInstance.get()
    instance.add_dynamic_partitions(RESEARCH_PARTITIONS_NAME, [key])
    job = build_definitions().resolve_job_def("research_job")
    result = job.execute_in_process(partition_key=key, instance=instance, raise_on_error=False)
    assert result.success, failure_reasons(result.all_events)
    settings = ResearchSettings.from_env()
    assert LineageStore.at(settings.duckdb_file).get_request(key)[0] == key
    report = json.loads((ArtifactStore(settings.artifacts_path, key).partition_dir / "report.json").read_text())
    assert report["question"] == key and report["citations"]


def test_unusable_partition_key_fails_with_a_clear_message(isolated_env):
    instance = DagsterInstance.get()
    key = "x" * 10_001
    instance.add_dynamic_partitions(RESEARCH_PARTITIONS_NAME, [key])
    job = build_definitions().resolve_job_def("research_job")
    result = job.execute_in_process(partition_key=key, instance=instance, raise_on_error=False)
    assert not result.success
    reasons = failure_reasons(result.all_events)
    assert reasons and "has no registered question and its key is not one" in reasons[0]


def test_context_reduction_below_its_threshold_is_a_warning(isolated_env, monkeypatch):
    monkeypatch.setenv("DEEPRESEARCH_MIN_CONTEXT_REDUCTION", "99.5")
    result, *_ = materialize_question(QUESTION)
    checks = {
        e.asset_check_evaluation_data.check_name: e.asset_check_evaluation_data
        for e in result.events
        if e.event_type_value == "ASSET_CHECK_EVALUATION"
    }
    failed = checks["context_reduction_above_threshold"]
    # A figure below its target, not a broken research: WARN in the UI, a warning line in the CLI.
    assert not failed.passed and failed.severity.value == "WARN"
    assert failed.metadata["threshold_pct"].value == 99.5
    assert "below its 99.5 % target" in failed.description
