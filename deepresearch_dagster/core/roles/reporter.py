"""Reporter: outline first, then one section at a time, from the working memory only.

Structure (seed 003 §6.4): executive summary, key findings, analysis, limitations, suggested
next steps, numbered references. Citations are verified against the stored raw artifacts in the
same run; source quality and the pipeline's own limits (incomplete research, budget) are stated.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import date
from typing import Any

from ..context import ResearchContext
from ..errors import MODEL_FAILURES, StructuredOutputError
from ..heuristics import OFFLINE_MODEL as FALLBACK_MODEL
from ..heuristics.report import REPORT_SECTIONS, direct_answer_text, extractive_section, reconcile_corroboration
from ..llm.contracts import OUTLINE, SECTION
from ..llm.prompts import render
from ..llm.structured import call_structured, complete_recorded, record_completion, record_fallback
from ..models import Citation, Outline, OutlineSection, Report, ReportBody, ResearchPlan, SummaryBundle, ToolOutputs
from ..naming import short_artifact_name
from ..store.artifacts import ArtifactReader
from ..tools import Toolbox, ToolError
from ..tools.artifact_tools import artifact_tools
from .citations import verify_citations
from .source_quality import corpus_status, corroborated_claims, listing_results, quality_warnings, score_sources

# A looked-up artifact slice enters the reporter's context; keep it bounded.
MAX_LOOKUP_CHARS = 6000
# Sections whose claims must carry a verifiable citation when the research found sources.
CITED = ("Executive summary", "Key findings", "Analysis")
_CITATION = re.compile(r"\[\d+\]")
SECTION_GUIDANCE = {
    "Executive summary": "Three to six sentences answering the question.",
    "Key findings": "Bullet points grouped under '### <step id>. <step title>' sub-headings.",
    "Analysis": "Compare sources, note agreement, contradictions and what the evidence supports.",
    "Limitations": "Gaps, weak or single sources, and what the research could not establish.",
    "Suggested next steps": "Concrete follow-up questions or searches, as bullet points.",
}


__all__ = ["Outline", "OutlineSection", "ReportBody", "write_report"]


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


def _raw_texts(ctx: ResearchContext, outputs: ToolOutputs) -> dict[str, str]:
    return {c.artifact_file: ctx.store.resolve_relpath(c.artifact_path).read_text("utf-8") for c in outputs.calls}


def _published(raws: dict[str, str]) -> dict[str, str | None]:
    """Publication dates that search providers reported, by URL."""
    dates: dict[str, str | None] = {}
    for r in listing_results(raws):
        if r.get("url") and r.get("published"):
            dates.setdefault(str(r["url"]), str(r["published"]))
    return dates


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
    except MODEL_FAILURES as exc:
        ctx.log(f"reporter lookups skipped: {exc}")
        record_fallback(ctx, "reporter", "lookups", exc)
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


def pipeline_notes(
    outputs: ToolOutputs, bundle: SummaryBundle, warnings: list[str], fallbacks: dict[str, int] | None = None
) -> list[str]:
    """Limitations the pipeline knows about, stated whatever the reporter model wrote."""
    notes = []
    if fallbacks:
        used = ", ".join(f"{role} {n}×" for role, n in fallbacks.items())
        notes.append(
            f"Some roles fell back to deterministic heuristics instead of the model ({used}); "
            "those parts were not written by the model."
        )
    if not outputs.complete:
        notes.append(f"Research may be incomplete: {outputs.stop_reason}.")
    if outputs.stop_reason.startswith("budget"):
        notes.append("The budget stopped the research; this report is written from what was gathered.")
    not_useful = len(bundle.summaries) - len(bundle.working_memory)
    if not_useful:
        notes.append(
            f"{not_useful} tool call(s) were judged not useful; their raw outputs stay in the artifact folder."
        )
    return notes + warnings


def insert_notes(markdown: str, notes: list[str], heading: str = "Limitations") -> str:
    if not notes:
        return markdown
    bullets = "\n".join(f"- {n}" for n in notes)
    match = re.search(rf"^## {heading}\s*$", markdown, re.MULTILINE)
    if not match:
        return markdown.rstrip() + f"\n\n## {heading}\n\n{bullets}\n"
    nxt = re.search(r"^## ", markdown[match.end() :], re.MULTILINE)
    end = match.end() + nxt.start() if nxt else len(markdown)
    return markdown[:end].rstrip() + "\n" + bullets + "\n\n" + markdown[end:].lstrip()


def _strip_heading(markdown: str, heading: str) -> str:
    lines = markdown.strip().splitlines()
    if lines and lines[0].lstrip("#").strip().lower() == heading.lower():
        lines = lines[1:]
    return "\n".join(lines).strip()


def _sections(
    ctx: ResearchContext,
    messages: list[dict[str, Any]],
    payload: dict[str, Any],
    cites: Callable[[str], bool] | None = None,
) -> tuple[str, str, int]:
    """Outline, then each section aware of the outline and the sections before it. A section the
    model cannot write is written extractively, and so is a section that must cite (``CITED``)
    but has no citation at all while the extractive section cites what ``cites`` verifies. Returns (body, reporter model
    label, number of parts written by the fallback); a report written wholly by the fallback names
    no model."""
    model = ctx.engine.model_for("reporter")
    headings = list(REPORT_SECTIONS)
    try:
        outline = call_structured(
            ctx,
            "reporter",
            [*messages, {"role": "user", "content": render("reporter_outline", sections=", ".join(headings))}],
            {**payload, "phase": "outline"},
            OUTLINE,
            artifact="report.md",
        )
        points = {s.heading.strip().lower(): s.points for s in outline.sections}
        outline_fallback = 0
    except MODEL_FAILURES as exc:
        ctx.log(f"report outline fell back to the fixed structure: {exc}")
        record_fallback(ctx, "reporter", "report.md", exc)
        points, outline_fallback = {}, 1
    outline_text = "\n".join(f"- {h}: " + "; ".join(points.get(h.lower(), [])) for h in headings)
    written: list[tuple[str, str]] = []
    fallbacks = 0
    for heading in headings:
        previous = "\n\n".join(f"## {h}\n{body}" for h, body in written) or "(none yet)"
        ask = render(
            "reporter_section",
            heading=heading,
            outline=outline_text,
            previous=previous,
            guidance=SECTION_GUIDANCE[heading],
        )
        try:
            body = call_structured(
                ctx,
                "reporter",
                [*messages, {"role": "user", "content": ask}],
                {**payload, "phase": "section", "section": heading},
                SECTION,
                artifact="report.md",
            ).markdown
            # A section that must cite but has no [n] at all is replaced when the extractive one
            # would cite verifiably (wrong citations are removed and counted further down instead).
            uncited = cites is not None and payload["sources"] and heading in CITED and not _CITATION.search(body)
            if uncited and cites(extractive_section(heading, payload)):
                raise StructuredOutputError("reporter", f"section '{heading}' cites no source that verifies")
        except MODEL_FAILURES as exc:
            ctx.log(f"section '{heading}' written extractively: {exc}")
            record_fallback(ctx, "reporter", "report.md", exc)
            body = extractive_section(heading, payload)
            fallbacks += 1
        written.append((heading, _strip_heading(body, heading)))
    if fallbacks == len(headings):
        label = FALLBACK_MODEL
    elif fallbacks:
        label = f"{model} ({fallbacks} section(s) by {FALLBACK_MODEL})"
    else:
        label = model
    return "\n\n".join(f"## {h}\n\n{body}" for h, body in written), label, fallbacks + outline_fallback


def write_report(ctx: ResearchContext, plan: ResearchPlan, bundle: SummaryBundle, outputs: ToolOutputs) -> Report:
    entries = number_sources(bundle)
    sourced = [e for e in entries if e["source"]]
    raws = _raw_texts(ctx, outputs)
    scores = score_sources(
        ctx.question, sourced, _published(raws), date.fromisoformat(ctx.today), status=corpus_status(raws)
    )
    warnings = quality_warnings(scores, sourced)
    rounds = outputs.critic_rounds
    payload = {
        "question": ctx.question,
        "plan": plan.with_followups(outputs.followup_steps),
        "sources": sourced,
        "corroborated": corroborated_claims(sourced),
        "critic_rounds": rounds,
        "open_gaps": rounds[-1]["verdict"]["gaps"] if rounds and rounds[-1]["decision"] != "sufficient" else [],
        "not_useful_count": len(bundle.summaries) - len(bundle.working_memory),
    }
    memory = _memory_text(entries, raws if ctx.settings.context_mode == "raw" else None)
    plan_text = plan.as_markdown(outputs.followup_steps)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": render("reporter", today=ctx.today)},
        {
            "role": "user",
            "content": f"Question: {ctx.question}\n\nPlan:\n{plan_text}\n\nWorking memory:\n" + (memory or "(empty)"),
        },
    ]
    if outputs.direct_answer:
        try:
            body = call_structured(
                ctx,
                "reporter",
                [*messages, {"role": "user", "content": render("reporter_direct")}],
                {**payload, "phase": "direct"},
                SECTION,
                artifact="report.md",
            ).markdown
            model, reporter_fallbacks = ctx.engine.model_for("reporter"), 0
        except MODEL_FAILURES as exc:
            ctx.log(f"direct answer fell back: {exc}")
            record_fallback(ctx, "reporter", "report.md", exc)
            body, model, reporter_fallbacks = direct_answer_text(payload), FALLBACK_MODEL, 1
        body = (
            f"## Answer\n\n{body.strip()}\n\n## Limitations\n\n"
            "- Answered without tool calls: no sources were consulted."
        )
    else:
        messages += artifact_lookups(ctx, plan, messages, payload)
        by_n: dict[int, list[dict[str, Any]]] = {}
        for e in entries:
            by_n.setdefault(e["n"], []).append(e)

        def cites(section: str) -> bool:
            return any(c.verified for c in verify_citations(section, by_n, raws)[1])

        body, model, reporter_fallbacks = _sections(ctx, messages, payload, cites)
    fallbacks = fallback_counts(ctx, bundle, outputs, reporter_fallbacks)
    body = insert_notes(body, pipeline_notes(outputs, bundle, warnings, fallbacks))
    entries_by_n: dict[int, list[dict[str, Any]]] = {}
    for e in entries:
        entries_by_n.setdefault(e["n"], []).append(e)
    body, checks = verify_citations(body, entries_by_n, raws)
    body = reconcile_corroboration(body)  # "two or more sources" counts verified citations only
    unverified = [c for c in checks if not c.verified]
    if unverified:
        body = insert_notes(
            body, [f"{len(unverified)} citation(s) could not be verified against the stored sources and were removed."]
        )
    citations = _citations(checks, entries_by_n)
    references = ["", "## References", ""]
    for c in citations:
        # A list item each (a Markdown viewer would join plain lines into one paragraph); a URL is
        # a link; the artifact's short name here, its full name in report.json and the audit.
        title = f"{c.source_title} — " if c.source_title else ""
        source = f"<{c.source}>" if c.source.startswith(("http://", "https://")) else f"`{c.source}`"
        references.append(f"- [{c.n}] {title}{source} (artifact: `{short_artifact_name(c.artifact_file)}`)")
    header = f"# {plan.plan_title}\n\n**Question:** {ctx.question}\n\n"
    markdown = header + body.strip() + "\n" + "\n".join(references) + "\n"
    ctx.lineage.replace_rows(
        "source_scores",
        ctx.partition_key,
        ["source", "domain", "credibility", "recency", "corroboration", "score", "published"],
        [[s.source, s.domain, s.credibility, s.recency, s.corroboration, s.score, s.published] for s in scores],
    )
    ctx.lineage.replace_rows(
        "citations",
        ctx.partition_key,
        ["n", "source", "artifact_file", "quote", "verified"],
        [[c.n, c.source, c.artifact_file, c.quote, c.verified] for c in citations],
    )
    return Report(
        partition_key=ctx.partition_key,
        question=ctx.question,
        plan_title=plan.plan_title,
        markdown=markdown,
        citations=citations,
        reporter_model=model,
        citation_checks=[c.model_dump() for c in checks],
        verified_citations=len(checks) - len(unverified),
        unverified_citations=len(unverified),
        sufficiency_scores=[r["verdict"]["sufficiency"] for r in rounds],
        complete=outputs.complete,
        stop_reason=outputs.stop_reason,
        warnings=warnings,
        source_scores=[s.__dict__ for s in scores],
        fallbacks=fallbacks,
    )


def fallback_counts(ctx: ResearchContext, bundle: SummaryBundle, outputs: ToolOutputs, reporter: int) -> dict[str, int]:
    """How often each role's fallback stood in for the model in what this report is built on:
    the plan's run (planner), the research run (researcher steps whose optional calls were
    skipped), the critic rounds and summaries as stored, and this report's own parts."""
    counts = {
        "planner": _run_fallbacks(ctx, "planner", "plans", last_only=True),
        "researcher": _run_fallbacks(ctx, "researcher", "tool_calls"),
        "compressor": sum(1 for s in bundle.summaries if s.fallback),
        "critic": sum(1 for r in outputs.critic_rounds if r.get("fallback")),
        "reporter": reporter,
    }
    return {role: n for role, n in counts.items() if n}


def _run_fallbacks(ctx: ResearchContext, role: str, stage_table: str, last_only: bool = False) -> int:
    runs = ctx.lineage.stage_run_ids(ctx.partition_key, stage_table)
    rows = ctx.lineage.role_outcomes(ctx.partition_key, runs, role, limit=10_000)
    if last_only:  # the plan on disk came from the last planner outcome of its run
        return int(bool(rows) and rows[0]["status"] == "fallback")
    return sum(1 for r in rows if r["status"] == "fallback")


def _citations(checks: list[Any], entries_by_n: dict[int, list[dict[str, Any]]]) -> list[Citation]:
    """One reference per cited source that kept at least one verified citation."""
    out: dict[int, Citation] = {}
    for c in checks:
        if not c.verified or c.n in out:
            continue
        e = entries_by_n[c.n][0]
        out[c.n] = Citation(
            n=c.n,
            source=e["source"] or e["artifact_file"],
            source_title=e["source_title"],
            artifact_file=c.artifact_file or e["artifact_file"],
            summary_title=e["summary_title"],
            quote=c.quote,
            verified=True,
        )
    return [out[n] for n in sorted(out)]
