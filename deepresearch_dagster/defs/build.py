"""The one composer of the Definitions object (``definitions.py`` exposes it to Dagster)."""

from dagster import Definitions, in_process_executor

from ..core.config import load_settings
from .assets import research_assets
from .checks import research_checks
from .evaluations import evaluation_assets, evaluation_job
from .jobs import all_jobs
from .resources import default_resources
from .schedules import recurring_schedules
from .sensors import research_requests_sensor, start_research_sensor
from .tools import with_configured_tools


def build_definitions(schedules: bool = True) -> Definitions:
    """Resources and schedules come from the configuration read when this is called, so the
    CLI and tests build their own. ``schedules=False`` leaves out recurring.yaml (running one
    job needs no schedule, and a broken file must not stop it)."""
    settings = load_settings()
    if settings.celery_broker:
        from ..celery_app import executor

        # A team deployment: each step is a Celery task, taken by any worker (docs/deployment.md).
        run_executor = executor()
    else:
        # One process per run: the loop and the mapped compression op share DuckDB without
        # contending for its single-writer lock, and no per-op process start-up is paid.
        run_executor = in_process_executor
    return Definitions(
        # The evaluation asset researches its items through research_job of definitions built
        # the same way (in its run's process, only when it runs).
        # The configured MCP servers and plugin tools are listed on tool_outputs' definition.
        assets=[
            *with_configured_tools(research_assets, settings),
            *evaluation_assets(lambda: build_definitions(schedules=False)),
        ],
        asset_checks=research_checks,
        jobs=[*all_jobs, evaluation_job],
        sensors=[research_requests_sensor, start_research_sensor],
        # One schedule per topic and per evaluation in recurring.yaml (DEEPRESEARCH_RECURRING),
        # read at load time.
        schedules=recurring_schedules(path=settings.recurring_path) if schedules else [],
        resources=default_resources(settings),
        executor=run_executor,
    )
