"""A full ``deepresearch run --engine openai`` against the fake server in each real-server mode.

Each mode reproduces what a server nobody here wrote does (llama-cpp-python's HTTP 500 on a
JSON-schema ``response_format``, Jinja templates that demand strict alternation, a template
without a system role, a server without tools, truncation, a placeholder-copying weak model, a
model that copies the prompt's worked example, schema-driven random answers, a single slot that
keeps generating after the client gave up).
For every mode the run must exit 0 with a cited report, never send two same-role messages in a
row, make no more requests than the capability answers require, and print no stack trace.

The runs are started together (a few at a time) by one module fixture, each with its own fake
server, ``DAGSTER_HOME`` and artifact folder; the tests then check one run each.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from deepresearch_dagster.core.llm.example_leaks import detector
from tests.conftest import FIXTURES
from tests.fakes.openai_server import FakeOpenAIServer, same_role_runs

QUESTION = "How do sodium-ion batteries work and what do they cost?"
# Distinct models of the default configuration (gpt-4o-mini for four roles, gpt-4o reporter):
# a capability is probed at most once per model and process.
MODELS = 2


@dataclass
class Mode:
    modes: tuple[str, ...] = ()
    server: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    depth: int = 0


MODES: dict[str, Mode] = {
    # A server that answers like OpenAI, behind a Jinja template that demands strict alternation:
    # the client never breaks it, so nothing is refused and the run is also the baseline.
    "strict_alternation": Mode(("strict_alternation",)),
    "llamacpp": Mode(("llamacpp",)),
    "no_system": Mode(("no_system", "strict_alternation")),
    "no_tools": Mode(("no_tools",)),
    "truncating": Mode(("truncating",)),
    "slow_ignore_disconnect": Mode(
        ("slow_ignore_disconnect",),
        {"first_s": 3.0},
        {"DEEPRESEARCH_LLM_TIMEOUT": "2", "DEEPRESEARCH_LLM_TOKENS_PER_S": "1e9"},
    ),
    "weak_placeholder": Mode(("weak_placeholder",)),
    # depth 1: at depth 0 a random ``direct_answer: true`` legitimately skips the research.
    "schema_random": Mode(("schema_random",), {"seed": 10}, depth=1),
    "copies_example": Mode(("copies_example",)),
}


@dataclass
class Run:
    proc: subprocess.CompletedProcess[str]
    server: FakeOpenAIServer


def run_mode(
    server: FakeOpenAIServer, corpus: Path, env_extra: dict[str, str] | None = None, depth: int = 0
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "DEEPRESEARCH_"))}
    env.update(
        {
            "OPENAI_BASE_URL": server.base_url,
            "OPENAI_API_KEY": "dummy-key",
            "DEEPRESEARCH_LLM_BACKOFF_BASE": "0.01",
            "DEEPRESEARCH_LLM_BACKOFF_MAX": "0.05",
            **(env_extra or {}),
        }
    )
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "deepresearch_dagster.cli",
            "run",
            QUESTION,
            "--engine",
            "openai",
            "--json",
            "--quiet",
            "--corpus",
            str(corpus),
            "--max-steps",
            "1",
            "--depth",
            str(depth),
            "--breadth",
            "1",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def start(name: str, root: Path, home: Path) -> Run:
    mode = MODES[name]
    folder = root / name
    corpus = shutil.copytree(FIXTURES / "corpus", folder / "corpus")
    env = {
        "DAGSTER_HOME": str(shutil.copytree(home, folder / "dagster_home")),
        "DEEPRESEARCH_ARTIFACTS_DIR": str(folder / "artifacts"),
        **mode.env,
    }
    with FakeOpenAIServer(modes=mode.modes, **mode.server) as server:
        return Run(run_mode(server, corpus, env, mode.depth), server)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, ready_dagster_home_template: Path) -> dict[str, Run]:
    root = tmp_path_factory.mktemp("real_servers")
    with ThreadPoolExecutor(max_workers=4) as pool:
        started = pool.map(lambda name: start(name, root, ready_dagster_home_template), MODES)
        return dict(zip(MODES, started, strict=True))


@pytest.fixture(scope="module")
def baseline(runs: dict[str, Run]) -> int:
    """Requests of a run against a server behaving like OpenAI (strict alternation refuses none:
    test_strict_alternation_templates_accept_every_request)."""
    check_run(runs["strict_alternation"])
    return len(runs["strict_alternation"].server.requests)


def figures(server: FakeOpenAIServer) -> dict[str, Any]:
    stats = server.stats()
    return {
        "requests": stats["requests"],
        "rejected": stats["rejected"],
        "rejections": dict(stats["rejections"]),
        "per_role": dict(stats["per_role"]),
        "truncated": stats.get("truncated", 0),
        "abandoned": stats.get("abandoned", 0),
    }


def llm_call_statuses(duckdb_file: str, partition_key: str) -> dict[str, int]:
    import duckdb

    with duckdb.connect(duckdb_file, read_only=True) as conn:
        rows = conn.execute(
            "SELECT status, count(*) FROM llm_calls WHERE partition_key = ? GROUP BY status", [partition_key]
        ).fetchall()
    return dict(rows)


def check_run(run: Run) -> dict[str, Any]:
    proc, server = run.proc, run.server
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    report = Path(out["report_md"]).read_text()
    assert "## References" in report and "[1]" in report, report
    for request in server.requests:
        messages = request["messages"]
        assert not same_role_runs(messages), [m["role"] for m in messages]
        assert messages[-1]["role"] in ("user", "tool"), [m["role"] for m in messages]
        assert all(m["role"] != "system" for m in messages[1:])
    return {**figures(server), "llm_calls": llm_call_statuses(out["duckdb"], out["partition_key"])}


def test_llamacpp_json_schema_500_is_a_capability_answer(runs, baseline):
    result = check_run(runs["llamacpp"])
    # One rejection per model and process, then llama.cpp's {"type": "json_object", "schema": ...}.
    assert 1 <= result["rejected"] <= MODELS
    assert result["requests"] <= baseline + MODELS
    formats = [r["response_format"] for r in runs["llamacpp"].server.requests if "response_format" in r]
    assert sum(f["type"] == "json_schema" for f in formats) == result["rejected"]
    assert all("schema" in f for f in formats if f["type"] == "json_object")
    assert result["llm_calls"].get("format_fallback", 0) == result["rejected"]


def test_strict_alternation_templates_accept_every_request(runs, baseline):
    result = check_run(runs["strict_alternation"])
    # Not one request refused: every request was answered as an OpenAI server would.
    assert result["rejected"] == 0 and result["rejections"] == {}
    assert result["llm_calls"] and set(result["llm_calls"]) == {"ok"}, result["llm_calls"]


def test_template_without_system_role_gets_the_system_prompt_folded(runs, baseline):
    result = check_run(runs["no_system"])
    assert 1 <= result["rejected"] <= MODELS
    assert result["requests"] <= baseline + MODELS


def test_server_without_tools_skips_the_optional_calls(runs, baseline):
    result = check_run(runs["no_tools"])
    assert 1 <= result["rejected"] <= MODELS  # researcher model, reporter model: once each
    assert result["requests"] <= baseline
    assert sum("tools" in r for r in runs["no_tools"].server.requests) == result["rejected"]


def test_truncated_answers_are_retried_once_with_more_tokens(runs, baseline):
    result = check_run(runs["truncating"])
    # Roles below 1200 max tokens (compressor, critic) are cut once per call, then get 2x.
    assert result["truncated"] >= 1 and result["llm_calls"].get("truncated", 0) >= 1
    assert result["requests"] <= baseline + result["truncated"]


def test_slow_server_that_ignores_disconnects(runs, baseline):
    result = check_run(runs["slow_ignore_disconnect"])
    # The first answer outlasts the timeout; the retry waits (twice as long) behind it instead
    # of timing out again: each abandoned generation costs exactly one extra request.
    assert result["abandoned"] >= 1
    assert result["requests"] == baseline + result["abandoned"]
    assert result["llm_calls"].get("retry", 0) == result["abandoned"]


def test_weak_model_copying_placeholders(runs, baseline):
    result = check_run(runs["weak_placeholder"])
    assert result["llm_calls"].get("fallback", 0) >= 1
    assert result["requests"] <= 2 * baseline


def test_schema_driven_random_answers(runs, baseline):
    result = check_run(runs["schema_random"])
    assert result["requests"] <= 2 * baseline


def test_model_copying_the_prompt_examples(runs, baseline):
    result = check_run(runs["copies_example"])
    assert result["llm_calls"].get("invalid", 0) >= 4 and result["llm_calls"].get("fallback", 0) >= 4
    out = json.loads(runs["copies_example"].proc.stdout)
    assert detector().found_in(Path(out["report_md"]).read_text()) == []
    assert result["requests"] <= 2 * baseline
