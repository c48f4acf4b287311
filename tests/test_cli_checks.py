"""The CLI says what the Dagster UI shows about a research's checks (core/checks.py): a failed
ERROR check is one ``error:`` line and exit code 3, a failed WARN check one ``warning:`` line and
exit 0, and ``ls`` shows either as the status."""

from __future__ import annotations

from deepresearch_dagster.cli.common import EXIT_CHECK_FAILED, EXIT_OK, report_checks
from deepresearch_dagster.cli.research import _with_checks
from deepresearch_dagster.core.checks import ERROR, WARN, read_checks, record_check
from deepresearch_dagster.core.config import ResearchSettings
from deepresearch_dagster.core.store.artifacts import ArtifactStore

KEY = "how-do-green-roofs-cool-buildings-e3a59208"


def _store(tmp_path) -> ArtifactStore:
    return ArtifactStore(tmp_path / "artifacts", KEY)


def test_a_failed_warn_check_is_one_warning_line_and_exit_0(tmp_path, capsys):
    store = _store(tmp_path)
    record_check(store, "citations_resolve", True, ERROR, "all 3 references resolve")
    record_check(store, "context_reduction_above_threshold", False, WARN, "context reduction 42.0 % is below 80 %")
    assert report_checks(store.partition_dir) == EXIT_OK
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["warning: check context_reduction_above_threshold: context reduction 42.0 % is below 80 %"]


def test_a_failed_error_check_is_one_error_line_and_exit_3(tmp_path, capsys):
    store = _store(tmp_path)
    record_check(store, "citations_resolve", True, ERROR, "first run")
    record_check(store, "citations_resolve", False, ERROR, "citations that do not resolve: [4]")  # the latest wins
    assert read_checks(store.partition_dir)["citations_resolve"]["passed"] is False
    assert report_checks(store.partition_dir) == EXIT_CHECK_FAILED == 3
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("error: the research finished, but check citations_resolve failed: citations that do not")


def test_ls_status_shows_failed_checks(tmp_path):
    settings = ResearchSettings(artifacts_dir=str(tmp_path / "artifacts"))
    store = _store(tmp_path)
    rows = [{"partition_key": KEY, "status": "succeeded"}, {"partition_key": "other-1", "status": "failed"}]
    record_check(store, "report_cites_sources", False, WARN, "the report cites no verified source")
    _with_checks(rows, settings)
    assert rows[0]["status"] == "succeeded, warning" and rows[0]["failed_checks"] == ["report_cites_sources"]
    assert rows[1]["status"] == "failed"
    record_check(store, "raw_artifacts_match_lineage", False, ERROR, "raw files and rows differ")
    rows[0]["status"] = "succeeded"
    _with_checks(rows, settings)
    assert rows[0]["status"] == "check failed"
    assert rows[0]["failed_checks"] == ["raw_artifacts_match_lineage", "report_cites_sources"]


def test_no_checks_recorded_changes_nothing(tmp_path):
    rows = [{"partition_key": KEY, "status": "succeeded"}]
    _with_checks(rows, ResearchSettings(artifacts_dir=str(tmp_path / "none")))
    assert rows[0]["status"] == "succeeded" and rows[0]["failed_checks"] == []
