"""Research team: executes plan steps in order with tools, offloading and compressing each result.

Per tool call, in this order: run the tool → write the whole raw output atomically → record
the call in DuckDB → compress → inject one assistant message if useful (seed 000 §4–§6).
The model's own tool-call request is transient: only compressed knowledge stays in context.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from .artifact_store import ArtifactReader
from .compressor import StepContext, compress
from .context import ResearchContext
from .engines.base import ToolCallRequest
from .models import PlanStep, ResearchPlan, SummaryRecord, ToolCallRecord, ToolOutputs
from .naming import artifact_filename, plan_folder, slugify
from .prompts import render
from .structured import complete_recorded, record_completion
from .text import estimate_tokens
from .tool_cache import ToolCache
from .tools import Toolbox, ToolError, ToolResult
from .tools.artifact_tools import artifact_tools
from .tools.local_search import corpus_tools, open_corpus
from .tools.web_tools import fetch_tool, search_tool
from .web.fetch import FetchPolicy
from .web.search import FallbackSearch, providers_from_env

# Tools that read one source, with the argument naming it (for "already read" bookkeeping).
READ_TOOLS = {"read_document": "path", "fetch_url": "url"}


def build_toolbox(ctx: ResearchContext, plan_title: str) -> Toolbox:
    """Corpus and artifact tools always; web tools when a search provider is configured."""
    settings = ctx.settings
    tools = corpus_tools(open_corpus(str(settings.corpus_path)))
    providers = providers_from_env()
    if providers:
        tools.append(search_tool(FallbackSearch(providers)))
    if providers or settings.enable_fetch:
        policy = FetchPolicy(
            allow_loopback=settings.fetch_allow_loopback,
            allow_private=settings.fetch_allow_private,
            respect_robots=settings.fetch_respect_robots,
        )
        tools.append(fetch_tool(policy))
    return Toolbox(tools + artifact_tools(ArtifactReader(ctx.store.raw_dir(plan_title))))


def conversation_file(step_id: str) -> str:
    return f"conversations/step_{slugify(step_id, 16)}.json"


def run_tool(
    ctx: ResearchContext,
    plan: ResearchPlan,
    step: PlanStep,
    toolbox: Toolbox,
    request: ToolCallRequest,
    seq: int,
    ordinal: int,
) -> tuple[ToolCallRecord, str, str]:
    started = time.perf_counter()
    tool = toolbox.tools.get(request.name)
    cache = ToolCache(ctx.lineage, ctx.settings.artifacts_path, ctx.settings.tool_cache_ttl_s)
    cached = cache.get(request.name, request.arguments) if tool and tool.cacheable else None
    status, error = "ok", None
    if cached is not None:
        result = cached
    else:
        try:
            result = toolbox.call(request.name, request.arguments)
        except ToolError as exc:
            result = ToolResult(content={"error": str(exc), "tool": request.name}, kind="json")
            status, error = "error", str(exc)
    latency_ms = round((time.perf_counter() - started) * 1000, 3)
    filename = artifact_filename(plan.plan_title, step.step_id, step.title, request.name, result.ext, ordinal)
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
        latency_ms=latency_ms,
        source=result.source,
        source_title=result.source_title,
        status=status,
        error=error,
        cached=cached is not None,
    )
    ctx.lineage.record_tool_call(ctx.partition_key, ctx.run_id, record)
    if tool and tool.cacheable and status == "ok" and cached is None:
        cache.put(record, result)
    return record, stored.text, result.kind


def execute_plan(ctx: ResearchContext, plan: ResearchPlan) -> ToolOutputs:
    ctx.lineage.clear_research_calls(ctx.partition_key)
    toolbox = build_toolbox(ctx, plan.plan_title)
    settings = ctx.settings
    calls: list[ToolCallRecord] = []
    summaries: list[SummaryRecord] = []
    conversations: dict[str, list[dict[str, str]]] = {}
    already_read: list[str] = []

    for index, step in enumerate(plan.steps, start=1):
        ctx.log(f"step {index}/{len(plan.steps)}: {step.title}")
        messages: list[dict[str, str]] = [
            {"role": "system", "content": render("researcher", today=ctx.today)},
            {
                "role": "user",
                "content": render(
                    "researcher_step",
                    plan_title=plan.plan_title,
                    step_id=step.step_id,
                    step_title=step.title,
                    step_description=step.description,
                    already_read=", ".join(already_read) or "none",
                    max_calls=settings.max_tool_calls_per_step,
                ),
            },
        ]
        step_calls: list[dict[str, Any]] = []
        memory: list[dict[str, Any]] = []
        ordinals: Counter[str] = Counter()
        while len(step_calls) < settings.max_tool_calls_per_step:
            payload = {
                "step": step.model_dump(),
                "memory": memory,
                "calls": step_calls,
                "already_read": already_read,
                "max_calls": settings.max_tool_calls_per_step,
                "docs_per_step": settings.docs_per_step,
                "tools": sorted(toolbox.tools),
            }
            completion = complete_recorded(
                ctx,
                "researcher",
                messages,
                payload,
                tools=toolbox.definitions(),
                artifact=conversation_file(step.step_id),
            )
            record_completion(ctx, "researcher", completion, 1, "ok", conversation_file(step.step_id))
            if not completion.tool_calls:
                break
            for request in completion.tool_calls[: settings.max_tool_calls_per_step - len(step_calls)]:
                ordinals[request.name] += 1
                seq = len(step_calls) + 1
                with ctx.lineage.session():
                    record, raw_text, kind = run_tool(ctx, plan, step, toolbox, request, seq, ordinals[request.name])
                    summary = compress(
                        ctx,
                        StepContext(plan.plan_title, step.title, step.description, request.name),
                        record,
                        raw_text,
                        kind,
                    )
                    ctx.lineage.record_tool_summary(ctx.partition_key, summary)
                step_calls.append({"tool": request.name, "arguments": request.arguments})
                calls.append(record)
                summaries.append(summary)
                injected = summary.injected
                verdict = "not useful"
                if summary.raw_context:
                    messages.append({"role": "assistant", "content": raw_text})
                    memory.append(injected.model_dump() if injected else {"extraction": []})
                    verdict = f"raw context, {summary.injected_tokens} tokens injected"
                elif injected is not None:
                    messages.append(injected.to_message())
                    memory.append(injected.model_dump())
                    verdict = f"useful, {summary.injected_tokens} tokens injected"
                if request.name in READ_TOOLS and record.status == "ok":
                    already_read.append(str(request.arguments.get(READ_TOOLS[request.name])))
                ctx.log(f"  {request.name} → {record.artifact_file} ({record.raw_tokens} raw tokens, {verdict})")
        conversations[step.step_id] = messages
        ctx.store.write_json(conversation_file(step.step_id), messages)
        ctx.lineage.record_context(ctx.partition_key, step.step_id, messages)

    return ToolOutputs(
        partition_key=ctx.partition_key,
        plan_folder=plan_folder(plan.plan_title),
        calls=calls,
        summaries=summaries,
        conversations=conversations,
    )
