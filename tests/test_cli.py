"""The ``deepresearch`` console script as a user runs it (subprocesses, real exit codes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import COMPRESS_ARGV, FIXTURES


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "deepresearch_dagster.cli", *args],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        cwd=cwd,
        timeout=300,
    )


@pytest.mark.parametrize("question", ["", "   ", "x" * 10_001, "bad\x01char"])
def test_bad_question_exits_2_with_one_line(question):
    proc = run_cli("run", question)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr


def test_missing_corpus_exits_2():
    proc = run_cli("run", "What is sodium?", "--corpus", "/no/such/folder")
    assert proc.returncode == 2 and "corpus folder not found" in proc.stderr


def test_unknown_option_exits_2():
    assert run_cli("run", "q", "--engine", "gpt9").returncode == 2


def test_run_json_then_ls(isolated_env, corpus_dir):
    # A named pipe would block a reader forever, a corrupt PDF cannot be parsed: both are skipped,
    # and the user is told (progress, figures, report.json, the report's Limitations).
    os.mkfifo(corpus_dir / "pipe.txt")
    (corpus_dir / "broken.pdf").write_bytes(b"%PDF-1.4 not really")
    proc = run_cli("run", "How do sodium-ion batteries work in cold weather?", "--corpus", str(corpus_dir), "--json")
    assert proc.returncode == 0, proc.stderr
    assert "documents: 2 file(s) skipped: broken.pdf (" in proc.stderr and "pipe.txt (not a regular file" in proc.stderr
    out = json.loads(proc.stdout)
    for key in (
        "partition_key",
        "plan_title",
        "report_md",
        "report_json",
        "artifacts_dir",
        "duckdb",
        "tool_calls",
        "llm_calls",
        "raw_tokens",
        "injected_tokens",
        "context_reduction",
    ):
        assert key in out
    assert Path(out["report_md"]).is_file() and Path(out["artifacts_dir"]).is_dir()
    assert out["tool_calls"] == len(list(Path(out["artifacts_dir"]).iterdir()))
    assert "step 1/" in proc.stderr  # progress was shown
    assert [path for path, _ in out["skipped_documents"]] == ["broken.pdf", "pipe.txt"]
    report = json.loads(Path(out["report_json"]).read_text())
    assert report["skipped_documents"] == out["skipped_documents"]
    limitations = Path(out["report_md"]).read_text().split("## Limitations")[1].split("\n## ")[0]
    assert "2 file(s) of the document folder could not be read" in limitations and "`pipe.txt`" in limitations
    assert out["checks"]["citations_resolve"] == {
        "passed": True,
        "severity": "ERROR",
        "summary": out["checks"]["citations_resolve"]["summary"],
    }

    listing = run_cli("ls", "--json")
    assert listing.returncode == 0
    rows = json.loads(listing.stdout)
    assert [r["partition_key"] for r in rows] == [out["partition_key"]]
    # This small corpus misses the context-reduction target: a WARN check, shown by run and ls alike.
    warned = sorted(name for name, check in out["checks"].items() if not check["passed"])
    assert all(out["checks"][name]["severity"] == "WARN" for name in warned)
    assert all(f"warning: check {name}: " in proc.stderr for name in warned)
    assert rows[0]["status"] == ("succeeded, warning" if warned else "succeeded")
    assert rows[0]["failed_checks"] == warned


def test_compress_prints_schema_json():
    proc = run_cli(*COMPRESS_ARGV)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert set(result) == {"summary_title", "summary", "extraction", "is_useful"}
    assert result["is_useful"] is True


def test_compress_missing_file_exits_2():
    proc = run_cli(
        "compress", "/nope.txt", "--plan-title", "p", "--step-title", "s", "--step-description", "d", "--tool-name", "t"
    )
    assert proc.returncode == 2


def test_dagster_loads_the_definitions():
    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "dagster"),
            "definitions",
            "validate",
            "-m",
            "deepresearch_dagster.definitions",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_extract_prints_one_json_line_per_input_and_reports_missing_files():
    page = FIXTURES / "web_pages" / "ars-1" / "source.html"
    proc = run_cli("extract", str(page), str(FIXTURES / "corpus" / "sodium_ion_costs.txt"), "/no/such.html", "--json")
    assert proc.returncode == 2 and "no such file: /no/such.html" in proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [line["source"] for line in lines] == [str(page), str(FIXTURES / "corpus" / "sodium_ion_costs.txt")]
    assert lines[0]["title"] and "Minecraft" in lines[0]["text"] and "<div" not in lines[0]["text"]


def test_extract_refuses_loopback_urls_by_default():
    proc = run_cli("extract", "http://127.0.0.1:9/page", "--json")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "127.0.0.1" in proc.stderr


def test_corpus_help_names_every_format_the_corpus_reads():
    from deepresearch_dagster.cli.common import CORPUS_FORMATS
    from deepresearch_dagster.core.documents.ingest import SUPPORTED

    assert set(CORPUS_FORMATS.split()) == set(SUPPORTED)
