"""Benchmark: a recompression fanned out over 1 vs 2 Celery workers (issue 25; not in make test).

Inputs: one research of a fixed question (the project's defaults; the openai engine against the
fake OpenAI-compatible server, tests/fakes/openai_server.py), stored on a team deployment
rehearsed on this machine (deepresearch_dagster/local_servers.py: Postgres for the Dagster
instance and the lineage, Redis, an S3-API server, all on 127.0.0.1). Then, for each latency and
with 1 and then 2 Celery workers, ``deepresearch recompress`` under a new compressor prompt
version (so every raw output is compressed again, one mapped ``compress_tool_output`` op each),
the fake server now answering each request after the latency (``--latencies``, seconds; default
0.3, a small fast model). The fake answers requests in parallel, as a model server with free
slots (or one per worker host) does: a single CPU-bound model server shared by both workers
would not shorten anything.

Figures: wall time of each recompression (the CLI process, start to exit: its own start-up and
the run's serial steps included), compressions made, ops per worker, the speed-up of 2 workers
over 1 per latency, and the load average before each recompression. Goal (issue 25): >= 1.6x. On
a 2-core machine shared with others the workers also compete for the CPU with everything else.

    PYTHONPATH=. .venv/bin/python benchmarks/celery_fanout.py [--latencies 0.3,1,3,30]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from common import REPO, figure, print_table, write_result

from deepresearch_dagster import local_servers as servers
from tests.fakes.openai_server import FakeOpenAIServer

QUESTION = "What limits solid-state battery manufacturing, and how are companies scaling production?"
BUCKET = "bench-fanout"


def _cli(env: dict[str, str], *argv: str) -> tuple[dict, float]:
    started = time.perf_counter()
    return servers.cli_json(env, *argv, cwd=REPO), time.perf_counter() - started


def _ops_per_worker(run_id: str) -> dict[str, int]:
    from dagster import DagsterInstance

    with DagsterInstance.get() as instance:
        ran = servers.steps_per_worker(instance, run_id)
    return {w: c["compress_tool_output"] for w, c in sorted(ran.items()) if c["compress_tool_output"]}


def _latest_recompress_run(key: str) -> str:
    from dagster import DagsterInstance, RunsFilter

    with DagsterInstance.get() as instance:
        (run,) = instance.get_runs(RunsFilter(job_name="recompress_job", tags={"dagster/partition": key}), limit=1)
        return run.run_id


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=None, help="one latency (same as --latencies X)")
    parser.add_argument(
        "--latencies", default="0.3", help="comma-separated seconds the fake model takes per answer (default 0.3)"
    )
    args = parser.parse_args(argv)
    latencies = [args.latency] if args.latency is not None else [float(x) for x in args.latencies.split(",")]
    reason = servers.unavailable_team()
    if reason:
        print(f"celery_fanout: {reason}", file=sys.stderr)
        return 2
    root = Path(tempfile.mkdtemp(prefix="deepresearch-bench-fanout-"))
    rows, results = [], {}
    with ExitStack() as stack:
        pg = stack.enter_context(servers.postgres())
        broker = stack.enter_context(servers.redis())
        store = stack.enter_context(servers.s3())
        model = stack.enter_context(FakeOpenAIServer())  # no latency for the research itself
        import boto3

        boto3.client(
            "s3", endpoint_url=store.endpoint, aws_access_key_id=store.access_key,
            aws_secret_access_key=store.secret_key, region_name="us-east-1",
        ).create_bucket(Bucket=BUCKET)  # fmt: skip
        shared = {
            "DEEPRESEARCH_POSTGRES_URL": pg.url,
            # Lineage on the shared server too, as a team deployment has it (docs/deployment.md).
            "DEEPRESEARCH_LINEAGE_URL": pg.new_database("lineage"),
            "DEEPRESEARCH_ARTIFACTS_URL": f"s3://{BUCKET}/research",
            "AWS_ENDPOINT_URL": store.endpoint,
            "AWS_ACCESS_KEY_ID": store.access_key,
            "AWS_SECRET_ACCESS_KEY": store.secret_key,
            "AWS_REGION": "us-east-1",
            "DAGSTER_HOME": str(root / "dagster_home"),
            "DEEPRESEARCH_ARTIFACTS_DIR": str(root / "artifacts"),
            "DEEPRESEARCH_ENGINE": "openai",
            "OPENAI_BASE_URL": model.base_url,
            "OPENAI_API_KEY": "bench-key",
        }
        host = {**os.environ, **shared}
        research, research_s = _cli(host, "run", QUESTION)
        key = research["partition_key"]
        print(f"research {key}: {research['tool_calls']} tool calls in {research_s:.1f} s")
        celery = {**host, "DEEPRESEARCH_CELERY_BROKER_URL": broker}
        os.environ.update(
            {**shared, "DEEPRESEARCH_POSTGRES_URL": pg.url.replace("postgresql://", "postgresql+psycopg2://")}
        )
        prompt = (REPO / "deepresearch_dagster" / "prompts" / "compressor.md").read_text()
        for latency in latencies:
            model.latency_s = latency  # from here on every answer takes this long
            runs = {}
            for n in (1, 2):
                names = tuple(f"w{i}" for i in range(1, n + 1))
                with servers.celery_workers(names, root / f"workers-{latency:g}-{n}", celery):
                    version = root / f"compressor_{latency:g}_{n}_workers.md"
                    version.write_text(prompt + f"\n<!-- {latency:g} s, {n} workers -->\n")  # every output again
                    load = os.getloadavg()[0]
                    out, seconds = _cli(celery, "recompress", key, "--prompt-file", str(version))
                ops = _ops_per_worker(_latest_recompress_run(key))
                runs[n] = {"seconds": round(seconds, 2), "summaries": out["summaries"], "ops_per_worker": ops,
                           "load_average": round(load, 2)}  # fmt: skip
            speedup = runs[1]["seconds"] / runs[2]["seconds"]
            results[f"{latency:g}"] = {"runs": runs, "speedup": round(speedup, 2)}
            rows.append([f"{latency:g}", f"{runs[1]['seconds']:.1f}", f"{runs[2]['seconds']:.1f}", f"{speedup:.2f}",
                         f"{runs[1]['load_average']:.1f} / {runs[2]['load_average']:.1f}", runs[1]["summaries"],
                         ", ".join(f"{w}: {c}" for w, c in runs[2]["ops_per_worker"].items())])  # fmt: skip
            print(f"latency {latency:g} s: 1 worker {runs[1]['seconds']} s, 2 workers {runs[2]['seconds']} s, "
                  f"{speedup:.2f}x", flush=True)  # fmt: skip
    print_table(
        ["latency s", "1 worker s", "2 workers s", "2 vs 1", "load (1 / 2)", "compressions", "ops per worker (2)"],
        rows,
        "recompression fan-out",
    )
    summary = [
        figure(
            f"recompression fan-out at {lat} s per answer, 2 vs 1 Celery worker",
            res["speedup"],
            goal=">= 1.6x",
            met=res["speedup"] >= 1.6,
            unit="x",
            why=f"1 worker {res['runs'][1]['seconds']} s, 2 workers {res['runs'][2]['seconds']} s, "
            f"load {res['runs'][1]['load_average']} / {res['runs'][2]['load_average']}",
        )
        for lat, res in results.items()
    ]
    write_result(
        "celery_fanout",
        {"latencies_s": latencies, "tool_calls": research["tool_calls"], "results": results, "summary": summary},
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
