"""The Dagster side of evaluations: ``evaluation_job`` researches a suite's items through
``research_job`` (one research partition each), scores them, writes eval.json / eval.md and
records the figures as metadata; an empty suite re-evaluates the stored configuration without
researching again; a recurring evaluation's schedule requests the job with ``rerun``."""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path

import pytest
from dagster import (
    AssetKey,
    DagsterInstance,
    Definitions,
    Failure,
    RunsFilter,
    asset,
    build_schedule_context,
    define_asset_job,
)

from deepresearch_dagster.core.config import ResearchSettings, load_settings
from deepresearch_dagster.core.errors import RequestError, ResearchInterrupted
from deepresearch_dagster.core.evaluation.report import write_evaluation
from deepresearch_dagster.core.evaluation.run import (
    EvalConfig,
    Evaluation,
    evaluation_dir,
    evaluation_key,
    summarize,
)
from deepresearch_dagster.core.evaluation.score import ItemScore
from deepresearch_dagster.core.evaluation.suite import SuiteItem
from deepresearch_dagster.core.requests import load_recurring
from deepresearch_dagster.definitions import build_definitions
from deepresearch_dagster.defs.evaluations import evaluation_assets, evaluation_job, reusing_judge
from deepresearch_dagster.defs.partitions import (
    EVALUATION_PARTITIONS_NAME,
    RESEARCH_PARTITIONS_NAME,
    research_partitions,
)
from deepresearch_dagster.defs.resources import default_resources
from deepresearch_dagster.defs.runs import PID_TAG, QUIET_LOGS
from deepresearch_dagster.launcher import ensure_instance, run_job

ITEMS = [
    {
        "id": "energy-density",  # held-out half
        "question": "What energy density did commercial sodium-ion cells reach in 2023?",
        "answers": ["160 Wh/kg"],
        "corpus": "corpus",
    },
    {
        "id": "anode-material",  # development half
        "question": "Which material is used for the anode of sodium-ion batteries?",
        "answers": ["hard carbon"],
        "corpus": "corpus",
    },
]


def _suite(folder: Path, corpus_dir: Path) -> Path:
    """A 2-item suite next to its corpus (an item's corpus is relative to the suite file)."""
    assert corpus_dir.parent == folder
    path = folder / "sodium.jsonl"
    path.write_text("".join(json.dumps(item) + "\n" for item in ITEMS), "utf-8")
    return path


def _ops(config: EvalConfig) -> dict:
    # What `deepresearch eval` (cli/evaluate.py, _record_in_dagster) passes.
    return {"evaluation_results": {"config": config.model_dump(mode="json", exclude_none=True)}}


def _research_runs(instance: DagsterInstance) -> int:
    return len(instance.get_run_records(RunsFilter(job_name="research_job")))


def test_evaluation_job_researches_scores_and_resumes(isolated_env, corpus_dir):
    suite = _suite(isolated_env, corpus_dir)
    config = EvalConfig(suite=str(suite), engine="offline", options={"max_steps": 2})
    key = evaluation_key(config, "offline")
    instance = ensure_instance()

    resources = {"research": {"config": {"max_tool_calls_per_step": 8}}}  # the default: only passed along
    outcome = run_job(
        "evaluation_job",
        key,
        instance,
        resources_config=resources,
        tags={"deepresearch/source": "test"},
        partitions=EVALUATION_PARTITIONS_NAME,
        ops_config=_ops(config),
    )
    assert outcome.success, outcome.message
    assert instance.has_dynamic_partition(EVALUATION_PARTITIONS_NAME, key)

    settings = ResearchSettings.from_env()
    folder = evaluation_dir(settings, key)
    evaluation = json.loads((folder / "eval.json").read_text())
    assert evaluation["key"] == key and (folder / "eval.md").is_file()
    assert [i["status"] for i in evaluation["items"]] == ["scored", "scored"]
    assert all(i["answer_in_raw"] for i in evaluation["items"])
    stored = json.loads((folder / "config.json").read_text())
    assert stored["suite"] == str(suite.resolve()) and "rerun" not in stored

    # Each item is an ordinary research partition, materialized by research_job.
    research_keys = [i["partition_key"] for i in evaluation["items"]]
    assert set(research_keys) <= set(instance.get_dynamic_partitions(RESEARCH_PARTITIONS_NAME))
    assert set(research_keys) <= instance.get_materialized_partitions(AssetKey("research_report"))
    runs = instance.get_runs(RunsFilter(job_name="research_job"))
    assert len(runs) == 2 and all(r.tags["deepresearch/evaluation"] == key for r in runs)
    # Nested runs get the evaluation run's resource configuration, log levels and process tags.
    assert all(
        r.run_config["resources"] == resources and r.run_config["loggers"] == QUIET_LOGS["loggers"] for r in runs
    )
    assert all(r.tags[PID_TAG] == str(os.getpid()) and r.tags["deepresearch/source"] == "test" for r in runs)

    event = instance.get_latest_materialization_event(AssetKey("evaluation_results"))
    assert event.dagster_event.partition == key
    meta = event.asset_materialization.metadata
    assert "energy-density" in meta["evaluation"].value and "## Summary" in meta["evaluation"].value
    assert meta["items"].value == 2 and meta["failed"].value == 0 and meta["resumed"].value == 0
    for name in ("answer_in_raw_pct", "answer_in_report_pct", "dev_answer_in_report_pct", "wall_s"):
        assert isinstance(meta[name].value, float), name
    assert meta["answer_in_raw_pct"].value == 100.0
    assert meta["tokens"].value > 0 and meta["tool_calls"].value > 0
    assert meta["config"].value["suite"] == str(suite.resolve())
    checks = {
        e.asset_check_evaluation_data.check_name: e.asset_check_evaluation_data.passed
        for e in outcome.events
        if e.event_type_value == "ASSET_CHECK_EVALUATION"
    }
    assert checks == {"every_item_scored": True}

    # From the UI with an empty suite: the stored configuration, resumed (nothing researched again).
    again = run_job(
        "evaluation_job", key, instance, partitions=EVALUATION_PARTITIONS_NAME, ops_config={"evaluation_results": {}}
    )
    assert again.success, again.message
    assert _research_runs(instance) == 2
    meta = instance.get_latest_materialization_event(AssetKey("evaluation_results")).asset_materialization.metadata
    assert meta["resumed"].value == 2 and meta["items"].value == 2
    resumed = json.loads((folder / "eval.json").read_text())
    assert [i["partition_key"] for i in resumed["items"]] == research_keys

    # A partition without a stored configuration, or a bad configuration, fails in one line.
    missing = run_job("evaluation_job", "no-such-evaluation", instance, partitions=EVALUATION_PARTITIONS_NAME)
    assert not missing.success
    assert "no stored configuration" in missing.message and "\n" not in missing.message
    bad = {"evaluation_results": {"config": {"suite": str(suite), "engine": "bogus"}}}
    refused = run_job("evaluation_job", "bad", instance, partitions=EVALUATION_PARTITIONS_NAME, ops_config=bad)
    assert refused.message.startswith("invalid evaluation configuration:") and "engine" in refused.message
    assert "\n" not in refused.message and _research_runs(instance) == 2


def test_failed_items_are_recorded_and_an_interrupt_stops_the_evaluation(isolated_env, corpus_dir):
    suite = _suite(isolated_env, corpus_dir)
    outcome = {"reason": "research_report failed: the model server refused the connection"}

    @asset(name="research_report", partitions_def=research_partitions)
    def broken_research() -> None:
        raise Failure(description=outcome["reason"])

    research = Definitions(
        assets=[broken_research],
        jobs=[define_asset_job("research_job", selection=[broken_research], partitions_def=research_partitions)],
    )
    defs = Definitions(
        assets=evaluation_assets(lambda: research), jobs=[evaluation_job], resources=default_resources(load_settings())
    )
    instance = ensure_instance()
    ops = _ops(EvalConfig(suite=str(suite), engine="offline"))

    def evaluate(key: str):
        return run_job(
            "evaluation_job", key, instance, definitions=defs, partitions=EVALUATION_PARTITIONS_NAME, ops_config=ops
        )

    failed = evaluate("all-fail")
    assert failed.message == (
        "every item of the evaluation failed (first: research_report failed: the model server refused the "
        f"connection); see {evaluation_dir(ResearchSettings.from_env(), 'all-fail') / 'eval.md'}"
    )
    items = json.loads((evaluation_dir(ResearchSettings.from_env(), "all-fail") / "eval.json").read_text())["items"]
    assert [i["status"] for i in items] == ["failed", "failed"] and _research_runs(instance) == 2

    # Ctrl-C / SIGTERM in an item's research stops the evaluation, not only that item.
    outcome["reason"] = f"research_report failed: {ResearchInterrupted.MESSAGE}"
    stopped = evaluate("interrupted")
    assert stopped.message.startswith("evaluation stopped at research partition ")
    assert _research_runs(instance) == 3


def test_a_resumed_item_keeps_the_verdict_of_the_same_judge(tmp_path):
    item = SuiteItem(id="a", question="Q?", answers=["x"])
    score = ItemScore(id="a", question="Q?", category="answer", split="dev", partition_key="p", resumed=True)
    verdict = {"model": "judge-1", "correct": True, "error": None}
    before = Evaluation(
        key="k", suite="s.jsonl", config=EvalConfig(suite="s.jsonl", judge_model="judge-1"), engine="offline",
        items=[score.model_copy(update={"judge": verdict})],
    )  # fmt: skip
    before.summary = summarize(before.items)
    write_evaluation(before, tmp_path)
    asked: list[str] = []

    def judge(item, score, partition_dir):
        asked.append(score.partition_key)
        return {"model": "judge-1", "correct": False, "error": None}

    assert reusing_judge(judge, "judge-1", tmp_path)(item, score, tmp_path) == verdict and asked == []
    # Researched again, another judge model, or no earlier evaluation: the judge is asked.
    assert reusing_judge(judge, "judge-1", tmp_path)(item, score.model_copy(update={"resumed": False}), tmp_path)
    assert reusing_judge(judge, "judge-2", tmp_path)(item, score, tmp_path)["correct"] is False
    assert reusing_judge(judge, "judge-1", tmp_path / "none")(item, score, tmp_path)["correct"] is False
    assert asked == ["p", "p", "p"]


def test_recurring_evaluation_schedules_a_rerun(isolated_env, corpus_dir, monkeypatch):
    suite = _suite(isolated_env, corpus_dir)
    recurring = isolated_env / "recurring.yaml"
    recurring.write_text(
        "evaluations:\n"
        "  - suite: sodium.jsonl\n"  # relative to recurring.yaml
        "    cron: '0 3 * * 0'\n"
        "    engine: offline\n"
        "    limit: 1\n"
        "    options: {max_steps: 2}\n"
    )
    monkeypatch.setenv("DEEPRESEARCH_RECURRING", str(recurring))
    (entry,) = load_recurring(recurring).evaluations
    assert entry.suite == str(suite.resolve()) and entry.status == "stopped"

    defs = build_definitions()
    schedule = defs.resolve_schedule_def("evaluation_sodium")
    assert schedule.job_name == "evaluation_job" and schedule.cron_schedule == "0 3 * * 0"
    assert schedule.default_status.value == "STOPPED"
    instance = DagsterInstance.get()
    context = build_schedule_context(
        instance=instance,
        instance_ref=instance.get_ref(),
        scheduled_execution_time=datetime(2026, 11, 22, 3, 0, tzinfo=timezone.utc),
        repository_def=defs.get_repository_def(),
        resources=defs.resources,
    )
    (request,) = schedule.evaluate_tick(context).run_requests
    config = request.run_config["ops"]["evaluation_results"]["config"]
    assert config["rerun"] is True and config["limit"] == 1 and config["engine"] == "offline"
    # The partition `deepresearch eval` gives the same suite and settings (limit and rerun aside).
    same = EvalConfig(suite=str(suite), engine="offline", options={"max_steps": 2})
    assert request.partition_key == evaluation_key(same, "offline")
    assert instance.has_dynamic_partition(EVALUATION_PARTITIONS_NAME, request.partition_key)
    assert request.tags["deepresearch/recurring_evaluation"] == "sodium"
    # The requested config is what the job accepts.
    job = defs.resolve_job_def("evaluation_job")
    assert job.run_config_schema.config_type is not None
    from dagster._config import validate_config

    assert validate_config(job.run_config_schema.config_type, request.run_config).success

    # A missing suite skips the tick with the reason; a bad entry fails the file in one message.
    suite.unlink()
    skipped = schedule.evaluate_tick(context)
    assert not skipped.run_requests and "suite file not found" in skipped.skip_message
    recurring.write_text("evaluations:\n  - suite: a.jsonl\n    options: {engine: offline}\n")
    with pytest.raises(RequestError, match="engine"):
        load_recurring(recurring)
