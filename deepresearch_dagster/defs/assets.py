"""The four partitioned research assets; each is a thin call into ``core.pipeline``."""

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetIn,
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
from dagster._core.errors import DagsterExecutionInterruptedError
from dagster._utils.interrupts import check_captured_interrupt
from dagster_duckdb import DuckDBResource

from ..core.checks import record_check
from ..core.context import ResearchContext, logger
from ..core.errors import ResearchError, ResearchInterrupted, redact, redact_exception_chain, storage_failure
from ..core.models import Report, ResearchPlan, SummaryBundle, SummaryRecord, ToolCallRecord, ToolOutputs
from ..core.naming import markdown_code, markdown_text, short_artifact_name, slugify
from ..core.pipeline import (
    compress_one,
    is_compressed,
    open_context,
    plan_stage,
    report_stage,
    research_stage,
    summaries_bundle,
)
from ..core.roles.revision import critique_markdown
from ..core.store.partition_lock import PartitionBusy, partition_lock
from .partitions import research_partitions
from .resources import ResearchConfig, lineage_store
from .runs import failure_kind
from .tools import offered_tools_metadata

GROUP = "research"
# Model and tool calls can fail transiently; a retried op re-uses every stored compression.
MODEL_RETRY = RetryPolicy(max_retries=2, delay=1.0, backoff=Backoff.EXPONENTIAL)
# Errors with a message meant for the user; only those that say so are worth retrying.
USER_FACING_ERRORS = (ResearchError, FileNotFoundError)


def _failure(stage: str, exc: Exception) -> Failure:
    message = redact(exc)  # whatever a server echoed (Bearer tokens, api_key=…) stays out of the event log
    redact_exception_chain(exc)  # the causes are logged too (`raise _failure(...) from exc`)
    return Failure(
        description=f"{stage} failed: {message}",
        # "kind" lets the CLI print a storage failure or a busy partition as its one line alone.
        metadata={"error": message, "kind": failure_kind(exc)},
        allow_retries=isinstance(exc, ResearchError) and exc.retryable,
    )


class _ProgressLog:
    """The research loop's progress lines (one per tool call) for the run's event log, grouped
    into at most one log event per ``EVERY_S``: each event is a write to Dagster's storage.
    The ``deepresearch`` logger (terminal) still gets every line at once."""

    EVERY_S = 1.0

    def __init__(self, context: AssetExecutionContext | OpExecutionContext) -> None:
        self.context = context
        self.lines: list[str] = []
        self.last = float("-inf")

    def __call__(self, message: str) -> None:
        logger.info(message)
        self.lines.append(message)
        if time.monotonic() - self.last >= self.EVERY_S:
            self.flush()

    def flush(self) -> None:
        if self.lines:
            self.context.log.info("\n".join(self.lines))
            self.lines = []
        self.last = time.monotonic()

    def __enter__(self) -> "_ProgressLog":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        # GeneratorExit: the step's generator is being closed by the garbage collector, at any
        # point of another run's code, possibly inside Dagster's own event write (a SQLite
        # connection it holds): writing to that step's log then deadlocks. Its lines already
        # went to the terminal logger.
        if exc_type is not GeneratorExit:
            self.flush()


@contextmanager
def _research(
    context: AssetExecutionContext | OpExecutionContext, research: ResearchConfig, duckdb: DuckDBResource
) -> Iterator[ResearchContext]:
    """The op's research context, inside one lineage session: the op's statements share the
    process's DuckDB connection, which another process waiting for the file still gets between
    two statements (core/store/lineage.py)."""

    log = _ProgressLog(context)
    lineage = lineage_store(duckdb)
    try:
        with lineage.session(), log:
            try:
                ctx = open_context(
                    context.partition_key,
                    research.settings(duckdb.database),
                    lineage,
                    context.run_id,
                    log,
                    # Dagster defers Ctrl-C/SIGTERM to the end of a step; the research loop polls it
                    # between tool calls instead, so one interrupt stops the run within seconds.
                    interrupted=check_captured_interrupt,
                )
            except USER_FACING_ERRORS as exc:
                raise _failure(context.op_def.name, exc) from exc
            yield ctx
    except Failure:
        raise
    except Exception as exc:
        # A full or read-only disk, or a corrupt lineage database, met outside a stage (opening the
        # context, the summaries ops, the session's last commit): one line, never retried.
        storage = storage_failure(exc)
        if storage is None:
            raise
        raise _failure(context.op_def.name, storage) from exc


@contextmanager
def _stage(ctx: ResearchContext, stage: str) -> Iterator[None]:
    """One run per partition at a time; record the stage in DuckDB; turn known errors into a
    clear Dagster failure."""
    try:
        with partition_lock(ctx.store.partition_dir, ctx.partition_key, ctx.run_id, postgres_url=ctx.settings.postgres):
            ctx.lineage.run_started(ctx.run_id, ctx.partition_key, stage)
            with _recorded(ctx, stage):
                yield
    except PartitionBusy as exc:
        # Another run holds the partition: one line naming it, never retried (a retry would
        # only be refused again, seconds later).
        raise _failure(stage, exc) from exc
    except Exception as exc:
        storage = storage_failure(exc)  # full disk, corrupt database: one line, never retried
        if storage is None or isinstance(exc, Failure):
            raise
        raise _failure(stage, storage) from exc


@contextmanager
def _recorded(ctx: ResearchContext, stage: str) -> Iterator[None]:
    try:
        yield
    except USER_FACING_ERRORS as exc:
        ctx.lineage.run_finished(ctx.run_id, stage, str(exc))
        raise _failure(stage, exc) from exc
    except (KeyboardInterrupt, DagsterExecutionInterruptedError) as exc:
        # Ctrl-C/SIGTERM inside a step: stop, never retry (RetryPolicy would restart the step).
        interrupted = ResearchInterrupted()
        ctx.lineage.run_finished(ctx.run_id, stage, str(interrupted))
        raise _failure(stage, interrupted) from exc
    except Exception as exc:
        ctx.lineage.run_finished(ctx.run_id, stage, redact(f"{type(exc).__name__}: {exc}"))
        redact_exception_chain(exc)  # the traceback Dagster logs must not quote a key either
        raise
    ctx.lineage.run_finished(ctx.run_id, stage)


def _reduction_metadata(ctx: ResearchContext, final: bool = False) -> dict[str, Any]:
    """The question (beside every partition key in the UI) and the context-reduction figures;
    ``final``: also the LLM calls of the partition, which only the report's materialization has
    (counted earlier, the same name showed a smaller number on tool_outputs for the same run)."""
    figures = ctx.lineage.reduction(ctx.partition_key)
    metadata: dict[str, Any] = {
        "question": ctx.question,
        "tool_calls": figures["tool_calls"],
        "useful": figures["useful"],
        "not_useful": figures["tool_calls"] - figures["useful"],
        "raw_tokens": figures["raw_tokens"],
        "injected_tokens": figures["injected_tokens"],
        "context_reduction_pct": MetadataValue.float(figures["context_reduction"] or 0.0),
    }
    if final:
        # Every LLM call ever recorded for this partition (all runs, replays included); this
        # run's own count is in the budget table.
        metadata["llm_calls_all_runs"] = figures["llm_calls"]
    return metadata


def _section(markdown: str, headings: tuple[str, ...]) -> str:
    """The body of the first ``## <heading>`` section of a report that has one ("" if none)."""
    for heading in headings:
        match = re.search(rf"^## {re.escape(heading)}\s*$(.*?)(?=^## |\Z)", markdown, re.M | re.S)
        if match and match.group(1).strip():
            return match.group(1).strip()
    return ""


def _cell(text: str) -> str:
    """Text for a Markdown table cell: a ``|`` in a file name would end the cell."""
    return text.replace("|", "\\|")


def _calls_table(outputs: ToolOutputs) -> str:
    """One row per tool call: what it read, its raw size, whether its summary entered the
    conversation and how many tokens it injected (0 for a summary judged not useful)."""
    summaries = {s.call_id: s for s in outputs.summaries}
    rows = ["| call | tool | artifact | raw tokens | useful | injected tokens |", "|---|---|---|---:|---|---:|"]
    for c in outputs.calls:
        s = summaries.get(c.call_id)
        useful = "—" if s is None else "yes" if s.result.is_useful else "no"
        injected = 0 if s is None or not s.result.is_useful else s.injected_tokens
        name = markdown_code(short_artifact_name(c.artifact_file, 40))
        rows.append(f"| {c.call_id} | {c.tool} | {name} | {c.raw_tokens:,} | {useful} | {injected:,} |")
    return "\n".join(rows)


def _budget_markdown(snapshot: dict[str, Any]) -> str:
    """The run's budget ledger as a table of figures with units (the raw JSON is in DuckDB)."""
    units = {
        "tokens": lambda v: f"{v:,.0f} tokens",
        "dollars": lambda v: f"${v:,.4f}",
        "llm_calls": lambda v: f"{v:,.0f} LLM calls",
        "tool_calls": lambda v: f"{v:,.0f} tool calls",
        "wall_s": lambda v: f"{v:,.1f} s",
    }
    rows = ["| this run | spent | cap | used |", "|---|---:|---:|---:|"]
    for dim, fmt in units.items():
        spent, cap = snapshot["spent"].get(dim, 0) or 0, snapshot["limits"].get(dim, 0) or 0
        used = f"{100 * spent / cap:.1f} %" if cap else "—"
        rows.append(f"| {dim.replace('_', ' ')} | {fmt(spent)} | {fmt(cap)} | {used} |")
    events = snapshot.get("events") or []
    return "\n".join(rows) + ("\n\n" + "\n".join(f"- {e}" for e in events) if events else "")


@asset(
    partitions_def=research_partitions,
    io_manager_key="research_io_manager",
    group_name=GROUP,
    kinds={"python", "duckdb"},
    retry_policy=MODEL_RETRY,
    check_specs=[
        AssetCheckSpec(
            "plan_is_valid",
            asset="research_plan",
            description="plan.json parses back under the plan contract, equals the planner's plan and has at most "
            "max_steps steps.",
        )
    ],
    description="The Planner's research plan for the partition's question.",
)
def research_plan(
    context: AssetExecutionContext, research: ResearchConfig, duckdb: DuckDBResource
) -> Iterator[Output[ResearchPlan] | AssetCheckResult]:
    with _research(context, research, duckdb) as ctx:
        yield from _plan_asset(ctx)


def _check(
    ctx: ResearchContext, name: str, passed: bool, severity: AssetCheckSeverity, summary: str, metadata: dict[str, Any]
) -> AssetCheckResult:
    """The check's result, also recorded in the partition's checks.json (core/checks.py), so the CLI's
    exit code and ``ls`` say what the UI shows."""
    record_check(ctx.store, name, passed, severity.value, summary)
    return AssetCheckResult(
        check_name=name,
        passed=passed,
        severity=severity,
        description=summary,
        metadata={"summary": summary, **metadata},
    )


def _plan_asset(ctx: ResearchContext) -> Iterator[Output[ResearchPlan] | AssetCheckResult]:
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
    too_long = len(plan.steps) > ctx.settings.max_steps
    yield _check(
        ctx,
        "plan_is_valid",
        error is None and not too_long,
        AssetCheckSeverity.ERROR,
        f"the stored plan is not the planner's plan: {error}"
        if error
        else f"the plan has {len(plan.steps)} steps, more than max_steps {ctx.settings.max_steps}"
        if too_long
        else f"plan.json is the planner's plan ({len(plan.steps)} steps)",
        {"steps": len(plan.steps), "error": error or ""},
    )


@asset(
    partitions_def=research_partitions,
    io_manager_key="research_io_manager",
    group_name=GROUP,
    kinds={"python", "duckdb"},
    retry_policy=MODEL_RETRY,
    check_specs=[
        AssetCheckSpec(
            "raw_artifacts_match_lineage",
            asset="tool_outputs",
            description="Every raw tool output on disk has its tool_calls row in DuckDB with the same sha256, and "
            "no file or row is missing.",
        ),
        AssetCheckSpec(
            "context_reduction_above_threshold",
            asset="tool_outputs",
            description="WARN: injected summaries are at least DEEPRESEARCH_MIN_CONTEXT_REDUCTION % (default 80) "
            "smaller than the raw tool outputs, in estimated tokens.",
        ),
    ],
    description="Raw tool outputs of every research step, offloaded to the deterministic layout.",
)
def tool_outputs(
    context: AssetExecutionContext, research: ResearchConfig, duckdb: DuckDBResource, research_plan: ResearchPlan
) -> Iterator[Output[ToolOutputs] | AssetCheckResult]:
    with _research(context, research, duckdb) as ctx:
        yield from _tool_outputs_asset(ctx, research_plan)


def _tool_outputs_asset(
    ctx: ResearchContext, research_plan: ResearchPlan
) -> Iterator[Output[ToolOutputs] | AssetCheckResult]:
    with _stage(ctx, "tool_outputs"):
        outputs = research_stage(ctx, research_plan)
    metadata = _reduction_metadata(ctx)
    # What the defences against untrusted content did (issue 28), beside the call figures: calls
    # proposed after tool output entered the conversation, calls refused, sources flagged.
    metadata.update(ctx.lineage.untrusted_counts(ctx.partition_key))
    if outputs.followup_steps:
        # The critic's follow-up steps belong to the research, not to the (unchanged) plan.
        metadata["followup_steps"] = MetadataValue.md(research_plan.as_markdown(outputs.followup_steps))
    metadata["critic"] = MetadataValue.json(outputs.critic_rounds)
    metadata["stop_reason"] = outputs.stop_reason
    metadata["complete"] = outputs.complete
    metadata["budget"] = MetadataValue.md(_budget_markdown(ctx.budget.snapshot()))
    metadata["artifacts_dir"] = MetadataValue.path(str(ctx.store.raw_dir(research_plan.plan_title)))
    # Short artifact names keep the table inside the dialog; artifacts_dir has the full paths.
    metadata["calls"] = MetadataValue.md(_calls_table(outputs))
    metadata.update(offered_tools_metadata(outputs))  # the plugin and MCP tools offered, with their calls
    if outputs.skipped_documents:
        metadata["skipped_documents"] = MetadataValue.md(
            "| file | why it was skipped |\n|---|---|\n"
            + "\n".join(
                f"| {_cell(markdown_code(path))} | {_cell(markdown_text(why))} |"
                for path, why in outputs.skipped_documents
            )
        )
    yield Output(outputs, metadata=metadata)
    recorded = ctx.lineage.tool_call_hashes(ctx.partition_key)
    on_disk = set(ctx.store.raw_reader(research_plan.plan_title).files())
    matches = recorded == {c.artifact_file: c.sha256 for c in outputs.calls} and on_disk == set(recorded)
    yield _check(
        ctx,
        "raw_artifacts_match_lineage",
        matches,
        AssetCheckSeverity.ERROR,
        f"{len(on_disk)} raw files match their tool_calls rows"
        if matches
        else f"raw files on disk ({len(on_disk)}) and tool_calls rows in DuckDB ({len(recorded)}) differ",
        {"rows": len(recorded), "files": len(on_disk)},
    )
    reduction = metadata["context_reduction_pct"].value
    threshold = ctx.settings.min_context_reduction_pct
    # A figure below its target, not a broken research: outputs too small to shrink much (short
    # pages, search listings) miss it with every summary correct. A direct answer has nothing to reduce.
    reduced = not outputs.calls or reduction >= threshold
    yield _check(
        ctx,
        "context_reduction_above_threshold",
        reduced,
        AssetCheckSeverity.WARN,
        f"context reduction {reduction:.1f} % (target {threshold:g} %)"
        if reduced
        else f"context reduction {reduction:.1f} % is below its {threshold:g} % target (tool outputs too small "
        "to shrink much?)",
        {"reduction_pct": MetadataValue.float(reduction), "threshold_pct": MetadataValue.float(threshold)},
    )


@op(
    out={
        "pending": DynamicOut(ToolCallRecord),
        "stored": Out(dict, description="order: every call id in tool_outputs order; summaries: the stored ones"),
    }
)
def split_tool_calls(
    context: OpExecutionContext,
    research: ResearchConfig,
    duckdb: DuckDBResource,
    research_plan: ResearchPlan,
    tool_outputs: ToolOutputs,
) -> Iterator[DynamicOutput[ToolCallRecord] | Output[Any]]:
    """Calls whose compression (this model, this prompt version) is stored, usually all of them
    after the research loop, are summarized here from the content-addressed cache; only the
    others fan out to the mapped ``compress_tool_output`` op (a replay with another model or
    prompt, a loop stopped early). No step or event is spent on a cache hit."""
    stored = []
    with _research(context, research, duckdb) as ctx:
        for call in tool_outputs.calls:
            if is_compressed(ctx, research_plan, call):
                stored.append(compress_one(ctx, research_plan, call))
            else:
                yield DynamicOutput(call, output_name="pending", mapping_key=slugify(call.call_id, 40))
    yield Output({"order": [c.call_id for c in tool_outputs.calls], "summaries": stored}, output_name="stored")


@op(retry_policy=MODEL_RETRY)
def compress_tool_output(
    context: OpExecutionContext,
    research: ResearchConfig,
    duckdb: DuckDBResource,
    research_plan: ResearchPlan,
    call: ToolCallRecord,
) -> SummaryRecord:
    """Compression of one stored raw output that has no stored compression for this run's
    compressor model and prompt version."""
    with _research(context, research, duckdb) as ctx, _stage(ctx, f"compress:{call.call_id}"):
        return compress_one(ctx, research_plan, call)


@op(out=Out(io_manager_key="research_io_manager"))
def collect_summaries(
    context: OpExecutionContext,
    research: ResearchConfig,
    duckdb: DuckDBResource,
    stored: dict[str, Any],
    summaries: list[SummaryRecord],
) -> Output[SummaryBundle]:
    with _research(context, research, duckdb) as ctx:
        by_call = {s.call_id: s for s in [*stored["summaries"], *summaries]}
        bundle = summaries_bundle(ctx, [by_call[call_id] for call_id in stored["order"]])
        figures = ctx.lineage.summary_reduction(ctx.partition_key, bundle.compressor_model, bundle.prompt_version)
    useful = len(bundle.working_memory)
    return Output(
        bundle,
        metadata={
            "question": ctx.question,
            "compressor_model": bundle.compressor_model,
            "prompt_version": bundle.prompt_version,
            "summaries": len(bundle.summaries),
            "useful": useful,
            "not_useful": len(bundle.summaries) - useful,
            "fallbacks": sum(s.fallback for s in bundle.summaries),
            "raw_tokens": figures["raw_tokens"],
            "injected_tokens": figures["injected_tokens"],
            "context_reduction_pct": MetadataValue.float(figures["reduction_pct"] or 0.0),
            "working_memory": MetadataValue.json([s.injected.model_dump() for s in bundle.working_memory]),
        },
    )


@graph_asset(
    partitions_def=research_partitions,
    group_name=GROUP,
    kinds={"python"},
    description="Compressed summaries of every tool call: stored compressions are reused, the others run as "
    "a mapped op.",
)
def compressed_summaries(research_plan: ResearchPlan, tool_outputs: ToolOutputs) -> SummaryBundle:
    pending, stored = split_tool_calls(research_plan, tool_outputs)
    summaries = pending.map(lambda call: compress_tool_output(research_plan, call)).collect()
    return collect_summaries(stored, summaries)


@asset(
    partitions_def=research_partitions,
    io_manager_key="research_io_manager",
    group_name=GROUP,
    kinds={"python", "markdown"},
    retry_policy=MODEL_RETRY,
    ins={"research_plan": AssetIn(), "tool_outputs": AssetIn(), "compressed_summaries": AssetIn()},
    check_specs=[
        AssetCheckSpec(
            "citations_resolve",
            asset="research_report",
            description="ERROR: every reference of the report is a source of the working memory and no citation "
            "marker is left unresolved (a report citing nothing passes; see report_cites_sources).",
        ),
        AssetCheckSpec(
            "report_cites_sources",
            asset="research_report",
            description="WARN: the report cites at least one verified source (a direct answer excepted).",
        ),
    ],
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
    with _research(context, research, duckdb) as ctx:
        yield from _report_asset(ctx, research_plan, tool_outputs, compressed_summaries)


def _report_asset(
    ctx: ResearchContext, research_plan: ResearchPlan, tool_outputs: ToolOutputs, compressed_summaries: SummaryBundle
) -> Iterator[Output[Report] | AssetCheckResult]:
    with _stage(ctx, "research_report"):
        report = report_stage(ctx, research_plan, compressed_summaries, tool_outputs)
    metadata = _reduction_metadata(ctx, final=True)
    summary = _section(report.markdown, ("Executive summary", "Answer"))
    if summary:
        # The short answer first, above the whole report (whose dialog may open scrolled down).
        metadata["executive_summary"] = MetadataValue.md(summary)
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
            # The report's second reading: its critique before and after revision (core/roles/revision.py).
            "critique": MetadataValue.md(critique_markdown(report.critique, report.drafts)),
            # References are sources; citation markers are the [n] in the text (several per source).
            "references": len(report.citations),
            "citation_markers_verified": report.verified_citations,
            "citation_markers_removed": report.unverified_citations,
            "sufficiency_scores": MetadataValue.json(report.sufficiency_scores),
            "complete": report.complete,
            "role_fallbacks": MetadataValue.json(report.fallbacks),
            "budget": MetadataValue.md(_budget_markdown(ctx.budget.snapshot())),
            "reporter_model": report.reporter_model,
            "report_md": MetadataValue.path(str(ctx.store.partition_dir / "report.md")),
        }
    )
    yield Output(report, metadata=metadata)
    known = {s.source or s.artifact_file for s in compressed_summaries.working_memory}
    unresolved = [c.n for c in report.citations if c.source not in known]
    dangling = "Unresolved citation numbers" in report.markdown
    resolved = not unresolved and not dangling
    yield _check(
        ctx,
        "citations_resolve",
        resolved,
        AssetCheckSeverity.ERROR,
        f"all {len(report.citations)} references resolve to sources of the working memory"
        if resolved
        else f"citations that do not resolve to a source of the working memory: {unresolved or 'unresolved numbers'}",
        {"citations": len(report.citations), "unresolved": MetadataValue.json(unresolved)},
    )
    # A report that found nothing to cite is not broken (its sources did not answer the question),
    # but it is worth a warning. A direct answer (depth 0, no tools) legitimately cites nothing.
    cites = bool(report.verified_citations) or tool_outputs.direct_answer
    yield _check(
        ctx,
        "report_cites_sources",
        cites,
        AssetCheckSeverity.WARN,
        f"{report.verified_citations} verified citation markers"
        if cites
        else "the report cites no verified source: nothing searched or read stated an answer",
        {"verified_citations": report.verified_citations},
    )


research_assets = [research_plan, tool_outputs, compressed_summaries, research_report]
