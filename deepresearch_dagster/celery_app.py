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

import contextlib
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
    # The step's own stdout and stderr, not Celery's logging proxies (which have no file descriptor):
    # Dagster captures a step's output at the descriptor, into its compute log (launcher.py).
    app.conf.worker_redirect_stdouts = False
    give_lost_steps_to_another_worker(app, settings.celery_worker_lost_s)
    create_task(app)
    _preload()
    return app


def give_lost_steps_to_another_worker(app: Any, lost_s: float) -> None:
    """A whole worker lost (SIGKILL, a host gone): its step goes to another worker.

    Nobody reports such a loss, and dagster-celery's executor would wait for the step's result for
    ever. So a step's message is acknowledged only once the step is done (``task_acks_late``);
    Redis keeps an unacknowledged message aside and, once it is older than the visibility timeout,
    any worker's periodic sweep puts it back in the queue (kombu's ``restore_visible``), where
    another worker takes it: the same Dagster step of the same run, its tool calls served from the
    tool cache. A live worker renews the claim on the messages it holds every quarter of the
    timeout (:class:`_KeepClaimed`), so a step that runs longer than the timeout is never handed to
    a second worker while the first still runs it. Not ``task_reject_on_worker_lost``: a step
    process that dies under a live worker (a reader that exhausts memory) fails the run, which is
    re-executed from failure by hand, rather than crashing worker after worker."""
    from celery import bootsteps

    app.conf.task_acks_late = True
    app.conf.broker_transport_options = {
        **(app.conf.broker_transport_options or {}),
        "visibility_timeout": lost_s,
        # Sweep every quarter of the timeout (kombu's default is 10 s × 10 polls).
        "unacked_restore_interval": max(1.0, lost_s / 4),
        "unacked_restore_throttle": 1,
        # A sweep holds a Redis lock for milliseconds; a worker killed while holding it (kombu's
        # default expiry: 300 s) would stop every sweep for that long.
        "unacked_mutex_expire": max(1.0, lost_s / 2),
    }

    class _KeepClaimed(bootsteps.StartStopStep):
        requires = ("celery.worker.consumer.tasks:Tasks",)

        def start(self, consumer: Any) -> None:
            self.tref = consumer.timer.call_repeatedly(lost_s / 4, self.renew, (consumer,), priority=10)

        def stop(self, consumer: Any) -> None:
            if getattr(self, "tref", None) is not None:
                self.tref.cancel()

        def renew(self, consumer: Any) -> None:
            import time

            from celery.worker import state

            channel = consumer.task_consumer.channel if consumer.task_consumer else None
            key = getattr(channel, "unacked_index_key", None)  # Redis only: other brokers track their own
            tags = {r.message.delivery_tag for r in [*state.reserved_requests, *state.active_requests]}
            if key and tags:
                # A client of the channel's own pool (its ``client`` may be waiting on a BRPOP), as
                # kombu's QoS does; XX: only a claim still held (an acknowledged or restored one stays gone).
                with contextlib.suppress(*channel.connection_errors), channel.conn_or_acquire() as client:
                    # Redis away for a moment: the next renewal, a quarter of the timeout later, makes up for it.
                    client.zadd(key, dict.fromkeys(tags, time.time()), xx=True)

    app.steps["consumer"].add(_KeepClaimed)


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
