"""Critic: scores the sufficiency of the research so far and names the gaps to close next."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from ..context import ResearchContext
from ..errors import MODEL_FAILURES, BudgetExceeded
from ..heuristics.critique import critique_heuristically
from ..heuristics.terms import names
from ..llm.contracts import CRITIC
from ..llm.prompts import render
from ..llm.structured import call_structured, record_fallback
from ..models import CriticVerdict, Gap, PlanStep, ResearchPlan

__all__ = ["CriticRound", "CriticVerdict", "Gap", "chain_advancing", "critique", "followup_steps"]

SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2}


class CriticRound(BaseModel):
    round: int
    verdict: CriticVerdict
    decision: str  # sufficient | follow_up | max_iterations | no_new_sources | no_gaps | budget
    fallback: bool = False
    followup_step_ids: list[str] = Field(default_factory=list)


def critique(
    ctx: ResearchContext, plan: ResearchPlan, memory: list[dict[str, Any]], followups: list[PlanStep] | None = None
) -> tuple[CriticVerdict, bool]:
    """Returns the verdict and whether it came from the heuristic fallback."""
    payload = {"question": ctx.question, "plan": plan.with_followups(followups or []), "memory": memory}
    lines = [
        f"- [{m['step_id']}] {m['summary_title']}: {m['summary']} (source: {m.get('source') or m['artifact_file']})"
        for m in memory
    ]
    messages = [
        {"role": "system", "content": render("critic", today=ctx.today)},
        {
            "role": "user",
            "content": f"Question: {ctx.question}\n\nPlan:\n{plan.as_markdown(followups)}\n\nWorking memory:\n"
            + "\n".join(lines),
        },
    ]
    try:
        return call_structured(ctx, "critic", messages, payload, CRITIC, artifact="critic"), False
    except BudgetExceeded:
        raise  # the research stops on its budget; no reflection round is worth a fallback
    except MODEL_FAILURES as exc:
        ctx.log(f"critic fell back to the heuristic critic: {exc}")
        record_fallback(ctx, "critic", "critic", exc)
    return CRITIC.parse(critique_heuristically(payload)), True


def followup_steps(round_: int, verdict: CriticVerdict, limit: int, asked: set[str]) -> list[PlanStep]:
    """Follow-up steps ``R<round>_<n>`` for the most severe gaps whose query is new."""
    steps: list[PlanStep] = []
    for gap in sorted(verdict.gaps, key=lambda g: SEVERITY_ORDER[g.severity]):
        query = " ".join(gap.suggested_query.split())
        if query.lower() in asked:
            continue
        asked.add(query.lower())
        steps.append(
            PlanStep(
                step_id=f"R{round_}_{len(steps) + 1}",
                # The gap's own words: the compressor scores the follow-up's sources against them.
                title=gap.description[:200],
                description=f"{gap.description} Search for '{query}'.",
                queries=[query],
            )
        )
        if len(steps) >= limit:
            break
    return steps


def chain_advancing(verdict: CriticVerdict, question: str, added: list[dict[str, Any]]) -> bool:
    """Whether a gap follows a name the question does not give and only the last round's new sources
    state: a chain of hops (A's page names B, B's page names C) reached its next hop in that round,
    so one more round may reach the answer. A gap the earlier evidence already named is not progress."""
    said = " ".join(f"{m.get('summary', '')} {' '.join(m.get('extraction') or [])}" for m in added).lower()
    asked = {n.lower() for n in names(question)}
    hops = {n.lower() for g in verdict.gaps for n in names(g.suggested_query, fragment=True)}
    return any(n in said for n in hops - asked)
