"""Reporter: a cited Markdown report written from the working memory (injected summaries) only."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, Field

from .context import ResearchContext
from .engines.base import EngineError
from .engines.offline import MODEL as FALLBACK_MODEL
from .engines.offline import extractive_report
from .models import Citation, Report, ResearchPlan, SummaryBundle
from .prompts import render
from .structured import StructuredOutputError, call_structured

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
                "n": n, "source": s.source, "source_title": s.source_title, "artifact_file": s.artifact_file,
                "step_id": s.step_id, "summary_title": s.result.summary_title, "summary": s.result.summary,
                "extraction": s.result.extraction,
            }
        )
    return entries


def _memory_text(entries: list[dict[str, Any]]) -> str:
    blocks = []
    for e in entries:
        bullets = "\n".join(f"- {b}" for b in e["extraction"])
        blocks.append(
            f"[{e['n']}] {e['summary_title']} (step {e['step_id']}, source: {e['source'] or e['artifact_file']})\n"
            f"{e['summary']}\n{bullets}".rstrip()
        )
    return "\n\n".join(blocks)


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
            + _memory_text(entries),
        },
    ]
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
            n=n, source=by_number[n]["source"] or by_number[n]["artifact_file"],
            source_title=by_number[n]["source_title"], artifact_file=by_number[n]["artifact_file"],
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
        partition_key=ctx.partition_key, question=ctx.question, plan_title=plan.plan_title,
        markdown=markdown, citations=citations, reporter_model=model,
    )
