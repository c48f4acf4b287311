"""The four partitioned research assets; each is a thin call into ``core.pipeline``."""

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetIn,
    AssetMaterialization,
    Backoff,
    DynamicOut,
    DynamicOutput,
    Failure,
    MetadataValue,
    OpExecutionContext,
    Out,
    Output,
    RetryPolicy,
    asset,
    graph_asset,
    op,
)
from dagster_duckdb import DuckDBResource

from ..core.context import ResearchContext, logger
from ..core.llm.engine import EngineError
from ..core.llm.structured import StructuredOutputError
from ..core.models import Report, ResearchPlan, SummaryBundle, SummaryRecord, ToolCallRecord, ToolOutputs
from ..core.naming import slugify
from ..core.pipeline import (
    ArtifactIntegrityError,
    UnknownResearch,
    compress_one,
    load_stage,
    open_context,
    plan_stage,
    report_stage,
    research_stage,
    summaries_bundle,
)
from ..core.roles.changes import add_what_changed
from ..core.store.artifacts import ArtifactReader
from .partitions import research_partitions
from .resources import ResearchConfig, lineage_store

GROUP = "research"
# Model and tool calls can fail transiently; a retried op re-uses every stored compression.
MODEL_RETRY = RetryPolicy(max_retries=2, delay=1.0, backoff=Backoff.EXPONENTIAL)
# Errors with a message meant for the user; only a model/engine error is worth retrying.
USER_FACING_ERRORS = (StructuredOutputError, EngineError, UnknownResearch, ArtifactIntegrityError, FileNotFoundError)


def _failure(stage: str, exc: Exception) -> Failure:
    return Failure(
        description=f"{stage} failed: {exc}",
        metadata={"error": str(exc)},
        allow_retries=isinstance(exc, EngineError) and exc.retryable,
    )


def _context(
    context: AssetExecutionContext | OpExecutionContext, research: ResearchConfig, duckdb: DuckDBResource
) -> ResearchContext:
    def log(message: str) -> None:
        context.log.info(message)
        logger.info(message)

    try:
        return open_context(
            context.partition_key, research.settings(duckdb.database), lineage_store(duckdb), context.run_id, log
        )
    except USER_FACING_ERRORS as exc:
        raise _failure(context.op_def.name, exc) from exc


@contextmanager
def _stage(ctx: ResearchContext, stage: str) -> Iterator[None]:
    """Record the stage in DuckDB; turn known errors into a clear Dagster failure."""
    ctx.lineage.run_started(ctx.run_id, ctx.partition_key, stage)
    try:
        yield
    except USER_FACING_ERRORS as exc:
        ctx.lineage.run_finished(ctx.run_id, stage, str(exc))
        raise _failure(stage, exc) from exc
    except Exception as exc:
        ctx.lineage.run_finished(ctx.run_id, stage, f"{type(exc).__name__}: {exc}")
        raise
    ctx.lineage.run_finished(ctx.run_id, stage)


def _reduction_metadata(ctx: ResearchContext) -> dict[str, Any]:
    figures = ctx.lineage.reduction(ctx.partition_key)
    return {
        "tool_calls": figures["tool_calls"],
        "useful": figures["useful"],
        "not_useful": figures["tool_calls"] - figures["useful"],
        "raw_tokens": figures["raw_tokens"],
        "injected_tokens": figures["injected_tokens"],
        "context_reduction_pct": MetadataValue.float(figures["context_reduction"] or 0.0),
        "llm_calls": figures["llm_calls"],
    }


@asset(
    partitions_def=research_partitions,
    io_manager_key="research_io_manager",
    group_name=GROUP,
    kinds={"python", "duckdb"},
    retry_policy=MODEL_RETRY,
    check_specs=[AssetCheckSpec("plan_is_valid", asset="research_plan")],
    description="The Planner's research plan for the partition's question.",
)
def research_plan(
    context: AssetExecutionContext, research: ResearchConfig, duckdb: DuckDBResource
) -> Iterator[Output[ResearchPlan] | AssetCheckResult]:
    ctx = _context(context, research, duckdb)
    with _stage(ctx, "research_plan"):
        plan = plan_stage(ctx)
    yield Output(
        plan,
        metadata={
            "plan": MetadataValue.md(plan.as_markdown()),
            "plan_title": plan.plan_title,
            "steps": len(plan.steps),
            "question": ctx.question,
            "engine": ctx.engine.name,
        },
    )
    # The stored plan.json (written by the IO manager as the output was yielded) must parse back
    # under the schema's rules and equal what the planner produced.
    try:
        stored = ResearchPlan.model_validate_json(ctx.store.read_text("plan.json"))
        error = None if stored == plan else "plan.json differs from the planner's plan"
    except (OSError, ValueError) as exc:
        error = str(exc)
    yield AssetCheckResult(
        check_name="plan_is_valid",
        passed=error is None and len(plan.steps) <= ctx.settings.max_steps,
        metadata={"steps": len(plan.steps), "error": error or ""},
    )


@asset(
    partitions_def=research_partitions,
    io_manager_key="research_io_manager",
    group_name=GROUP,
    kinds={"python", "duckdb"},
    retry_policy=MODEL_RETRY,
    check_specs=[
        AssetCheckSpec("raw_artifacts_match_lineage", asset="tool_outputs"),
        AssetCheckSpec("context_reduction_above_threshold", asset="tool_outputs"),
    ],
    description="Raw tool outputs of every research step, offloaded to the deterministic layout.",
)
def tool_outputs(
    context: AssetExecutionContext, research: ResearchConfig, duckdb: DuckDBResource, research_plan: ResearchPlan
) -> Iterator[Output[ToolOutputs] | AssetCheckResult]:
    ctx = _context(context, research, duckdb)
    with _stage(ctx, "tool_outputs"):
        outputs = research_stage(ctx, research_plan)
    if research_plan.followup_steps:
        # The critic extended the plan (plan.json was rewritten): show it on the plan asset too.
        context.log_event(
            AssetMaterialization(
                asset_key="research_plan",
                partition=context.partition_key,
                description="Plan extended with the critic's follow-up steps",
                metadata={
                    "plan": MetadataValue.md(research_plan.as_markdown()),
                    "steps": len(research_plan.all_steps),
                    "followup_steps": len(research_plan.followup_steps),
                },
            )
        )
    metadata = _reduction_metadata(ctx)
    metadata["critic"] = MetadataValue.json(outputs.critic_rounds)
    metadata["stop_reason"] = outputs.stop_reason
    metadata["complete"] = outputs.complete
    metadata["budget"] = MetadataValue.json(ctx.budget.snapshot())
    metadata["artifacts_dir"] = MetadataValue.path(str(ctx.store.raw_dir(research_plan.plan_title)))
    metadata["calls"] = MetadataValue.md(
        "| call | tool | artifact | raw tokens |\n|---|---|---|---|\n"
        + "\n".join(f"| {c.call_id} | {c.tool} | `{c.artifact_file}` | {c.raw_tokens} |" for c in outputs.calls)
    )
    yield Output(outputs, metadata=metadata)
    rows = ctx.lineage.query(
        "SELECT artifact_file, sha256 FROM tool_calls WHERE partition_key = ?", [ctx.partition_key]
    )
    recorded = {r["artifact_file"]: r["sha256"] for r in rows}
    on_disk = set(ArtifactReader(ctx.store.raw_dir(research_plan.plan_title)).files())
    matches = recorded == {c.artifact_file: c.sha256 for c in outputs.calls} and on_disk == set(recorded)
    yield AssetCheckResult(
        check_name="raw_artifacts_match_lineage",
        passed=matches,
        severity=AssetCheckSeverity.ERROR,
        metadata={"rows": len(recorded), "files": len(on_disk)},
    )
    reduction = metadata["context_reduction_pct"].value
    threshold = ctx.settings.min_context_reduction_pct
    yield AssetCheckResult(
        check_name="context_reduction_above_threshold",
        # A research without tool calls (a direct answer) has nothing to reduce.
        passed=not outputs.calls or reduction >= threshold,
        severity=AssetCheckSeverity.ERROR,
        metadata={"reduction_pct": MetadataValue.float(reduction), "threshold_pct": MetadataValue.float(threshold)},
    )


@op(out=DynamicOut(ToolCallRecord))
def split_tool_calls(tool_outputs: ToolOutputs) -> Iterator[DynamicOutput[ToolCallRecord]]:
    for call in tool_outputs.calls:
        yield DynamicOutput(call, mapping_key=slugify(call.call_id, 40))


@op(retry_policy=MODEL_RETRY)
def compress_tool_output(
    context: OpExecutionContext, research: ResearchConfig, duckdb: DuckDBResource, call: ToolCallRecord
) -> SummaryRecord:
    """Compression of one stored raw output; served from the content-addressed cache when the
    research loop already compressed it with the same model and prompt version."""
    ctx = _context(context, research, duckdb)
    with ctx.lineage.session(), _stage(ctx, f"compress:{call.call_id}"):
        plan = load_stage(ctx.store, "research_plan")
        return compress_one(ctx, plan, call)


@op(out=Out(io_manager_key="research_io_manager"))
def collect_summaries(
    context: OpExecutionContext,
    research: ResearchConfig,
    duckdb: DuckDBResource,
    tool_outputs: ToolOutputs,
    summaries: list[SummaryRecord],
) -> Output[SummaryBundle]:
    ctx = _context(context, research, duckdb)
    by_call = {s.call_id: s for s in summaries}
    bundle = summaries_bundle(ctx, [by_call[c.call_id] for c in tool_outputs.calls])
    useful = len(bundle.working_memory)
    injected = sum(s.injected_tokens for s in bundle.summaries)
    raw = sum(c.raw_tokens for c in tool_outputs.calls)
    return Output(
        bundle,
        metadata={
            "compressor_model": bundle.compressor_model,
            "prompt_version": bundle.prompt_version,
            "summaries": len(bundle.summaries),
            "useful": useful,
            "not_useful": len(bundle.summaries) - useful,
            "fallbacks": sum(s.fallback for s in bundle.summaries),
            "raw_tokens": raw,
            "injected_tokens": injected,
            "context_reduction_pct": MetadataValue.float(round(100 * (1 - injected / raw), 2) if raw else 0.0),
            "working_memory": MetadataValue.json([s.injected.model_dump() for s in bundle.working_memory]),
        },
    )


@graph_asset(
    partitions_def=research_partitions,
    group_name=GROUP,
    kinds={"python"},
    description="Compressed summaries of every tool call (compression runs as a mapped op).",
)
def compressed_summaries(tool_outputs: ToolOutputs) -> SummaryBundle:
    summaries = split_tool_calls(tool_outputs).map(compress_tool_output).collect()
    return collect_summaries(tool_outputs, summaries)


@asset(
    partitions_def=research_partitions,
    io_manager_key="research_io_manager",
    group_name=GROUP,
    kinds={"python", "markdown"},
    retry_policy=MODEL_RETRY,
    ins={"research_plan": AssetIn(), "tool_outputs": AssetIn(), "compressed_summaries": AssetIn()},
    check_specs=[AssetCheckSpec("citations_resolve", asset="research_report")],
    description="The cited report (report.md + report.json) written from the working memory.",
)
def research_report(
    context: AssetExecutionContext,
    research: ResearchConfig,
    duckdb: DuckDBResource,
    research_plan: ResearchPlan,
    tool_outputs: ToolOutputs,
    compressed_summaries: SummaryBundle,
) -> Iterator[Output[Report] | AssetCheckResult]:
    ctx = _context(context, research, duckdb)
    with _stage(ctx, "research_report"):
        report = report_stage(ctx, research_plan, compressed_summaries, tool_outputs)
        # Recurring partitions (<slug>--YYYY-MM-DD) get "What changed since <previous date>".
        report = add_what_changed(ctx, report, compressed_summaries)
    metadata = _reduction_metadata(ctx)
    if report.what_changed is not None:
        changed = report.what_changed
        metadata["what_changed_since"] = changed.previous_date
        metadata["what_changed"] = MetadataValue.json(
            {
                "previous_partition": changed.previous_partition,
                "new_sources": len(changed.new_sources),
                "dropped_sources": len(changed.dropped_sources),
                "findings_added": len(changed.findings_added),
                "findings_no_longer_supported": len(changed.findings_no_longer_supported),
            }
        )
    metadata.update(
        {
            "report": MetadataValue.md(report.markdown),
            "citations": len(report.citations),
            "verified_citations": report.verified_citations,
            "unverified_citations": report.unverified_citations,
            "sufficiency_scores": MetadataValue.json(report.sufficiency_scores),
            "complete": report.complete,
            "budget": MetadataValue.json(ctx.budget.snapshot()),
            "reporter_model": report.reporter_model,
            "report_md": MetadataValue.path(str(ctx.store.partition_dir / "report.md")),
        }
    )
    yield Output(report, metadata=metadata)
    known = {s.source or s.artifact_file for s in compressed_summaries.working_memory}
    unresolved = [c.n for c in report.citations if c.source not in known]
    dangling = "Unresolved citation numbers" in report.markdown
    yield AssetCheckResult(
        check_name="citations_resolve",
        # A direct answer (depth 0, no tools) legitimately cites nothing.
        passed=not unresolved and not dangling and (bool(report.citations) or tool_outputs.direct_answer),
        metadata={"citations": len(report.citations), "unresolved": MetadataValue.json(unresolved)},
    )


research_assets = [research_plan, tool_outputs, compressed_summaries, research_report]
