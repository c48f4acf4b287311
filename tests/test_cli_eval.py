"""``deepresearch eval`` as a user runs it (subprocesses, real Dagster instance, offline engine):
scores that agree with an independent reading of each report, resuming, compare, the compressor
replay without tool calls, bad suite lines, and the exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb

from deepresearch_dagster.core.config import load_settings
from tests.test_cli import run_cli

ITEMS = [
    {"id": "density", "question": "What energy density did commercial sodium-ion cells reach in 2023?",
     "answers": ["160 Wh/kg"], "corpus": "docs"},
    {"id": "cold", "question": "How much capacity do sodium-ion cells keep at minus 20 degrees?",
     "answers": ["90 percent"], "corpus": "docs"},
    {"id": "nowhere", "question": "Who wrote Brand?", "answers": ["Ibsen"], "corpus": "missing"},
]  # fmt: skip


def write_suite(folder: Path, corpus_dir: Path, extra: list[str] = ()) -> Path:
    (folder / "docs").symlink_to(corpus_dir)
    suite = folder / "suite.jsonl"
    suite.write_text("\n".join([*(json.dumps(i) for i in ITEMS), *extra]) + "\n")
    return suite


def tool_calls(database: Path) -> int:
    with duckdb.connect(str(database), read_only=True) as conn:
        return conn.execute("SELECT count(*) FROM tool_calls").fetchone()[0]


def test_eval_scores_resumes_compares_and_replays(tmp_path: Path, corpus_dir: Path) -> None:
    suite = write_suite(tmp_path, corpus_dir, ['{"id": "typo", "question": "q?", "answer": ["x"]}', "{broken"])
    first = run_cli("eval", str(suite), "--engine", "offline", "--json", "--max-steps", "2")
    assert first.returncode == 0, first.stderr
    result = json.loads(first.stdout)
    items = {i["id"]: i for i in result["items"]}
    assert items["nowhere"]["status"] == "failed" and "corpus folder not found" in items["nowhere"]["reason"]
    assert {f["line"] for f in result["failures"]} == {4, 5}
    settings = load_settings()
    for item in ITEMS[:2]:
        score = items[item["id"]]
        assert score["status"] == "scored" and not score["resumed"]
        report = (settings.artifacts_path / score["partition_key"] / "report.md").read_text("utf-8")
        # The independent reading: the gold answer, case-insensitively, in report.md.
        assert score["answer_in_report"] == any(a.lower() in report.lower() for a in item["answers"])
        assert score["answer_in_raw"] is True  # both facts are in the corpus the research searched
        assert score["tool_calls"] > 0 and score["verified_citations"] >= 0
    assert result["summary"]["answerable"] == 2 and result["summary"]["failed"] == 1
    eval_json = Path(result["eval_json"])
    assert json.loads(eval_json.read_text())["key"] == result["key"]
    calls = tool_calls(settings.duckdb_file)

    # Same settings: every item is scored from its artifacts, no tool runs again; the table
    # and summary fit 100 columns.
    again = run_cli("eval", str(suite), "--engine", "offline", "--max-steps", "2")
    assert again.returncode == 0, again.stderr
    assert tool_calls(settings.duckdb_file) == calls
    assert all(len(line) <= 100 for line in again.stdout.splitlines() if str(tmp_path) not in line)
    assert "skipped line 4 (typo): answer: unknown field" in again.stderr

    # Compressor replay under another prompt version: no tool call, retention reported.
    prompt = tmp_path / "compressor_v2.md"
    prompt.write_text((Path("deepresearch_dagster/prompts/compressor.md")).read_text() + "\nBe brief.\n")
    replay = run_cli("eval", str(suite), "--engine", "offline", "--max-steps", "2", "--recompress",
                     f"offline/{prompt}", "--json")  # fmt: skip
    assert replay.returncode == 0, replay.stderr
    replayed = json.loads(replay.stdout)
    assert replayed["recompress"]["tool_calls_made"] == 0 and replayed["recompress"]["answerable"] == 2
    assert replayed["recompress"]["prompt_version"].startswith("compressor-")
    assert tool_calls(settings.duckdb_file) == calls
    assert replayed["key"] != result["key"]

    compared = run_cli("eval", "compare", str(eval_json), replayed["key"], "--json")
    assert compared.returncode == 0, compared.stderr
    assert json.loads(compared.stdout)["a"] == result["key"]

    # The evaluation is a materialization of evaluation_results in the Dagster instance.
    from dagster import AssetKey, DagsterInstance

    with DagsterInstance.get() as instance:
        events = instance.fetch_materializations(AssetKey("evaluation_results"), limit=10).records
    assert {e.partition_key for e in events} >= {result["key"], replayed["key"]}


def test_eval_bad_input_exits_with_one_line(tmp_path: Path, corpus_dir: Path) -> None:
    missing = run_cli("eval", str(tmp_path / "none.jsonl"))
    assert missing.returncode == 2 and missing.stderr.strip().count("\n") == 0
    (tmp_path / "broken.jsonl").write_text("{broken\n")
    broken = run_cli("eval", str(tmp_path / "broken.jsonl"))
    assert broken.returncode == 2 and "no readable item" in broken.stderr
    assert "Traceback" not in broken.stderr
    suite = tmp_path / "all_fail.jsonl"
    suite.write_text(json.dumps({"id": "x", "question": "Who?", "answers": ["y"], "corpus": "nope"}) + "\n")
    failed = run_cli("eval", str(suite), "--engine", "offline")
    assert failed.returncode == 1 and "every item failed" in failed.stderr
    usage = run_cli("eval", "compare", "only-one")
    assert usage.returncode == 2
