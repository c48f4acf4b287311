"""One line for a broken environment (issue 28): a corrupt ``dagster.yaml``, a lineage database
that is a folder or a truncated file, a full disk under DAGSTER_HOME or the artifact folder, a
corpus folder from the environment that does not exist, a zero or negative timeout. Each gives
one ``error:`` line on stderr (no traceback, no Dagster or SQLAlchemy text), the documented exit
code (2: configuration to fix; 1: storage), in under 5 s, with nothing registered (no research
request in DuckDB, no Dagster partition or run).

The CLI runs in this process (``main``), as a subprocess would run it, so each case costs well
under a second; ``capfd`` also catches what Dagster writes to the stderr file descriptor."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import duckdb
import pytest

from deepresearch_dagster.cli import main

QUESTION = "How do urban heat islands form?"
RUN = ["run", QUESTION, "--engine", "offline", "--quiet"]
LIMIT_S = 5.0


def _cli(argv: list[str], capfd: pytest.CaptureFixture[str]) -> tuple[int, float, list[str], str]:
    started = time.monotonic()
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own errors
        code = int(exc.code or 0)
    took = time.monotonic() - started
    err = capfd.readouterr().err
    return code, took, [line for line in err.splitlines() if line.strip()], err


def _requests(db: Path) -> int:
    """Research requests registered in the lineage database ``db`` (0 when it does not exist)."""
    if not db.is_file():
        return 0
    with duckdb.connect(str(db), read_only=True) as conn:
        tables = {row[0] for row in conn.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        if "research_requests" not in tables:
            return 0
        return int(conn.execute("SELECT count(*) FROM research_requests").fetchone()[0])


def _lineage(root: Path) -> Path:
    return root / "artifacts" / "lineage.duckdb"


def _dagster_runs(home: Path) -> int:
    """Runs recorded by the Dagster instance (its SQLite run storage; 0 when there is none)."""
    import sqlite3

    runs = home / "history" / "runs.db"
    if not runs.is_file():
        return 0
    with sqlite3.connect(runs) as conn:
        try:
            return int(conn.execute("SELECT count(*) FROM runs").fetchone()[0])
        except sqlite3.OperationalError:  # created, but its tables never were (the disk filled)
            return 0


def _check(
    record: Callable[..., None],
    case: str,
    result: tuple[int, float, list[str], str],
    code: int,
    words: tuple[str, ...],
    db: Path,
    home: Path | None = None,
) -> None:
    got, took, lines, err = result
    line = lines[0] if lines else ""
    ok = (
        got == code
        and len(lines) == 1
        and line.startswith("error: ")
        and all(w in line for w in words)
        and "Traceback" not in err
        and "sqlalchemy" not in err.lower()
        and "DagsterExecution" not in err  # never "DagsterExecutionHandleOutputError: …"
        and took < LIMIT_S
        and _requests(db) == 0
        and (home is None or _dagster_runs(home) == 0)
    )
    shown = re.sub(r"(?:/[^/\s:]+)+/", "…/", line[7:])  # the message, not the test's temp folders
    record(case, f"exit {code}, one line, < {LIMIT_S:g} s, nothing registered", f"{took:.1f} s: {shown[:70]}", ok)
    assert ok, (got, took, err[-3000:], _requests(db))


@pytest.mark.parametrize(
    ("content", "words"),
    [
        ("telemetry:\n  enabled: [false\n", ("dagster.yaml is not valid YAML at line", "move it aside")),
        ("- a list\n", ("dagster.yaml holds a list, not a mapping",)),
        ('run_queue: {max_concurrent_runs: "many"}\n', ("is not a valid Dagster instance configuration",)),
    ],
    ids=["not-yaml", "not-a-mapping", "not-dagster-config"],
)
def test_a_corrupt_dagster_yaml_is_one_line(content, words, isolated_env, capfd, record):
    home = Path(os.environ["DAGSTER_HOME"])
    (home / "dagster.yaml").write_text(content)
    result = _cli(RUN, capfd)
    _check(record, f"dagster.yaml: {content.splitlines()[0][:28]}", result, 2, words, _lineage(isolated_env), home)


def test_a_lineage_database_path_that_is_a_folder_is_one_line(isolated_env, capfd, monkeypatch, record):
    folder = isolated_env / "db_folder"
    folder.mkdir()
    monkeypatch.setenv("DEEPRESEARCH_DUCKDB", str(folder))
    for argv, label in ((RUN, "run"), (["ls"], "ls")):
        result = _cli(argv, capfd)
        words = (str(folder), "is a folder, not a DuckDB file", "DEEPRESEARCH_DUCKDB")
        _check(record, f"DEEPRESEARCH_DUCKDB is a folder ({label})", result, 2, words, _lineage(isolated_env))


def test_a_truncated_lineage_database_is_one_line_before_registration(isolated_env, capfd, monkeypatch, record):
    whole = isolated_env / "whole.duckdb"
    with duckdb.connect(str(whole)) as conn:
        conn.execute("CREATE TABLE t AS SELECT range AS i, repeat('x', 100) AS s FROM range(20000)")
    db = isolated_env / "lineage.duckdb"
    db.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    before = db.read_bytes()
    monkeypatch.setenv("DEEPRESEARCH_DUCKDB", str(db))
    result = _cli(RUN, capfd)
    _check(record, "truncated lineage.duckdb (run)", result, 1, (str(db), "corrupt or truncated"), whole)
    assert db.read_bytes() == before  # nothing was written into it


def test_a_missing_corpus_folder_from_the_environment_is_refused_at_once(isolated_env, capfd, monkeypatch, record):
    monkeypatch.setenv("DEEPRESEARCH_CORPUS", str(isolated_env / "no-such-corpus"))
    result = _cli(RUN, capfd)
    words = ("corpus folder not found", "no-such-corpus", "DEEPRESEARCH_CORPUS")
    _check(record, "DEEPRESEARCH_CORPUS names a missing folder", result, 2, words, _lineage(isolated_env))


TIMEOUTS = [
    ("DEEPRESEARCH_LLM_TIMEOUT", "-1", "greater than 0"),
    ("DEEPRESEARCH_LLM_TIMEOUT", "0", "greater than 0"),
    ("DEEPRESEARCH_LLM_TIMEOUT", "inf", "finite number"),
    ("DEEPRESEARCH_LLM_IDLE_TIMEOUT", "0", "greater than 0"),
    ("DEEPRESEARCH_LLM_TOKENS_PER_S", "-20", "greater than 0"),
    ("DEEPRESEARCH_SEARCH_TIMEOUT", "-1", "greater than 0"),
    ("DEEPRESEARCH_BUDGET_WALL_S", "0", "greater than 0"),
]


@pytest.mark.parametrize(("var", "value", "why"), TIMEOUTS, ids=[f"{v}={x}" for v, x, _ in TIMEOUTS])
def test_a_zero_or_negative_timeout_is_refused(var, value, why, isolated_env, capfd, monkeypatch, record):
    monkeypatch.setenv(var, value)
    result = _cli(RUN, capfd)
    _check(record, f"{var}={value}", result, 2, (var, why, repr(value)), _lineage(isolated_env))


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """``mount(size)``: a fresh tmpfs of that size (root only), unmounted afterwards."""
    mounted: list[Path] = []

    def mount(size: str) -> Path:
        target = tmp_path / f"disk{len(mounted)}"
        target.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(target)], capture_output=True)
        if done.returncode != 0:
            pytest.skip("needs root to mount a small tmpfs")
        mounted.append(target)
        return target

    yield mount
    for target in mounted:
        subprocess.run(["umount", "-l", str(target)], check=False)


def _fill(folder: Path) -> None:
    """Fill the file system of ``folder`` to the last byte."""
    with (folder / "filler").open("wb", buffering=0) as handle:
        for size in (65536, 1):
            try:
                while handle.write(b"\0" * size):
                    pass
            except OSError:
                pass


def test_a_full_disk_under_a_new_dagster_home_is_one_line(isolated_env, capfd, monkeypatch, tiny_disk, record):
    home = tiny_disk("16k") / "dagster_home"
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    result = _cli(RUN, capfd)
    words = ("disk full writing", str(home), "free some space")
    _check(record, "full disk, new DAGSTER_HOME (16 KB tmpfs)", result, 1, words, _lineage(isolated_env), home)


def test_a_dagster_home_whose_disk_is_full_is_one_line(isolated_env, capfd, monkeypatch, tiny_disk, record):
    # The instance exists (a ready copy) and the disk is then filled: the run's first event fails.
    disk = tiny_disk("4m")
    home = disk / "dagster_home"
    shutil.copytree(os.environ["DAGSTER_HOME"], home)
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    _fill(disk)
    result = _cli(RUN, capfd)
    words = ("disk full writing", str(home), "free some space")
    _check(record, "full disk under an existing DAGSTER_HOME", result, 1, words, _lineage(isolated_env), home)


def test_a_full_artifact_disk_is_one_line_before_registration(isolated_env, capfd, monkeypatch, tiny_disk, record):
    disk = tiny_disk("64k")
    monkeypatch.setenv("DEEPRESEARCH_ARTIFACTS_DIR", str(disk / "artifacts"))
    _fill(disk)
    result = _cli(RUN, capfd)
    words = ("disk full", "free some space")
    _check(record, "full disk under the artifact folder", result, 1, words, disk / "artifacts" / "lineage.duckdb")
