"""Fast start: the commands that do not run Dagster never import it (nor the web stack), each
checked in a fresh interpreter, as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from deepresearch_dagster.core.store.lineage import LineageStore
from tests.conftest import COMPRESS_ARGV, FIXTURES

# Runs main(argv) and reports the top-level packages loaded afterwards.
DRIVER = """
import contextlib, io, json, sys
from deepresearch_dagster.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    try:
        code = main(sys.argv[1:])
    except SystemExit as exc:
        code = exc.code
print(json.dumps({"code": code, "loaded": sorted({m.split(".")[0] for m in sys.modules}), "out": out.getvalue()}))
"""
WEB_AND_MODELS = {"httpx", "openai", "trafilatura", "lxml", "tiktoken"}
DB_AND_TABLES = {"duckdb", "pydantic", "rich"}


def _run(*argv: str, env: dict[str, str]) -> dict:
    proc = subprocess.run([sys.executable, "-c", DRIVER, *argv], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("startup")
    db = tmp / "lineage.duckdb"
    lineage = LineageStore.at(db)
    for key in ("alpha-1", "beta-2"):
        lineage.register_request(key, f"What about {key}?", {})
        lineage.run_started(f"run-{key}", key, "research_plan")
    return {
        **os.environ,
        "DEEPRESEARCH_DUCKDB": str(db),
        "DEEPRESEARCH_ARTIFACTS_DIR": str(tmp / "artifacts"),
        "DEEPRESEARCH_CONFIG": str(tmp / "no-config.toml"),
        "DAGSTER_HOME": str(tmp / "dagster_home"),
    }


@pytest.mark.parametrize(
    ("argv", "also_absent"),
    [
        (["--help"], DB_AND_TABLES),  # the parser alone: no pydantic, DuckDB or rich
        (["metrics", "--help"], DB_AND_TABLES),
        (["ls"], set()),
        (["ls", "--json", "--limit", "1"], {"rich"}),
        (["audit", "alpha"], set()),
        (["audit", "alpha-1", "--json"], {"rich"}),
        (["metrics"], set()),
        (["metrics", "--json"], {"rich"}),
        (["extract", str(FIXTURES / "corpus" / "sodium_ion_costs.txt")], {"duckdb", "rich"}),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else None,
)
def test_read_commands_never_import_dagster_or_the_web_stack(env, argv, also_absent):
    result = _run(*argv, env=env)
    assert result["code"] == 0, result
    loaded = set(result["loaded"])
    assert not {m for m in loaded if m == "dagster" or m.startswith("dagster_")}, argv
    assert not loaded & (WEB_AND_MODELS | also_absent), (argv, loaded & (WEB_AND_MODELS | also_absent))


def test_compress_and_html_extract_do_not_import_dagster(env):
    page = FIXTURES / "web_pages" / "ars-1" / "source.html"
    assert "dagster" not in _run("extract", str(page), "--json", env=env)["loaded"]
    result = _run(*COMPRESS_ARGV, env=env)
    assert result["code"] == 0 and "dagster" not in result["loaded"]


def test_ls_and_metrics_page_newest_first(env):
    rows = json.loads(_run("ls", "--json", env=env)["out"])
    assert [r["partition_key"] for r in rows] == ["beta-2", "alpha-1"] and rows[0]["status"] == "running"
    assert [r["partition_key"] for r in json.loads(_run("ls", "--json", "--offset", "1", env=env)["out"])] == [
        "alpha-1"
    ]
    text = _run("ls", "--limit", "1", env={**env, "COLUMNS": "160"})["out"]
    assert "beta-2" in text and "alpha-1" not in text and "showing 1–1 of 2 researches" in text
    assert "--offset 1 for the next page" in text
    metrics = json.loads(_run("metrics", "--json", "--limit", "1", "--offset", "1", env=env)["out"])
    assert [r["partition_key"] for r in metrics["researches"]] == ["alpha-1"]
    assert metrics["researches_total"] == 2 and metrics["totals"]["researches"] == 2
