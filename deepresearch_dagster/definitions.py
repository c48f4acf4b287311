"""Dagster definitions: ``dagster dev`` / ``dg dev`` load this module."""

from dagster import Definitions, in_process_executor

from .defs.assets import research_assets
from .defs.checks import research_checks
from .defs.jobs import all_jobs, research_job
from .defs.resources import default_resources
from .defs.schedules import recurring_schedules
from .defs.sensors import research_requests_sensor

__all__ = ["build_definitions", "defs", "research_job"]


def build_definitions() -> Definitions:
    """Resources read the environment when built, so the CLI and tests build their own."""
    return Definitions(
        assets=research_assets,
        asset_checks=research_checks,
        jobs=all_jobs,
        sensors=[research_requests_sensor],
        # One schedule per topic in recurring.yaml ($DEEPRESEARCH_RECURRING), read at load time.
        schedules=recurring_schedules(),
        resources=default_resources(),
        # One process per run: the loop and the mapped compression op share DuckDB without
        # contending for its single-writer lock, and no per-op process start-up is paid.
        executor=in_process_executor,
    )


defs = build_definitions()
