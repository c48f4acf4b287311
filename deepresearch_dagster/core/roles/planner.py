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
from ..text import content_terms, words

TOOLS_FOR_PROMPT = "local_search, read_document, grep_artifacts, read_artifact"


def _written(plan: ResearchPlan, title: bool = True) -> set[str]:
    steps = [f"{s.title} {s.description} {' '.join(s.queries)}" for s in plan.steps]
    return set(content_terms(" ".join([plan.plan_title if title else "", *steps])))


def _about_the_question(plan: ResearchPlan, question: str) -> bool:
    asked = set(content_terms(question))
    return not asked or bool(asked & _written(plan))


def _cover_the_question(plan: ResearchPlan, question: str) -> ResearchPlan:
    """The plan with the question's words it never mentions added to its last step's first query
    and description.

    A small model plans the first hop of a two-hop question and stops ("the 1999 runner-up"
    without "the racing game on whose cover he appears"): no search would then reach the second
    hop. A plan that leaves out more than half of the question's content words gets them back
    where they are searched; a plan that words the question its own way loses nothing."""
    asked = list(dict.fromkeys(content_terms(question)))
    left_out = set(asked) - _written(plan, title=False)  # the steps are what is searched
    if len(left_out) < 2 or 2 * len(left_out) <= len(asked):
        return plan
    missing = " ".join(dict.fromkeys(w for w in words(question) if set(content_terms(w)) & left_out))
    last = plan.steps[-1]
    queries = [f"{last.queries[0]} {missing}"[:300], *last.queries[1:]] if last.queries else [f"{last.title} {missing}"]
    # The description too: the compressors judge what a source says against it.
    description = f"{last.description} Also search for the rest of the question: {missing}."[:2000]
    amended = last.model_copy(update={"queries": queries, "description": description})
    return plan.model_copy(update={"steps": [*plan.steps[:-1], amended]})


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
        covered = _cover_the_question(plan, ctx.question)
        if covered is not plan:
            searched = covered.steps[-1].queries[0]
            ctx.log(f"planner: the plan left out most of the question, now searched by {searched!r}")
        return covered
    except MODEL_FAILURES as exc:
        ctx.log(f"planner fell back to the heuristic planner: {exc}")
        record_fallback(ctx, "planner", "plan.json", exc)
    return contract.parse(plan_heuristically(payload))
