"""Steps on Celery workers (``dagster-celery``, Redis as broker and result backend), for a team
deployment (docs/deployment.md).

With ``DEEPRESEARCH_CELERY_BROKER_URL`` set, the jobs use :func:`executor`: each step (each
mapped ``compress_tool_output`` among them) is a Celery task that any worker takes. A worker is

    celery -A deepresearch_dagster.celery_app worker -Q dagster -n w1@%h

started with the same settings as the host that launches runs (the Postgres instance, the
object store, the broker). This module is the ``-A`` target: dagster-celery's own app would read
the broker from a generated ``dagster_celery_config`` module; here it comes from the one
configuration reader.
"""

from __future__ import annotations

import warnings
from typing import Any

from .core.config import CELERY_BROKER_ENV, export_postgres_url, load_settings

# dagster-celery registers its task again for every step it submits, and Celery 5.7 warns each
# time (seven lines on the terminal per step); the task is the same one.
warnings.filterwarnings("ignore", message="Task name 'execute_plan' is already registered")


def executor() -> Any:
    """The Celery executor; the broker is named by its variable, so the URL (and any password in
    it) is never part of a run's stored config."""
    from dagster_celery import celery_executor, core_execution_loop

    # The orchestrating process looks for finished tasks once a TICK_SECONDS (1 s by default, no
    # setting for it): each step then waits up to a second for the one before it. A tenth of a
    # second costs Redis ten small reads a second per run.
    core_execution_loop.TICK_SECONDS = 0.1
    url = {"env": CELERY_BROKER_ENV}
    return celery_executor.configured({"broker": url, "backend": url}, name="celery")


def _app() -> Any:
    from dagster_celery.make_app import make_app
    from dagster_celery.tasks import create_task

    settings = load_settings()
    if settings.postgres:
        # The run's instance comes to the worker as a reference naming the variable: its value
        # here must be the psycopg2 form too (core/config.py), whatever the worker was given.
        export_postgres_url(settings.postgres)
    broker = settings.celery_broker
    if not broker:
        from .core.errors import ConfigError

        raise ConfigError(f"{CELERY_BROKER_ENV} is not set: a worker needs the broker's URL (redis://host:6379/0)")
    # The same arguments as the executor's side (CeleryExecutor.app_args), so both build one app.
    app = make_app({"broker": broker, "backend": broker, "include": [], "config_source": {}, "retries": None})
    # One task at a time per worker process, none reserved ahead: a free worker takes the next
    # step instead of it waiting behind a busy one (dagster-celery's own worker command does the same).
    app.conf.worker_prefetch_multiplier = 1
    create_task(app)
    _preload()
    return app


def _preload() -> None:
    """Import the steps' code in the worker's main process, before it forks the processes that
    run the tasks: they inherit it, so a step no longer pays its process's first imports (the
    project's assets and jobs, Dagster's step execution, the model client: 2-4 s on two busy
    cores, the first step of every worker process). Not ``definitions`` itself, which builds the
    executor from this module (each task builds its job, ``defs.runs``). Nothing connects here."""
    import dagster._core.execution.api  # noqa: F401 - the step execution dagster-celery calls

    from .core.llm import openai_engine  # noqa: F401 - imported by the first model call otherwise
    from .defs import checks, evaluations, jobs, sensors  # noqa: F401 - what defs.build composes


def __getattr__(name: str) -> Any:
    # Built when the celery CLI asks for it (``-A deepresearch_dagster.celery_app``), not on import.
    if name in ("app", "celery"):
        value = _app()
        globals()["app"] = value
        return value
    raise AttributeError(name)
