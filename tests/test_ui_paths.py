"""The UI's front door without a browser: ``start_research_job`` (validate, register, add the
partition, tag the run), the ``start_research_sensor`` that launches ``research_job`` for it, the
fail-fast subset materialization, prefilled launchpads and asset-check descriptions."""

from __future__ import annotations

import time

from dagster import DagsterInstance, build_sensor_context

from deepresearch_dagster.core.config import RequestOptions, ResearchSettings
from deepresearch_dagster.core.naming import partition_key_for
from deepresearch_dagster.core.pipeline import register
from deepresearch_dagster.core.store.lineage import LineageStore
from deepresearch_dagster.defs.build import build_definitions
from deepresearch_dagster.defs.jobs import EMPTY_HINT, PARTITION_TAG
from deepresearch_dagster.defs.partitions import RESEARCH_PARTITIONS_NAME
from deepresearch_dagster.defs.runs import failure_reasons
from deepresearch_dagster.defs.sensors import start_research_sensor
from deepresearch_dagster.launcher import ensure_instance, run_job

QUESTION = "Sodium-ion batteries: how do they work, and what do they cost (per kWh)? [2026]"


def _start(instance: DagsterInstance, **config: object):
    job = build_definitions(schedules=False).resolve_job_def("start_research_job")
    return job.execute_in_process(
        run_config={"ops": {"start_research": {"config": config}}}, instance=instance, raise_on_error=False
    )


def test_launchpads_open_prefilled_and_valid():
    defs = build_definitions(schedules=False)
    start = defs.resolve_job_def("start_research_job")
    config = start.run_config["ops"]["start_research"]["config"]
    # An empty question to type into: no sample text whose second YAML line could be left behind.
    assert config["question"] == ""
    assert set(config) == {"question", *RequestOptions.model_fields} and config["engine"] is None
    assert start.run_config_schema.config_type is not None
    for name, keys in (
        ("recompress_job", {"compressor_model", "compressor_prompt_file"}),
        ("rewrite_report_job", {"reporter_model"}),
    ):
        # Partitioned jobs: the launchpad loads this config when a partition is picked.
        config_for = defs.resolve_job_def(name).partitioned_config.get_run_config_for_partition_key
        prefilled = config_for("any-partition")["resources"]["research"]["config"]
        assert set(prefilled) == keys and all(v == "" for v in prefilled.values())


def test_start_research_registers_the_question_and_the_sensor_launches_it(corpus_dir):
    instance = ensure_instance()
    result = _start(instance, question=QUESTION, engine="offline", max_steps=2, corpus_dir=str(corpus_dir))
    assert result.success
    key = partition_key_for(QUESTION)
    assert result.output_for_node("start_research") == key
    assert instance.has_dynamic_partition(RESEARCH_PARTITIONS_NAME, key)
    assert instance.get_run_by_id(result.run_id).tags[PARTITION_TAG] == key
    lineage = LineageStore.at(ResearchSettings.from_env().duckdb_file)
    question, options = lineage.get_request(key)
    assert question == QUESTION and options == {"engine": "offline", "max_steps": 2, "corpus_dir": str(corpus_dir)}

    time.sleep(0.01)
    context = build_sensor_context(instance=instance)
    outcome = start_research_sensor(context)
    (request,) = outcome.run_requests
    assert request.partition_key == key and request.tags["deepresearch/started_by"] == result.run_id
    # The cursor moved past the start run: it is not launched twice.
    again = start_research_sensor(build_sensor_context(instance=instance, cursor=outcome.cursor))
    assert not getattr(again, "run_requests", None)
    instance.dispose()


def test_start_research_refuses_a_bad_question_or_option_in_one_line():
    instance = ensure_instance()
    bad_question = _start(instance, question="   ")
    assert not bad_question.success
    (reason,) = failure_reasons(bad_question.all_events)
    assert reason.startswith("invalid question:") and "\n" not in reason
    assert reason == f"invalid question: {EMPTY_HINT}"  # the launchpad left as it opened
    bad_option = _start(instance, question=QUESTION, max_steps=99)
    assert not bad_option.success
    (reason,) = failure_reasons(bad_option.all_events)
    assert reason.startswith("invalid option:") and "max_steps" in reason
    assert instance.get_dynamic_partitions(RESEARCH_PARTITIONS_NAME) == []
    instance.dispose()


def test_materializing_a_stage_whose_upstream_is_missing_fails_fast_without_retries():
    settings = ResearchSettings.from_env()
    key = register(LineageStore.at(settings.duckdb_file), QUESTION, {"engine": "offline"})
    outcome = run_job("rewrite_report_job", key)
    assert not outcome.success
    assert outcome.message.startswith("compressed_summaries of partition")
    assert "launch research_job" in outcome.message and "\n" not in outcome.message
    assert not [e for e in outcome.events if e.event_type_value == "STEP_UP_FOR_RETRY"]


def test_every_asset_check_has_a_description():
    from deepresearch_dagster.defs.assets import research_assets
    from deepresearch_dagster.defs.checks import research_checks

    specs = [spec for d in [*research_assets, *research_checks] for spec in d.check_specs]
    assert len(specs) == 6
    for spec in specs:
        assert spec.description, spec.name
    # The severity a check means (core/checks.py) is said in its description for the WARN ones.
    warn = {s.name for s in specs if s.description.startswith("WARN")}
    assert warn == {"context_reduction_above_threshold", "report_cites_sources"}
