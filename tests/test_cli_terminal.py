"""The CLI at terminal widths a person uses: whole keys in ``ls``, key prefixes, stacked
``audit``/``metrics`` at 80–100 columns, figures with units, short progress lines."""

from __future__ import annotations

import re

import pytest
from rich.console import Console

from deepresearch_dagster.cli import main
from deepresearch_dagster.cli.common import figure
from deepresearch_dagster.cli.render import render_audit, render_metrics
from deepresearch_dagster.core.config import ResearchSettings
from deepresearch_dagster.core.pipeline import run_research
from deepresearch_dagster.core.store.audit import audit_research, metrics
from deepresearch_dagster.core.store.lineage import LineageStore

QUESTION = "How do sodium-ion batteries work and what do they cost?"


@pytest.fixture
def researched(corpus_dir):
    settings = ResearchSettings.from_env(engine="offline", corpus_dir=str(corpus_dir))
    lines: list[str] = []
    ctx, report = run_research(QUESTION, settings, log=lines.append)
    return ctx.partition_key, report, settings, lines


def _render(width: int, draw) -> str:
    console = Console(width=width, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    draw(console)
    return console.export_text()


def test_figures_have_units_and_separators():
    assert figure(63190, "tokens") == "63,190 tokens"
    assert figure(400000.0, "tokens") == "400,000 tokens"
    assert figure(0.01234, "$", 4) == "$0.0123"
    assert figure(12.345, "s", 1) == "12.3 s"
    assert figure(None) == "—"


def test_progress_lines_are_short(researched):
    *_, lines = researched
    calls = [line for line in lines if re.match(r"\s+\d+\.\d+ \w+: [\d,]+ raw tokens → ", line)]
    assert calls, lines
    assert all(len(line) <= 100 for line in calls), max(calls, key=len)


def test_audit_and_metrics_fit_narrow_terminals(researched):
    key, report, settings, _ = researched
    lineage = LineageStore.at(settings.duckdb_file)
    audit = audit_research(lineage, settings.artifacts_path, key, settings.prices)
    result = metrics(lineage, settings.prices)
    for width in (80, 100):
        text = _render(width, lambda c: render_audit(audit, c))
        assert "Citations → summary → raw artifact → tool call" in text
        assert text.count("sha256 ok") == len(report.citations)
        assert "raw artifact: step" in text  # short names: the plan-title prefix is dropped
        assert "Steps" in text and "LLM calls by role and model" in text
        text += _render(width, lambda c: render_metrics(result, c))
        assert "Totals across researches" in text and key in text  # whole key on its own line
        assert all(len(line) <= width for line in text.splitlines())
        if width == 80:  # the steps table does not fit: one block per step, no cell cut mid-word
            assert "step: 1" in text and "tool calls: " in text


def test_ls_shows_whole_keys_and_commands_accept_a_prefix(researched, capsys, monkeypatch):
    key, *_ = researched
    monkeypatch.setenv("COLUMNS", "80")
    capsys.readouterr()
    assert main(["ls"]) == 0
    assert key in capsys.readouterr().out
    prefix = key[:12]
    assert main(["audit", prefix, "--json"]) == 0
    assert f'"partition_key": "{key}"' in capsys.readouterr().out
    assert main(["audit", "zz-no-such"]) == 2
