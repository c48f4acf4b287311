"""Running one job for one partition in this process: the one place that calls
``execute_in_process``. The launcher (CLI, schedules, tests, benchmarks) and the evaluation asset
(which researches each item through ``research_job``) both use it; it needs no Definitions
builder, so defs modules can use it without importing the launcher.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from typing import Any

from dagster import DagsterInstance, Definitions

from ..core.errors import ResearchInterrupted

# Dagster's console logger prints step failures with stack traces; the CLI prints one line instead.
QUIET_LOGS = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}
# In-process runs carry the process that runs them, so a later command can tell a dead run
# (killed, machine rebooted) from a live one: Dagster's run monitoring only watches runs that
# a run launcher started, not ``execute_in_process``.
PID_TAG, HOST_TAG = "deepresearch/pid", "deepresearch/host"


def failure_kind(exc: BaseException) -> str:
    """What a step failure was, for its Failure's metadata: ``storage`` (full, read-only or corrupt
    storage), ``busy`` (another run holds the partition) or ``research``."""
    from ..core.errors import StorageError
    from ..core.store.partition_lock import PartitionBusy

    if isinstance(exc, StorageError):
        return "storage"
    return "busy" if isinstance(exc, PartitionBusy) else "research"


def failure_kinds(events: list[Any]) -> list[str]:
    """:func:`failure_kind` of each failed step that says (its Failure's ``kind`` metadata)."""
    kinds = []
    for event in events:
        if not event.is_step_failure:
            continue
        data = event.step_failure_data.user_failure_data
        kind = data.metadata.get("kind") if data and data.metadata else None
        if kind is not None:
            kinds.append(str(getattr(kind, "value", kind)))
    return kinds


def failure_reasons(events: list[Any]) -> list[str]:
    """The user-facing description of each failed step (a Failure's text, else the error)."""
    reasons = []
    for event in events:
        if not event.is_step_failure:
            continue
        data = event.step_failure_data
        if data.user_failure_data and data.user_failure_data.description:
            reasons.append(data.user_failure_data.description)
        elif data.error and data.error.cls_name == "DagsterExecutionInterruptedError":
            # Dagster raised the interrupt itself at a step boundary.
            reasons.append(f"{event.step_key} failed: {ResearchInterrupted.MESSAGE}")
        elif data.error and data.error.message.startswith("Exceeded max_retries") and data.error.cause:
            # Retries ran out: say what each attempt met, not only that they ran out.
            cause = data.error.cause.message.strip().splitlines()[0]
            reasons.append(f"{cause} ({data.error.message.strip().replace('Exceeded', 'after')})")
        elif data.error:
            reasons.append(data.error.message.strip())
    return reasons or _run_failure(events)


def _run_failure(events: list[Any]) -> list[str]:
    """A run that failed outside any step's own failure: a step lost with its Celery worker
    ("During celery execution errors occurred in workers: [tool_outputs]: WorkerLostError …")."""
    for event in events:
        error = getattr(event.event_specific_data, "error", None) if event.is_run_failure else None
        if error is not None:
            return [" ".join(line.strip() for line in error.message.strip().splitlines()[:3])[:400]]
    return []


@dataclass(frozen=True)
class RunOutcome:
    success: bool
    run_id: str
    # The last failed step's user-facing reason ("" on success).
    message: str = ""
    reasons: list[str] = field(default_factory=list)
    # Every event of the run (asset checks, materializations) for callers that inspect it.
    events: list[Any] = field(default_factory=list, repr=False)

    @property
    def interrupted(self) -> bool:
        return ResearchInterrupted.MESSAGE in self.message

    @property
    def storage_failure(self) -> bool:
        """The run stopped on a full, read-only or corrupt storage (its message says what to do)."""
        return not self.success and "storage" in failure_kinds(self.events)


def _execute_on_workers(
    job: Any,
    partition_key: str,
    instance: DagsterInstance,
    run_config: dict[str, Any],
    tags: dict[str, str],
    run_id: str | None,
) -> Any:
    """A run whose steps go to Celery workers (``celery_app.executor``): this process orchestrates,
    and every process (this one and the workers) builds the job by name through
    ``definitions.job_definition``, from its own configuration read then (``execute_in_process``
    would run every step here, whatever the executor)."""
    from dagster import build_reconstructable_job
    from dagster._core.execution.api import execute_run

    recon = build_reconstructable_job("deepresearch_dagster.definitions", "job_definition", (job.name,))
    run = instance.create_run_for_job(
        job_def=job,
        run_id=run_id,
        run_config=run_config,
        tags={**tags, "dagster/partition": partition_key},
        job_code_origin=recon.get_python_origin(),
    )
    return execute_run(recon, run, instance)


def execute(
    definitions: Definitions,
    job_name: str,
    partition_key: str,
    instance: DagsterInstance,
    run_config: dict[str, Any],
    tags: dict[str, str] | None = None,
    run_id: str | None = None,
) -> RunOutcome:
    """``job_name`` for one (existing) partition, tagged with this process; never raises for a
    failed step (the outcome says why). ``run_id``: the run's id, chosen by the caller (the CLI
    names it in the partition's lock before the run starts)."""
    job = definitions.resolve_job_def(job_name)
    tags = {**(tags or {}), PID_TAG: str(os.getpid()), HOST_TAG: socket.gethostname()}
    if job.executor_def.name == "celery":
        result = _execute_on_workers(job, partition_key, instance, run_config, tags, run_id)
    else:
        from .event_log import held_event_log

        with held_event_log(instance):  # one SQLite connection per event database for the run
            result = job.execute_in_process(
                partition_key=partition_key,
                instance=instance,
                raise_on_error=False,
                run_id=run_id,
                run_config=run_config,
                tags=tags,
            )
    return _outcome(result)


def _outcome(result: Any) -> RunOutcome:
    reasons = [] if result.success else failure_reasons(result.all_events)
    message = "" if result.success else (reasons[-1] if reasons else "unknown error")
    return RunOutcome(result.success, result.run_id, message, reasons, list(result.all_events))


def reexecute_from_failure(job_name: str, parent_run_id: str, instance: DagsterInstance) -> RunOutcome:
    """A failed run of ``job_name`` again from its failed steps (Dagster's from-failure
    re-execution, as the UI's "Re-execute from failure"): the steps that succeeded are not run
    again, their outputs are read where the IO managers stored them; the steps go to whichever
    executor the job has (Celery workers when configured)."""
    from dagster import ReexecutionOptions, build_reconstructable_job, execute_job

    recon = build_reconstructable_job("deepresearch_dagster.definitions", "job_definition", (job_name,))
    parent = instance.get_run_by_id(parent_run_id)
    # The parent's tags (its partition among them), this process as the one orchestrating.
    tags = {**(parent.tags if parent else {}), PID_TAG: str(os.getpid()), HOST_TAG: socket.gethostname()}
    options = ReexecutionOptions.from_failure(parent_run_id, instance)
    return _outcome(execute_job(recon, instance, tags=tags, reexecution_options=options))
