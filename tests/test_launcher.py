"""The launcher: stale in-process runs are reconciled; a broken recurring.yaml does not stop a run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from dagster import DagsterInstance, DagsterRunStatus

from deepresearch_dagster.core.config import load_settings
from deepresearch_dagster.core.store.lineage import LineageStore
from deepresearch_dagster.launcher import HOST_TAG, PID_TAG, ensure_instance, reconcile_stale_runs


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_run_whose_process_is_gone_is_marked_failed(isolated_env: Path) -> None:
    import socket

    from dagster import job, op

    @op
    def noop() -> None:
        pass

    @job
    def tiny() -> None:
        noop()

    instance: DagsterInstance = ensure_instance()
    lineage = LineageStore.at(load_settings().duckdb_file)
    dead = instance.create_run_for_job(tiny, tags={PID_TAG: str(_dead_pid()), HOST_TAG: socket.gethostname()})
    alive = instance.create_run_for_job(
        tiny, tags={PID_TAG: str(__import__("os").getpid()), HOST_TAG: socket.gethostname()}
    )
    for run in (dead, alive):
        instance.handle_run_event(run.run_id, _started_event(run))
        lineage.run_started(run.run_id, "demo-partition", "tool_outputs")

    assert reconcile_stale_runs(instance, lineage) == [dead.run_id]
    assert instance.get_run_by_id(dead.run_id).status == DagsterRunStatus.FAILURE
    assert instance.get_run_by_id(alive.run_id).status == DagsterRunStatus.STARTED
    assert lineage.abandon_run(dead.run_id, "again") == 0  # already marked
    assert reconcile_stale_runs(instance, lineage) == []


def _started_event(run):
    from dagster._core.events import DagsterEvent, DagsterEventType

    return DagsterEvent(event_type_value=DagsterEventType.RUN_START.value, job_name=run.job_name)


def test_a_broken_recurring_file_does_not_stop_a_research(isolated_env: Path, monkeypatch, capsys) -> None:
    from deepresearch_dagster.cli import main

    broken = isolated_env / "recurring.yaml"
    broken.write_text("topics:\n  - question: [unclosed\n")
    monkeypatch.setenv("DEEPRESEARCH_RECURRING", str(broken))
    code = main(
        [
            "run",
            "How do urban heat islands form?",
            "--engine",
            "offline",
            "--max-steps",
            "1",
            "--depth",
            "0",
            "--quiet",
            "--json",
        ]
    )
    assert code == 0, capsys.readouterr().err


def test_exhausted_retries_report_what_each_attempt_met():
    from types import SimpleNamespace

    from deepresearch_dagster.defs.runs import failure_reasons

    cause = SimpleNamespace(message="ConnectionError: the lineage file stayed locked\n", cause=None)
    error = SimpleNamespace(message="Exceeded max_retries of 2\n", cause=cause, cls_name="RetryRequested")
    event = SimpleNamespace(
        is_step_failure=True,
        step_key="research_plan",
        step_failure_data=SimpleNamespace(user_failure_data=None, error=error),
    )
    assert failure_reasons([event]) == ["ConnectionError: the lineage file stayed locked (after max_retries of 2)"]
