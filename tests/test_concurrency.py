"""Researches at once: three ``deepresearch run`` processes (and a fourth, alone, for comparison) on
two cores write to one DuckDB file and one Dagster instance (``benchmarks/throughput.py`` runs 4
and 8). DuckDB admits one writing process at a time, so every lineage write is a
short connection retried with backoff; this test proves no run fails and no row is lost. More
writers than cores are enough to make them take turns; more of them only make the test longer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest
from dagster import AssetKey, DagsterInstance, DagsterRunStatus, RunsFilter

from deepresearch_dagster.core.store.artifacts import sha256_bytes
from tests.conftest import make_dagster_home

QUESTIONS = [
    "What limits the energy density of solid-state batteries?",
    "How effective are green roofs at cooling cities?",
    "How did early computers store data in memory?",
]
ASSETS = ("research_plan", "tool_outputs", "compressed_summaries", "research_report")


def _start(question: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "deepresearch_dagster.cli", "run", question, "--engine", "offline", "--json", "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _counts(db: Path, key: str) -> dict[str, object]:
    with duckdb.connect(str(db), read_only=True) as conn:

        def one(sql: str) -> int:
            return conn.execute(sql, [key]).fetchone()[0]

        return {
            "tool_calls": one("SELECT count(*) FROM tool_calls WHERE partition_key = ?"),
            "summaries": one("SELECT count(*) FROM summaries WHERE partition_key = ?"),
            "context_messages": one("SELECT count(*) FROM context_messages WHERE partition_key = ?"),
            "plan_steps": one("SELECT count(*) FROM plan_steps WHERE partition_key = ?"),
            "llm_by_role": dict(
                conn.execute(
                    "SELECT role, count(*) FROM llm_calls WHERE partition_key = ? GROUP BY role ORDER BY role", [key]
                ).fetchall()
            ),
        }


@pytest.mark.fresh_dagster_home  # the first runs race to create the instance storage
def test_concurrent_researches_lose_no_rows(isolated_env):
    env = dict(os.environ)
    # The same research alone, in a fresh instance and database of its own (compared below),
    # runs meanwhile: it shares neither file with the others, so it still writes as if alone.
    alone_env = {
        **env,
        "DEEPRESEARCH_ARTIFACTS_DIR": str(isolated_env / "alone"),
        "DAGSTER_HOME": str(make_dagster_home(isolated_env / "alone_home")),
    }
    alone_proc = _start(QUESTIONS[0], alone_env)
    started = time.monotonic()
    procs = [_start(q, env) for q in QUESTIONS]
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-2000:]
        outputs.append(json.loads(out))
    elapsed = time.monotonic() - started
    print(f"{len(QUESTIONS)} concurrent researches in {elapsed:.1f} s")

    keys = [o["partition_key"] for o in outputs]
    assert len(set(keys)) == len(QUESTIONS)
    db = Path(outputs[0]["duckdb"])
    artifacts = Path(env["DEEPRESEARCH_ARTIFACTS_DIR"]).resolve()
    with duckdb.connect(str(db), read_only=True) as conn:
        assert conn.execute("SELECT count(*) FROM research_requests").fetchone()[0] == len(QUESTIONS)
        ids = conn.execute("SELECT count(*), count(DISTINCT id) FROM llm_calls").fetchone()
        assert ids[0] == ids[1] == sum(o["llm_calls"] for o in outputs)
        stages = conn.execute(
            "SELECT partition_key, count(*) FILTER (WHERE status = 'succeeded'), count(*) FROM runs GROUP BY ALL"
        ).fetchall()
    assert {k for k, _, _ in stages} == set(keys)
    assert all(ok == total for _, ok, total in stages), stages

    for out in outputs:
        key = out["partition_key"]
        counts = _counts(db, key)
        partition = artifacts / key
        manifest = json.loads((partition / "tool_outputs.json").read_text())["calls"]
        raw_dir = Path(out["artifacts_dir"])
        raw_files = sorted(p.name for p in raw_dir.iterdir() if p.is_file())
        # Rows mirror the files: one tool_calls row per raw artifact, with its sha256.
        assert counts["tool_calls"] == len(raw_files) == len(manifest) == out["tool_calls"] > 0
        assert sorted(c["artifact_file"] for c in manifest) == raw_files
        for call in manifest:
            assert sha256_bytes((artifacts / call["artifact_path"]).read_bytes()) == call["sha256"]
        # Every raw output compressed exactly once, and recorded once as a summary.
        assert counts["llm_by_role"]["compressor"] == counts["summaries"] == counts["tool_calls"]
        assert counts["llm_by_role"]["planner"] == 1
        assert sum(counts["llm_by_role"].values()) == out["llm_calls"]
        plan = json.loads((partition / "plan.json").read_text())
        followups = json.loads((partition / "tool_outputs.json").read_text()).get("followup_steps", [])
        assert counts["plan_steps"] == len(plan["steps"]) + len(followups)
        # Context rows mirror the stored conversations.
        messages = sum(len(json.loads(p.read_text())) for p in (partition / "conversations").glob("step_*.json"))
        assert counts["context_messages"] == messages > 0
        print(f"{key}: {counts}")  # shown with -s: the measured per-partition row counts

    instance = DagsterInstance.get()
    runs = instance.get_runs(RunsFilter(job_name="research_job"))
    assert len(runs) == len(QUESTIONS) and all(r.status == DagsterRunStatus.SUCCESS for r in runs)
    for name in ASSETS:
        materialized = instance.get_materialized_partitions(AssetKey(name))
        assert set(keys) <= set(materialized), name

    # The same research alone, in a fresh instance and database, writes exactly the same rows.
    out, err = alone_proc.communicate(timeout=600)
    assert alone_proc.returncode == 0, err[-2000:]
    alone = json.loads(out)
    assert _counts(Path(alone["duckdb"]), alone["partition_key"]) == _counts(db, keys[0])


def test_fresh_instance_storage_is_created_once_under_a_lock(tmp_path):
    from deepresearch_dagster.launcher import STORAGE_READY, init_instance_storage

    home = make_dagster_home(tmp_path / "home")
    init_instance_storage(home)
    assert (home / STORAGE_READY).exists() and (home / "history" / "runs.db").exists()
    stamp = (home / "history" / "runs.db").stat().st_mtime_ns
    init_instance_storage(home)  # ready: no lock, no second open
    assert (home / "history" / "runs.db").stat().st_mtime_ns == stamp
