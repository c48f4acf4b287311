"""The request-queue sensor and recurring schedules, evaluated against a real temporary
instance and then materialized in-process (offline engine)."""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timezone

import pytest
from dagster import AssetKey, DagsterInstance, build_schedule_context, build_sensor_context

from deepresearch_dagster.core.config import ResearchSettings, load_settings
from deepresearch_dagster.core.naming import partition_key_for
from deepresearch_dagster.core.requests import RequestError, RequestQueue
from deepresearch_dagster.core.store.lineage import LineageStore
from deepresearch_dagster.definitions import build_definitions
from deepresearch_dagster.defs.partitions import RESEARCH_PARTITIONS_NAME
from deepresearch_dagster.defs.runs import failure_reasons
from deepresearch_dagster.defs.schedules import recurring_schedules
from tests.conftest import FIXTURES

QUESTION = "How do sodium-ion batteries work and what do they cost?"


def _sensor_context(defs, instance: DagsterInstance):
    # What the daemon passes: the instance by reference and the code location's resources.
    return build_sensor_context(
        instance=instance,
        instance_ref=instance.get_ref(),
        repository_def=defs.get_repository_def(),
        resources=defs.resources,
    )


def _materialize(defs, instance: DagsterInstance, key: str, tags: dict[str, str] | None = None):
    result = defs.resolve_job_def("research_job").execute_in_process(
        partition_key=key, instance=instance, raise_on_error=False, tags=tags
    )
    assert result.success
    return result


def test_sensor_registers_request_files_and_runs_them(isolated_env, corpus_dir):
    queue = RequestQueue.for_settings(load_settings())
    assert queue.root == ResearchSettings.from_env().artifacts_path / "requests"
    good = queue.enqueue(QUESTION, {"engine": "offline", "corpus_dir": str(corpus_dir)})
    (queue.inbox / "bad.json").write_text(json.dumps({"question": "ok?", "max_steps": 99}))
    # One file, two requests for the same question: one partition, one run.
    (queue.inbox / "dupes.yaml").write_text(
        "- Which sodium-ion chemistry is cheapest?\n- question: Which sodium-ion chemistry is cheapest?\n"
    )
    defs = build_definitions()
    instance = DagsterInstance.get()
    sensor = defs.resolve_sensor_def("research_requests_sensor")

    data = sensor.evaluate_tick(_sensor_context(defs, instance))
    keys = {partition_key_for(QUESTION), partition_key_for("Which sodium-ion chemistry is cheapest?")}
    assert {r.partition_key for r in data.run_requests} == keys
    assert len({r.run_key for r in data.run_requests}) == 2
    (add,) = data.dynamic_partitions_requests
    assert add.partitions_def_name == RESEARCH_PARTITIONS_NAME and set(add.partition_keys) == keys
    assert sorted(p.name for p in queue.accepted.iterdir()) == sorted([good.name, "dupes.yaml"])
    assert "max_steps" in (queue.rejected / "bad.json.error.txt").read_text()
    assert list(queue.inbox.iterdir()) == []

    lineage = LineageStore.at(ResearchSettings.from_env().duckdb_file)
    question, options = lineage.get_request(partition_key_for(QUESTION))
    assert question == QUESTION and options == {"engine": "offline", "corpus_dir": str(corpus_dir)}

    # The next tick has nothing to do.
    again = sensor.evaluate_tick(_sensor_context(defs, instance))
    assert not again.run_requests and "no request files" in again.skip_message

    # What the daemon would do next: add the partitions and launch the requested run.
    instance.add_dynamic_partitions(add.partitions_def_name, list(add.partition_keys))
    request = next(r for r in data.run_requests if r.partition_key == partition_key_for(QUESTION))
    _materialize(defs, instance, request.partition_key, dict(request.tags))
    report = json.loads(
        (ResearchSettings.from_env().artifacts_path / request.partition_key / "report.json").read_text()
    )
    assert report["question"] == QUESTION and report["citations"]
    # The request's own corpus was used, not the bundled one.
    assert all(c["source"].startswith("sodium_ion") for c in report["citations"])


def _recurring_yaml(path, corpus) -> None:
    path.write_text(
        "topics:\n"
        f"  - question: {QUESTION}\n"
        "    key: sodium-watch\n"
        "    cron: '0 6 * * *'\n"
        f"    options: {{engine: offline, corpus_dir: '{corpus}'}}\n"
    )


def test_recurring_topic_runs_daily_and_reports_what_changed(isolated_env, monkeypatch, tmp_path):
    corpus = tmp_path / "watch_corpus"
    shutil.copytree(FIXTURES / "corpus", corpus)
    recurring = tmp_path / "recurring.yaml"
    _recurring_yaml(recurring, corpus)
    monkeypatch.setenv("DEEPRESEARCH_RECURRING", str(recurring))
    defs = build_definitions()
    instance = DagsterInstance.get()
    schedule = defs.resolve_schedule_def("recurring_sodium_watch")
    assert schedule.cron_schedule == "0 6 * * *" and schedule.job_name == "research_job"

    def tick(day: int) -> str:
        when = datetime(2026, 11, day, 6, 0, tzinfo=timezone.utc)
        context = build_schedule_context(
            instance=instance,
            instance_ref=instance.get_ref(),
            scheduled_execution_time=when,
            repository_def=defs.get_repository_def(),
            resources=defs.resources,
        )
        (request,) = schedule.evaluate_tick(context).run_requests
        assert request.run_key == request.partition_key  # one run per topic and day
        assert request.tags["deepresearch/recurring"] == "sodium-watch"
        return request.partition_key

    first = tick(21)
    assert first == "sodium-watch--2026-11-21"
    assert instance.has_dynamic_partition(RESEARCH_PARTITIONS_NAME, first)
    assert tick(21) == first  # evaluating the same tick again is harmless
    _materialize(defs, instance, first)
    artifacts = ResearchSettings.from_env().artifacts_path
    day1 = json.loads((artifacts / first / "report.json").read_text())
    assert "what_changed" not in day1 and "What changed since" not in day1["markdown"]
    day1_sources = {c["source"] for c in day1["citations"]}
    assert "sodium_ion_costs.txt" in day1_sources

    # Between the two days one document disappears and a new one is published.
    (corpus / "sodium_ion_costs.txt").unlink()
    (corpus / "sodium_ion_recycling_2026.md").write_text(
        "# Sodium-ion battery costs and recycling in 2026\n\n"
        "Sodium-ion batteries cost less to recycle than lithium-ion batteries because they contain no cobalt. "
        "Recyclers in 2026 recover aluminium current collectors from sodium-ion cells at scale. "
        "Sodium-ion battery pack costs fell below 60 dollars per kilowatt-hour in 2026. "
        "Sodium-ion batteries work by shuttling sodium ions between a hard carbon anode and a layered oxide cathode.\n"
    )
    # The process's open corpus notices the new file itself (core/tools/local_search.open_corpus).
    second = tick(22)
    assert second == "sodium-watch--2026-11-22"
    result = _materialize(defs, instance, second)
    report = json.loads((artifacts / second / "report.json").read_text())
    changed = report["what_changed"]
    assert changed["previous_partition"] == first and changed["previous_date"] == "2026-11-21"
    assert "sodium_ion_costs.txt" in {s["source"] for s in changed["dropped_sources"]}
    assert "sodium_ion_recycling_2026.md" in {s["source"] for s in changed["new_sources"]}
    assert changed["findings_added"] and changed["findings_no_longer_supported"]
    assert any("60 dollars" in f for f in changed["findings_added"])
    markdown = (artifacts / second / "report.md").read_text()
    assert markdown == report["markdown"]
    assert "## What changed since 2026-11-21" in markdown and "`sodium_ion_recycling_2026.md`" in markdown
    meta = instance.get_latest_materialization_event(AssetKey("research_report")).asset_materialization.metadata
    assert meta["what_changed_since"].value == "2026-11-21"
    assert any(
        e.asset_check_evaluation_data.check_name == "citations_resolve" and e.asset_check_evaluation_data.passed
        for e in result.all_events
        if e.event_type_value == "ASSET_CHECK_EVALUATION"
    )


def test_stopped_topic_and_broken_recurring_file(tmp_path, monkeypatch):
    recurring = tmp_path / "recurring.yaml"
    recurring.write_text("topics:\n  - question: Heat islands?\n    status: stopped\n")
    (schedule,) = recurring_schedules(path=recurring)
    assert schedule.name == "recurring_heat_islands" and schedule.default_status.value == "STOPPED"
    recurring.write_text("topics:\n  - question: Heat islands?\n    cron: 'every day'\n")
    with pytest.raises(RequestError, match="heat-islands"):
        recurring_schedules(path=recurring)


def test_submit_job_queues_a_question_for_the_sensor(isolated_env):
    defs = build_definitions()
    instance = DagsterInstance.get()
    job = defs.resolve_job_def("submit_research_job")
    config = {"ops": {"enqueue_research_request": {"config": {"question": QUESTION, "engine": "offline"}}}}
    result = job.execute_in_process(run_config=config, instance=instance)
    assert result.success and result.output_for_node("enqueue_research_request") == partition_key_for(QUESTION)
    data = defs.resolve_sensor_def("research_requests_sensor").evaluate_tick(_sensor_context(defs, instance))
    assert [r.partition_key for r in data.run_requests] == [partition_key_for(QUESTION)]

    bad = {"ops": {"enqueue_research_request": {"config": {"question": "   "}}}}
    failed = job.execute_in_process(run_config=bad, instance=instance, raise_on_error=False)
    assert not failed.success
    assert "request rejected: question: the question is empty" in failure_reasons(failed.all_events)[0]
    assert RequestQueue.for_settings(load_settings()).pending() == []


def test_a_request_that_cannot_be_registered_yet_waits_in_the_inbox(isolated_env, monkeypatch):
    import deepresearch_dagster.defs.sensors as sensors

    def locked(*args, **kwargs):
        raise RuntimeError("IO Error: Could not set lock on file")

    queue = RequestQueue.for_settings(load_settings())
    path = queue.enqueue(QUESTION)
    monkeypatch.setattr(sensors, "register", locked)
    defs = build_definitions()
    data = defs.resolve_sensor_def("research_requests_sensor").evaluate_tick(
        _sensor_context(defs, DagsterInstance.get())
    )
    assert not data.run_requests and "deferred" in data.skip_message
    assert queue.pending() == [path] and not queue.accepted.exists()


def test_sensor_cursor_never_runs_a_submission_twice(isolated_env, corpus_dir):
    import os
    import shutil

    queue = RequestQueue.for_settings(load_settings())
    path = queue.enqueue(QUESTION, {"engine": "offline", "corpus_dir": str(corpus_dir)})
    stat = path.stat()
    defs = build_definitions()
    instance = DagsterInstance.get()
    sensor = defs.resolve_sensor_def("research_requests_sensor")
    first = sensor.evaluate_tick(_sensor_context(defs, instance))
    assert len(first.run_requests) == 1 and first.cursor

    # The same submission shows up again (e.g. a move that did not stick): the cursor skips it.
    back = queue.inbox / path.name
    shutil.copy(queue.accepted / path.name, back)
    os.utime(back, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    context = build_sensor_context(
        instance=instance,
        instance_ref=instance.get_ref(),
        repository_def=defs.get_repository_def(),
        resources=defs.resources,
        cursor=first.cursor,
    )
    second = sensor.evaluate_tick(context)
    assert not second.run_requests
    assert not back.exists()
