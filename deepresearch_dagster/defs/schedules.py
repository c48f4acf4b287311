"""Recurring research: one schedule per topic in ``recurring.yaml`` ($DEEPRESEARCH_RECURRING).

Each tick registers the dated partition ``<slug>--YYYY-MM-DD`` (the date of the scheduled
tick in the topic's time zone) and requests one ``research_job`` run for it; the report of
that partition gets a "What changed since <previous date>" section (core/changes.py).
"""

from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

from dagster import (
    DagsterInvalidDefinitionError,
    DefaultScheduleStatus,
    RunRequest,
    ScheduleDefinition,
    ScheduleEvaluationContext,
    schedule,
)
from dagster_duckdb import DuckDBResource

from ..core.config import load_settings
from ..core.naming import slugify
from ..core.pipeline import register
from ..core.requests import RecurringConfig, RecurringTopic, RequestError, load_recurring
from .partitions import ensure_partition
from .resources import lineage_store


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


def recurring_schedules(config: RecurringConfig | None = None, path: Path | None = None) -> list[ScheduleDefinition]:
    """A broken recurring.yaml fails loudly (the code location shows the message) rather than
    silently dropping a schedule someone relies on."""
    config = config if config is not None else load_recurring(path or load_settings().recurring_path)
    schedules = []
    for i, topic in enumerate(config.topics):
        try:
            schedules.append(recurring_schedule(topic))
        except DagsterInvalidDefinitionError as exc:
            raise RequestError(f"recurring topic {i + 1} ({topic.slug}): {exc}") from exc
    return schedules
