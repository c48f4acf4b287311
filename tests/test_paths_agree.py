"""The library path (``core.pipeline.run_research``) and the Dagster path (``deepresearch run`` /
``research_job``) compose the same stages: the same research gives byte-identical files."""

from __future__ import annotations

from pathlib import Path

import pytest

from deepresearch_dagster.cli import main
from deepresearch_dagster.core.config import load_settings
from deepresearch_dagster.core.pipeline import register, run_research
from deepresearch_dagster.core.store.lineage import LineageStore
from deepresearch_dagster.launcher import run_job

QUESTION = "How do urban heat islands form?"
OPTIONS = {"engine": "offline", "max_steps": 2, "depth": 0, "breadth": 1}
COMPARED = ("plan.json", "report.md", "report.json", "compressed_summaries.json")


def _use_root(monkeypatch: pytest.MonkeyPatch, root: Path) -> None:
    monkeypatch.setenv("DEEPRESEARCH_ARTIFACTS_DIR", str(root))


def test_cli_and_library_write_identical_reports(isolated_env: Path, monkeypatch, capsys) -> None:
    _use_root(monkeypatch, isolated_env / "dagster_path")
    flags = ["--engine", "offline", "--max-steps", "2", "--depth", "0", "--breadth", "1", "--quiet", "--json"]
    assert main(["run", QUESTION, *flags]) == 0
    capsys.readouterr()
    _use_root(monkeypatch, isolated_env / "library_path")
    ctx, _ = run_research(QUESTION, load_settings(), OPTIONS)
    for name in COMPARED:
        via_dagster = (isolated_env / "dagster_path" / ctx.partition_key / name).read_bytes()
        assert via_dagster == (ctx.store.partition_dir / name).read_bytes(), name


def test_recurring_topic_what_changed_is_identical_on_both_paths(isolated_env: Path, monkeypatch) -> None:
    keys = ["heat-island-watch--2026-01-05", "heat-island-watch--2026-01-06"]
    _use_root(monkeypatch, isolated_env / "dagster_path")
    settings = load_settings()
    lineage = LineageStore.at(settings.duckdb_file)
    for key in keys:
        register(lineage, QUESTION, OPTIONS, partition_key=key)
        assert run_job("research_job", key).success
    _use_root(monkeypatch, isolated_env / "library_path")
    library = load_settings()
    for key in keys:
        ctx, report = run_research(QUESTION, library, OPTIONS, partition_key=key)
    assert report.what_changed is not None and report.what_changed.previous_partition == keys[0]
    assert "## What changed since 2026-01-05" in report.markdown
    for name in COMPARED:
        via_dagster = (settings.artifacts_path / keys[1] / name).read_bytes()
        assert via_dagster == (ctx.store.partition_dir / name).read_bytes(), name
