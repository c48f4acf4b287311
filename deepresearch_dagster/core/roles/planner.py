"""Planner: question → validated ``ResearchPlan``.

The answer is normalized to the planner's contract (ids renumbered, queries de-duplicated, steps
clamped to ``max_steps``), gets one repair round, and when it stays invalid — or the model fails
in any way :data:`MODEL_FAILURES` names — the heuristic planner writes the plan (seed 003 §11.4
``use_default_plan``), recorded as a ``fallback`` row in ``llm_calls``.
"""

from __future__ import annotations

from ..context import ResearchContext
from ..errors import MODEL_FAILURES, StructuredOutputError
from ..heuristics.planning import plan_heuristically
from ..llm.contracts import planner_contract
from ..llm.prompts import render
from ..llm.structured import call_structured, record_fallback
from ..models import ResearchPlan
from ..text import content_terms

TOOLS_FOR_PROMPT = "local_search, read_document, grep_artifacts, read_artifact"


def _about_the_question(plan: ResearchPlan, question: str) -> bool:
    asked = set(content_terms(question))
    written = " ".join([plan.plan_title, *(f"{s.title} {s.description} {' '.join(s.queries)}" for s in plan.steps)])
    return not asked or bool(asked & set(content_terms(written)))


def make_plan(ctx: ResearchContext) -> ResearchPlan:
    max_steps = ctx.settings.max_steps
    messages = [
        {"role": "system", "content": render("planner", today=ctx.today, tools=TOOLS_FOR_PROMPT, max_steps=max_steps)},
        {"role": "user", "content": ctx.question},
    ]
    payload = {"question": ctx.question, "max_steps": max_steps}
    contract = planner_contract(max_steps)
    try:
        plan = call_structured(ctx, "planner", messages, payload, contract, artifact="plan.json")
        if not _about_the_question(plan, ctx.question):
            # Schema-valid but unrelated to the question (a model emitting filler): its searches
            # could only find nothing, so the heuristic planner plans instead.
            raise StructuredOutputError("planner", "the plan shares no content word with the question")
        return plan
    except MODEL_FAILURES as exc:
        ctx.log(f"planner fell back to the heuristic planner: {exc}")
        record_fallback(ctx, "planner", "plan.json", exc)
    return contract.parse(plan_heuristically(payload))
