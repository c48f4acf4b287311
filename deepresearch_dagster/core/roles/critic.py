"""Critic: scores the sufficiency of the research so far and names the gaps to close next."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from ..context import ResearchContext
from ..heuristics.critique import critique_heuristically
from ..llm.budget import BudgetExceeded
from ..llm.engine import EngineError
from ..llm.prompts import render
from ..llm.structured import StructuredOutputError, call_structured
from ..models import PlanStep, ResearchPlan

SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2}


class Gap(BaseModel):
    description: str = Field(min_length=3, max_length=400)
    severity: Literal["low", "medium", "high"] = "medium"
    suggested_query: str = Field(min_length=2, max_length=300)


class CriticVerdict(BaseModel):
    sufficiency: int = Field(ge=1, le=10)
    gaps: list[Gap] = Field(default_factory=list, max_length=10)
    contradictions: list[str] = Field(default_factory=list, max_length=10)
    recommendation: str = Field(default="", max_length=1000)


class CriticRound(BaseModel):
    round: int
    verdict: CriticVerdict
    decision: str  # sufficient | follow_up | max_iterations | no_new_sources | no_gaps | budget
    fallback: bool = False
    followup_step_ids: list[str] = Field(default_factory=list)


def critique(ctx: ResearchContext, plan: ResearchPlan, memory: list[dict[str, Any]]) -> tuple[CriticVerdict, bool]:
    """Returns the verdict and whether it came from the heuristic fallback."""
    payload = {"question": ctx.question, "plan": plan.model_dump(), "memory": memory}
    lines = [
        f"- [{m['step_id']}] {m['summary_title']}: {m['summary']} (source: {m.get('source') or m['artifact_file']})"
        for m in memory
    ]
    messages = [
        {"role": "system", "content": render("critic", today=ctx.today)},
        {
            "role": "user",
            "content": f"Question: {ctx.question}\n\nPlan:\n{plan.as_markdown()}\n\nWorking memory:\n"
            + "\n".join(lines),
        },
    ]
    try:
        return call_structured(ctx, "critic", messages, payload, CriticVerdict, artifact="critic"), False
    except (StructuredOutputError, EngineError) as exc:
        ctx.log(f"critic fell back to the heuristic critic: {exc}")
    except BudgetExceeded:
        raise
    return CriticVerdict.model_validate(critique_heuristically(payload)), True


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
                title=f"Follow-up: {gap.description[:180]}",
                description=f"Close the gap ({gap.severity}): {gap.description} Search for '{query}'.",
                queries=[query],
            )
        )
        if len(steps) >= limit:
            break
    return steps
