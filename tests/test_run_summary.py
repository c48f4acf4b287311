"""``deepresearch run``'s summary reads the research's results through the configured artifact
store: with steps on Celery workers, the starting host's working copy holds none of them."""

from __future__ import annotations

import contextlib

import duckdb
import pytest

from deepresearch_dagster.cli import research
from deepresearch_dagster.core.store.artifacts import ArtifactStore, dumps_json
from deepresearch_dagster.core.store.lineage import LineageStore
from tests.fakes.shared_root import DictRoot


@pytest.fixture
def lineage() -> LineageStore:
    conn = duckdb.connect(":memory:")
    return LineageStore(lambda: contextlib.nullcontext(conn))


def test_the_summary_reads_what_a_worker_wrote_to_the_shared_store(tmp_path, lineage):
    shared = DictRoot()
    worker = ArtifactStore(tmp_path / "worker", "q1", shared)  # the host that ran the steps
    worker.write_json("plan.json", {"plan_title": "Solid-state batteries", "steps": []})
    worker.write_json("report.json", {"verified_citations": 3, "complete": True})
    worker.write_text("report.md", "# Report\n")
    worker.write_json("checks.json", {"report_cites": {"passed": True, "severity": "ERROR", "summary": "ok"}})
    starter = ArtifactStore(tmp_path / "starter", "q1", shared)  # this host: an empty working copy
    settings = type("Settings", (), {"lineage_label": str(tmp_path / "lineage.duckdb")})()

    summary = research._summary(lineage, "q1", settings, starter)

    assert summary["plan_title"] == "Solid-state batteries" and summary["verified_citations"] == 3
    assert summary["checks"] == {"report_cites": {"passed": True, "severity": "ERROR", "summary": "ok"}}
    # What --show-report and the checks' lines read is in this host's working copy now.
    assert (starter.partition_dir / "report.md").read_text() == "# Report\n"
    assert (starter.partition_dir / "checks.json").read_text() == dumps_json(summary["checks"])


def test_a_result_missing_everywhere_is_one_line_naming_the_file_and_the_stores(tmp_path, lineage):
    shared = DictRoot()
    store = ArtifactStore(tmp_path / "starter", "q1", shared)
    store.write_json("plan.json", {"plan_title": "T", "steps": []})
    settings = type("Settings", (), {"lineage_label": str(tmp_path / "lineage.duckdb")})()
    with pytest.raises(research.MissingResult) as info:
        research._summary(lineage, "q1", settings, store)
    message = str(info.value)
    assert "report.json" in message and "s3://bucket/prefix" in message and "\n" not in message
