"""What a rehearsed team deployment (``deepresearch_dagster/team_rehearsal.py``) reads from the
shared Postgres database: Dagster's run and event tables (which Celery worker ran which step),
the lineage tables (core/store/schema.py, schema ``deepresearch``), and, for the reference, a
lineage DuckDB file. Read-only; plain psycopg2, apart from the lineage store's own connection.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from .schema import SCHEMA

# Not compared with the single machine: its researches run through the plain pipeline (no
# Dagster runs, so no lineage `runs` rows).
NOT_COMPARED = {"runs"}
_WORKER = re.compile(r"\b(w\d+)@")


def _rows(url: str, sql: str, params: tuple = ()) -> list[tuple]:
    import psycopg2

    conn = psycopg2.connect(url)
    try:
        with conn.cursor() as cur:
            cur.execute(sql, params)
            return cur.fetchall()
    finally:
        conn.close()


def _steps_started(url: str) -> list[tuple[str, str, str | None, str | None]]:
    """(worker, run id, step key, partition) of every step a Celery worker reported starting
    (dagster-celery's "Executing steps … in celery worker" engine event), in the order reported."""
    rows = _rows(
        url,
        "SELECT e.event, e.run_id, e.step_key, t.value FROM event_logs e LEFT JOIN run_tags t ON t.run_id = e.run_id "
        "AND t.key = 'dagster/partition' WHERE e.dagster_event_type = 'ENGINE_EVENT' "
        "AND e.event LIKE '%%Celery worker%%' ORDER BY e.id",
    )
    return [
        (m.group(1), run_id, step, partition) for event, run_id, step, partition in rows if (m := _WORKER.search(event))
    ]


def compressing_steps(url: str) -> list[tuple[str, str]]:
    """(worker, partition) of each worker whose current step is a ``tool_outputs`` step that has
    compressed at least one tool output; [] before the first run created the tables. A worker runs
    one step at a time (``--concurrency 1``): its current step is the last it reported starting,
    if that step has not ended; an older unended step (one whose process was killed) is not."""
    import psycopg2

    try:
        current = {worker: rest for worker, *rest in _steps_started(url)}
        found = []
        for worker, (run_id, step, partition) in sorted(current.items()):
            if step != "tool_outputs":
                continue
            compressed = _rows(
                url,
                f"SELECT count(*) FROM {SCHEMA}.tool_calls WHERE partition_key = %s AND compression_key IS NOT NULL",
                (partition,),
            )[0][0]
            ended = _rows(
                url,
                "SELECT count(*) FROM event_logs WHERE run_id = %s AND step_key = %s "
                "AND dagster_event_type IN ('STEP_SUCCESS', 'STEP_FAILURE')",
                (run_id, step),
            )[0][0]
            if compressed and not ended:
                found.append((worker, partition))
        return found
    except psycopg2.errors.UndefinedTable:
        return []


def executed_calls(url: str, partition: str) -> list[tuple[str, str]]:
    """(tool, arguments) of the partition's recorded tool calls that were executed (not cached)."""
    return _rows(
        url, f"SELECT tool, arguments FROM {SCHEMA}.tool_calls WHERE partition_key = %s AND NOT cached", (partition,)
    )


def steps_per_worker(url: str, step: str = "") -> dict[str, int]:
    """Steps (whose key contains ``step``) each Celery worker ran, from Dagster's engine events."""
    ran = Counter(worker for worker, _, key, _ in _steps_started(url) if step in (key or ""))
    return dict(sorted(ran.items()))


def captured_logs(url: str) -> dict[str, list[list[str]]]:
    """For each Celery worker, the compute-log keys (``[run_id, "compute_logs", file_key]``) of the
    steps it ran, from Dagster's LOGS_CAPTURED events (a worker's capture names its one step)."""
    import json

    ran = {(run_id, step): worker for worker, run_id, step, _ in _steps_started(url) if step}
    logs: dict[str, list[list[str]]] = {}
    for run_id, event in _rows(url, "SELECT run_id, event FROM event_logs WHERE dagster_event_type = 'LOGS_CAPTURED'"):
        data = json.loads(event)["dagster_event"]["event_specific_data"]
        workers = {ran.get((run_id, step)) for step in data.get("step_keys") or []}
        # ComputeLogsCaptureData's file key is stored as "log_key"; the full key is the run's.
        if len(workers) == 1 and (worker := workers.pop()) and data.get("log_key"):
            logs.setdefault(worker, []).append([run_id, "compute_logs", data["log_key"]])
    return logs


def last_run(url: str, job: str, partition: str) -> tuple[str, str] | None:
    """(run id, status) of the partition's latest run of ``job``."""
    rows = _rows(
        url,
        "SELECT r.run_id, r.status FROM runs r JOIN run_tags t ON t.run_id = r.run_id AND t.key = "
        "'dagster/partition' WHERE t.value = %s AND r.pipeline_name = %s ORDER BY r.create_timestamp DESC LIMIT 1",
        (partition, job),
    )
    return (rows[0][0], rows[0][1]) if rows else None


def succeeded_partitions(url: str, job: str) -> int:
    """Partitions with at least one successful run of ``job``."""
    rows = _rows(
        url,
        "SELECT t.value, bool_or(r.status = 'SUCCESS') FROM runs r JOIN run_tags t ON t.run_id = r.run_id "
        "AND t.key = 'dagster/partition' WHERE r.pipeline_name = %s GROUP BY t.value",
        (job,),
    )
    return sum(ok for _, ok in rows)


def lineage_counts(url: str) -> tuple[dict[str, int], Counter]:
    """Rows per lineage table, and per (table, partition) for the compared tables."""
    tables = [
        t
        for (t,) in _rows(
            url, "SELECT table_name FROM information_schema.tables WHERE table_schema = %s ORDER BY 1", (SCHEMA,)
        )
    ]
    totals = {t: _rows(url, f"SELECT count(*) FROM {SCHEMA}.{t}")[0][0] for t in tables}
    partitioned = {
        t
        for (t,) in _rows(
            url,
            "SELECT table_name FROM information_schema.columns WHERE table_schema = %s "
            "AND column_name = 'partition_key'",
            (SCHEMA,),
        )
    }
    per: Counter = Counter()
    for t in sorted((partitioned & set(tables)) - NOT_COMPARED):
        for key, n in _rows(url, f"SELECT partition_key, count(*) FROM {SCHEMA}.{t} GROUP BY 1"):
            per[(t, key)] = n
    return totals, per


def lineage_counts_file(path: Path) -> Counter:
    """Rows per (table, partition) of a lineage DuckDB file, for the compared tables."""
    import duckdb

    per: Counter = Counter()
    with duckdb.connect(str(path), read_only=True) as conn:
        tables = {
            t
            for (t,) in conn.execute(
                "SELECT table_name FROM duckdb_columns() WHERE column_name = 'partition_key' AND schema_name = 'main' "
                "AND table_name IN (SELECT table_name FROM duckdb_tables())"
            ).fetchall()
        }
        for t in sorted(tables - NOT_COMPARED):
            for key, n in conn.execute(f"SELECT partition_key, count(*) FROM {t} GROUP BY 1").fetchall():
                per[(t, key)] = n
    return per


def failed_steps(url: str) -> set[tuple[str, str]]:
    """(run id, step key) of the failed runs' ``tool_outputs`` steps, which their re-execution from
    failure did again: every LLM attempt and budget entry of the failed attempt stays recorded."""
    return {(r, "tool_outputs") for (r,) in _rows(url, "SELECT run_id FROM runs WHERE status = 'FAILURE'")}


def stage_rows(url: str) -> Counter:
    """Rows per (table, partition, run id, stage) that each stage has written so far: read at the
    end for a failed run's step, and at the moment a whole worker is lost for the steps it lost.
    Which of those stages the lost worker was running shows only
    afterwards (:func:`restarted_steps`): the step a worker starts is reported by the step itself,
    so at the moment of the loss the worker's newest step may not be known yet; and a stage may
    have recorded its end while its Dagster step had not (the step is then done again whole)."""
    queries = {
        # The stage's LLM calls: those of its run made once the stage started.
        "llm_calls": f"SELECT l.partition_key, l.run_id, r.stage, count(*) FROM {SCHEMA}.llm_calls l "
        f"JOIN {SCHEMA}.runs r ON r.run_id = l.run_id WHERE l.created_at >= r.started_at "
        "GROUP BY 1, 2, 3",
        "budget_ledger": f"SELECT partition_key, run_id, stage, count(*) FROM {SCHEMA}.budget_ledger GROUP BY 1, 2, 3",
    }
    rows: Counter = Counter()
    for table, sql in queries.items():
        for key, run_id, stage, n in _rows(url, sql):
            rows[(table, key, run_id, stage)] += n
    return rows


def restarted_steps(url: str) -> set[tuple[str, str]]:
    """(run id, step key) of the steps a worker started more than once within one run: a lost
    worker's step that another worker took over (a failed run is re-executed as a new run)."""
    started = Counter((run_id, step) for _, run_id, step, _ in _steps_started(url) if step)
    return {step for step, n in started.items() if n > 1}
