"""A research killed with SIGKILL at any stage resumes without asking the model again what it had
already answered, and writes the same report as a run that was never killed (issue 15)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

QUESTION = "How do sodium-ion batteries work and what do they cost?"


def _command(corpus: Path) -> list[str]:
    return [sys.executable, "-m", "deepresearch_dagster.cli", "run", QUESTION, "--engine", "openai", "--quiet",
            "--corpus", str(corpus), "--json"]  # fmt: skip


def _env(root: Path) -> dict[str, str]:
    return {**os.environ, "DEEPRESEARCH_ARTIFACTS_DIR": str(root / "artifacts"), "PYTHONUNBUFFERED": "1"}


def _run(corpus: Path, root: Path) -> dict:
    proc = subprocess.run(_command(corpus), env=_env(root), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "leaked" not in proc.stderr, proc.stderr[-3000:]  # DuckDB's exit-time noise stays away
    return json.loads(proc.stdout)


def _fingerprints(requests: list[dict]) -> list[str]:
    return [json.dumps(r.get("messages"), sort_keys=True) for r in requests]


def test_a_killed_research_resumes_with_no_repeated_model_call_and_the_same_report(
    fake_openai, corpus_dir, isolated_env
):
    reference = _run(corpus_dir, isolated_env / "reference")
    total = len(fake_openai.requests)
    expected = Path(reference["report_md"]).read_bytes()
    assert total >= 8

    # One research killed early (planning, first compressions), midway (researching) and late
    # (report sections): each process resumes what the previous one was killed in, then is killed
    # itself at the next point; the last one finishes. Every stage is resumed from once.
    root = isolated_env / "killed"
    first = len(fake_openai.requests)
    asked: list[str] = []  # what the killed processes asked, in order
    for kill_at in (3, total // 2, total - 2):
        before = len(fake_openai.requests)
        proc = subprocess.Popen(_command(corpus_dir), env=_env(root), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)  # fmt: skip
        deadline = time.monotonic() + 180
        while len(fake_openai.requests) - first < kill_at and proc.poll() is None:
            assert time.monotonic() < deadline, "the research never reached the kill point"
            time.sleep(0.01)
        assert proc.poll() is None, f"the research ended before the kill point {kill_at}"
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait() == -signal.SIGKILL
        segment = _fingerprints(fake_openai.requests[before:])
        # At most the request in flight at the previous kill (sent, never answered) is sent again.
        repeated = [fp for fp in segment if fp in asked]
        assert len(repeated) <= 1, f"{len(repeated)} model requests repeated after the kill before {kill_at}"
        asked += segment

    resumed = _run(corpus_dir, root)
    again = _fingerprints(fake_openai.requests[first + len(asked) :])
    repeated = [fp for fp in again if fp in asked]
    assert len(repeated) <= 1, f"{len(repeated)} model requests repeated after the kill at {total - 2}"
    assert 0 < len(again) < total
    assert len(asked) + len(again) <= total + 3  # one request in flight per kill
    assert Path(resumed["report_md"]).read_bytes() == expected
    # The killed writers' temp files are gone (partition and corpus cache), not left for later.
    assert not list(root.rglob(".*.tmp")), "temp files left after the kills"
