"""Research team: executes plan steps in order with tools, offloading and compressing each result.

Per tool call, in this order: run the tool → write the whole raw output atomically → record
the call in DuckDB → compress → inject one assistant message if useful (seed 000 §4–§6).
The model's own tool-call request is transient: only compressed knowledge stays in context.

A step: ``breadth`` query variants searched concurrently → results merged, deduplicated and
ranked → the top ``max_sources_per_step`` read (concurrently) → the researcher model may add
calls up to the step's cap. After the pass, the critic decides on follow-up rounds.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from ..context import ResearchContext, fetch_policy, logger
from ..documents import embeddings
from ..errors import MODEL_FAILURES
from ..eta import Eta
from ..heuristics.compression import FACT_SHEET_TOKENS
from ..llm.budget import BudgetExceeded
from ..llm.engine import ToolCallRequest
from ..llm.prompts import render
from ..llm.structured import complete_recorded, record_completion, record_fallback
from ..models import PlanStep, ResearchPlan, SummaryRecord, ToolCallRecord, ToolOutputs
from ..naming import artifact_filename, plan_folder, printable_name, slugify
from ..store.artifacts import CORPUS_CACHE
from ..store.tool_cache import ToolCache
from ..text import estimate_tokens
from ..tools import Toolbox, ToolResult
from ..tools.artifact_tools import artifact_tools
from ..tools.external import load_external_tools
from ..tools.local_search import corpus_tools, open_corpus
from ..tools.web_tools import fetch_tool, search_tool
from ..untrusted import data_marker, set_aside, spotlight, suspected_sources
from ..web.search import FallbackSearch, providers_from_settings
from .compressor import StepContext, compress
from .critic import CriticRound, chain_advancing, critique, followup_steps
from .provenance import Provenance
from .retrieval import close_ranked, rank_results, run_concurrently

# Tools that read one source, with the argument naming it (for "already read" bookkeeping).
READ_TOOLS = {"read_document": "path", "fetch_url": "url"}
SEARCH_RESULTS = 5  # results per search
CHAIN_ROUNDS = 2  # reflection rounds beyond --depth while a chain of hops advances
MAX_RESULTS = {"web_search": 10, "local_search": 20}  # the tools' own bounds
SEARCH_TOOLS = {"web_search": ("fetch_url", "url", "max_results"), "local_search": ("read_document", "path", "k")}


def build_toolbox(ctx: ResearchContext, plan_title: str) -> Toolbox:
    """Corpus and artifact tools always; web tools when a search provider is configured; plugin
    and MCP tools when installed or configured (open until :meth:`Toolbox.close`)."""
    settings = ctx.settings
    # Extracted text is cached by file sha256 under the artifact root: a folder is indexed once.
    corpus = document_folder(settings)
    if settings.semantic_search and not corpus.semantic_ready:
        ctx.log(f"local_search lists by words alone: {embeddings.encoder_problem()}")
    tools = corpus_tools(corpus)
    providers = providers_from_settings(settings.search)
    if providers:
        tools.append(search_tool(FallbackSearch(providers)))
    if providers or settings.enable_fetch:
        tools.append(fetch_tool(fetch_policy(settings)))
    tools += artifact_tools(ctx.store.raw_reader(plan_title))
    external = load_external_tools(settings, {t.name for t in tools})
    for problem in external.problems:
        ctx.log(problem)
    return Toolbox(tools + external.tools, close=external.close, problems=external.problems, term_weight=corpus.idf)


def document_folder(settings: Any) -> Any:
    """The configured document folder, indexed (once per process while it is unchanged)."""
    cache = str(settings.artifacts_path / CORPUS_CACHE)
    return open_corpus(
        str(settings.corpus_path), cache, deadline_s=settings.extract_deadline_s, semantic=settings.semantic_search
    )


def skipped_documents(ctx: ResearchContext) -> list[list[str]]:
    """Files of the document folder that could not be indexed, each with its reason; logged in
    one progress line (count and the first names), since a skipped file is a hole in the sources."""
    skipped = [[path, reason] for path, reason in document_folder(ctx.settings).skipped]
    if skipped:
        shown = "; ".join(f"{printable_name(path)} ({reason})" for path, reason in skipped[:3])
        more = f"; and {len(skipped) - 3} more (report.json)" if len(skipped) > 3 else ""
        ctx.log(f"documents: {len(skipped)} file(s) skipped: {shown}{more}")
    return skipped


def conversation_file(step_id: str) -> str:
    return f"conversations/step_{slugify(step_id, 16)}.json"


@dataclass
class ResearchState:
    calls: list[ToolCallRecord] = field(default_factory=list)
    summaries: list[SummaryRecord] = field(default_factory=list)
    conversations: dict[str, list[dict[str, str]]] = field(default_factory=dict)
    already_read: list[str] = field(default_factory=list)  # whole documents / pages that answered a step
    read_ranges: set[tuple[str, int, int]] = field(default_factory=set)  # passage reads that answered one
    # Documents read whole that were too long to be kept as a fact sheet: their other facts were
    # compressed away for that step, so a later step may read their passages again.
    long_reads: set[str] = field(default_factory=set)
    memory: list[dict[str, Any]] = field(default_factory=list)  # injected summaries + step/source
    provenance: Provenance = field(default_factory=Provenance)  # URLs the team may fetch

    @property
    def sources(self) -> set[str]:
        return {c.source for c in self.calls if c.source and c.status == "ok"}


@dataclass
class StepRun:
    """One step's conversation and call bookkeeping."""

    step: PlanStep
    messages: list[dict[str, str]]
    ordinals: Counter[str] = field(default_factory=Counter)
    calls: list[dict[str, Any]] = field(default_factory=list)
    memory: list[dict[str, Any]] = field(default_factory=list)


def _store_call(
    ctx: ResearchContext,
    plan: ResearchPlan,
    run: StepRun,
    request: ToolCallRequest,
    result: ToolResult,
    error: str | None,
    latency_ms: float,
    cached: bool,
    tainted: bool = False,
    cache: Callable[[ToolCallRecord], None] | None = None,
) -> tuple[ToolCallRecord, str]:
    """Write the raw output, then (``cache``) its tool-cache entry, then its ``tool_calls`` row:
    a call recorded as made is always in the cache, so a step killed right after re-makes none."""
    run.ordinals[request.name] += 1
    seq = len(run.calls) + 1
    step = run.step
    filename = artifact_filename(
        plan.plan_title, step.step_id, step.title, request.name, result.ext, run.ordinals[request.name]
    )
    stored = ctx.store.write_raw(plan.plan_title, filename, result.content)
    record = ToolCallRecord(
        call_id=f"{step.step_id}.{seq}",
        step_id=step.step_id,
        step_title=step.title,
        step_description=step.description,
        seq=seq,
        tool=request.name,
        arguments=request.arguments,
        artifact_file=stored.filename,
        artifact_path=stored.relpath,
        bytes=stored.bytes,
        sha256=stored.sha256,
        raw_tokens=estimate_tokens(stored.text),
        latency_ms=round(latency_ms, 3),
        source=result.source,
        source_title=result.source_title,
        status="error" if error else "ok",
        error=error,
        cached=cached,
        tainted=tainted,
        suspected_injection=[] if error else suspected_sources(stored.text, result.kind, result.source),
    )
    if cache is not None:
        cache(record)
    ctx.lineage.record_tool_call(ctx.partition_key, ctx.run_id, record)
    run.calls.append({"tool": request.name, "arguments": request.arguments})
    return record, stored.text


def run_calls(
    ctx: ResearchContext,
    plan: ResearchPlan,
    toolbox: Toolbox,
    run: StepRun,
    state: ResearchState,
    requests: list[ToolCallRequest],
    tainted: bool = False,
) -> list[tuple[ToolCallRecord, str]]:
    """Execute calls (uncached ones concurrently), then offload, record, compress and inject
    each in request order. A call without provenance is not executed: it is stored as a failed
    call with the reason. ``tainted``: the calls were proposed by a model that had read tool
    output. Raises BudgetExceeded after storing what was within the budget."""
    cache = ToolCache(ctx.lineage, ctx.settings.artifacts_path, ctx.settings.tool_cache_ttl_s, ctx.store.shared)
    ctx.check_interrupt()
    reservations, over_budget = [], None
    for _ in requests:
        try:
            reservations.append(ctx.budget.reserve(tool_calls=1))
        except BudgetExceeded as exc:
            over_budget = exc
            break
    requests = requests[: len(reservations)]
    refused = [state.provenance.refusal(r.name, r.arguments, toolbox.tools.get(r.name)) for r in requests]
    with ctx.lineage.session():  # one lookup for the fan-out's calls
        cached = cache.get_many(
            [
                (r.name, r.arguments, t.cache_scope)
                if (t := toolbox.tools.get(r.name)) and t.cacheable and not no
                else None
                for r, no in zip(requests, refused, strict=True)
            ]
        )
    pending = [r for r, c, no in zip(requests, cached, refused, strict=True) if c is None and not no]
    with ctx.lineage.waiting():  # the lineage file's housekeeping happens meanwhile
        executed = iter(run_concurrently(toolbox, pending, ctx.settings.fanout_concurrency))
    stored: list[tuple[ToolCallRecord, str]] = []
    for request, hit, reservation, refusal in zip(requests, cached, reservations, refused, strict=True):
        if refusal:
            result, error, latency = None, refusal, 0.0
            ctx.log(f"  {request.name} {refusal}")
        else:
            result, error, latency = (hit, None, 0.0) if hit is not None else next(executed)
        if result is None:
            result = ToolResult(content={"error": error, "tool": request.name}, kind="json")
        ctx.budget.settle(reservation, tool_calls=1)
        tool = toolbox.tools.get(request.name)
        put = None
        if tool and tool.cacheable and error is None and hit is None:
            put = partial(cache.put, result=result, scope=tool.cache_scope)
        # One short connection per call: other processes can write between calls.
        with ctx.lineage.session():
            record, raw_text = _store_call(
                ctx, plan, run, request, result, error, latency, hit is not None, tainted, put
            )
            if error is None:
                state.provenance.learn(request.name, result.content, result.links, result.source)
            summary = compress(
                ctx,
                StepContext(plan.plan_title, run.step.title, run.step.description, request.name),
                record,
                raw_text,
                result.kind,
            )
            # A source suspected now or earlier leaves working memory, also where it entered before.
            set_aside([*state.summaries, summary])
            if summary.suspects:
                flagged = {s.artifact_file for s in state.summaries if s.suspected_injection}
                for memory in (state.memory, run.memory):
                    memory[:] = [m for m in memory if m["artifact_file"] not in flagged]
            ctx.lineage.record_tool_summary(ctx.partition_key, summary)
        _absorb(ctx, run, state, request, record, raw_text, summary)
        stored.append((record, raw_text))
    if over_budget is not None:
        raise over_budget
    return stored


def _absorb(
    ctx: ResearchContext,
    run: StepRun,
    state: ResearchState,
    request: ToolCallRequest,
    record: ToolCallRecord,
    raw_text: str,
    summary: SummaryRecord,
) -> None:
    state.calls.append(record)
    state.summaries.append(summary)
    injected = summary.injected
    verdict = "set aside: suspected prompt injection" if summary.suspected_injection else "not useful"
    if summary.raw_context and not summary.suspected_injection:
        run.messages.append({"role": "assistant", "content": spotlight(raw_text, data_marker(ctx.partition_key))})
        verdict = f"raw context, {summary.injected_tokens:,} tokens injected"
    elif injected is not None:
        run.messages.append(injected.to_message())
        verdict = f"useful, {summary.injected_tokens:,} tokens injected"
    if injected is not None:
        run.memory.append(injected.model_dump())
        state.memory.append({**injected.model_dump(), "step_id": record.step_id, "source": record.source})
    if request.name in READ_TOOLS and record.status == "ok" and (injected is not None or summary.raw_context):
        # Only a read that answered its step counts as read: a risk register that said nothing
        # about operations stays a candidate for the risks step. A passage read leaves the rest
        # of its document to later steps.
        target = str(request.arguments.get(READ_TOOLS[request.name]))
        start, end = request.arguments.get("start"), request.arguments.get("end")
        if isinstance(start, int) and isinstance(end, int):
            state.read_ranges.add((target, start, end))
        else:
            state.already_read.append(target)
            if record.raw_tokens > FACT_SHEET_TOKENS:
                state.long_reads.add(target)
    # One short line per call (step.call, tool, tokens, verdict); the full artifact name is a
    # debug line (`deepresearch run --verbose`; the UI's table and the audit have it too).
    ctx.log(f"  {record.call_id} {request.name}: {record.raw_tokens:,} raw tokens → {verdict}")
    logger.debug(f"      {record.artifact_path}")


def _search_requests(step: PlanStep, toolbox: Toolbox, breadth: int, cap: int) -> list[ToolCallRequest]:
    name = "web_search" if "web_search" in toolbox.tools else "local_search"
    size_arg = SEARCH_TOOLS[name][2]
    queries = list(dict.fromkeys(step.queries))[: min(breadth, cap)] or [f"{step.title} {step.description}"[:300]]
    # A step of one query (a follow-up) sees as many results as a step of three.
    size = SEARCH_RESULTS if len(queries) > 1 else min(MAX_RESULTS[name], 3 * SEARCH_RESULTS)
    return [ToolCallRequest(name, {"query": q, size_arg: size}) for q in queries]


def ranking_terms(
    plan: ResearchPlan, step: PlanStep, term_weight: Callable[[str], float] | None
) -> tuple[str, Callable[[str], float] | None]:
    """What a step's results are ranked against, and how its terms count: a planned step's title,
    description and queries, alike; a follow-up's queries alone, each term by its rarity in the
    corpus (``term_weight``). A follow-up's title repeats the whole question, whose other hops'
    words would rank the answer's page above the page of the bridge its query names."""
    if step in plan.steps:
        return " ".join([step.title, step.description, *step.queries]), None
    return " ".join(step.queries), term_weight


def _passage_reads(
    listings: list[str],
    ranked: list[Any],
    taken: set[str],
    n: int,
    done: set[tuple[str, int, int]] = frozenset(),
    again: set[str] = frozenset(),
) -> list[ToolCallRequest]:
    """``read_document {path, start, end}`` for the best current passage of the next ``n`` ranked
    documents that a passage listing names (none when the listings are not passage-level), except
    a passage range an earlier step read already (``done``), and at most one passage of the
    documents an earlier step read whole (``again``)."""
    if n <= 0:
        return []
    best: dict[str, tuple[float, int, int]] = {}
    for raw in listings:
        try:
            data = json.loads(raw)
        except json.JSONDecodeError:
            continue
        results = data.get("results", []) if isinstance(data, dict) else []
        for r in results if isinstance(results, list) else []:
            if not isinstance(r, dict) or not isinstance(r.get("passage"), int) or not r.get("path"):
                continue
            if r.get("status") == "superseded":
                continue  # its figures are out of date; the search ranks the current one higher
            score = float(r["score"]) if isinstance(r.get("score"), (int, float)) else 0.0
            path, total = str(r["path"]), r.get("passages")
            # The passage and the next one: a table or list often runs on into it.
            end = min(r["passage"] + 1, total) if isinstance(total, int) else r["passage"]
            if path not in best or score > best[path][0]:
                best[path] = (score, r["passage"], end)
    out = []
    for r in ranked:
        if len(out) >= n:
            break
        if r.source in taken or r.source not in best or (r.source, *best[r.source][1:]) in done:
            continue
        if r.source in again and any(str(o.arguments["path"]) in again for o in out):
            continue
        _, start, end = best[r.source]
        out.append(ToolCallRequest("read_document", {"path": r.source, "start": start, "end": end}))
    return out


def execute_step(
    ctx: ResearchContext, plan: ResearchPlan, step: PlanStep, toolbox: Toolbox, state: ResearchState
) -> None:
    settings = ctx.settings
    reduced = ctx.budget.reduce_scope  # at 90 % of any cap: one query, one source
    breadth = 1 if reduced else settings.breadth
    top_k = 1 if reduced else settings.max_sources_per_step
    cap = settings.max_tool_calls_per_step
    run = StepRun(
        step,
        [
            {
                "role": "system",
                "content": render("researcher", today=ctx.today, data_marker=data_marker(ctx.partition_key)),
            },
            {
                "role": "user",
                "content": render(
                    "researcher_step",
                    plan_title=plan.plan_title,
                    step_id=step.step_id,
                    step_title=step.title,
                    step_description=step.description,
                    already_read=", ".join(state.already_read) or "none",
                    max_calls=cap,
                ),
            },
        ],
    )
    try:
        searches = run_calls(ctx, plan, toolbox, run, state, _search_requests(step, toolbox, breadth, cap))
        listings = [raw for record, raw in searches if record.status == "ok"]
        read_tool, arg = SEARCH_TOOLS[searches[0][0].tool][:2] if searches else ("read_document", "path")
        # The corpus's term weights rank the corpus's own listings (no listing: nothing to rank).
        corpus = read_tool == "read_document"
        text, weight = ranking_terms(plan, step, toolbox.term_weight if corpus else None)
        ranked = rank_results(listings, text, exclude=set(state.already_read), weight=weight)
        # The top K, and the next results while they rank close to the K-th: a listing whose
        # snippets score alike does not say which of them answers.
        close = close_ranked(ranked, top_k, set(state.already_read)) if not reduced else top_k
        room = max(0, cap - len(run.calls))
        n = min(top_k, room) + max(0, min(close - top_k, room - top_k - 1))  # one call left for the researcher
        reads = [ToolCallRequest(read_tool, {arg: r.source}) for r in ranked[:n]]
        if read_tool == "read_document" and not reduced:
            # Passage listings: the best passage of each of the next documents is cheap to read
            # (one section, not a file), so as many more documents are read, one passage each.
            # A long document an earlier step read whole was compressed for that step: its passage
            # that answers this one is read again (one annual report holds the funding, the members
            # and the board), ranked with the rest rather than after them.
            taken = {str(r.arguments[arg]) for r in reads} | (set(state.already_read) - state.long_reads)
            room = max(0, cap - len(run.calls) - len(reads) - 1)  # one call left for the researcher
            reads += _passage_reads(listings, ranked, taken, min(top_k, room), state.read_ranges, state.long_reads)
        run_calls(ctx, plan, toolbox, run, state, reads)
        _researcher_phase(ctx, plan, toolbox, run, state)
    finally:
        state.conversations[step.step_id] = run.messages
        ctx.store.write_json(conversation_file(step.step_id), run.messages)
        ctx.lineage.record_context(ctx.partition_key, step.step_id, run.messages)


def _earlier_outcomes(state: ResearchState, step_id: str) -> dict[str, str]:
    """Per tool called in earlier steps of this research: "useful" if a call of it was, else
    "failed" if one failed, else "not useful" (the offline researcher tries other tools first)."""
    useful = {s.call_id for s in state.summaries if s.result.is_useful}
    rank = {"useful": 2, "failed": 1, "not useful": 0}
    out: dict[str, str] = {}
    for c in state.calls:
        if c.step_id != step_id:
            outcome = "useful" if c.call_id in useful else "failed" if c.status != "ok" else "not useful"
            if rank[outcome] >= rank.get(out.get(c.tool, "not useful"), 0):
                out[c.tool] = outcome
    return out


def _researcher_phase(
    ctx: ResearchContext, plan: ResearchPlan, toolbox: Toolbox, run: StepRun, state: ResearchState
) -> None:
    """The researcher model may add calls (deeper reads, artifact grep) up to the step's cap."""
    cap = ctx.settings.max_tool_calls_per_step
    while len(run.calls) < cap:
        payload = {
            "step": run.step.model_dump(),
            "memory": run.memory,
            "calls": run.calls,
            "already_read": state.already_read,
            "max_calls": cap,
            "tools": sorted(toolbox.tools),
        }
        outside = [t.function_definition()["function"] for t in toolbox.tools.values() if t.origin != "builtin"]
        if outside:  # the offline engine picks among them by their descriptions
            payload["external_tools"] = [{**d, "name": toolbox.canonical(d["name"])} for d in outside]
            payload["earlier_outcomes"] = _earlier_outcomes(state, run.step.step_id)
        try:
            completion = complete_recorded(
                ctx,
                "researcher",
                run.messages,
                payload,
                tools=toolbox.definitions(),
                artifact=conversation_file(run.step.step_id),
            )
        except BudgetExceeded:
            raise  # stops the research (the report is written from what exists)
        except MODEL_FAILURES as exc:
            # The model's calls are optional: the searches and reads above stand on their own.
            ctx.log(f"researcher model skipped for step {run.step.step_id}: {exc}")
            record_fallback(ctx, "researcher", conversation_file(run.step.step_id), exc)
            return
        record_completion(ctx, "researcher", completion, 1, "ok", conversation_file(run.step.step_id))
        # A call this step already made is not made again: its output is on disk, and a refused
        # call that left the conversation unchanged would otherwise be asked for (and replayed
        # from the answer cache) until the cap.
        made = [(c["tool"], c["arguments"]) for c in run.calls]
        asked = [ToolCallRequest(toolbox.canonical(c.name), c.arguments) for c in completion.tool_calls]
        new = [c for c in asked if (c.name, c.arguments) not in made]
        if not new:
            return
        # Past the step's opening prompt, the conversation holds what tools returned: untrusted.
        run_calls(ctx, plan, toolbox, run, state, new[: cap - len(run.calls)], tainted=len(run.messages) > 2)


def execute_plan(ctx: ResearchContext, plan: ResearchPlan) -> ToolOutputs:
    """All plan steps, then critic rounds with follow-up steps (kept in the outputs: the plan is
    never changed)."""
    ctx.lineage.clear_research_calls(ctx.partition_key)
    toolbox = build_toolbox(ctx, plan.plan_title)
    try:
        return _execute_plan(ctx, plan, toolbox)
    finally:
        toolbox.close()  # MCP server processes end with the research


def _execute_plan(ctx: ResearchContext, plan: ResearchPlan, toolbox: Toolbox) -> ToolOutputs:
    skipped = skipped_documents(ctx)
    state = ResearchState(provenance=Provenance.of_question(ctx.question))
    rounds: list[CriticRound] = []
    followups: list[PlanStep] = []
    stop_reason, complete = "complete", True
    settings = ctx.settings
    if plan.direct_answer and settings.depth == 0:
        ctx.log("the planner judged the question directly answerable and depth is 0: no tool calls")
        stop_reason = "direct_answer"
    else:
        # The parts whose time the progress lines extrapolate: every step, then the report.
        eta = Eta(total=len(plan.steps) + 1)
        try:
            for index, step in enumerate(plan.steps, start=1):
                ctx.check_interrupt()
                ctx.log(f"step {index}/{len(plan.steps)}: {step.title}{eta.note()}")
                execute_step(ctx, plan, step, toolbox, state)
                eta.done += 1
            stop_reason, complete = _reflect(ctx, plan, toolbox, state, rounds, followups, eta)
        except BudgetExceeded as exc:
            ctx.log(f"budget exhausted: {exc}; the report is written from what exists")
            stop_reason, complete = f"budget: {exc}", False
    ctx.lineage.record_critic_rounds(ctx.partition_key, [r.model_dump() for r in rounds])
    return ToolOutputs(
        partition_key=ctx.partition_key,
        plan_folder=plan_folder(plan.plan_title),
        calls=state.calls,
        summaries=state.summaries,
        conversations=state.conversations,
        followup_steps=followups,
        critic_rounds=[r.model_dump() for r in rounds],
        stop_reason=stop_reason,
        complete=complete,
        direct_answer=stop_reason == "direct_answer",
        skipped_documents=skipped,
        outside_tools=[[t.name, t.origin, t.description] for t in toolbox.tools.values() if t.origin != "builtin"],
        tool_problems=toolbox.problems,
    )


def _reflect(
    ctx: ResearchContext,
    plan: ResearchPlan,
    toolbox: Toolbox,
    state: ResearchState,
    rounds: list[CriticRound],
    followups: list[PlanStep],
    eta: Eta,
) -> tuple[str, bool]:
    """Critic after each pass; follow-ups while insufficient and within depth and budget."""
    settings = ctx.settings
    if settings.depth == 0:
        return "depth 0: no reflection round", True
    asked = {q.lower() for s in plan.steps for q in s.queries}
    added = 0  # where the last follow-up round's sources begin in memory
    # Rounds beyond the depth while a chain of hops advances: each round reached its next hop (a
    # question of four hops needs three rounds after the first pass), at most CHAIN_ROUNDS of them.
    for round_ in range(1, settings.depth + CHAIN_ROUNDS + 2):
        verdict, fallback = critique(ctx, plan, state.memory, followups)
        ctx.log(f"critic round {round_}: sufficiency {verdict.sufficiency}/10, {len(verdict.gaps)} gap(s)")

        def close(decision: str, fallback: bool = fallback, verdict: Any = verdict, round_: int = round_) -> None:
            rounds.append(CriticRound(round=round_, verdict=verdict, decision=decision, fallback=fallback))

        if verdict.sufficiency >= settings.sufficiency_threshold:
            close("sufficient")
            return "sufficient", True
        advancing = settings.depth < round_ <= settings.depth + CHAIN_ROUNDS
        chain = advancing and chain_advancing(verdict, ctx.question, state.memory[added:])
        if round_ > settings.depth and not chain:
            close("max_iterations")
            return f"max iterations ({settings.depth}) reached at sufficiency {verdict.sufficiency}/10", False
        if ctx.budget.reduce_scope:
            close("budget")
            return "budget at 90%: no further reflection round", False
        steps = followup_steps(round_, verdict, settings.max_followups_per_round, asked)
        if not steps:
            close("no_gaps")
            return f"critic scored {verdict.sufficiency}/10 but named no new query to run", False
        rounds.append(
            CriticRound(
                round=round_,
                verdict=verdict,
                decision="follow_up",
                fallback=fallback,
                followup_step_ids=[s.step_id for s in steps],
            )
        )
        followups.extend(steps)
        ctx.lineage.record_followup_steps(ctx.partition_key, steps, len(plan.steps) + len(followups) - len(steps))
        sources_before, added = set(state.sources), len(state.memory)
        eta.total += len(steps)
        for step in steps:
            ctx.log(f"follow-up {step.step_id}: {step.title}{eta.note()}")
            execute_step(ctx, plan, step, toolbox, state)
            eta.done += 1
        if state.sources <= sources_before:
            return f"follow-up round {round_} found no new sources", False
    return "complete", True
