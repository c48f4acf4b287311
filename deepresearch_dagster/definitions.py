"""Dagster definitions: ``dagster dev`` / ``dg dev`` load this module."""

from dagster import AssetSelection, Definitions, define_asset_job, in_process_executor

from .assets import research_assets
from .partitions import research_partitions
from .resources import default_resources

research_job = define_asset_job(
    "research_job",
    selection=AssetSelection.assets(*research_assets),
    partitions_def=research_partitions,
    description="Plan, research, compress and report one research partition.",
)


def build_definitions() -> Definitions:
    """Resources read the environment when built, so the CLI and tests build their own."""
    return Definitions(
        assets=research_assets,
        jobs=[research_job],
        resources=default_resources(),
        # One process per run: the loop and the mapped compression op share DuckDB without
        # contending for its single-writer lock, and no per-op process start-up is paid.
        executor=in_process_executor,
    )


defs = build_definitions()
