"""Reporter: outline first, then one section at a time, each from its share of the working memory.

Structure (seed 003 §6.4): executive summary, key findings, analysis, limitations, suggested
next steps, numbered references. Citations are verified against the stored raw artifacts in the
same run, and every sentence of the executive summary and key findings ends up cited by a source
that verifies it, rewritten from its source, or dropped (``cited_sentences``); the next steps are
the critic's gaps. Source quality and the pipeline's own limits (incomplete research, budget) are
stated.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import date
from typing import Any

from ..context import ResearchContext
from ..errors import MODEL_FAILURES, CredentialsError, StructuredOutputError
from ..heuristics import OFFLINE_MODEL as FALLBACK_MODEL
from ..heuristics.report import (
    DIRECT_ANSWER,
    REPORT_SECTIONS,
    extractive_section,
    preceding_sentences,
    ranked_findings,
    reconcile_corroboration,
)
from ..llm.contracts import OUTLINE, SECTION, SELECTION
from ..llm.prompts import render
from ..llm.structured import call_structured, complete_recorded, record_completion, record_fallback
from ..models import (
    Citation,
    Outline,
    OutlineSection,
    PlanStep,
    Report,
    ReportBody,
    ResearchPlan,
    SummaryBundle,
    SummaryRecord,
    ToolOutputs,
)
from ..naming import markdown_code, markdown_text, reference_line, short_artifact_name
from ..text import split_sentences
from ..tools import Toolbox, ToolError
from ..tools.artifact_tools import artifact_tools
from ..tools.local_search import TRUNCATED
from ..untrusted import data_marker, spotlight, without_address
from .citations import locate, verify_citations
from .cited_sentences import EMPTY_NOTICE, MAX_REWRITES, MUST_CITE, CitedSentences, cite_every_sentence
from .revision import Evidence, revise_report
from .source_quality import corpus_status, corroborated_claims, listing_results, quality_warnings, score_sources

# A looked-up artifact slice enters the reporter's context; keep it bounded.
MAX_LOOKUP_CHARS = 6000
# Sections whose claims must carry a verifiable citation when the research found sources.
CITED = ("Executive summary", "Key findings", "Analysis")
_CITATION = re.compile(r"\[\d+\]")
_CITED_GROUP = re.compile(r"\[(\d+(?:\s*,\s*\d+)*)\]")
_CITED_LIST = re.compile(r"\[(\d+(?:\s*,\s*\d+)+)\]")
# Sections written from a source index and the open gaps, not from the summaries.
INDEX_ONLY = ("Limitations",)
# Sections rendered from the critic's structured gaps (description, suggested query), whatever the
# engine: what to search next is the critic's finding, not the reporter model's prose.
FROM_GAPS = ("Suggested next steps",)
# The "select" report style (settings.report_style), for a model whose prose does not verify: it
# picks by number, from the best-ranked findings that verify, those the executive summary quotes;
# every other section is the extractive writer's (quoted findings, the source index, the gaps),
# and no outline is asked (it would only guide the model's own sections).
SELECTED = ("Executive summary",)
SELECT_LIMIT = 5  # findings the summary quotes
SELECT_POOL = 10  # best-ranked findings offered (a small model picks among the first)
# A context window this small (tokens) marks a small local model: report_style "auto" selects.
SMALL_WINDOW = 8192
# Later sections see each earlier one cut to this many characters (to avoid repeating it).
PREVIOUS_CHARS = 600
SECTION_GUIDANCE = {
    "Executive summary": "Three to six sentences answering the question.",
    "Key findings": "Bullet points grouped under '### <step id>. <step title>' sub-headings.",
    "Analysis": "Compare sources, note agreement, contradictions and what the evidence supports.",
    "Limitations": "Gaps, weak or single sources, and what the research could not establish.",
}


__all__ = ["Outline", "OutlineSection", "ReportBody", "write_report"]


def number_sources(bundle: SummaryBundle, raws: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Working memory entries with citation numbers; one number per distinct source.

    A search listing is not a source, but the snippet it quotes from one is: a snippet the
    compressor kept as answering (an extraction item of the listing's summary, whole) becomes an
    entry of the document or page it comes from, verified against the listing that quotes it.
    Without it, an answer the research only saw in a listing could never reach the report."""
    numbers: dict[str, int] = {}
    entries = []

    def add(s: SummaryRecord, source: str | None, title: str | None, summary: str, extraction: list[str]) -> None:
        key = source or s.artifact_file
        entries.append(
            {
                "listed": source is not None and s.source is None,  # a snippet of a listing
                "n": numbers.setdefault(key, len(numbers) + 1),
                "source": source,
                "source_title": title,
                "artifact_file": s.artifact_file,
                "step_id": s.step_id,
                "summary_title": s.result.summary_title,
                "summary": summary,
                "extraction": extraction,
            }
        )

    memory = bundle.working_memory
    listings = [s for s in memory if s.source is None]
    # Sources proper (documents, pages) are numbered before search listings.
    for s in memory:
        if s.source is not None:
            add(s, s.source, s.source_title, s.result.summary, s.result.extraction)
    rest: list[tuple[SummaryRecord, list[str]]] = []  # each listing with what it keeps as its own
    for s in listings:
        rows = listing_results({s.artifact_file: (raws or {}).get(s.artifact_file, "")})
        by_snippet = {" ".join(str(r.get("snippet") or "").split()): r for r in rows}
        own = []
        for item in s.result.extraction:
            r = by_snippet.get(" ".join(item.split()))
            where = r and (r.get("url") or r.get("path"))
            if where and not item.rstrip().endswith(TRUNCATED):
                add(s, str(where), str(r.get("title") or where), "", [item])
            else:
                own.append(item)
        rest.append((s, own))
    for s, own in rest:
        add(s, None, None, s.result.summary, own)
    return entries


def _memory_text(entries: list[dict[str, Any]], raw: dict[str, str] | None = None, compact: bool = False) -> str:
    """Numbered working memory; ``compact``: each summary without its extraction bullets; with
    ``raw`` (context_mode=raw) the whole outputs instead."""
    blocks = []
    for e in entries:
        if raw:
            body = raw[e["artifact_file"]]
        else:
            body = e["summary"] + ("" if compact else "".join(f"\n- {b}" for b in e["extraction"]))
        blocks.append(
            f"[{e['n']}] {e['summary_title']} (step {e['step_id']}, source: {e['source'] or e['artifact_file']})\n"
            f"{body}".rstrip()
        )
    return "\n\n".join(blocks)


def plan_brief(plan: ResearchPlan, followups: list[PlanStep] | None = None) -> str:
    """The plan as the reporter needs it: each step's id, title and description (the search
    queries served the research team; the report is organized by step)."""
    lines = [f"Plan: {plan.plan_title}"]
    if plan.direct_answer:
        lines.append("(directly answerable from model knowledge)")
    for s in [*plan.steps, *(followups or [])]:
        lines.append(f"- step {s.step_id}: {s.title}. {' '.join(s.description.split())}")
    return "\n".join(lines)


def _source_index(entries: list[dict[str, Any]]) -> str:
    """One line per source number (title, steps, source), no summary: what a section that cites
    nothing needs to name the evidence. Lines start with "- " so they never read as a memory block."""
    lines: dict[int, str] = {}
    for e in entries:
        lines.setdefault(
            e["n"],
            f"- [{e['n']}] {e['summary_title']} (step {e['step_id']}, "
            f"source: {e['source'] or short_artifact_name(e['artifact_file'])})",
        )
    return "\n".join(lines[n] for n in sorted(lines))


def cited_numbers(points: list[str]) -> set[int]:
    """Source numbers an outline's points cite: ``[2]``, ``[2, 3]`` or ``[2][3]``."""
    return {int(n) for group in _CITED_GROUP.findall(" ".join(points)) for n in re.findall(r"\d+", group)}


def section_memory(
    heading: str,
    entries: list[dict[str, Any]],
    points: list[str],
    raw: dict[str, str] | None = None,
    gaps: list[Any] | None = None,
) -> str:
    """The working memory one section is written from (its own share, not the whole memory):
    the sources its outline points cite, with their extraction; when the outline cites none,
    Key findings (grouped by step) reads every step's summaries in full, the Executive summary
    and the Analysis every summary without extraction bullets; Limitations reads a one-line index
    of the sources and the critic's open gaps only."""
    if heading in INDEX_ONLY:
        lines = [f"Sources (summaries not needed for this section):\n{_source_index(entries) or '(none)'}"]
        if gaps:
            lines.append("Open gaps named by the critic:\n" + "\n".join(f"- {_gap_text(g)}" for g in gaps))
        return "\n\n".join(lines)
    cited = cited_numbers(points) & {e["n"] for e in entries}
    if cited:
        return _memory_text([e for e in entries if e["n"] in cited], raw)
    return _memory_text(entries, raw, compact=heading != "Key findings")


def _gap_text(gap: Any) -> str:
    if isinstance(gap, dict):
        return f"{gap.get('description', '')} (search: {gap.get('suggested_query', '')})".strip()
    return str(gap)


def _working_memory(ctx: ResearchContext, text: str) -> dict[str, str]:
    """The memory as one data block (core/untrusted.py): it was drawn from untrusted text."""
    memory = spotlight(text or "(empty)", data_marker(ctx.partition_key))
    return {"role": "user", "content": "Working memory:\n" + memory}


def _brief(body: str, limit: int = PREVIOUS_CHARS) -> str:
    """A written section as later sections see it: enough not to repeat it, not all of it."""
    body = body.strip()
    return body if len(body) <= limit else body[:limit].rstrip() + " […]"


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
    toolbox = Toolbox(artifact_tools(ctx.store.raw_reader(plan.plan_title)))
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
                "content": spotlight(
                    json.dumps(content, ensure_ascii=False)[:MAX_LOOKUP_CHARS], data_marker(ctx.partition_key)
                ),
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
    suspects = list(dict.fromkeys(src for c in outputs.calls for src in c.suspected_injection))
    if suspects:
        names = ", ".join(markdown_code(src) for src in suspects)
        notes.append(
            f"Suspected prompt injection: {names} held text addressed to the model (instructions, role tags or "
            "tool calls). It was not followed, and nothing from these sources is used in this report."
        )
    if outputs.skipped_documents:
        skipped = outputs.skipped_documents
        names = "; ".join(f"{markdown_code(path)} ({markdown_text(why)})" for path, why in skipped[:10])
        more = f"; {len(skipped) - 10} more in report.json" if len(skipped) > 10 else ""
        notes.append(f"{len(skipped)} file(s) of the document folder could not be read (not searched): {names}{more}.")
    set_aside = sum(1 for s in bundle.summaries if s.suspected_injection)
    not_useful = len(bundle.summaries) - len(bundle.working_memory) - set_aside
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


def _outline(
    ctx: ResearchContext,
    head: list[dict[str, Any]],
    entries: list[dict[str, Any]],
    raw: dict[str, str] | None,
    lookups: list[dict[str, Any]],
    payload: dict[str, Any],
) -> tuple[dict[str, list[str]], int]:
    """Each section's points (by lowercased heading), and 1 when the fixed structure stood in."""
    headings = list(REPORT_SECTIONS)
    try:
        outline = call_structured(
            ctx,
            "reporter",
            [
                *head,
                _working_memory(ctx, _memory_text(entries, raw, compact=True)),
                *lookups,
                {"role": "user", "content": render("reporter_outline", sections=", ".join(headings))},
            ],
            {**payload, "phase": "outline"},
            OUTLINE,
            artifact="report.md",
        )
        return {s.heading.strip().lower(): s.points for s in outline.sections}, 0
    except MODEL_FAILURES as exc:
        ctx.log(f"report outline fell back to the fixed structure: {exc}")
        record_fallback(ctx, "reporter", "report.md", exc)
        return {}, 1


def _sections(
    ctx: ResearchContext,
    head: list[dict[str, Any]],
    payload: dict[str, Any],
    cites: Callable[[str], bool] | None = None,
    settle: Callable[[str, str], str | None] | None = None,
    *,
    entries: list[dict[str, Any]] | None = None,
    raw: dict[str, str] | None = None,
    lookups: list[dict[str, Any]] | None = None,
    selects: bool = False,
) -> tuple[str, str, int]:
    """Outline, then each section aware of the outline and the sections before it. Every call
    starts with the same stable prefix ``head`` (system prompt, question, plan: a provider's
    prompt cache can serve it), then its own variable part: the outline reads every summary
    without extraction bullets (as the lookup before it did: a shared prefix again), each section
    only its share (:func:`section_memory`); looked-up artifact text goes to the outline and the
    sections that must cite. A section that must cite (``CITED``) is handed to ``settle``, which
    returns it with every sentence cited from what verifies, rewritten from its source, or dropped
    (a small model paraphrases: its sentences are mended one by one, not discarded whole), or None
    when nothing in it verifies. A section the model cannot write is written extractively, and so
    is one ``settle`` rejects while the extractive section cites what ``cites`` verifies; ``FROM_GAPS`` sections are
    rendered from the critic's gaps without a model call. Returns (body, reporter model
    label, number of parts written by the fallback); a report written wholly by the fallback names
    no model."""
    model = ctx.engine.model_for("reporter")
    entries = entries or []
    lookups = lookups or []
    headings = list(REPORT_SECTIONS)
    select = selects and cites is not None and bool(payload["sources"])
    # The select style needs no outline: it would only guide the Analysis, at a small model's pace.
    points, outline_fallback = {}, 0
    if not select:
        points, outline_fallback = _outline(ctx, head, entries, raw, lookups, payload)
    outline_text = "\n".join(f"- {h}: " + "; ".join(points.get(h.lower(), [])) for h in headings)
    written: list[tuple[str, str]] = []
    fallbacks = 0
    if select:  # a small model's summaries paraphrase: the sections quote only what verifies
        payload = _quotable(payload, cites)  # type: ignore[arg-type]
    for heading in headings:
        if heading in FROM_GAPS or (select and heading not in SELECTED):
            written.append((heading, extractive_section(heading, payload)))
            continue
        if select and heading in SELECTED:
            try:
                written.append((heading, _selected(ctx, head, payload, heading, cites)))  # type: ignore[arg-type]
            except MODEL_FAILURES as exc:
                ctx.log(f"section '{heading}' written extractively: {exc}")
                record_fallback(ctx, "reporter", "report.md", exc)
                written.append((heading, extractive_section(heading, payload)))
                fallbacks += 1
            continue
        previous = "\n\n".join(f"## {h}\n{_brief(body)}" for h, body in written) or "(none yet)"
        ask = render(
            "reporter_section",
            heading=heading,
            outline=outline_text,
            previous=previous,
            guidance=SECTION_GUIDANCE[heading],
        )
        memory = section_memory(heading, entries, points.get(heading.lower(), []), raw, payload.get("open_gaps"))
        try:
            body = call_structured(
                ctx,
                "reporter",
                [
                    *head,
                    _working_memory(ctx, memory),
                    *(lookups if heading in CITED else []),
                    {"role": "user", "content": ask},
                ],
                {**payload, "phase": "section", "section": heading},
                SECTION,
                artifact="report.md",
            ).markdown
            # A section that must cite and keeps nothing that verifies once mended (a weak or
            # random model) is replaced when the extractive one would cite verifiably.
            if settle is not None and cites is not None and payload["sources"] and heading in CITED:
                settled = settle(heading, body)
                if settled is None and cites(extractive_section(heading, payload)):
                    raise StructuredOutputError("reporter", f"section '{heading}' cites no source that verifies")
                body = body if settled is None else settled
        except MODEL_FAILURES as exc:
            ctx.log(f"section '{heading}' written extractively: {exc}")
            record_fallback(ctx, "reporter", "report.md", exc)
            body = extractive_section(heading, payload)
            fallbacks += 1
        written.append((heading, _strip_heading(body, heading)))
    if fallbacks == len([h for h in headings if h not in FROM_GAPS]):
        label = FALLBACK_MODEL
    elif fallbacks:
        label = f"{model} ({fallbacks} section(s) by {FALLBACK_MODEL})"
    else:
        label = model
    return "\n\n".join(f"## {h}\n\n{body}" for h, body in written), label, fallbacks + outline_fallback


def _quotable(payload: dict[str, Any], cites: Callable[[str], bool]) -> dict[str, Any]:
    """``payload`` with each source's summary sentences and extraction items kept only when they
    verify against its raw output as quoted: the extractive writer then cites nothing that the
    verifier would remove."""

    def keep(e: dict[str, Any], text: str) -> bool:
        return cites(f"{text} [{e['n']}]")

    sources = [
        {
            **e,
            "summary": " ".join(s for s in split_sentences(e["summary"]) if keep(e, s)),
            "extraction": [x for x in e["extraction"] if keep(e, x)],
        }
        for e in payload["sources"]
    ]
    return {**payload, "sources": sources}


def report_style(ctx: ResearchContext) -> str:
    """``settings.report_style``, "auto" resolved: select for a model whose context window is
    ``SMALL_WINDOW`` tokens or less, write otherwise (and always for the offline engine)."""
    model = ctx.engine.model_for("reporter")
    window = getattr(ctx.engine, "context_window", None)
    if model == FALLBACK_MODEL or window is None:
        return "write"
    if ctx.settings.report_style != "auto":
        return ctx.settings.report_style
    size = window(model)
    return "select" if size is not None and size <= SMALL_WINDOW else "write"


def selection_pool(payload: dict[str, Any], cites: Callable[[str], bool]) -> list[Any]:
    """The best-ranked findings that verify, at most ``SELECT_POOL``; a finding whose every word a
    better one holds repeats it and is left out."""
    pool: list[Any] = []
    for f in ranked_findings(payload):
        if len(pool) < SELECT_POOL and not any(f.terms <= g.terms for g in pool) and cites(f.quoted()):
            pool.append(f)
    return pool


def _selected(
    ctx: ResearchContext,
    head: list[dict[str, Any]],
    payload: dict[str, Any],
    heading: str,
    cites: Callable[[str], bool],
) -> str:
    """A section of the findings the model picks by number from those that verify (the offline
    writer's findings, the best answers first): the model decides what answers the question,
    every word is quoted from a source, so nothing in it can fail verification."""
    pool = selection_pool(payload, cites)
    if not pool:
        raise StructuredOutputError("reporter", f"section '{heading}': no finding verifies")
    statements = "\n".join(f"({i}) {f.quoted()}" for i, f in enumerate(pool, 1))
    ask = render(
        "reporter_select",
        heading=heading,
        statements=spotlight(statements, data_marker(ctx.partition_key)),
        limit=SELECT_LIMIT,
    )
    picked = call_structured(
        ctx,
        "reporter",
        [*head, {"role": "user", "content": ask}],
        {**payload, "phase": "select", "section": heading},
        SELECTION,
        artifact="report.md",
    ).ids
    chosen = [pool[i - 1] for i in picked if i <= len(pool)][:SELECT_LIMIT]
    if not chosen:
        raise StructuredOutputError("reporter", f"section '{heading}': no statement number from 1 to {len(pool)}")
    return " ".join(f.quoted(close=True) for f in chosen)


def write_report(
    ctx: ResearchContext, plan: ResearchPlan, bundle: SummaryBundle, outputs: ToolOutputs, draft: int = 1
) -> Report:
    raws = _raw_texts(ctx, outputs)
    entries = number_sources(bundle, raws)
    sourced = [e for e in entries if e["source"]]
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
        "preceding": preceding_sentences(sourced, raws),
        # Sources the critique finds stale figures in (roles/revision.py).
        "stale_sources": sorted(
            {e["n"] for e in sourced for s in scores if s.source == e["source"] and s.currency != "current"}
        ),
    }
    raw = raws if ctx.settings.context_mode == "raw" else None
    # The stable prefix of every reporter call (system prompt, question, plan); each call adds
    # its own share of the working memory after it.
    head: list[dict[str, Any]] = [
        {"role": "system", "content": render("reporter", today=ctx.today, data_marker=data_marker(ctx.partition_key))},
        {"role": "user", "content": f"Question: {ctx.question}\n\n{plan_brief(plan, outputs.followup_steps)}"},
    ]
    entries_by_n: dict[int, list[dict[str, Any]]] = {}
    for e in entries:
        entries_by_n.setdefault(e["n"], []).append(e)
    rewriter = _rewriter(ctx, head, payload, entries_by_n, raw)
    # What the sections' own mending did (counted with the whole report's mending below).
    early = CitedSentences(markdown="")
    # The select report style (a small model picks, never writes): read once, for the sections and the revision.
    selects = not outputs.direct_answer and report_style(ctx) == "select"
    if outputs.direct_answer:
        try:
            body = call_structured(
                ctx,
                "reporter",
                [
                    *head,
                    _working_memory(ctx, _memory_text(entries, raw)),
                    {"role": "user", "content": render("reporter_direct")},
                ],
                {**payload, "phase": "direct"},
                SECTION,
                artifact="report.md",
            ).markdown
            model, reporter_fallbacks = ctx.engine.model_for("reporter"), 0
        except MODEL_FAILURES as exc:
            ctx.log(f"direct answer fell back: {exc}")
            record_fallback(ctx, "reporter", "report.md", exc)
            body, model, reporter_fallbacks = DIRECT_ANSWER, FALLBACK_MODEL, 1
        body = (
            f"## Answer\n\n{body.strip()}\n\n## Limitations\n\n"
            "- Answered without tool calls: no sources were consulted."
        )
    else:
        # The lookup decides from the summaries alone (no extraction bullets) what to check.
        lookups = artifact_lookups(
            ctx, plan, [*head, _working_memory(ctx, _memory_text(entries, raw, compact=True))], payload
        )

        def cites(section: str) -> bool:
            return any(c.verified for c in verify_citations(one_number_each(section), entries_by_n, raws)[1])

        def settle(heading: str, section: str) -> str | None:
            if heading.lower() not in MUST_CITE:
                return section if cites(section) else None
            text, checks = verify_citations(one_number_each(f"## {heading}\n\n{section}\n"), entries_by_n, raws)
            part = cite_every_sentence(text, checks, entries_by_n, raws, rewriter, MAX_REWRITES - early.rewrites_asked)
            if EMPTY_NOTICE in part.markdown or not any(c.verified for c in [*checks, *part.checks]):
                return None
            early.fixes += part.fixes
            early.rewrites_asked += part.rewrites_asked
            early.checks += [c for c in checks if not c.verified]  # counted as removed below
            return _strip_heading(part.markdown, heading)

        body, model, reporter_fallbacks = _sections(
            ctx, head, payload, cites, settle, entries=entries, raw=raw, lookups=lookups, selects=selects
        )
    fallbacks = fallback_counts(ctx, bundle, outputs, reporter_fallbacks)
    body = without_address(body)  # an instruction a model read and repeated is never in a section
    body = insert_notes(body, pipeline_notes(outputs, bundle, warnings, fallbacks))
    body, checks = verify_citations(one_number_each(body), entries_by_n, raws)
    # Every sentence of the executive summary and key findings cites what verifies, or goes.
    cited = cite_every_sentence(body, checks, entries_by_n, raws, rewriter, MAX_REWRITES - early.rewrites_asked)
    cited.fixes = [*early.fixes, *cited.fixes]
    body, checks = cited.markdown, [*early.checks, *checks, *cited.checks]
    body = reconcile_corroboration(body)  # "two or more sources" counts verified citations only
    # A second reading: the critique, and the sections it names revised (roles/revision.py).
    evidence = Evidence(
        entries=entries,
        verify=lambda text: verify_citations(one_number_each(text), entries_by_n, raws),
        memory=lambda sources: _working_memory(ctx, _memory_text(sources, raw)),
        model_revises=not selects,
    )
    revised = revise_report(ctx, body, checks, payload, evidence, head, draft)
    body, checks = revised.markdown, revised.checks
    unverified = [c for c in checks if not c.verified]
    if unverified:
        body = insert_notes(
            body, [f"{len(unverified)} citation(s) could not be verified against the stored sources and were removed."]
        )
    if cited.fixes:
        note = _fixes_note(cited)
        warnings.append(note)
        body = insert_notes(body, [note])
    citations = _citations(checks, entries_by_n, raws)
    references = ["", "## References", ""]
    # A list item each (a Markdown viewer would join plain lines into one paragraph), every name
    # escaped for Markdown; the artifact's short name here, its full name in report.json.
    references += [reference_line(c) for c in citations]
    header = f"# {plan.plan_title}\n\n**Question:** {ctx.question}\n\n"
    markdown = header + body.strip() + "\n" + "\n".join(references) + "\n"
    ctx.lineage.replace_rows(
        "source_scores",
        ctx.partition_key,
        ["source", "domain", "credibility", "recency", "corroboration", "score", "published"],
        [[s.source, s.domain, s.credibility, s.recency, s.corroboration, s.score, s.published] for s in scores],
    )
    record_citations(ctx, citations)
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
        rewritten=[f.model_dump(exclude={"reason"}) for f in cited.rewritten],
        uncited_dropped=[f.model_dump(exclude={"text"}) for f in cited.dropped],
        critique=revised.summary(),
        skipped_documents=outputs.skipped_documents,
    )


def record_citations(ctx: ResearchContext, citations: list[Citation]) -> None:
    ctx.lineage.replace_rows(
        "citations",
        ctx.partition_key,
        ["n", "source", "artifact_file", "quote", "verified"],
        [[c.n, c.source, c.artifact_file, c.quote, c.verified] for c in citations],
    )


def one_number_each(markdown: str) -> str:
    """``[1, 3]`` written as ``[1][3]``: the verifier checks each number of a ``[n]`` marker."""
    return _CITED_LIST.sub(lambda m: "".join(f"[{n}]" for n in re.findall(r"\d+", m.group(1))), markdown)


def _rewriter(
    ctx: ResearchContext,
    head: list[dict[str, Any]],
    payload: dict[str, Any],
    entries_by_n: dict[int, list[dict[str, Any]]],
    raw: dict[str, str] | None,
) -> Callable[[str, str, int], str | None]:
    """The one model call that rewrites a sentence from its source: the stable prefix, that
    source's summary and extraction only (its raw output in context_mode=raw), the sentence."""

    def rewrite(section: str, sentence: str, n: int) -> str | None:
        source = entries_by_n[n]
        ask = render("reporter_rewrite", section=section, sentence=sentence, n=n)
        try:
            return call_structured(
                ctx,
                "reporter",
                [*head, _working_memory(ctx, _memory_text(source, raw)), {"role": "user", "content": ask}],
                {**payload, "phase": "rewrite", "section": section, "sentence": sentence, "source": source},
                SECTION,
                artifact="report.md",
            ).markdown
        except MODEL_FAILURES as exc:
            if isinstance(exc, CredentialsError):
                raise
            ctx.log(f"sentence not rewritten (dropped): {exc}")
            return None

    return rewrite


def _fixes_note(cited: CitedSentences) -> str:
    by = {kind: sum(1 for f in cited.fixes if f.by == kind) for kind in ("citation", "model", "dropped")}
    done = [
        f"{by['citation']} cited from the source that states it" if by["citation"] else "",
        f"{by['model']} rewritten from its source" if by["model"] else "",
        f"{by['dropped']} dropped" if by["dropped"] else "",
    ]
    return (
        f"{len(cited.fixes)} sentence(s) of the executive summary and key findings had no citation that "
        f"verified: {', '.join(d for d in done if d)} (report.json: rewritten, uncited_dropped)."
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


def _citations(
    checks: list[Any], entries_by_n: dict[int, list[dict[str, Any]]], raws: dict[str, str]
) -> list[Citation]:
    """One reference per cited source that kept at least one verified citation; a local
    document's reference names the section and page its first verified quote stands in."""
    out: dict[int, Citation] = {}
    for c in checks:
        if not c.verified or c.n in out:
            continue
        e = entries_by_n[c.n][0]
        source = e["source"] or e["artifact_file"]
        web = source.startswith(("http://", "https://"))
        title = (e["source_title"] or "").split(" — ")[0].removesuffix(" (superseded)") or None
        location = None if web else locate(raws.get(c.artifact_file or e["artifact_file"], ""), c.quote, title)
        out[c.n] = Citation(
            n=c.n,
            source=source,
            source_title=e["source_title"],
            artifact_file=c.artifact_file or e["artifact_file"],
            summary_title=e["summary_title"],
            quote=c.quote,
            verified=True,
            location=location,
        )
    return [out[n] for n in sorted(out)]
