"""Benchmark 5 — throughput: N researches at once through Dagster, each in its own process.

Inputs: N = 4 and 8 (quick; --full adds 16) researches of the benchmark web research
(benchmarks/common.BenchModelServer; a different question and page rotation per research) — quick:
a small research (1-step plan, DEEPRESEARCH_BREADTH=1 query, DEEPRESEARCH_DEPTH=0 i.e. no critic
round); --full: the project's defaults with 3-step plans (three queries and three pages per step).
The N researches are launched at the same moment as N separate processes — like runs started by a
run queue — each running research_job.execute_in_process for its own partition. All N share one
DuckDB lineage file and one DAGSTER_HOME (the project's dagster.yaml, SQLite storage), both created
before the launch. One fake OpenAI-compatible server, one fake Brave API and one fake website on
127.0.0.1 serve every process with no added latency, so the figures measure the orchestration
itself on this machine (process start-up included).

Figures: wall time from launch to the last exit, runs per minute, failures, DuckDB rows lost, and
(diagnostic) duckdb.connect calls and the attempts refused by another process's file lock:
  tool_calls  expected = the calls in each partition's tool_outputs.json manifest; found = rows in
              tool_calls for the partition (and summaries rows, which mirror them)
  llm_calls   expected = requests the fake model server received for the research (attributed by
              the question's tag); found = llm_calls rows for the partition
Must be 0 rows lost.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from common import (
    REPO,
    clean_env,
    count_duckdb_connects,
    figure,
    guard_extractive_compressor,
    load_pages,
    make_dagster_home,
    pages_dir,
    parse_args,
    print_table,
    question,
    web_services,
    write_result,
)

WORKER_TIMEOUT_S = 900


def worker(index: int) -> int:
    """One research in this process (the environment names the shared instance and database)."""
    guard = guard_extractive_compressor()
    connects = count_duckdb_connects()
    started = time.perf_counter()
    out: dict[str, Any] = {"index": index, "success": False}
    try:
        from dagster import DagsterInstance

        from deepresearch_dagster.core.config import ResearchSettings
        from deepresearch_dagster.core.pipeline import register
        from deepresearch_dagster.core.store.lineage import LineageStore
        from deepresearch_dagster.launcher import run_job

        settings = ResearchSettings.from_env()
        key = register(LineageStore.at(settings.duckdb_file), question(index))
        out["partition_key"] = key
        instance = DagsterInstance.get()
        run_start = time.perf_counter()
        result = run_job("research_job", key, instance)
        out["run_s"] = round(time.perf_counter() - run_start, 3)
        out["success"] = result.success
        out["run_id"] = result.run_id
        if not result.success:
            out["error"] = "; ".join(result.reasons)[:2000]
    except Exception as exc:  # reported by the parent as a failure
        out["error"] = f"{type(exc).__name__}: {exc}"[:2000]
    out["process_s"] = round(time.perf_counter() - started, 3)
    out["extractive_summaries_padded"] = guard["padded"]
    out["duckdb_connects"] = {**connects, "s": round(connects["s"], 3)}
    print("RESULT " + json.dumps(out))
    return 0 if out["success"] else 1


def launch(n: int, root: Path, env: dict[str, str]) -> tuple[float, list[dict[str, Any]]]:
    env = {**os.environ, **env, "PYTHONPATH": str(REPO)}
    start = time.perf_counter()
    procs = [
        subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--worker", str(i)],
            env=env,
            cwd=root,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(1, n + 1)
    ]
    results = []
    for i, proc in enumerate(procs, start=1):
        try:
            stdout, stderr = proc.communicate(timeout=WORKER_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
            stderr += "\n(timed out)"
        line = next((ln for ln in stdout.splitlines() if ln.startswith("RESULT ")), None)
        res = json.loads(line[7:]) if line else {"index": i, "success": False}
        res["exit_code"] = proc.returncode
        if not res["success"]:
            res.setdefault("error", stderr.strip()[-2000:] or "no result line")
        results.append(res)
    return time.perf_counter() - start, results


def check_rows(root: Path, results: list[dict[str, Any]], llm_requests: Counter[str]) -> dict[str, Any]:
    import duckdb

    from deepresearch_dagster.core.roles.coordinator import route
    from deepresearch_dagster.core.store.artifacts import partition_folder

    per_run = []
    with duckdb.connect(str(root / "lineage.duckdb"), read_only=True) as conn:
        for res in results:
            key = res.get("partition_key") or route(question(res["index"]))[1]
            manifest = root / "artifacts" / partition_folder(key) / "tool_outputs.json"
            expected_tools = len(json.loads(manifest.read_text())["calls"]) if manifest.is_file() else None
            tool_rows = conn.execute("SELECT count(*) FROM tool_calls WHERE partition_key = ?", [key]).fetchone()[0]
            summary_rows = conn.execute("SELECT count(*) FROM summaries WHERE partition_key = ?", [key]).fetchone()[0]
            llm_rows = conn.execute("SELECT count(*) FROM llm_calls WHERE partition_key = ?", [key]).fetchone()[0]
            expected_llm = llm_requests.get(f"bench-{res['index']:02d}", 0)
            per_run.append(
                {
                    "index": res["index"],
                    "partition_key": key,
                    "success": res["success"],
                    "tool_calls_expected": expected_tools,
                    "tool_calls_rows": tool_rows,
                    "summaries_rows": summary_rows,
                    "llm_requests_seen": expected_llm,
                    "llm_calls_rows": llm_rows,
                }
            )
    lost_tools = sum(max(0, (r["tool_calls_expected"] or 0) - r["tool_calls_rows"]) for r in per_run)
    lost_summaries = sum(max(0, (r["tool_calls_expected"] or 0) - r["summaries_rows"]) for r in per_run if r["success"])
    lost_llm = sum(max(0, r["llm_requests_seen"] - r["llm_calls_rows"]) for r in per_run)
    return {
        "per_run": per_run,
        "tool_rows_lost": lost_tools,
        "summary_rows_lost": lost_summaries,
        "llm_rows_lost": lost_llm,
        "llm_rows_extra": sum(max(0, r["llm_calls_rows"] - r["llm_requests_seen"]) for r in per_run),
        "manifests_missing": sum(1 for r in per_run if r["tool_calls_expected"] is None),
    }


def batch(n: int, tmp: Path, pages: list[Any], steps: int, small: bool) -> dict[str, Any]:
    root = tmp / f"n{n}"
    root.mkdir()
    home = make_dagster_home(root / "dagster_home")
    env = {
        **({"DEEPRESEARCH_BREADTH": "1", "DEEPRESEARCH_DEPTH": "0"} if small else {}),
        "DAGSTER_HOME": str(home),
        "DEEPRESEARCH_ARTIFACTS_DIR": str(root / "artifacts"),
        "DEEPRESEARCH_DUCKDB": str(root / "lineage.duckdb"),
    }
    # Steady state: the instance storage and the lineage schema exist before the runs start.
    os.environ.update(env)
    from dagster import DagsterInstance

    from deepresearch_dagster.core.store.lineage import LineageStore

    DagsterInstance.get().dispose()
    LineageStore.at(root / "lineage.duckdb")
    with web_services(pages, steps=steps) as services:
        wall, results = launch(n, root, {**services.env, **env})
        llm_requests = Counter(services.model.tag_of(b) or "?" for b in services.model.requests)
        counts = services.request_counts()
    rows = check_rows(root, results, llm_requests)
    failures = [r for r in results if not r["success"]]
    return {
        "n": n,
        "wall_s": round(wall, 2),
        "runs_per_minute": round(60 * n / wall, 2),
        "failures": len(failures),
        "failure_messages": [f"run {r['index']}: {r.get('error', '')[:500]}" for r in failures],
        "run_s": [r.get("run_s") for r in results],
        "research": "1 step, breadth 1, depth 0" if small else f"{steps} steps, project defaults",
        "process_s": [r.get("process_s") for r in results],
        "requests": counts,
        "extractive_summaries_padded": sum(r.get("extractive_summaries_padded", 0) for r in results),
        "duckdb_connects": sum(r.get("duckdb_connects", {}).get("n", 0) for r in results),
        "duckdb_lock_conflicts": sum(r.get("duckdb_connects", {}).get("lock_conflicts", 0) for r in results),
        "duckdb_connect_s": round(sum(r.get("duckdb_connects", {}).get("s", 0) for r in results), 2),
        **rows,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(__doc__, argv, worker={"type": int, "default": None, "help": argparse_hidden()})
    if args.worker is not None:
        return worker(args.worker)
    clean_env()
    pages = load_pages()
    sizes = [4, 8, 16] if args.full else [4, 8]
    steps = 3 if args.full else 1
    print(f"inputs: {len(pages)} pages from {pages_dir()}; N = {sizes}; {steps}-step plans; {os.cpu_count()} CPUs")
    batches = []
    with tempfile.TemporaryDirectory(prefix="bench-throughput-") as tmp:
        for n in sizes:
            res = batch(n, Path(tmp), pages, steps, small=not args.full)
            batches.append(res)
            print(
                f"N={n}: {res['wall_s']} s, {res['failures']} failure(s), rows lost: tool {res['tool_rows_lost']}, "
                f"summaries {res['summary_rows_lost']}, llm {res['llm_rows_lost']}"
            )
            for message in res["failure_messages"]:
                print(f"  {message}")
    print_table(
        [
            "N",
            "wall s",
            "runs/min",
            "failures",
            "run s (median)",
            "tool rows exp/found",
            "llm rows exp/found",
            "rows lost",
            "duckdb connects / lock conflicts",
        ],
        [
            [
                b["n"],
                b["wall_s"],
                b["runs_per_minute"],
                b["failures"],
                sorted(x for x in b["run_s"] if x is not None)[len([x for x in b["run_s"] if x is not None]) // 2]
                if any(x is not None for x in b["run_s"])
                else None,
                f"{sum(r['tool_calls_expected'] or 0 for r in b['per_run'])}/"
                f"{sum(r['tool_calls_rows'] for r in b['per_run'])}",
                f"{sum(r['llm_requests_seen'] for r in b['per_run'])}/{sum(r['llm_calls_rows'] for r in b['per_run'])}",
                b["tool_rows_lost"] + b["summary_rows_lost"] + b["llm_rows_lost"],
                f"{b['duckdb_connects']} / {b['duckdb_lock_conflicts']}",
            ]
            for b in batches
        ],
        title="N concurrent Dagster runs (separate processes, shared DuckDB and DAGSTER_HOME)",
    )
    summary = []
    for b in batches:
        lost = b["tool_rows_lost"] + b["summary_rows_lost"] + b["llm_rows_lost"]
        summary.append(figure(f"runs/minute (N={b['n']})", b["runs_per_minute"]))
        summary.append(figure(f"failures (N={b['n']})", b["failures"], "0", b["failures"] == 0))
        summary.append(figure(f"DuckDB rows lost (N={b['n']})", lost, "0", lost == 0))
        summary.append(
            figure(
                f"DuckDB connects refused by the lock, retried (N={b['n']})",
                f"{b['duckdb_lock_conflicts']} of {b['duckdb_connects']}",
            )
        )
    write_result(
        "throughput",
        {
            "mode": "full" if args.full else "quick",
            "inputs": {"pages_dir": str(pages_dir()), "sizes": sizes, "plan_steps": steps, "latency_s": 0.0},
            "goal": "0 DuckDB rows lost",
            "batches": batches,
            "summary": summary,
        },
    )
    return 0


def argparse_hidden() -> str:
    import argparse

    return argparse.SUPPRESS


if __name__ == "__main__":
    sys.exit(main())
