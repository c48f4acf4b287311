"""Self-critique and revision: the reporter checks its own report before the user does (issue 30).

After citation verification (``reporter.write_report``) the report is critiqued
(:func:`critique`): the deterministic checks of ``heuristics/report_critique.py`` always, and the
critic model's issues where a model is configured, each kept only when the sentence it names
stands in the report. The revision rewrites only the sections the critique names, each from its
own sources (the ones it cites; every source's summary when a part of the question is unanswered);
a model's section must verify like the first text (every citation verified, every sentence of
the executive summary and key findings cited) or the deterministic revision stands instead, and
the issues left after it are fixed deterministically. The loop stops when the critique is clean
or after ``revisions`` rounds; a round that makes the critique worse is discarded.

Every critique is kept under ``report_critique/`` and every revision under ``report_revision/``,
each a row of the ``report_revisions`` lineage table (written by ``drafts.py``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field

from ..context import ResearchContext
from ..errors import MODEL_FAILURES, CredentialsError
from ..heuristics.report_critique import (
    CITATION,
    MUST_CITE,
    ReportCritique,
    ReportIssue,
    critique_report,
    read_sentences,
    revise_deterministically,
    sentence_key,
    units,
)
from ..llm.contracts import SECTION, generic_contract
from ..llm.prompts import render
from ..llm.structured import call_structured, record_fallback
from .citations import CitationCheck

__all__ = ["REPORT_CRITIQUE", "Evidence", "Revised", "critique", "critique_markdown", "revise_report"]

REPORT_CRITIQUE = generic_contract(ReportCritique)
REVISIONS_TABLE = "report_revisions"


@dataclass(frozen=True)
class Evidence:
    """What the revision needs of the reporter: the numbered sources, its citation verification
    (text → verified text and checks) and the working-memory message of some sources."""

    entries: list[dict[str, Any]]
    verify: Callable[[str], tuple[str, list[CitationCheck]]]
    memory: Callable[[list[dict[str, Any]]], dict[str, Any]]
    # False in the select report style: a model whose prose does not verify revises nothing.
    model_revises: bool = True


class Revised(BaseModel):
    markdown: str
    checks: list[CitationCheck]
    before: ReportCritique
    after: ReportCritique
    rounds: list[dict[str, Any]] = Field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {
            "before": {"counts": self.before.counts(), "issues": [i.model_dump() for i in self.before.issues]},
            "after": {"counts": self.after.counts(), "issues": [i.model_dump() for i in self.after.issues]},
            "rounds": self.rounds,
        }


# ------------------------------------------------------------------------------------ critique


def critique(ctx: ResearchContext, markdown: str, payload: dict[str, Any], artifact: str) -> ReportCritique:
    """The deterministic checks, and the critic model's issues that name a sentence of the report
    (an issue about a sentence the report does not hold is invented, and dropped)."""
    found = critique_report(markdown, payload)
    if ctx.settings.revisions == 0:
        return found  # no revision to act on it: the model is not asked (the free checks still show)
    messages = [
        {"role": "system", "content": render("report_critic", today=ctx.today)},
        {"role": "user", "content": f"Question: {ctx.question}\n\nThe report:\n\n{markdown}"},
    ]
    try:
        answer = call_structured(
            ctx, "critic", messages, {**payload, "phase": "report", "report": markdown}, REPORT_CRITIQUE, artifact
        )
    except MODEL_FAILURES as exc:  # a spent budget too: the report is still critiqued and revised
        ctx.log(f"report critique by the deterministic checks only: {exc}")
        record_fallback(ctx, "critic", artifact, exc)
        return found
    # The sentence as the report writes it (a model may copy it with its citation after the stop);
    # "uncited" and "unanswered" are the deterministic checks' to say (one reading of each).
    stated = {sentence_key(s.text): s for s in read_sentences(markdown)[0]}
    known = {(i.kind, sentence_key(i.sentence)) for i in found.issues}
    extra = []
    for issue in answer.issues:
        s = stated.get(sentence_key(issue.sentence))
        if s is None or issue.kind in ("uncited", "unanswered") or (issue.kind, sentence_key(s.text)) in known:
            continue
        known.add((issue.kind, sentence_key(s.text)))
        extra.append(issue.model_copy(update={"sentence": s.text, "section": s.section}))
    return ReportCritique(issues=[*found.issues, *extra])


# ------------------------------------------------------------------------------------ revision


def split_sections(markdown: str) -> list[tuple[str, str]]:
    """``(heading, body)`` of each ``## `` section in order; text before the first is ``("", text)``."""
    out: list[tuple[str, str]] = []
    heading, lines = "", []
    for line in markdown.splitlines():
        if line.startswith("## "):
            out.append((heading, "\n".join(lines)))
            heading, lines = line[3:].strip(), []
        else:
            lines.append(line)
    out.append((heading, "\n".join(lines)))
    return [(h, b) for h, b in out if h or b.strip()]


def join_sections(sections: list[tuple[str, str]]) -> str:
    return "\n\n".join(f"## {h}\n\n{b.strip()}" if h else b.strip() for h, b in sections).strip() + "\n"


def _section_sources(body: str, issues: list[ReportIssue], entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The sources a section is rewritten from: those it cites; every source when it must answer
    a part of the question it leaves unanswered."""
    if any(i.kind == "unanswered" for i in issues):
        return entries
    cited = {int(n) for m in CITATION.findall(body) for n in re.findall(r"\d+", m)}
    return [e for e in entries if e["n"] in cited]


def _verifies(heading: str, text: str, evidence: Evidence) -> bool:
    """A revised section verifies like the first text: every citation verified, and every sentence
    of a section that must cite carries one."""
    _, checks = evidence.verify(text)
    if not all(c.verified for c in checks):
        return False
    if heading.lower() not in MUST_CITE:
        return True
    lines = [line for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    return bool(lines) and all(CITATION.search(u) for line in lines for u in units(re.sub(r"\*\*[^*]+\*\*", "", line)))


def _model_section(
    ctx: ResearchContext,
    head: list[dict[str, Any]],
    heading: str,
    body: str,
    issues: list[ReportIssue],
    payload: dict[str, Any],
    sources: list[dict[str, Any]],
    evidence: Evidence,
    artifact: str,
) -> str | None:
    listed = "\n".join(
        f"- {i.kind}: {i.sentence or i.detail}" + (f" ({i.detail})" if i.sentence else "") for i in issues
    )
    ask = render("reporter_revise", heading=heading, body=body.strip(), issues=listed)
    try:
        return call_structured(
            ctx,
            "reporter",
            [*head, evidence.memory(sources), {"role": "user", "content": ask}],
            {
                **payload,
                "phase": "revise",
                "section": heading,
                "body": body,
                "issues": [i.model_dump() for i in issues],
            },
            SECTION,
            artifact=artifact,
        ).markdown
    except MODEL_FAILURES as exc:
        if isinstance(exc, CredentialsError):
            raise
        ctx.log(f"section '{heading}' revised deterministically: {exc}")
        record_fallback(ctx, "reporter", artifact, exc)
        return None


def _revise_once(
    ctx: ResearchContext,
    markdown: str,
    found: ReportCritique,
    payload: dict[str, Any],
    evidence: Evidence,
    head: list[dict[str, Any]],
    artifact: str,
) -> tuple[str, list[str]]:
    """The report with each section the critique names rewritten; returns it and how each was
    revised (``model`` or ``deterministic``)."""
    original = split_sections(markdown)
    sections = list(original)
    how = []
    named = found.sections()
    for k, (heading, body) in enumerate(sections):
        if heading not in named:
            continue
        issues = [i for i in found.issues if i.section == heading]
        sources = _section_sources(body, issues, evidence.entries)
        text = None
        if evidence.model_revises:
            text = _model_section(ctx, head, heading, body, issues, payload, sources, evidence, artifact)
        if text is not None and text.strip() and _verifies(heading, text, evidence):
            how.append(f"{heading}: model")
        else:
            text = revise_deterministically(body, heading, issues, payload)
            how.append(f"{heading}: deterministic")
        sections[k] = (heading, text)
    revised = join_sections(_unemptied(original, sections))
    # What the model's sections left of the issues (a repeat, a denial) is fixed without a model.
    left = critique_report(revised, payload)
    if left.issues:
        sections = split_sections(revised)
        sections = [
            (h, revise_deterministically(b, h, [i for i in left.issues if i.section == h], payload))
            if h in left.sections()
            else (h, b)
            for h, b in sections
        ]
        revised = join_sections(_unemptied(original, sections))
    return revised, how


def revise_report(
    ctx: ResearchContext,
    markdown: str,
    checks: list[CitationCheck],
    payload: dict[str, Any],
    evidence: Evidence,
    head: list[dict[str, Any]],
    draft: int = 1,
) -> Revised:
    """Critique, revise the named sections, critique again; at most ``settings.revisions`` rounds,
    a round that leaves the critique worse discarded. ``checks`` are the verified text's citation
    checks; the revised text is verified again (the unverified checks of the first text stay:
    their citations were removed before)."""
    name = f"draft{draft}"
    before = critique(ctx, markdown, payload, f"report_critique/{name}_round0.json")
    write_artifact(ctx, f"report_critique/{name}_round0.json", before.model_dump())
    rounds: list[dict[str, Any]] = [_row(draft, 0, "critique", before, f"report_critique/{name}_round0.json", True)]
    current, found = markdown, before
    for r in range(1, ctx.settings.revisions + 1):
        if not found.issues:
            break
        ctx.check_interrupt()
        revision_file = f"report_revision/{name}_round{r}.md"
        revised, how = _revise_once(ctx, current, found, payload, evidence, head, revision_file)
        write_artifact(ctx, revision_file, revised)
        after = critique(ctx, revised, payload, f"report_critique/{name}_round{r}.json")
        write_artifact(ctx, f"report_critique/{name}_round{r}.json", after.model_dump())
        accepted = after.total <= found.total
        rounds.append({**_row(draft, r, "revision", after, revision_file, accepted), "sections": how})
        if not accepted:
            ctx.log(f"revision round {r} discarded: {after.total} issue(s) against {found.total}")
            break
        current, found = revised, after
    if current != markdown:
        current, fresh = evidence.verify(current)
        checks = [*(c for c in checks if not c.verified), *fresh]
    return Revised(markdown=current, checks=checks, before=before, after=found, rounds=rounds)


def _unemptied(before: list[tuple[str, str]], after: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """``after`` with each section it emptied as it was ``before``: repeats removed from a section
    that held nothing else (its findings all quoted by the summary) leave no better report."""
    was = dict(before)
    return [(h, b if b.strip() or not was.get(h, "").strip() else was[h]) for h, b in after]


def _row(draft: int, round_: int, stage: str, found: ReportCritique, artifact: str, accepted: bool) -> dict[str, Any]:
    return {
        "draft": draft,
        "round": round_,
        "stage": stage,
        "issues": found.total,
        "counts": found.counts(),
        "artifact": artifact,
        "accepted": accepted,
    }


def write_artifact(ctx: ResearchContext, name: str, value: Any) -> None:
    if isinstance(value, str):
        ctx.store.write_text(name, value)
    else:
        ctx.store.write_json(name, value)


def critique_markdown(critique_: dict[str, Any], drafts: dict[str, Any] | None = None) -> str:
    """The critique before and after revision as a table (the report asset's metadata), with the
    rounds and, for several drafts, the judge's choice."""
    if not critique_:
        return "No critique was recorded."
    before, after = critique_["before"]["counts"], critique_["after"]["counts"]
    lines = ["| issue | before | after |", "|---|---:|---:|"]
    lines += [f"| {kind} | {before.get(kind, 0)} | {after.get(kind, 0)} |" for kind in before]
    lines.append(f"| **total** | {sum(before.values())} | {sum(after.values())} |")
    for r in critique_.get("rounds", [])[1:]:
        verdict = "kept" if r["accepted"] else "discarded (worse)"
        lines.append(
            f"\nRound {r['round']}: {verdict}; sections revised: {', '.join(r.get('sections', [])) or 'none'}."
        )
    left = critique_["after"].get("issues") or []
    if left:
        lines.append("\nLeft after revision:\n\n" + ReportCritique.model_validate(critique_["after"]).markdown())
    if drafts:
        lines.append(f"\nDrafts: {drafts['reasons']}.")
    return "\n".join(lines)
