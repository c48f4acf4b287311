"""The request queue as a sensor: each request file dropped in ``<requests>/inbox/`` (by hand,
by ``deepresearch submit`` or by the ``submit_research_job``) becomes a registered question, a
dynamic partition and a ``research_job`` run."""

import json

from dagster import (
    DefaultSensorStatus,
    RunRequest,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)
from dagster_duckdb import DuckDBResource

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
    queue = RequestQueue.from_env()
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
