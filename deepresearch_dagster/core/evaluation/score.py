"""Score one finished research against a suite item, from its stored artifacts only.

Nothing is re-run and nothing is fetched: the report (``report.md``, ``report.json``), the raw
tool outputs (the plan folder), the working memory (the summaries injected into the
conversation) and the lineage rows already hold everything a figure needs.

- ``answer_in_report``: a gold answer anywhere in ``report.md``;
  ``answer_in_summary``: in a sentence of the executive summary (or a direct answer) — whether the
  report leads with it;
  ``answer_in_findings``: in a sentence of the cited sections (executive summary, key findings,
  analysis, answer), headings and the echoed question left out — what a reader takes away;
- ``answer_in_memory``: in what compression injected (titles, summaries, extractions of the
  useful summaries), so a loss between memory and report shows apart from a retrieval miss;
- ``answer_in_raw``: in any raw tool output (retrieval alone);
- ``facts_found``: gold facts in the report body (before the references);
- ``stale``: stale figures stated in a report line that does not mark them as older;
- ``uncited_sentences``: sentences of the executive summary and key findings without ``[n]``;
- ``ungrounded_figures``: figures of a cited claim (numbers, full dates) that none of the raw outputs
  it cites contains — a figure the writer changed or invented, whatever its citation says;
- ``contradictions``, ``duplicated_sentences``: sentences denying what another section states with
  a citation, and sentences stated twice (``heuristics/report_critique.py``: the report's critique).
"""

from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from ..heuristics.report_critique import CITATION, CLAIM_SECTIONS, MUST_CITE, STALE_NOTE, faults, units
from ..naming import plan_folder
from ..text import json_strings, key_figures
from .matching import Haystack, any_in, contains, first_in
from .suite import Fact, SuiteItem

__all__ = ["ItemScore", "ReportParts", "raw_text", "read_report", "score_item", "working_memory_text"]

# A bold lead opening a paragraph (``**The question, restated.**``) introduces; it states nothing.
_BOLD_LEAD = re.compile(r"^\*\*[^*]+\*\*\s*")
_BULLET = re.compile(r"^\s*(?:[-*+]|\d+\.)\s+")
SUMMARY_SECTIONS = ("executive summary", "answer")  # what a report leads with


class ItemScore(BaseModel):
    id: str
    question: str
    category: str
    split: str
    partition_key: str | None = None
    status: str = "scored"  # scored | failed
    reason: str | None = None
    answer_in_report: bool | None = None
    answer_matched: str | None = Field(default=None, description="the gold alias found in report.md")
    answer_in_summary: bool | None = None
    answer_in_findings: bool | None = None
    answer_in_memory: bool | None = None
    answer_in_raw: bool | None = None
    facts_found: int = 0
    facts_total: int = 0
    facts_missing: list[str] = Field(default_factory=list)
    stale: int = 0
    stale_stated: list[str] = Field(default_factory=list)
    verified_citations: int = 0
    removed_citations: int = 0
    uncited_sentences: int = 0
    ungrounded_figures: int = 0
    ungrounded: list[str] = Field(default_factory=list, description="figures: the cited claim whose sources lack them")
    contradictions: int = 0
    duplicated_sentences: int = 0
    tokens: int = 0
    tokens_by_role: dict[str, dict[str, int]] = Field(default_factory=dict)
    dollars: float | None = None
    wall_s: float | None = None
    tool_calls: int = 0
    raw_tokens: int = 0
    injected_tokens: int = 0
    fallbacks: dict[str, int] = Field(default_factory=dict)
    engine: str | None = None
    models: dict[str, str] = Field(default_factory=dict)
    prompt_versions: dict[str, str] = Field(default_factory=dict)
    resumed: bool = False
    judge: dict[str, Any] | None = None


class ReportParts(BaseModel):
    """``report.md`` read as a reader reads it: the sentences of each section."""

    markdown: str
    question: str
    sections: dict[str, list[str]]

    def sentences(self, names: tuple[str, ...]) -> list[str]:
        return [s for name in names for s in self.sections.get(name, [])]


def read_report(markdown: str, question: str) -> ReportParts:
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in markdown.splitlines():
        stripped = line.strip()
        if stripped.startswith("## "):
            current = sections.setdefault(stripped[3:].strip().lower(), [])
            continue
        if current is None or not stripped or stripped.startswith("#"):
            continue  # the title, the echoed question, sub-headings
        text = _BOLD_LEAD.sub("", _BULLET.sub("", stripped))
        current.extend(s for s in units(text) if s)
    return ReportParts(markdown=markdown, question=question, sections=sections)


def uncited(parts: ReportParts) -> list[str]:
    return [s for s in parts.sentences(MUST_CITE) if not CITATION.search(s)]


def raw_text(raw_dir: Path) -> str:
    """Every raw tool output of a research as one text."""
    texts = []
    for path in sorted(raw_dir.glob("*")) if raw_dir.is_dir() else []:
        if not path.is_file() or path.is_symlink():
            continue
        text = path.read_text("utf-8", errors="replace")
        if path.suffix == ".json":
            with contextlib.suppress(json.JSONDecodeError):
                text = "\n".join(json_strings(json.loads(text)))
        texts.append(text)
    return "\n".join(texts)


def working_memory_text(bundle: dict[str, Any]) -> tuple[str, int]:
    """What compression injected (useful summaries only) and its injected tokens."""
    parts, tokens = [], 0
    for summary in bundle.get("summaries", []):
        result = summary.get("result") or {}
        if not result.get("is_useful"):
            continue
        tokens += int(summary.get("injected_tokens") or 0)
        parts.extend([result.get("summary_title", ""), result.get("summary", ""), *result.get("extraction", [])])
    return "\n".join(parts), tokens


def _fact_found(fact: str | Fact, body: Haystack) -> bool:
    return fact.found_in(body.original) if isinstance(fact, Fact) else contains(body, fact)


def _fact_name(fact: str | Fact) -> str:
    return fact.fact if isinstance(fact, Fact) else fact


def _stale_lines(item: SuiteItem, body: str) -> list[str]:
    stated = []
    lines = [line for line in body.splitlines() if not STALE_NOTE.search(line)]
    for stale in item.stale:
        if any(_fact_found(stale, Haystack(line)) for line in lines):
            stated.append(_fact_name(stale))
    return stated


def ungrounded_figures(parts: ReportParts, report: dict[str, Any], partition_dir: Path) -> list[str]:
    """Each cited claim with the figures none of its cited raw outputs states, as "figures: claim".
    A source read twice (a passage, then the whole document) has the raw outputs of both: the
    verified checks name the artifact each quote was found in."""
    files: dict[int, set[str]] = {}
    for c in [*report.get("citations", []), *(c for c in report.get("citation_checks", []) if c.get("verified"))]:
        if c.get("artifact_file"):
            files.setdefault(int(c["n"]), set()).add(c["artifact_file"])
    raws: dict[int, frozenset[str]] = {}
    for n, names in files.items():
        found = [f for name in sorted(names) if (f := next(partition_dir.rglob(name), None))]
        raws[n] = frozenset().union(*(key_figures(f.read_text("utf-8", errors="replace")) for f in found))
    out = []
    for sentence in parts.sentences(CLAIM_SECTIONS):
        cited = {int(n) for m in CITATION.finditer(sentence) for n in re.findall(r"\d+", m.group())}
        if not cited:
            continue  # counted as uncited
        missing = key_figures(CITATION.sub(" ", sentence)) - frozenset().union(*(raws.get(n, set()) for n in cited))
        if missing:
            out.append(f"{', '.join(sorted(missing))}: {sentence}")
    return out


def score_item(
    item: SuiteItem,
    split: str,
    partition_dir: Path,
    figures: dict[str, Any] | None = None,
    bundle_file: str = "compressed_summaries.json",
) -> ItemScore:
    """The scores of one researched item; ``figures`` are its lineage figures
    (:meth:`LineageStore.evaluation_figures`), ``bundle_file`` the summary version scored as the
    working memory (a compressor replay scores its own)."""
    report = json.loads((partition_dir / "report.json").read_text("utf-8"))
    markdown = (partition_dir / "report.md").read_text("utf-8")
    plan = json.loads((partition_dir / "plan.json").read_text("utf-8"))
    bundle = json.loads((partition_dir / bundle_file).read_text("utf-8"))
    parts = read_report(markdown, item.question)
    memory, injected = working_memory_text(bundle)
    body = markdown.split("\n## References", 1)[0]
    findings = "\n".join(parts.sentences(CLAIM_SECTIONS))
    answers = item.answers
    score = ItemScore(
        id=item.id,
        question=item.question,
        category=item.category,
        split=split,
        partition_key=report.get("partition_key") or partition_dir.name,
        answer_in_report=any_in(markdown, answers) if answers else None,
        answer_matched=first_in(markdown, answers) if answers else None,
        answer_in_summary=any_in("\n".join(parts.sentences(SUMMARY_SECTIONS)), answers) if answers else None,
        answer_in_findings=any_in(findings, answers) if answers else None,
        answer_in_memory=any_in(memory, answers) if answers else None,
        answer_in_raw=any_in(raw_text(partition_dir / plan_folder(plan["plan_title"])), answers) if answers else None,
        facts_total=len(item.facts),
        verified_citations=int(report.get("verified_citations", 0)),
        removed_citations=int(report.get("unverified_citations", 0)),
        uncited_sentences=len(uncited(parts)),
        **faults(markdown),
        injected_tokens=injected,
        fallbacks={k: int(v) for k, v in (report.get("fallbacks") or {}).items() if v},
        prompt_versions={"compressor": bundle.get("prompt_version", "")},
    )
    missing = [_fact_name(f) for f in item.facts if not _fact_found(f, Haystack(body))]
    score.facts_found, score.facts_missing = len(item.facts) - len(missing), missing
    score.ungrounded = ungrounded_figures(parts, report, partition_dir)
    score.ungrounded_figures = len(score.ungrounded)
    score.stale_stated = _stale_lines(item, body)
    score.stale = len(score.stale_stated)
    if figures:
        score = score.model_copy(update=figures)
    return score
