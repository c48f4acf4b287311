"""``make team-demo``: a team deployment rehearsed on one machine (docs/deployment.md).

Starts Postgres (Dagster's instance and the partition lock), Redis (the Celery broker), an S3-API
server (the artifacts) and two Celery workers in folders of their own, all on 127.0.0.1 on free
ports (deepresearch_dagster/local_servers.py, the same code the tests use); runs one research with
``deepresearch run`` (its steps on the workers, its Dagster run in Postgres, its artifacts in the
object store) and then recompresses it with another compressor prompt (the mapped compressions fan out
over the workers); prints where everything went; stops everything it started.
Local copies (reports, worker logs, the lineage file) stay in the printed folder.

    PYTHONPATH=. .venv/bin/python deploy/team_demo.py ["question"]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from deepresearch_dagster import local_servers as servers

REPO = Path(__file__).resolve().parents[1]
QUESTION = "What limits solid-state battery manufacturing, and how are companies scaling production?"
BUCKET, PREFIX = "team-demo", "research"
WORKERS = ("w1", "w2")


def _report(instance, job: str, key: str) -> str:
    from dagster import RunsFilter

    (run,) = instance.get_runs(RunsFilter(job_name=job, tags={"dagster/partition": key}), limit=1)
    per_worker = servers.steps_per_worker(instance, run.run_id)
    steps = "; ".join(
        f"{w}: " + ", ".join(f"{op} x{n}" for op, n in sorted(c.items())) for w, c in sorted(per_worker.items())
    )
    return f"  {job} run {run.run_id}: {run.status.value}\n    steps on the workers: {steps or 'none'}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("question", nargs="?", default=QUESTION)
    args = parser.parse_args(argv)
    reason = servers.unavailable_team()
    if reason:
        print(f"team-demo: {reason}", file=sys.stderr)
        return 2
    root = Path(tempfile.mkdtemp(prefix="deepresearch-team-demo-"))
    started = time.monotonic()
    with ExitStack() as stack:
        pg = stack.enter_context(servers.postgres())
        broker = stack.enter_context(servers.redis())
        store = stack.enter_context(servers.s3())
        import boto3

        boto3.client(
            "s3", endpoint_url=store.endpoint, aws_access_key_id=store.access_key,
            aws_secret_access_key=store.secret_key, region_name="us-east-1",
        ).create_bucket(Bucket=BUCKET)  # fmt: skip
        shared = {
            "DEEPRESEARCH_POSTGRES_URL": pg.url,
            "DEEPRESEARCH_CELERY_BROKER_URL": broker,
            "DEEPRESEARCH_ARTIFACTS_URL": f"s3://{BUCKET}/{PREFIX}",
            "AWS_ENDPOINT_URL": store.endpoint,
            "AWS_ACCESS_KEY_ID": store.access_key,
            "AWS_SECRET_ACCESS_KEY": store.secret_key,
            "AWS_REGION": "us-east-1",
            # Lineage is one DuckDB file per host (docs/deployment.md, "Not yet shared").
            "DEEPRESEARCH_DUCKDB": str(root / "lineage.duckdb"),
        }
        print(f"team-demo: servers on 127.0.0.1 — Postgres :{pg.port} (Dagster's instance, the partition lock),")
        print(f"  Redis {broker} (Celery broker), S3 API {store.endpoint} (bucket {BUCKET})")
        env = {**os.environ, **shared}
        stack.enter_context(servers.celery_workers(WORKERS, root / "workers", env))
        print(f"  Celery workers {', '.join(WORKERS)}: ready (logs {root / 'workers'}/<name>/worker.log)")
        # The host that starts runs: its own DAGSTER_HOME (Postgres storage) and working copy.
        host = {
            **env,
            "DAGSTER_HOME": str(root / "dagster_home"),
            "DEEPRESEARCH_ARTIFACTS_DIR": str(root / "artifacts"),
        }
        # The research's steps run on the workers (its compressions are made inside the research
        # loop); the summary reads the results from the object store.
        research = servers.cli_json(
            host, "run", args.question, "--engine", "offline", "--max-steps", "2", "--depth", "0", cwd=REPO
        )
        key = research["partition_key"]
        prompt = root / "compressor_v2.md"
        prompt.write_text((REPO / "deepresearch_dagster" / "prompts" / "compressor.md").read_text() + "\n")
        recompressed = servers.cli_json(host, "recompress", key, "--prompt-file", str(prompt), cwd=REPO)

        os.environ.update({k: v for k, v in host.items() if k in shared or k == "DAGSTER_HOME"})
        from dagster import DagsterInstance

        from deepresearch_dagster.core.config import export_postgres_url, load_settings
        from deepresearch_dagster.core.store.object_store import object_root

        settings = load_settings()
        export_postgres_url(settings.postgres)
        objects = object_root(settings).keys(key)
        print(
            f"research {key}: {research['tool_calls']} tool calls, {research['verified_citations']} verified citations"
        )
        with DagsterInstance.get() as instance:
            print(_report(instance, "research_job", key))
            print(_report(instance, "recompress_job", key))
        print(f"  {recompressed['summaries']} summaries under prompt {recompressed['prompt_version']}")
        print(f"artifacts: {len(objects)} objects in s3://{BUCKET}/{PREFIX}/{key}/ (report.md among them);")
        print(f"  this host's working copy: {root / 'artifacts' / key}")
        print(f"lineage: {settings.duckdb_file}; Dagster's runs and events: Postgres")
    print(f"team-demo: stopped the workers, the S3 API, Redis and Postgres after {time.monotonic() - started:.0f} s;")
    print(f"  their data is gone, the local copies stay in {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
