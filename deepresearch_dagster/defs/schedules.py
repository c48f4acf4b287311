"""Recurring research: one schedule per topic in ``recurring.yaml`` ($DEEPRESEARCH_RECURRING).

Each tick registers the dated partition ``<slug>--YYYY-MM-DD`` (the date of the scheduled
tick in the topic's time zone) and requests one ``research_job`` run for it; the report of
that partition gets a "What changed since <previous date>" section (core/changes.py).

Recurring evaluations: one schedule ``evaluation_<slug>`` per entry under ``evaluations:``.
Each tick adds the suite's ``evaluations`` partition (the key ``deepresearch eval`` gives the
same suite and settings) and requests ``evaluation_job`` with ``rerun: true``: every item is
researched again, so a regression shows in the figures plotted across its materializations.
"""

from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from dagster import (
    DagsterInvalidDefinitionError,
    DefaultScheduleStatus,
    RunRequest,
    ScheduleDefinition,
    ScheduleEvaluationContext,
    SkipReason,
    schedule,
)
from dagster_duckdb import DuckDBResource

from ..core.config import load_settings
from ..core.evaluation.run import EvalConfig, evaluation_key
from ..core.naming import slugify
from ..core.pipeline import register
from ..core.requests import RecurringConfig, RecurringEvaluation, RecurringTopic, RequestError, load_recurring
from .partitions import EVALUATION_PARTITIONS_NAME, ensure_partition
from .resources import ResearchConfig, lineage_store


def schedule_name(topic: RecurringTopic) -> str:
    return f"recurring_{slugify(topic.slug, 60)}"


def recurring_schedule(topic: RecurringTopic) -> ScheduleDefinition:
    @schedule(
        name=schedule_name(topic),
        cron_schedule=topic.cron,
        execution_timezone=topic.timezone,
        job_name="research_job",
        default_status=DefaultScheduleStatus.RUNNING if topic.status == "running" else DefaultScheduleStatus.STOPPED,
        description=f"Recurring research ({topic.cron}, {topic.timezone}): {topic.question[:200]}",
    )
    def _recurring(context: ScheduleEvaluationContext, duckdb: DuckDBResource) -> RunRequest:
        when = context.scheduled_execution_time or datetime.now(ZoneInfo(topic.timezone))
        key = topic.partition_key(when.astimezone(ZoneInfo(topic.timezone)).date())
        register(lineage_store(duckdb), topic.question, topic.options, partition_key=key)
        # Schedules cannot return partition requests (sensors can): add the partition first so
        # the run request resolves against it.
        ensure_partition(context.instance, key)
        # One run per topic and day, however often the tick is evaluated.
        return RunRequest(
            partition_key=key,
            run_key=key,
            tags={"deepresearch/source": "schedule", "deepresearch/recurring": topic.slug},
        )

    return _recurring


def evaluation_config(entry: RecurringEvaluation) -> EvalConfig:
    """What each tick evaluates: the suite with every item researched again."""
    return EvalConfig(
        suite=entry.suite,
        corpus=entry.corpus,
        engine=entry.engine,
        limit=entry.limit,
        options=entry.options,
        rerun=True,
    )


def evaluation_schedule(entry: RecurringEvaluation) -> ScheduleDefinition:
    @schedule(
        name=f"evaluation_{slugify(entry.slug, 60)}",
        cron_schedule=entry.cron,
        execution_timezone=entry.timezone,
        job_name="evaluation_job",
        default_status=DefaultScheduleStatus.RUNNING if entry.status == "running" else DefaultScheduleStatus.STOPPED,
        description=f"Recurring evaluation ({entry.cron}, {entry.timezone}): re-runs every item of "
        f"{Path(entry.suite).name} into its evaluations partition (evaluation_results plots the figures).",
    )
    def _evaluation(
        context: ScheduleEvaluationContext, research: ResearchConfig, duckdb: DuckDBResource
    ) -> RunRequest | SkipReason:
        if not Path(entry.suite).is_file():
            return SkipReason(f"suite file not found: {entry.suite}")
        config = evaluation_config(entry)
        settings = research.settings(duckdb.database)
        engine = settings.with_options({"engine": config.engine} if config.engine else {}).resolved_engine()
        key = evaluation_key(config, engine)
        # As for topics: the partition must exist before the run request resolves against it.
        ensure_partition(context.instance, key, EVALUATION_PARTITIONS_NAME)
        when = context.scheduled_execution_time
        ops: dict[str, Any] = {"evaluation_results": {"config": config.model_dump(mode="json", exclude_none=True)}}
        return RunRequest(
            partition_key=key,
            # One run per tick, however often the tick is evaluated.
            run_key=f"{key}@{when.isoformat()}" if when else None,
            run_config={"ops": ops},
            tags={
                "deepresearch/source": "schedule",
                "deepresearch/evaluation": key,
                "deepresearch/recurring_evaluation": entry.slug,
            },
        )

    return _evaluation


def recurring_schedules(config: RecurringConfig | None = None, path: Path | None = None) -> list[ScheduleDefinition]:
    """A broken recurring.yaml fails loudly (the code location shows the message) rather than
    silently dropping a schedule someone relies on. A missing suite file only skips its ticks
    (with the reason), so the code location still loads."""
    config = config if config is not None else load_recurring(path or load_settings().recurring_path)
    schedules = []
    for i, topic in enumerate(config.topics):
        try:
            schedules.append(recurring_schedule(topic))
        except DagsterInvalidDefinitionError as exc:
            raise RequestError(f"recurring topic {i + 1} ({topic.slug}): {exc}") from exc
    for i, entry in enumerate(config.evaluations):
        try:
            schedules.append(evaluation_schedule(entry))
        except DagsterInvalidDefinitionError as exc:
            raise RequestError(f"recurring evaluation {i + 1} ({entry.slug}): {exc}") from exc
    return schedules
