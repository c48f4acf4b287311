"""Planner: question → validated ``ResearchPlan`` (one repair round, then a recorded failure)."""

from __future__ import annotations

from ..context import ResearchContext
from ..llm.prompts import render
from ..llm.structured import call_structured
from ..models import ResearchPlan

TOOLS_FOR_PROMPT = "local_search, read_document, grep_artifacts, read_artifact"


def make_plan(ctx: ResearchContext) -> ResearchPlan:
    max_steps = ctx.settings.max_steps
    messages = [
        {"role": "system", "content": render("planner", today=ctx.today, tools=TOOLS_FOR_PROMPT, max_steps=max_steps)},
        {"role": "user", "content": ctx.question},
    ]
    payload = {"question": ctx.question, "max_steps": max_steps}
    plan = call_structured(ctx, "planner", messages, payload, ResearchPlan, artifact="plan.json")
    # Follow-up steps belong to the critic; a planner that invents them is ignored there.
    return plan.model_copy(update={"steps": plan.steps[:max_steps], "followup_steps": []})
