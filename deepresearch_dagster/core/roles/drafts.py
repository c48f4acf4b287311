"""Drafts: ``--drafts N`` writes N reports and a judge picks one (issue 30).

A model's drafts differ by the reporter's sampling temperature (raised per draft); the offline
engine, which does not sample, writes one draft for all N, and the judge's reasons say so. The
deterministic judge scores each draft by the share of its claims that carry a verified citation, the question's parts it
answers (the critique's reading) and its length; the others are kept under ``report_drafts/``
with their scores, and the choice and its reasons go to report.json (``drafts``). Every draft,
critique and revision is a row of the ``report_revisions`` lineage table.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from ..context import ResearchContext
from ..heuristics.report import parts_of
from ..heuristics.report_critique import CLAIM_SECTIONS, ReportCritique, read_sentences
from ..models import Report, ResearchPlan, SummaryBundle, ToolOutputs
from .reporter import record_citations, write_report
from .revision import REVISIONS_TABLE, write_artifact

__all__ = ["judge", "write_drafts"]

# The reporter's temperature rises by this much per draft after the first (a model's drafts differ).
DRAFT_TEMPERATURE_STEP = 0.3
MAX_DRAFT_TEMPERATURE = 1.2
# The judge's weights: verified-claim share, answered parts, brevity (shortest draft / this one).
JUDGE_WEIGHTS = (0.5, 0.4, 0.1)


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


def _samples(engine: Any) -> bool:
    """Whether the engine samples at a temperature (a model engine; not the offline engine)."""
    return isinstance(getattr(engine, "temperature", None), dict)


def _at_temperature(engine: Any, temperature: float) -> Any:
    """The engine with the reporter's sampling temperature changed (a model engine samples at the
    temperature it was built with)."""
    other = copy.copy(engine)  # the same client and connection pool
    other.temperature = {**engine.temperature, "reporter": temperature}
    return other


def write_drafts(ctx: ResearchContext, plan: ResearchPlan, bundle: SummaryBundle, outputs: ToolOutputs) -> Report:
    """``settings.drafts`` reports, the judge's choice among them (the others kept with their scores)."""
    requested = ctx.settings.drafts
    # An engine that does not sample (the offline engine) would write the same report N times.
    n = requested if _samples(ctx.engine) else 1
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
    if requested == 1:
        chosen = reports[0]
    else:
        best, reasons = _pick(scores)
        if n < requested:
            reasons += f"; the {ctx.engine.name} engine does not sample: one draft stands for the {requested} asked"
        for k, report in enumerate(reports):
            write_artifact(ctx, f"report_drafts/draft_{k + 1}.md", report.markdown)
        write_artifact(ctx, "report_drafts/scores.json", {"chosen": best + 1, "reasons": reasons, "drafts": scores})
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
