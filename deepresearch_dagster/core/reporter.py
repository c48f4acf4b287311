"""Reporter: a cited Markdown report written from the working memory (injected summaries) only."""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel, Field

from .artifact_store import ArtifactReader
from .context import ResearchContext
from .engines.base import EngineError
from .engines.offline import MODEL as FALLBACK_MODEL
from .engines.offline import extractive_report
from .models import Citation, Report, ResearchPlan, SummaryBundle
from .prompts import render
from .structured import StructuredOutputError, call_structured, complete_recorded, record_completion
from .tools import Toolbox, ToolError
from .tools.artifact_tools import artifact_tools

# A looked-up artifact slice enters the reporter's context; keep it bounded.
MAX_LOOKUP_CHARS = 6000

_CITE = re.compile(r"\[(\d+)\]")


class ReportBody(BaseModel):
    markdown: str = Field(min_length=20)


def number_sources(bundle: SummaryBundle) -> list[dict[str, Any]]:
    """Working memory entries with citation numbers; one number per distinct source."""
    numbers: dict[str, int] = {}
    entries = []
    # Sources proper (documents, pages) are numbered before search listings.
    for s in sorted(bundle.working_memory, key=lambda s: s.source is None):
        key = s.source or s.artifact_file
        n = numbers.setdefault(key, len(numbers) + 1)
        entries.append(
            {
                "n": n,
                "source": s.source,
                "source_title": s.source_title,
                "artifact_file": s.artifact_file,
                "step_id": s.step_id,
                "summary_title": s.result.summary_title,
                "summary": s.result.summary,
                "extraction": s.result.extraction,
            }
        )
    return entries


def _memory_text(entries: list[dict[str, Any]], raw: dict[str, str] | None = None) -> str:
    """Numbered working memory; with ``raw`` (context_mode=raw) the whole outputs instead."""
    blocks = []
    for e in entries:
        body = raw[e["artifact_file"]] if raw else e["summary"] + "".join(f"\n- {b}" for b in e["extraction"])
        blocks.append(
            f"[{e['n']}] {e['summary_title']} (step {e['step_id']}, source: {e['source'] or e['artifact_file']})\n"
            f"{body}".rstrip()
        )
    return "\n\n".join(blocks)


def _raw_outputs(ctx: ResearchContext, plan: ResearchPlan, entries: list[dict[str, Any]]) -> dict[str, str]:
    folder = ctx.store.raw_dir(plan.plan_title)
    return {e["artifact_file"]: (folder / e["artifact_file"]).read_text("utf-8") for e in entries}


def artifact_lookups(
    ctx: ResearchContext, plan: ResearchPlan, messages: list[dict[str, Any]], payload: dict[str, Any]
) -> list[dict[str, Any]]:
    """Let the reporter read stored raw outputs (seed 000 §8) before writing, within a cap."""
    cap = ctx.settings.report_lookups
    if cap <= 0:
        return []
    toolbox = Toolbox(artifact_tools(ArtifactReader(ctx.store.raw_dir(plan.plan_title))))
    ask = [*messages, {"role": "user", "content": render("reporter_lookup", max_lookups=cap)}]
    try:
        completion = complete_recorded(
            ctx, "reporter", ask, {**payload, "phase": "lookup"}, tools=toolbox.definitions(), artifact="lookups"
        )
    except EngineError as exc:
        ctx.log(f"reporter lookups skipped: {exc}")
        return []
    record_completion(ctx, "reporter", completion, 1, "ok", "lookups")
    calls = completion.tool_calls[:cap]
    if not calls:
        return []
    ids = [f"lookup_{i}" for i in range(len(calls))]
    added: list[dict[str, Any]] = [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": i, "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
                for i, c in zip(ids, calls, strict=True)
            ],
        }
    ]
    for call_id, call in zip(ids, calls, strict=True):
        try:
            content: Any = toolbox.call(call.name, call.arguments).content
        except ToolError as exc:
            content = {"error": str(exc)}
        added.append(
            {
                "role": "tool",
                "tool_call_id": call_id,
                "content": json.dumps(content, ensure_ascii=False)[:MAX_LOOKUP_CHARS],
            }
        )
    ctx.log(f"reporter looked up {len(calls)} artifact(s)")
    return added


def write_report(ctx: ResearchContext, plan: ResearchPlan, bundle: SummaryBundle) -> Report:
    entries = number_sources(bundle)
    payload = {
        "question": ctx.question,
        "plan": plan.model_dump(),
        "sources": [e for e in entries if e["source"]],
        "not_useful_count": len(bundle.summaries) - len(bundle.working_memory),
    }
    messages = [
        {"role": "system", "content": render("reporter", today=ctx.today)},
        {
            "role": "user",
            "content": f"Question: {ctx.question}\n\nPlan:\n{plan.as_markdown()}\n\nWorking memory:\n"
            + _memory_text(entries, _raw_outputs(ctx, plan, entries) if ctx.settings.context_mode == "raw" else None),
        },
    ]
    messages += artifact_lookups(ctx, plan, messages, payload)
    model = ctx.engine.model_for("reporter")
    try:
        body = call_structured(ctx, "reporter", messages, payload, ReportBody, artifact="report.md").markdown
    except (StructuredOutputError, EngineError) as exc:
        ctx.log(f"reporter failed ({exc}); writing the extractive report instead")
        body = extractive_report(payload)
        body += "- The configured reporter model failed; this is the extractive fallback report.\n"
        model = FALLBACK_MODEL
    by_number: dict[int, dict[str, Any]] = {}
    for e in entries:
        by_number.setdefault(e["n"], e)
    cited = sorted({int(n) for n in _CITE.findall(body)})
    citations = [
        Citation(
            n=n,
            source=by_number[n]["source"] or by_number[n]["artifact_file"],
            source_title=by_number[n]["source_title"],
            artifact_file=by_number[n]["artifact_file"],
            summary_title=by_number[n]["summary_title"],
        )
        for n in cited
        if n in by_number
    ]
    unresolved = [n for n in cited if n not in by_number]
    references = ["", "## References", ""]
    for c in citations:
        title = f"{c.source_title} — " if c.source_title else ""
        references.append(f"[{c.n}] {title}`{c.source}` (artifact: `{c.artifact_file}`)")
    if unresolved:
        references.append("")
        references.append(f"Unresolved citation numbers (no such source): {', '.join(map(str, unresolved))}")
    markdown = body.rstrip() + "\n" + "\n".join(references) + "\n"
    return Report(
        partition_key=ctx.partition_key,
        question=ctx.question,
        plan_title=plan.plan_title,
        markdown=markdown,
        citations=citations,
        reporter_model=model,
    )
