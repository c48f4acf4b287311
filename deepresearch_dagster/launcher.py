"""The one way to run research jobs: ensure the instance, ensure the partition, run a job in
process, and turn a failure into one message. The CLI, schedules, tests and benchmarks use it.

First use of a DAGSTER_HOME by several processes at once: Dagster's SQLite instance storage
creates its databases and stamps their alembic revision on first open. Eight ``deepresearch
run`` processes starting together on a fresh home can race there ("Version table
'alembic_version' has more than one head present"). The first process creates the storage under
an exclusive file lock; the others wait, then find it ready.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

from dagster import DagsterInstance, Definitions

from .core.config import (
    FIX_DAGSTER_YAML,
    POSTGRES_URL_ENV,
    check_dagster_yaml,
    dagster_home,
    export_celery_broker,
    export_dagster_home,
    export_postgres_url,
    load_settings,
)
from .core.errors import (
    INSTANCE_STORAGE,
    ConfigError,
    ResearchError,
    ResearchInterrupted,
    StorageError,
    storage_failure,
)
from .core.store.artifacts import atomic_write_bytes, check_writable
from .core.store.lineage import LineageStore
from .defs.partitions import RESEARCH_PARTITIONS_NAME, ensure_partition
from .defs.runs import HOST_TAG, PID_TAG, QUIET_LOGS, RunOutcome, execute
from .defs.runs import failure_reasons as failure_reasons  # re-exported (tests, callers of the launcher)

STORAGE_READY = ".deepresearch_storage_ready"


def init_instance_storage(home: Path) -> None:
    marker = home / STORAGE_READY
    if marker.exists():
        return
    try:
        import fcntl
    except ImportError:  # no POSIX locks (Windows): keep Dagster's own behaviour
        return
    with (home / ".deepresearch_storage.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not marker.exists():
                # Opening the instance creates and migrates its storage; nothing else is needed.
                DagsterInstance.from_config(str(home)).dispose()
                marker.touch()
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


PACKAGE_DIR = Path(__file__).resolve().parent
# Appended to the packaged dagster.yaml when a Postgres URL is configured; deploy/dagster-postgres.yaml
# is this file as generated (tests/test_team_deployment.py keeps the two equal).
POSTGRES_STORAGE = f"""
# A team deployment (docs/deployment.md): runs, event logs, schedules and the run queue live in
# Postgres, shared by every host. The URL (postgresql+psycopg2://user:password@host:port/db) is read
# from the environment, so its password is never written in this file.
storage:
  postgres:
    postgres_url:
      env: {POSTGRES_URL_ENV}
"""


def compute_logs_yaml(artifacts_url: str, endpoint: str | None = None, region: str = "us-east-1") -> str:
    """The instance's ``compute_logs`` block for artifacts on an object store: each step's stdout
    and stderr go, once the step ends, to ``<prefix>-compute-logs/`` beside the artifacts (never
    among them), where the UI of any host reads them, whichever worker ran the step. The bucket,
    endpoint and region are no secrets; the credentials stay in the AWS_* variables."""
    bucket, _, prefix = artifacts_url.removeprefix("s3://").partition("/")
    prefix = prefix.strip("/")
    endpoint_line = f"\n    endpoint_url: {endpoint}" if endpoint else ""
    return f"""
# Compute logs (each step's stdout and stderr) beside the artifacts of {artifacts_url}: the UI
# of any host shows them, whichever worker ran the step (docs/deployment.md). dagster-aws's
# S3ComputeLogManager uploads them as a step ends, with the credentials of the AWS_* variables.
compute_logs:
  module: dagster_aws.s3.compute_log_manager
  class: S3ComputeLogManager
  config:
    bucket: {bucket}
    prefix: {f"{prefix}-compute-logs" if prefix else "compute-logs"}
    region: {region}{endpoint_line}
    skip_empty_files: true
"""


def instance_yaml(postgres: bool = False, compute_logs: str = "") -> bytes:
    """The ``dagster.yaml`` a new DAGSTER_HOME gets: the packaged one, plus Postgres storage, plus
    the compute logs block (:func:`compute_logs_yaml`)."""
    default = (PACKAGE_DIR / "dagster_home" / "dagster.yaml").read_bytes()
    return default + (POSTGRES_STORAGE.encode() if postgres else b"") + compute_logs.encode()


def _stores_in_postgres(path: Path) -> bool:
    import yaml

    data = yaml.safe_load(path.read_bytes()) or {}
    storage = data.get("storage") or {}
    return isinstance(storage, dict) and "postgres" in storage


def _instance_yaml_in_place(home: Path, postgres_url: str | None, compute_logs: str = "") -> None:
    """Write ``dagster.yaml`` when missing (the packaged one, becoming the Postgres one when a URL
    is configured, with compute logs on the object store when the artifacts are there: a home still
    holding an untouched generated one with less is switched too); a hand-written one is kept, but
    one that would store the instance locally while a Postgres URL is configured is refused: runs
    would then be invisible to the other hosts."""
    path = home / "dagster.yaml"
    wanted = instance_yaml(postgres=bool(postgres_url), compute_logs=compute_logs)
    current = path.read_bytes() if path.exists() else None
    if current != wanted and current in {None, instance_yaml(), instance_yaml(postgres=bool(postgres_url))}:
        atomic_write_bytes(path, wanted)
    check_dagster_yaml(home)
    if postgres_url and not _stores_in_postgres(path):
        raise ConfigError(
            f"{POSTGRES_URL_ENV} is set but {path} keeps the Dagster instance in local files: add the storage "
            "block of deploy/dagster-postgres.yaml to it (docs/deployment.md)"
        )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def reconcile_stale_runs(instance: DagsterInstance, lineage: LineageStore | None = None) -> list[str]:
    """Mark failed the in-process runs of this host whose process is gone, in Dagster and in
    DuckDB's ``runs``; otherwise they stay STARTED forever and fill the run queue."""
    from dagster import DagsterRunStatus, RunsFilter

    stale = []
    runs = instance.get_runs(
        RunsFilter(
            statuses=[DagsterRunStatus.STARTED, DagsterRunStatus.STARTING], tags={HOST_TAG: socket.gethostname()}
        )
    )
    for run in runs:
        pid = int(run.tags.get(PID_TAG) or 0)
        if not pid or _alive(pid):
            continue
        reason = f"the process that ran it (pid {pid}) is gone; the run was abandoned"
        instance.report_run_failed(run, reason)
        if lineage is not None:
            lineage.abandon_run(run.run_id, reason)
        stale.append(run.run_id)
    return stale


def ensure_instance() -> DagsterInstance:
    """The persistent instance ($DAGSTER_HOME, default ./.dagster_home), created if needed.

    A broken instance is one line, before anything is registered: a ``dagster.yaml`` that is not
    YAML or not a Dagster configuration raises :class:`ConfigError`, a full, read-only or corrupt
    instance storage :class:`StorageError` (never Dagster's or SQLAlchemy's tracebacks)."""
    home = dagster_home()
    try:
        settings = load_settings()
        postgres_url = settings.postgres
        home.mkdir(parents=True, exist_ok=True)
        # Atomic, and the storage is created under a lock: concurrent first runs must not race.
        url, endpoint, region = settings.artifacts_url, settings.s3_endpoint, settings.s3_region
        logs = compute_logs_yaml(url, endpoint, region) if url else ""
        _instance_yaml_in_place(home, postgres_url, logs)
        check_writable(home)  # a full disk here is one line now, not an SQLite error mid-run
        if postgres_url:
            from .core.store.postgres import check_reachable

            check_reachable(postgres_url)  # unreachable: one line naming the server, before Dagster
            export_postgres_url(postgres_url)
        if settings.celery_broker:
            export_celery_broker(settings.celery_broker)
        if settings.artifacts_url:
            from .core.store.object_store import object_root

            object_root(settings)  # unreachable, no bucket, refused keys: one line, before Dagster
        export_dagster_home(home)
        init_instance_storage(home)
        return DagsterInstance.get()
    except ResearchError:
        raise
    except Exception as exc:
        raise instance_failure(exc, home) from exc


def instance_failure(exc: BaseException, home: Path) -> ResearchError:
    """One line for an instance that cannot be loaded: the storage problem behind ``exc`` (full,
    read-only or corrupt), else its ``dagster.yaml`` configuration."""
    storage = storage_failure(exc)
    if storage is not None:
        return StorageError(str(storage).replace(INSTANCE_STORAGE, f"the Dagster instance storage in {home}"))
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    # DagsterInvalidConfigError: "Errors whilst loading …" then "Error 1: <what>"
    detail = next((line for line in lines if line.startswith("Error 1:")), lines[0] if lines else "")
    detail = detail.removeprefix("Error 1: ")[:300]
    return ConfigError(
        f"{home / 'dagster.yaml'} is not a valid Dagster instance configuration ({type(exc).__name__}: {detail}): "
        f"{FIX_DAGSTER_YAML}"
    )


def _run_lineage_session(definitions: Definitions, lineage: LineageStore | None) -> AbstractContextManager[None]:
    duckdb = (definitions.resources or {}).get("duckdb")
    database = getattr(duckdb, "database", None)
    if isinstance(database, str) and not getattr(duckdb, "connection_config", None):
        return LineageStore.at(database).session()
    return lineage.session() if lineage is not None else nullcontext()


def run_job(
    job_name: str,
    partition_key: str,
    instance: DagsterInstance | None = None,
    resources_config: dict[str, Any] | None = None,
    tags: dict[str, str] | None = None,
    definitions: Definitions | None = None,
    quiet: bool = True,
    lineage: LineageStore | None = None,
    partitions: str = RESEARCH_PARTITIONS_NAME,
    ops_config: dict[str, Any] | None = None,
    run_id: str | None = None,
) -> RunOutcome:
    """Run ``job_name`` for one partition (of ``partitions``) in this process (the partition is
    added if missing)."""
    from .defs.build import build_definitions

    instance = instance or ensure_instance()
    reconcile_stale_runs(instance, lineage)
    ensure_partition(instance, partition_key, partitions)
    run_config: dict[str, Any] = dict(QUIET_LOGS) if quiet else {}
    if resources_config:
        run_config["resources"] = resources_config
    if ops_config:
        run_config["ops"] = ops_config
    # Schedules are not needed to run a job: a broken recurring.yaml must not stop a research.
    definitions = definitions or build_definitions(schedules=False)
    # One lineage session for the whole run: its ops (all in this process) share one DuckDB
    # connection instead of opening one each; it is let go whenever another process waits.
    with _run_lineage_session(definitions, lineage):
        return execute(definitions, job_name, partition_key, instance, run_config, tags, run_id=run_id)


def research_runner(
    instance: DagsterInstance, lineage: LineageStore, tags: dict[str, str] | None = None
) -> Callable[[str], str | None]:
    """An evaluation's researcher: ``research_job`` for one (registered) partition through the
    real Dagster instance; returns the failure's one-line reason, or ``None``. An interrupted
    run (Ctrl-C, SIGTERM) stops the evaluation instead of failing one item."""
    from .core.errors import redact

    def research(partition_key: str) -> str | None:
        outcome = run_job("research_job", partition_key, instance, tags=tags, lineage=lineage)
        if outcome.interrupted:
            raise ResearchInterrupted()
        return None if outcome.success else redact(outcome.message or "the research failed")

    return research
