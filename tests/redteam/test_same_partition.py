"""The same question started twice (issue 15): runs never interleave — a second run is refused
with who holds the partition, or runs after the first; the partition's rows come from one run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from deepresearch_dagster.core.config import ResearchSettings
from deepresearch_dagster.core.store.lineage import LineageStore
from deepresearch_dagster.core.store.partition_lock import PartitionBusy, partition_lock

QUESTION = "How do urban heat islands form?"
CLI = [sys.executable, "-m", "deepresearch_dagster.cli", "run", QUESTION, "--engine", "offline"]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONUNBUFFERED": "1"}  # after isolated_env set the folders


def test_the_same_question_twice_at_once_never_interleaves(isolated_env: Path, record):
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    procs = [subprocess.Popen([*CLI, "--quiet", "--json"], env=_env(), **pipes) for _ in range(2)]
    outputs = [p.communicate(timeout=50) for p in procs]
    outcomes = [(p.returncode, out, err) for p, (out, err) in zip(procs, outputs, strict=True)]
    codes = sorted(code for code, _, _ in outcomes)
    refused = [err for code, _, err in outcomes if code == 1]
    assert codes in ([0, 0], [0, 1]), outcomes
    assert all("is already running (pid" in err and "Traceback" not in err for err in refused), refused

    settings = ResearchSettings.from_env()
    key = json.loads(next(out for code, out, _ in outcomes if code == 0))["partition_key"]
    lineage = LineageStore.at(settings.duckdb_file)
    runs = lineage.query("SELECT DISTINCT run_id FROM tool_calls WHERE partition_key = ?", [key])
    partition = settings.artifacts_path / key
    missing = [name for name in lineage.tool_call_hashes(key) if not any(partition.rglob(name))]
    ok = len(runs) == 1 and not missing
    record("same question, 2 runs at once", "refused or serialized; rows of one run", f"exit codes {codes}", ok)
    assert ok, (runs, missing)


def test_a_running_research_holds_its_partition(isolated_env: Path, record):
    proc = subprocess.Popen(CLI, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    key = None
    for line in proc.stderr:  # "partition <key>", then the research loop's "step 1/…"
        if line.startswith("partition "):
            key = line.split()[1]
        if "step 1/" in line:
            break
    assert key is not None
    partition = ResearchSettings.from_env().artifacts_path / key
    message = ""
    try:
        with partition_lock(partition, key, "second-run"):
            pass
    except PartitionBusy as exc:
        message = str(exc)
    proc.stderr.read()
    assert proc.wait(timeout=50) == 0
    ok = f"already running (pid {proc.pid}, run " in message
    record("a second run while a research runs", "refused, naming pid and run", message[:60] or "got the lock", ok)
    assert ok, message
