"""``deepresearch run`` on a pseudo-terminal, read as a person sees the screen: every progress line
stands on its own row, with no spinner residue before it and no wrap at 80 or 100 columns.

While a Dagster step runs, its compute-log capture points fd 2 at a pipe; a console that asked
"is this a terminal?" then printed progress lines after the spinner's text without clearing it.
The real run covers that path at 100 columns; at 80 columns a short script does what Dagster does
(fd 2 to a pipe copied to the terminal) around the same progress code, which takes a second.
"""

from __future__ import annotations

import os
import pty
import re
import select
import sys
import time

import pytest

SPINNER = set("⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏")
ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def screen_rows(output: str) -> list[str]:
    """The rows a terminal shows: a line feed starts a row, a carriage return goes back to its
    start, ``ESC[2K`` erases it, ``ESC[nA`` goes back up n rows, other escapes show nothing."""
    rows: list[list[str]] = [[]]
    row, col = 0, 0
    for part in re.split(r"(\r\n|\n|\r|\x1b\[[0-9;?]*[A-Za-z])", output):
        if part in ("\r\n", "\n"):
            row, col = row + 1, 0
            if row == len(rows):
                rows.append([])
        elif part == "\r":
            col = 0
        elif part == "\x1b[2K":
            rows[row] = []
        elif part and ESCAPE.fullmatch(part):
            if part.endswith("A"):
                row = max(0, row - int(part[2:-1] or 1))
        elif part:
            rows[row][col : col + len(part)] = list(part)
            col += len(part)
    return ["".join(r) for r in rows if r]


def run_on_pty(argv: list[str], columns: int, env: dict[str, str], timeout: float = 240) -> tuple[int, str]:
    env = {**env, "COLUMNS": str(columns), "LINES": "40", "TERM": "xterm-256color"}
    pid, fd = pty.fork()
    if pid == 0:  # pragma: no cover - the child
        os.execvpe(argv[0], argv, env)
    out, deadline = b"", time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 1.0)
        if not ready:
            continue
        try:
            data = os.read(fd, 65536)
        except OSError:
            break
        if not data:
            break
        out += data
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), out.decode("utf-8", "replace")


def assert_clean(rows: list[str], columns: int) -> None:
    progress = [r for r in rows if r.startswith("  ")]
    assert progress, rows
    residue = [r for r in rows if SPINNER & set(r)]
    assert not residue, residue
    # Progress lines are cut to the width (paths in the final figures are printed whole, to copy).
    assert all(len(r) <= columns for r in progress), max(progress, key=len)


def test_run_progress_on_a_100_column_terminal(isolated_env, corpus_dir):
    (corpus_dir / "pipe.txt").unlink(missing_ok=True)
    os.mkfifo(corpus_dir / "pipe.txt")  # its progress line is longer than the terminal is wide
    argv = [sys.executable, "-m", "deepresearch_dagster.cli", "run", "How do sodium-ion batteries work?"]
    argv += ["--corpus", str(corpus_dir), "--max-steps", "1", "--depth", "0"]
    code, output = run_on_pty(argv, 100, dict(os.environ))
    assert code == 0, output[-3000:]
    rows = screen_rows(output)
    assert_clean([r for r in rows if not r.startswith(("│", "┌", "└", "├"))], 100)
    assert any(r.startswith("  documents: 1 file(s) skipped: pipe.txt (not a regular file") for r in rows)
    assert any(r.startswith("  step 1/1: ") for r in rows) and any(r.startswith("report: ") for r in rows)


SCRIPT = """
import logging, os, threading, time
from deepresearch_dagster.cli.common import live_progress
log = logging.getLogger("deepresearch")
with live_progress(False, False, "loading Dagster"):
    time.sleep(0.3)
    # What Dagster's compute-log capture does while a step runs: fd 2 becomes a pipe, copied on.
    saved, (r, w) = os.dup(2), os.pipe()
    copier = threading.Thread(target=lambda: [os.write(saved, b) for b in iter(lambda: os.read(r, 4096), b"")])
    copier.start()
    os.dup2(w, 2)
    for n in range(6):
        log.info(f"{n}.1 read_document: 1,234 raw tokens → useful, 118 tokens injected " + "long words " * n * 3)
        time.sleep(0.15)
    os.dup2(saved, 2)
    os.close(w)
    copier.join()
"""


@pytest.mark.parametrize("columns", [80, 100])
def test_progress_lines_never_mix_with_the_spinner(columns):
    code, output = run_on_pty([sys.executable, "-c", SCRIPT], columns, dict(os.environ), timeout=60)
    assert code == 0, output
    rows = screen_rows(output)
    assert_clean(rows, columns)
    assert [r.split(" ")[2] for r in rows if r.startswith("  ")] == [f"{n}.1" for n in range(6)]
