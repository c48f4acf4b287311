"""Sensors that start research runs.

- ``research_requests_sensor``: each request file dropped in ``<requests>/inbox/`` (by hand, by
  ``deepresearch submit`` or by the ``submit_research_job``) becomes a registered question, a
  dynamic partition and a ``research_job`` run.
- ``start_research_sensor``: each successful ``start_research_job`` run (the launchpad's front
  door, which already registered the question and added the partition) becomes one
  ``research_job`` run of that partition.
"""

import json
from datetime import datetime, timezone

from dagster import (
    DagsterRunStatus,
    DefaultSensorStatus,
    RunRequest,
    RunsFilter,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)
from dagster_duckdb import DuckDBResource

from ..core.config import load_settings
from ..core.pipeline import register
from ..core.requests import RequestError, RequestQueue, parse_request_file
from ..core.store.artifacts import sha256_bytes
from .partitions import RESEARCH_PARTITIONS_NAME, research_partitions
from .resources import lineage_store

# Files handled per tick; the rest wait for the next one, so a flood cannot stall the daemon.
MAX_FILES_PER_TICK = 20
# The cursor remembers this many recent submissions (name, mtime, content hash).
CURSOR_MEMORY = 1000


@sensor(
    name="research_requests_sensor",
    job_name="research_job",
    minimum_interval_seconds=10,
    default_status=DefaultSensorStatus.RUNNING,
    description="Turns request files in the queue's inbox/ into research partitions and runs.",
)
def research_requests_sensor(context: SensorEvaluationContext, duckdb: DuckDBResource) -> SensorResult | SkipReason:
    queue = RequestQueue.for_settings(load_settings())
    pending = queue.pending(MAX_FILES_PER_TICK)
    if not pending:
        return SkipReason(f"no request files in {queue.inbox}")
    lineage = lineage_store(duckdb)
    handled: list[str] = json.loads(context.cursor) if context.cursor else []
    run_requests: dict[str, RunRequest] = {}
    for path in pending:
        try:
            requests = parse_request_file(path)
        except (RequestError, OSError) as exc:
            queue.reject(path, str(exc))
            context.log.warning(f"rejected {path.name}: {exc}")
            continue
        # A run key per submission: the same question submitted again is researched again,
        # while a tick evaluated twice does not launch the same submission twice.
        stat = path.stat()
        submission = f"{path.name}:{stat.st_mtime_ns}:{sha256_bytes(path.read_bytes())[:12]}"
        if submission in handled:
            # Handled on an earlier tick whose file move did not stick: never run it twice.
            queue.accept(path)
            continue
        try:
            keys = [register(lineage, r.question, r.options) for r in requests]
        except Exception as exc:  # e.g. the lineage file stayed locked: the file waits for the next tick
            context.log.warning(f"could not register {path.name} yet: {exc}")
            continue
        handled.append(submission)
        accepted = queue.accept(path)
        context.log.info(f"accepted {path.name}: {', '.join(keys)}")
        for key in keys:
            run_requests.setdefault(
                key,
                RunRequest(
                    partition_key=key,
                    run_key=f"{key}@{submission}",
                    tags={"deepresearch/source": "request", "deepresearch/request_file": accepted.name},
                ),
            )
    cursor = json.dumps(handled[-CURSOR_MEMORY:])
    if not run_requests:
        return SensorResult(
            skip_reason="no request accepted: see rejected/*.error.txt; deferred files wait in inbox/", cursor=cursor
        )
    new_keys = [k for k in run_requests if not context.instance.has_dynamic_partition(RESEARCH_PARTITIONS_NAME, k)]
    return SensorResult(
        cursor=cursor,
        run_requests=list(run_requests.values()),
        dynamic_partitions_requests=[research_partitions.build_add_request(new_keys)] if new_keys else [],
    )


START_JOB = "start_research_job"
START_PARTITION_TAG = "deepresearch/partition"  # set by the start_research op (defs/jobs.py)


@sensor(
    name="start_research_sensor",
    job_name="research_job",
    minimum_interval_seconds=5,
    default_status=DefaultSensorStatus.RUNNING,
    description="Launches research_job (all four assets) for the partition each successful start_research_job "
    "run registered.",
)
def start_research_sensor(context: SensorEvaluationContext) -> SensorResult | SkipReason:
    # Cursor: the update time of the newest start run handled; run keys make a re-seen run harmless.
    since = datetime.fromtimestamp(float(context.cursor), tz=timezone.utc) if context.cursor else None
    records = context.instance.get_run_records(
        filters=RunsFilter(job_name=START_JOB, statuses=[DagsterRunStatus.SUCCESS], updated_after=since),
        limit=50,
        ascending=True,
    )
    requests = []
    newest = float(context.cursor or 0)
    for record in records:
        updated = record.update_timestamp
        newest = max(newest, (updated if updated.tzinfo else updated.replace(tzinfo=timezone.utc)).timestamp())
        key = record.dagster_run.tags.get(START_PARTITION_TAG)
        if not key:
            continue
        requests.append(
            RunRequest(
                partition_key=key,
                run_key=f"start:{record.dagster_run.run_id}",
                tags={"deepresearch/source": "ui", "deepresearch/started_by": record.dagster_run.run_id},
            )
        )
    if not requests:
        return SkipReason("no new successful start_research_job run")
    context.log.info(f"launching research_job for {', '.join(r.partition_key or '' for r in requests)}")
    return SensorResult(run_requests=requests, cursor=str(newest))
