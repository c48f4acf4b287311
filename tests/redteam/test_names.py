"""Hostile file names (issue 28): a corpus file named with a newline, backticks, Markdown or Rich
markup is indexed and cited like any other, and printed escaped wherever it is shown: the report's
References (one list item per source, the name in a code span), ``deepresearch audit``'s text
output (one visible line, no markup), the UI's Markdown metadata. And the temp files a killed run
left are gone when the next run starts, in the partition and in the shared corpus cache."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from deepresearch_dagster.core.config import ResearchSettings
from deepresearch_dagster.core.models import Citation
from deepresearch_dagster.core.naming import markdown_code, markdown_text, printable_name, reference_line
from deepresearch_dagster.core.pipeline import run_research
from deepresearch_dagster.core.store.artifacts import atomic_write_bytes, remove_stale_temps

NASTY = [
    "a\nb.md",
    "`id`;rm -rf ~.md",
    "[click](javascript:alert(1)) **bold** <script>x<b>.md",
    "[bold]hot[blink] streets.md",
    "tab\there\x1b[31mred.md",
    "right\u202eleft.md",
    "``` fence.md",
]
QUESTION = "Why are city streets hotter than the countryside at night?"
TEXT = (
    "City streets stay hotter than the countryside at night because asphalt and concrete store heat "
    "during the day and release it after sunset. The urban heat island raises night temperatures by "
    "{n} degrees in dense districts.\n"
)


def _html(markdown: str) -> str:
    return MarkdownIt("commonmark").render(markdown)


@pytest.mark.parametrize("name", NASTY, ids=range(len(NASTY)))
def test_a_name_is_one_escaped_line_wherever_it_is_printed(name, record):
    shown = printable_name(name)
    code = markdown_code(name)
    citation = Citation(
        n=1, source=name, source_title=name.removesuffix(".md"), artifact_file="p__step1_x__read.txt", summary_title="s"
    )
    line = reference_line(citation)
    html = _html(line)
    escaped_code = shown.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    ok = (
        shown.isprintable()
        and "\n" not in code + line
        and html.count("<li>") == 1  # one list item, whatever the name holds
        and f"<code>{escaped_code}</code>" in html  # the whole name, literally, in one code span
        and "<a " not in html
        and "<strong>" not in html
        and "<script>" not in html
        and "<em>" not in html
    )
    record(f"name {name!r:.40}", "one line, literal in a code span", line[:70], ok)
    assert ok, (line, html)


def test_markdown_text_keeps_plain_titles_readable():
    assert (
        markdown_text("Sodium-ion batteries: costs & outlook (2026)") == "Sodium-ion batteries: costs & outlook (2026)"
    )
    assert _html(markdown_text("*not* [a](link) <b>")) == "<p>*not* [a](link) &lt;b&gt;</p>\n"


@pytest.fixture
def nasty_research(tmp_path: Path) -> tuple[ResearchSettings, str]:
    corpus = tmp_path / "nasty_corpus"
    corpus.mkdir()
    for n, name in enumerate(NASTY, start=2):
        (corpus / name).write_text(TEXT.format(n=n))
    settings = ResearchSettings.from_env(engine="offline", corpus_dir=str(corpus), max_steps=2, depth=0)
    ctx, _ = run_research(QUESTION, settings, log=lambda m: None)
    return settings, ctx.partition_key


def test_hostile_names_in_the_report_and_the_audit(nasty_research, capsys, monkeypatch, record):
    from deepresearch_dagster.cli import main

    settings, key = nasty_research
    folder = settings.artifacts_path / key
    report = (folder / "report.md").read_text("utf-8")
    import json

    cited = {c["source"] for c in json.loads((folder / "report.json").read_text("utf-8"))["citations"]}
    references = report.split("\n## References\n", 1)[1].strip().splitlines()
    in_report = (
        cited & set(NASTY)
        and all(line.startswith("- [") for line in references)
        and len(references) == len(cited)
        and all(markdown_code(name) in report for name in cited)
    )
    outputs = {}
    for columns in ("80", "200"):  # the stacked chain and the table
        monkeypatch.setenv("COLUMNS", columns)
        assert main(["audit", key]) == 0
        outputs[columns] = capsys.readouterr().out
    in_audit = all(
        # A table cell may wrap (its words then sit on rows of their own), but every word of the
        # escaped name is shown as it is.
        all(word in out for word in printable_name(name).split())
        and "\x1b[31m" not in out
        and "\u202e" not in out
        for out in outputs.values()
        for name in cited
    )
    markup_kept = all("[bold]hot[blink]" in " ".join(out.split()) for out in outputs.values()) or (
        "[bold]hot[blink] streets.md" not in cited
    )
    ok = bool(in_report) and in_audit and markup_kept
    record(
        f"{len(cited & set(NASTY))} hostile corpus names cited",
        "References one item each; audit shows them escaped",
        f"{len(references)} references; audit ok {in_audit}",
        ok,
    )
    assert ok, (report[-3000:], outputs["80"][-3000:])


def _dead_pid() -> int:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(proc.stdout)


def test_temp_files_of_a_killed_run_are_gone_when_the_next_run_starts(isolated_env, corpus_dir, record):
    settings = ResearchSettings.from_env(engine="offline", corpus_dir=str(corpus_dir), max_steps=1, depth=0)
    ctx, _ = run_research(QUESTION, settings, log=lambda m: None)
    partition, cache = ctx.store.partition_dir, settings.artifacts_path / "corpus_cache"
    dead, now = _dead_pid(), time.time()
    stale = [
        partition / f".report.md.{dead}.k2j4h5g6.tmp",
        partition / "conversations" / f".step_1.json.{dead}.abcd1234.tmp",
        cache / "texts" / "ab" / f".ab12.json.{dead}.zzzz9999.tmp",
    ]
    snapshot = cache / "snapshots" / f".0123456789abcdef.{dead}.tmp"
    live = cache / "texts" / "ab" / f".cd34.json.{os.getpid()}.live1234.tmp"  # a writer still at work
    for path in [*stale, live]:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("partial")
        os.utime(path, (now, now))  # just written: an age rule alone would keep them
    (snapshot / "bm25").mkdir(parents=True)
    run_research(QUESTION, settings, log=lambda m: None)  # the next run, at once
    left = [p for p in [*stale, snapshot] if p.exists()]
    ok = not left and live.exists()
    record("temp files of a killed run, rerun at once", "removed (partition + corpus cache)", f"left {len(left)}", ok)
    assert ok, left
    live.unlink()


def test_atomic_writes_name_their_writer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    tmp_path = tmp_path / "writes"
    tmp_path.mkdir()
    seen: list[str] = []
    real_replace = os.replace

    def spy(src: str, dst: Path) -> None:
        seen.append(Path(src).name)
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    atomic_write_bytes(tmp_path / "x.json", b"{}")
    monkeypatch.undo()
    assert seen and seen[0].startswith(f".x.json.{os.getpid()}.") and seen[0].endswith(".tmp")
    dead = f".y.json.{_dead_pid()}.abc12345.tmp"
    mine = f".z.json.{os.getpid()}.abc12345.tmp"
    legacy = ".w.json.abc12345.tmp"  # no pid: removed only once old
    for name in (dead, mine, legacy):
        (tmp_path / name).write_text("")
    assert remove_stale_temps(tmp_path) == [dead]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([legacy, "x.json", mine])
