"""Drafts, self-critique and revision: the reporter checks its own report before the user does.

After citation verification (``reporter.write_report``) the report is critiqued
(:func:`critique`): the deterministic checks of ``heuristics/report_critique.py`` always, and the
critic model's issues where a model is configured, each kept only when the sentence it names
stands in the report. The revision rewrites only the sections the critique names, each from its
own sources (the ones it cites; every source's summary when a part of the question is unanswered);
a model's section must verify like the first text (every citation verified, every sentence of
the executive summary and key findings cited) or the deterministic revision stands instead, and
the issues left after it are fixed deterministically. The loop stops when the critique is clean
or after ``revisions`` rounds; a round that makes the critique worse is discarded.

``--drafts N`` writes N reports (the reporter's temperature raised per draft; the offline engine
writes the same report each time and says so) and the judge picks one by verified-claim share,
answered parts and length; every draft is kept under ``report_drafts/`` with its score, every
critique under ``report_critique/`` and every revision under ``report_revision/``, each a row of
the ``report_revisions`` lineage table.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from typing import Any

from pydantic import BaseModel, Field

from ..context import ResearchContext
from ..errors import MODEL_FAILURES, BudgetExceeded, CredentialsError
from ..heuristics.report import parts_of
from ..heuristics.report_critique import (
    CLAIM_SECTIONS,
    MUST_CITE,
    ReportCritique,
    ReportIssue,
    critique_report,
    read_sentences,
    revise_deterministically,
    units,
)
from ..llm.contracts import SECTION, generic_contract
from ..llm.prompts import render
from ..llm.structured import call_structured, record_fallback
from ..models import Report, ResearchPlan, SummaryBundle, ToolOutputs
from .citations import CitationCheck, verify_citations
from .reporter import _memory_text, _working_memory, one_number_each, record_citations, write_report

__all__ = ["REPORT_CRITIQUE", "Revised", "critique", "judge", "revise_report", "write_drafts"]

REPORT_CRITIQUE = generic_contract(ReportCritique)
# The reporter's temperature rises by this much per draft after the first (a model's drafts differ).
DRAFT_TEMPERATURE_STEP = 0.3
MAX_DRAFT_TEMPERATURE = 1.2
# The judge's weights: verified-claim share, answered parts, brevity (shortest draft / this one).
JUDGE_WEIGHTS = (0.5, 0.4, 0.1)
REVISIONS_TABLE = "report_revisions"
_CITATION = re.compile(r"\[\d+(?:\s*,\s*\d+)*\]")


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
    (or a part of the question) — an issue about a sentence the report does not hold is invented."""
    found = critique_report(markdown, payload)
    messages = [
        {"role": "system", "content": render("report_critic", today=ctx.today)},
        {"role": "user", "content": f"Question: {ctx.question}\n\nThe report:\n\n{markdown}"},
    ]
    try:
        answer = call_structured(
            ctx, "critic", messages, {**payload, "phase": "report", "report": markdown}, REPORT_CRITIQUE, artifact
        )
    except BudgetExceeded:
        raise
    except MODEL_FAILURES as exc:
        ctx.log(f"report critique by the deterministic checks only: {exc}")
        record_fallback(ctx, "critic", artifact, exc)
        return found
    stated = {s.text for s in read_sentences(markdown)[0]}
    known = {(i.kind, i.section, i.sentence, i.detail) for i in found.issues}
    extra = [
        i
        for i in answer.issues
        if (i.sentence in stated or (i.kind == "unanswered" and i.detail))
        and (i.kind, i.section, i.sentence, i.detail) not in known
        and i.kind not in ("uncited", "unanswered")  # the deterministic reading of these is the one
    ]
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
    cited = {int(n) for m in _CITATION.findall(body) for n in re.findall(r"\d+", m)}
    return [e for e in entries if e["n"] in cited]


def _verifies(heading: str, text: str, entries_by_n: dict[int, list[dict[str, Any]]], raws: dict[str, str]) -> bool:
    """A revised section verifies like the first text: every citation verified, and every sentence
    of a section that must cite carries one."""
    _, checks = verify_citations(one_number_each(text), entries_by_n, raws)
    if not all(c.verified for c in checks):
        return False
    if heading.lower() not in MUST_CITE:
        return True
    lines = [line for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    return bool(lines) and all(_CITATION.search(u) for line in lines for u in units(re.sub(r"\*\*[^*]+\*\*", "", line)))


def _model_section(
    ctx: ResearchContext,
    head: list[dict[str, Any]],
    heading: str,
    body: str,
    issues: list[ReportIssue],
    payload: dict[str, Any],
    sources: list[dict[str, Any]],
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
            [*head, _working_memory(_memory_text(sources)), {"role": "user", "content": ask}],
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
        if isinstance(exc, (CredentialsError, BudgetExceeded)):
            raise
        ctx.log(f"section '{heading}' revised deterministically: {exc}")
        record_fallback(ctx, "reporter", artifact, exc)
        return None


def _revise_once(
    ctx: ResearchContext,
    markdown: str,
    found: ReportCritique,
    payload: dict[str, Any],
    entries: list[dict[str, Any]],
    entries_by_n: dict[int, list[dict[str, Any]]],
    raws: dict[str, str],
    head: list[dict[str, Any]],
    artifact: str,
) -> tuple[str, list[str]]:
    """The report with each section the critique names rewritten; returns it and how each was
    revised (``model`` or ``deterministic``)."""
    sections = split_sections(markdown)
    how = []
    named = found.sections()
    for k, (heading, body) in enumerate(sections):
        if heading not in named:
            continue
        issues = [i for i in found.issues if i.section == heading]
        sources = _section_sources(body, issues, entries)
        text = _model_section(ctx, head, heading, body, issues, payload, sources, artifact)
        if text is not None and text.strip() and _verifies(heading, text, entries_by_n, raws):
            how.append(f"{heading}: model")
        else:
            text = revise_deterministically(body, heading, issues, payload)
            how.append(f"{heading}: deterministic")
        sections[k] = (heading, text)
    revised = join_sections(sections)
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
        revised = join_sections(sections)
    return revised, how


def revise_report(
    ctx: ResearchContext,
    markdown: str,
    checks: list[CitationCheck],
    payload: dict[str, Any],
    entries_by_n: dict[int, list[dict[str, Any]]],
    raws: dict[str, str],
    head: list[dict[str, Any]],
    draft: int = 1,
) -> Revised:
    """Critique, revise the named sections, critique again; at most ``settings.revisions`` rounds,
    a round that leaves the critique worse discarded. ``checks`` are the verified text's citation
    checks; the revised text is verified again (the unverified checks of the first text stay:
    their citations were removed before)."""
    entries = [e for n in sorted(entries_by_n) for e in entries_by_n[n]]
    name = f"draft{draft}"
    before = critique(ctx, markdown, payload, f"report_critique/{name}_round0.json")
    _write(ctx, f"report_critique/{name}_round0.json", before.model_dump())
    rounds: list[dict[str, Any]] = [_row(draft, 0, "critique", before, f"report_critique/{name}_round0.json", True)]
    current, found = markdown, before
    for r in range(1, ctx.settings.revisions + 1):
        if not found.issues:
            break
        ctx.check_interrupt()
        revision_file = f"report_revision/{name}_round{r}.md"
        revised, how = _revise_once(ctx, current, found, payload, entries, entries_by_n, raws, head, revision_file)
        _write(ctx, revision_file, revised)
        after = critique(ctx, revised, payload, f"report_critique/{name}_round{r}.json")
        _write(ctx, f"report_critique/{name}_round{r}.json", after.model_dump())
        accepted = after.total <= found.total
        rounds.append({**_row(draft, r, "revision", after, revision_file, accepted), "sections": how})
        if not accepted:
            ctx.log(f"revision round {r} discarded: {after.total} issue(s) against {found.total}")
            break
        current, found = revised, after
    if current != markdown:
        current, fresh = verify_citations(one_number_each(current), entries_by_n, raws)
        checks = [*(c for c in checks if not c.verified), *fresh]
    return Revised(markdown=current, checks=checks, before=before, after=found, rounds=rounds)


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


def _write(ctx: ResearchContext, name: str, value: Any) -> None:
    if isinstance(value, str):
        ctx.store.write_text(name, value)
    else:
        ctx.store.write_json(name, value)


# -------------------------------------------------------------------------------------- drafts


def judge(report: Report, payload: dict[str, Any]) -> dict[str, Any]:
    """The deterministic judge's figures for one draft: the share of its claims (sentences of the
    executive summary, key findings, analysis or answer) that carry a verified citation, the
    question's parts it answers (the critique's reading), its length in words."""
    body = report.markdown.split("\n## References", 1)[0]
    sentences = [s for s in read_sentences(body)[0] if s.section.lower() in CLAIM_SECTIONS]
    verified = sum(1 for s in sentences if s.cited) / len(sentences) if sentences else 0.0
    after = ReportCritique.model_validate(report.critique.get("after") or {})
    parts = len(parts_of(str(payload["question"])))
    answered = max(0, parts - after.counts()["unanswered"])
    return {
        "verified_share": round(verified, 3),
        "answered_parts": answered,
        "parts": parts,
        "words": len(body.split()),
    }


def _pick(scores: list[dict[str, Any]]) -> tuple[int, str]:
    shortest = min(s["words"] for s in scores) or 1
    wv, wa, wl = JUDGE_WEIGHTS
    for s in scores:
        s["score"] = round(
            wv * s["verified_share"]
            + wa * s["answered_parts"] / max(1, s["parts"])
            + wl * shortest / max(1, s["words"]),
            4,
        )
    best = max(range(len(scores)), key=lambda k: (scores[k]["score"], -k))
    b = scores[best]
    reasons = (
        f"draft {best + 1} scored highest ({b['score']}): {b['verified_share']:.0%} of its claims cite a verified "
        f"source, it answers {b['answered_parts']} of {b['parts']} part(s) of the question, {b['words']} words "
        f"(score = {wv} × verified-claim share + {wa} × answered share + {wl} × shortest length / length; "
        "ties go to the earlier draft)"
    )
    same = [k + 1 for k, s in enumerate(scores) if s.get("identical_to")]
    if same:
        reasons += f"; draft(s) {', '.join(map(str, same))} came out identical to an earlier draft"
    return best, reasons


def _at_temperature(engine: Any, temperature: float) -> Any:
    """The engine with the reporter's sampling temperature changed (a model engine samples at the
    temperature it was built with; the offline engine has none)."""
    if not isinstance(getattr(engine, "temperature", None), dict):
        return engine
    other = copy.copy(engine)  # the same client and connection pool
    other.temperature = {**engine.temperature, "reporter": temperature}
    return other


def write_drafts(ctx: ResearchContext, plan: ResearchPlan, bundle: SummaryBundle, outputs: ToolOutputs) -> Report:
    """``settings.drafts`` reports, the judge's choice among them (the others kept with their scores)."""
    n = ctx.settings.drafts
    reports: list[Report] = []
    scores: list[dict[str, Any]] = []
    base = ctx.settings.role_temperature("reporter")
    payload = {"question": ctx.question, "plan": plan.with_followups(outputs.followup_steps)}
    for k in range(n):
        temperature = min(MAX_DRAFT_TEMPERATURE, base + DRAFT_TEMPERATURE_STEP * k) if k else base
        settings = ctx.settings.model_copy(
            update={"role_temperatures": {**ctx.settings.role_temperatures, "reporter": temperature}}
        )
        dctx = (
            dataclasses.replace(ctx, settings=settings, engine=_at_temperature(ctx.engine, temperature)) if k else ctx
        )
        report = write_report(dctx, plan, bundle, outputs, draft=k + 1)
        reports.append(report)
        figures = {"draft": k + 1, "temperature": temperature, **judge(report, payload)}
        twin = next((j + 1 for j, r in enumerate(reports[:-1]) if r.markdown == report.markdown), None)
        if twin:
            figures["identical_to"] = twin
        figures["artifact"] = f"report_drafts/draft_{k + 1}.md"
        scores.append(figures)
    rows = [r for report in reports for r in report.critique.get("rounds", [])]
    if n == 1:
        chosen = reports[0]
    else:
        best, reasons = _pick(scores)
        for k, report in enumerate(reports):
            _write(ctx, f"report_drafts/draft_{k + 1}.md", report.markdown)
        _write(ctx, "report_drafts/scores.json", {"chosen": best + 1, "reasons": reasons, "drafts": scores})
        chosen = reports[best].model_copy(update={"drafts": {"chosen": best + 1, "reasons": reasons, "drafts": scores}})
        rows += [
            {
                "draft": s["draft"],
                "round": 0,
                "stage": "draft",
                "issues": len(reports[s["draft"] - 1].critique.get("after", {}).get("issues", [])),
                "counts": {"score": s["score"]},
                "artifact": s["artifact"],
                "accepted": s["draft"] == best + 1,
            }
            for s in scores
        ]
        record_citations(ctx, chosen.citations)  # each draft rewrote the table: the chosen one's stand
    ctx.lineage.replace_rows(
        REVISIONS_TABLE,
        ctx.partition_key,
        ["draft", "round", "stage", "issues", "counts", "artifact", "accepted"],
        [[r["draft"], r["round"], r["stage"], r["issues"], r["counts"], r["artifact"], r["accepted"]] for r in rows],
    )
    return chosen
