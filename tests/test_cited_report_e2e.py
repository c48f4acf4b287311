"""A model reporter that leaves sentences uncited, and cites a source that does not say one, through
the real ``openai`` client and the fake server (``uncited_prose``): the report keeps no uncited
sentence in its executive summary and key findings, and every citation left verifies (issue 24
item 3)."""

from __future__ import annotations

import json
import re

from deepresearch_dagster.core.config import ResearchSettings
from deepresearch_dagster.core.evaluation.score import read_report, uncited
from deepresearch_dagster.core.models import SummaryBundle
from deepresearch_dagster.core.roles.citations import verify_citations
from deepresearch_dagster.core.roles.reporter import number_sources
from tests.test_dagster_e2e import materialize_question

QUESTION = "How do sodium-ion batteries work and what do they cost?"


def _must_cite(markdown: str) -> str:
    """The executive summary and key findings sections of a report."""
    keep, out = False, []
    for line in markdown.splitlines():
        if line.startswith("## "):
            keep = line[3:].strip().lower() in ("executive summary", "key findings")
        if keep:
            out.append(line)
    return "\n".join(out) + "\n"


def test_uncited_and_wrongly_cited_sentences_are_rewritten_or_dropped(fake_openai, corpus_dir):
    fake_openai.mode = "uncited_prose"
    result, key, _, _ = materialize_question(QUESTION, {"engine": "openai", "corpus_dir": str(corpus_dir)})
    assert result.success
    partition = ResearchSettings.from_env().artifacts_path / key
    report = json.loads((partition / "report.json").read_text())
    markdown = (partition / "report.md").read_text()
    assert markdown == report["markdown"]

    # The model's sections held uncited sentences; none is left where every sentence must cite.
    parts = read_report(markdown, QUESTION)
    assert parts.sentences(("executive summary", "key findings"))
    assert uncited(parts) == []
    assert "outlook bright" not in _must_cite(markdown) and "Moon" not in _must_cite(markdown)

    # Every citation left in those sections verifies against the stored raw outputs.
    bundle = SummaryBundle.model_validate_json((partition / "compressed_summaries.json").read_text())
    entries_by_n: dict[int, list[dict]] = {}
    for e in number_sources(bundle):
        entries_by_n.setdefault(e["n"], []).append(e)
    manifest = json.loads((partition / "tool_outputs.json").read_text())
    raws = {c["artifact_file"]: next(partition.rglob(c["artifact_file"])).read_text() for c in manifest["calls"]}
    section = _must_cite(markdown)
    again, checks = verify_citations(section, entries_by_n, raws)
    assert again == section and checks and all(c.verified for c in checks)

    # What happened to each sentence is recorded: cited as written, rewritten by one model call
    # with only its source, or dropped; the warnings and the Limitations say so.
    by = {f["by"] for f in report["rewritten"]}
    assert by == {"citation", "model"}
    assert report["uncited_dropped"] and all(f["reason"] for f in report["uncited_dropped"])
    assert any("outlook bright" in f["sentence"] for f in report["uncited_dropped"])
    rewritten = [f for f in report["rewritten"] if f["by"] == "model"]
    assert all("Moon" in f["sentence"] and f"[{f['source']}]" in f["text"] for f in rewritten)
    note = next(w for w in report["warnings"] if "had no citation that verified" in w)
    assert note in markdown.split("## Limitations", 1)[1]
    rewrites = [r for r in fake_openai.requests_for("reporter") if "Rewrite one sentence" in str(r["messages"][-1])]
    failed = [f for f in report["uncited_dropped"] if f["reason"].startswith("the rewrite")]
    assert len(rewrites) == len(rewritten) + len(failed) >= 1
    for request in rewrites:  # only the sentence's own source is in the rewrite's working memory
        memory = next(str(m["content"]) for m in request["messages"] if "Working memory:" in str(m["content"]))
        memory = memory.split("Working memory:", 1)[1].split("Rewrite one sentence", 1)[0]
        assert len(set(re.findall(r"^\[(\d+)\] ", memory, re.M))) == 1

    # Suggested next steps are the critic's gaps, never the model's prose.
    steps = markdown.split("## Suggested next steps", 1)[1].split("\n## ", 1)[0]
    assert "Moon" not in steps and "outlook" not in steps
    assert not [r for r in fake_openai.requests_for("reporter") if "Write the section: Suggested next steps" in str(r)]


def test_a_section_whose_every_citation_is_wrong_is_mended_sentence_by_sentence(fake_openai, corpus_dir):
    """A small model paraphrases loosely: its executive summary and findings cite sources that do
    not say them. The sections stay the model's, each sentence rewritten from its source or
    dropped, instead of the whole section falling back to the extractive writer."""
    fake_openai.mode = "paraphrases"
    result, key, _, _ = materialize_question(QUESTION, {"engine": "openai", "corpus_dir": str(corpus_dir)})
    assert result.success
    report = json.loads((ResearchSettings.from_env().artifacts_path / key / "report.json").read_text())
    assert "reporter" not in report["fallbacks"]
    assert "(" not in report["reporter_model"]  # no section "by" the offline writer
    parts = read_report(report["markdown"], QUESTION)
    assert parts.sentences(("executive summary",)) and uncited(parts) == []
    assert "Moon" not in _must_cite(report["markdown"]) and "outlook" not in _must_cite(report["markdown"])
    rewritten = [f for f in report["rewritten"] if f["by"] == "model"]
    assert {f["section"] for f in rewritten} == {"Executive summary", "Key findings"}
    # The wrong citations were removed and are counted as such.
    assert report["unverified_citations"] >= 4


def test_the_select_style_quotes_the_verified_findings_the_model_picks(fake_openai, corpus_dir, monkeypatch):
    """``report_style=select`` (a small model): the model picks by number the findings the
    executive summary quotes; the other sections are the extractive writer's. Every word there is
    quoted from a source, so nothing is rewritten, dropped or removed, and no section falls back."""
    monkeypatch.setenv("DEEPRESEARCH_REPORT_STYLE", "select")
    result, key, _, _ = materialize_question(QUESTION, {"engine": "openai", "corpus_dir": str(corpus_dir)})
    assert result.success
    report = json.loads((ResearchSettings.from_env().artifacts_path / key / "report.json").read_text())
    assert "reporter" not in report["fallbacks"] and "(" not in report["reporter_model"]
    assert report["unverified_citations"] == 0 and report["rewritten"] == report["uncited_dropped"] == []
    assert "could not be verified" not in report["markdown"]
    parts = read_report(report["markdown"], QUESTION)
    assert parts.sentences(("executive summary", "key findings")) and uncited(parts) == []

    asks = [str(r["messages"][-1]["content"]) for r in fake_openai.requests_for("reporter")]
    selects = [a for a in asks if "Choose the statements for the section:" in a]
    sections = [re.search(r"Choose the statements for the section: (.+)", a).group(1) for a in selects]
    assert sections == ["Executive summary"]
    assert not [a for a in asks if "Write the outline first" in a or "Write the section:" in a]
    revised = [r for r in report["critique"]["rounds"] if r["stage"] == "revision"]
    assert all(h.endswith(": deterministic") for r in revised for h in r["sections"])
    assert not [a for a in asks if "Revise one section" in a]
    # The fake picks statements 1-3: the summary quotes them, in that order, and nothing else.
    summary = report["markdown"].split("## Executive summary", 1)[1].split("\n## ", 1)[0]
    statements = re.findall(r"^\((\d+)\) (.+)$", selects[0], re.M)
    assert [text for n, text in statements[:3]] and all(text in summary for _, text in statements[:3])
    assert not any(text in summary for _, text in statements[3:])


def test_auto_selects_for_a_small_context_window():
    from types import SimpleNamespace

    from deepresearch_dagster.core.roles.reporter import report_style

    def ctx(style: str, window: int | None, model: str = "m", engine_window: bool = True):
        engine = SimpleNamespace(model_for=lambda role: model)
        if engine_window:
            engine.context_window = lambda name: window
        return SimpleNamespace(engine=engine, settings=SimpleNamespace(report_style=style))

    assert report_style(ctx("auto", 4096)) == report_style(ctx("auto", 8192)) == "select"
    assert report_style(ctx("auto", 32768)) == report_style(ctx("auto", None)) == "write"
    assert report_style(ctx("write", 4096)) == "write" and report_style(ctx("select", 32768)) == "select"
    assert report_style(ctx("select", 4096, engine_window=False)) == "write"  # the offline engine


def test_the_select_style_quotes_only_what_verifies():
    """A small model's summary paraphrases; the sections the extractive writer fills in the select
    style keep only the sentences and items that verify as quoted."""
    from deepresearch_dagster.core.roles.reporter import _quotable

    raw = "Concrete stores heat by day. It releases the heat at night."
    source = {"n": 1, "summary": "The passage discusses heat. Concrete stores heat by day.", "extraction": [
        "It releases the heat at night.", "heat storage overview"]}  # fmt: skip

    def cites(text: str) -> bool:
        return text.removesuffix(" [1]") in raw

    (kept,) = _quotable({"question": "q", "sources": [source]}, cites)["sources"]
    assert kept["summary"] == "Concrete stores heat by day."
    assert kept["extraction"] == ["It releases the heat at night."]


def test_the_selection_pool_leaves_out_a_finding_a_better_one_holds():
    from deepresearch_dagster.core.roles.reporter import selection_pool

    long = "A 2021 study of the 175 largest urban areas found that people of colour lived in hotter tracts."
    short = "People of colour lived in hotter tracts."
    plan = {"plan_title": "Heat", "steps": [{"step_id": "1", "title": "Urban heat", "description": "Who is hotter."}]}
    source = {"n": 1, "step_id": "1", "summary": f"{long} {short}", "extraction": [], "artifact_file": "a.txt"}
    pool = selection_pool({"question": "Who lives in hotter tracts?", "plan": plan, "sources": [source]}, bool)
    assert [f.text for f in pool] == [long]
