"""Bad flags, environment values and argv: exit 2 with one line naming what was wrong, before
anything is registered (issue 15, "Bad input")."""

from __future__ import annotations

from pathlib import Path

import pytest

from deepresearch_dagster.cli import main

QUESTION = "How do urban heat islands form?"

FLAG_CASES = [
    (["--depth", "-1"], "--depth"),
    (["--breadth", "1000000000"], "--breadth"),
    (["--max-steps", "0"], "--max-steps"),
    (["--tool-calls", "1e20"], "--tool-calls"),
    (["--budget-seconds", "nan"], "--budget-seconds"),
    (["--budget-seconds", "-5"], "--budget-seconds"),
    (["--engine", "gpt5"], "--engine"),
]

ENV_CASES = [
    ("DEEPRESEARCH_MAX_STEPS", "lots"),
    ("DEEPRESEARCH_ENGINE", "gpt5"),
    ("DEEPRESEARCH_DEPTH", "-3"),
    ("DEEPRESEARCH_LLM_TIMEOUT", "soon"),
    ("DEEPRESEARCH_SEARCH_TIMEOUT", "0"),
]


def _nothing_registered(root: Path) -> bool:
    # The lineage database is created by the first registration; a refused run never gets there.
    return not (root / "artifacts" / "lineage.duckdb").exists()


def _exit_code(argv: list[str]) -> int:
    """What the process would exit with: argparse's own errors raise SystemExit, ours return."""
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize(("flags", "name"), FLAG_CASES, ids=[c[1] + "=" + c[0][1] for c in FLAG_CASES])
def test_bad_flag_is_one_line_naming_the_flag(flags, name, capsys, isolated_env):
    assert _exit_code(["run", QUESTION, *flags]) == 2
    line = _one_line(capsys.readouterr().err)
    assert line.startswith("error: ") and name in line
    assert _nothing_registered(isolated_env)


@pytest.mark.parametrize(("var", "value"), ENV_CASES, ids=[c[0] for c in ENV_CASES])
def test_bad_environment_value_is_one_line_naming_the_variable(var, value, capsys, monkeypatch, isolated_env):
    monkeypatch.setenv(var, value)
    assert main(["run", QUESTION]) == 2
    line = _one_line(capsys.readouterr().err)
    assert var in line and repr(value) in line
    assert _nothing_registered(isolated_env)


def test_undecodable_argv_is_refused_before_registration(capsys, isolated_env):
    # What Python makes of the bytes b"\xff\xfe" in argv (surrogateescape).
    assert main(["run", "\udcff\udcfe what is this"]) == 2
    assert "not valid UTF-8" in _one_line(capsys.readouterr().err)
    assert _nothing_registered(isolated_env)


@pytest.mark.parametrize("argv", [["frobnicate"], ["run"], ["ls", "--limit", "many"]])
def test_argparse_errors_are_one_line(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    line = _one_line(capsys.readouterr().err)
    assert line.startswith("error: deepresearch") and "--help" in line


def test_a_corrupt_lineage_database_is_one_line_at_once(capsys, isolated_env, record):
    import os
    import time

    db = isolated_env / "artifacts" / "lineage.duckdb"
    db.parent.mkdir(parents=True, exist_ok=True)
    db.write_bytes(os.urandom(20_000))
    started = time.monotonic()
    code = _exit_code(["ls"])
    took = time.monotonic() - started
    line = _one_line(capsys.readouterr().err)
    ok = code == 1 and "not a readable DuckDB file" in line and took < 5
    record(
        "corrupt lineage.duckdb (`deepresearch ls`)",
        "exit 1, one line, no lock-wait retries",
        f"{took:.1f} s: {line[:60]}",
        ok,
    )
    assert ok, (code, took, line)


def test_a_full_disk_is_one_line_and_the_research_resumes_after(capsys, isolated_env, monkeypatch, record):
    import subprocess

    mount = isolated_env / "small"
    mount.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1500k", "tmpfs", str(mount)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip("needs root to mount a small tmpfs")
    try:
        monkeypatch.setenv("DEEPRESEARCH_ARTIFACTS_DIR", str(mount / "artifacts"))
        code = _exit_code(["run", QUESTION, "--quiet", "--engine", "offline"])
        err = capsys.readouterr().err
        first = next(line for line in err.splitlines() if line.startswith("error:"))
        ok = code == 1 and "disk full" in first and "Traceback" not in err
        record("disk full (1.5 MB tmpfs) during `deepresearch run`", "exit 1, 'disk full' line", first[:70], ok)
        assert ok, err
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
