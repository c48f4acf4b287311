"""The four research stages as plain functions; Dagster assets and tests call the same ones."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from .config import ResearchSettings
from .context import ResearchContext, logger, make_engine
from .errors import InvalidQuestion, UnknownResearch
from .llm.budget import dollars
from .llm.prompts import prompt_version
from .models import Grounding, Report, ResearchPlan, SummaryBundle, ToolOutputs
from .naming import plan_folder, slugify
from .roles.changes import add_what_changed
from .roles.compressor import StepContext, cache_key, compress
from .roles.coordinator import route
from .roles.drafts import write_drafts
from .roles.planner import make_plan
from .roles.researcher import execute_plan
from .store.artifacts import CORPUS_CACHE, ArtifactStore, remove_stale_temps
from .store.lineage import LineageStore
from .store.partition_lock import partition_lock
from .untrusted import set_aside

# Stage outputs as files in the partition folder; the Dagster IO manager uses the same names.
STAGE_FILES: dict[str, tuple[str, type[BaseModel]]] = {
    "research_plan": ("plan.json", ResearchPlan),
    "tool_outputs": ("tool_outputs.json", ToolOutputs),
    "compressed_summaries": ("compressed_summaries.json", SummaryBundle),
    "research_report": ("report.json", Report),
}


def save_stage(store: ArtifactStore, stage: str, value: BaseModel) -> str:
    name, _ = STAGE_FILES[stage]
    if isinstance(value, Report):
        # report.md first: report.json marks the stage done, so a kill between the two leaves
        # the stage to be redone (its model answers replayed), never a report.json alone.
        store.write_text("report.md", value.markdown)
    store.write_json(name, value.model_dump(mode="json"))
    if isinstance(value, SummaryBundle):
        # One copy per compressor model and prompt version: a replay never loses an older one.
        versioned = bundle_version_file(value.compressor_model, value.prompt_version)
        store.write_json(versioned, value.model_dump(mode="json"))
    return name


def bundle_version_file(compressor_model: str, prompt_version: str) -> str:
    return f"compressed_summaries.{slugify(compressor_model, 60)}.{slugify(prompt_version, 40)}.json"


def load_stage(store: ArtifactStore, stage: str) -> Any:
    name, cls = STAGE_FILES[stage]
    value = cls.model_validate_json(store.read_text(name))
    if isinstance(value, Report) and not store.exists("report.md"):
        store.write_text("report.md", value.markdown)  # left by a kill in an older version
    return value


def question_from_key(partition_key: str) -> str:
    """``how-do-x-work`` → ``how do x work``; a key typed as a sentence is kept as it is."""
    key = partition_key.strip()
    return key if " " in key else re.sub(r"[-_]+", " ", key).strip()


def register(
    lineage: LineageStore, question: str, options: dict[str, Any] | None = None, partition_key: str | None = None
) -> str:
    """Validate a question (coordinator) and record it; returns the partition key (derived from
    the question unless given, as for the dated partitions of a recurring topic)."""
    cleaned, key = route(question)
    key = partition_key or key
    lineage.register_request(key, cleaned, options or {})
    return key


def open_context(
    partition_key: str,
    settings: ResearchSettings,
    lineage: LineageStore,
    run_id: str | None = None,
    log: Callable[[str], None] = logger.info,
    interrupted: Callable[[], bool] | None = None,
) -> ResearchContext:
    with lineage.session():  # one connection for the lookups below
        ctx = _open_context(partition_key, settings, lineage, run_id, log)
    if interrupted is not None:
        ctx.interrupted = interrupted
    return ctx


def _open_context(
    partition_key: str,
    settings: ResearchSettings,
    lineage: LineageStore,
    run_id: str | None,
    log: Callable[[str], None],
) -> ResearchContext:
    request = lineage.get_request(partition_key)
    if request is None:
        # A partition added by hand in the UI: its key is the question.
        question = question_from_key(partition_key)
        try:
            register(lineage, question, {}, partition_key=partition_key)
        except InvalidQuestion as exc:
            raise UnknownResearch(
                f"partition {partition_key!r} has no registered question and its key is not one: {exc}"
            ) from exc
        request = lineage.get_request(partition_key)
        assert request is not None
    question, options = request
    settings = settings.with_options(options)
    ctx = ResearchContext(
        partition_key=partition_key,
        question=question,
        run_id=run_id or uuid.uuid4().hex,
        settings=settings,
        engine=make_engine(settings),
        lineage=lineage,
        log=log,
    )
    resume_budget(ctx)
    return ctx


def resume_budget(ctx: ResearchContext) -> None:
    """Carry a run's spending into this op's ledger (each Dagster op opens its own context)."""
    spending = ctx.lineage.run_spending(ctx.run_id)
    ledger = ctx.budget
    for row in spending["per_model"]:
        tokens = int(row["p"] or 0) + int(row["c"] or 0)
        ledger.spent["tokens"] += tokens
        ledger.spent["dollars"] += dollars(row["model"], int(row["p"] or 0), int(row["c"] or 0), ledger.prices)
        ledger.spent["llm_calls"] += int(row["n"] or 0)
    ledger.spent["tool_calls"] += spending["tool_calls"]
    ledger.started -= spending["elapsed_s"]


def plan_stage(ctx: ResearchContext) -> ResearchPlan:
    # A run starts here, holding the partition's run lock (nobody else writes in the partition):
    # the temp files a killed writer left can go, and those of the shared corpus cache (a dead
    # writer's only: other researches may be writing there).
    ctx.store.remove_stale_temps()
    remove_stale_temps(ctx.settings.artifacts_path / CORPUS_CACHE)
    ctx.log("planning")
    plan = make_plan(ctx)
    ctx.lineage.record_plan(ctx.partition_key, ctx.run_id, plan, plan_folder(plan.plan_title))
    ctx.log(f"plan: {plan.plan_title} ({len(plan.steps)} steps)")
    return plan


def research_stage(ctx: ResearchContext, plan: ResearchPlan) -> ToolOutputs:
    """Runs the steps and reflection rounds; the critic's follow-up steps are part of the
    outputs (the plan is never changed)."""
    outputs = execute_plan(ctx, plan)
    ctx.lineage.record_budget(ctx.partition_key, ctx.run_id, "tool_outputs", ctx.budget.snapshot())
    return outputs


def read_raw(ctx: ResearchContext, relpath: str, sha256: str) -> str:
    return ctx.store.read_verified(relpath, sha256).decode("utf-8")


def _step_context(plan: ResearchPlan, record: Any) -> StepContext:
    return StepContext(plan.plan_title, record.step_title, record.step_description, record.tool)


def compress_one(ctx: ResearchContext, plan: ResearchPlan, record: Any) -> Any:
    """Compress one stored tool call from its raw file (a cache hit when nothing changed)."""
    raw = read_raw(ctx, record.artifact_path, record.sha256)
    kind = "json" if record.artifact_file.endswith(".json") else "text"
    return compress(ctx, _step_context(plan, record), record, raw, kind)


def is_compressed(ctx: ResearchContext, plan: ResearchPlan, record: Any) -> bool:
    """True when compressing ``record`` needs no model call: its compression with this run's
    compressor model and prompt version is stored (the research loop made it), or raw-context
    mode. The Dagster compression op is mapped only over the other calls."""
    if ctx.settings.context_mode == "raw":
        return True
    model = ctx.engine.model_for("compressor")
    version = prompt_version("compressor", ctx.settings.prompt_files.get("compressor"))
    return (
        ctx.lineage.get_compression(cache_key(record.sha256, _step_context(plan, record), model, version)) is not None
    )


def summaries_bundle(ctx: ResearchContext, summaries: list[Any]) -> SummaryBundle:
    set_aside(summaries)  # a source suspected anywhere in the research is out of working memory
    ctx.lineage.record_summaries(ctx.partition_key, summaries)
    return SummaryBundle(
        partition_key=ctx.partition_key,
        compressor_model=ctx.engine.model_for("compressor"),
        prompt_version=prompt_version("compressor", ctx.settings.prompt_files.get("compressor")),
        summaries=summaries,
    )


def compression_stage(ctx: ResearchContext, plan: ResearchPlan, outputs: ToolOutputs) -> SummaryBundle:
    return summaries_bundle(ctx, [compress_one(ctx, plan, rec) for rec in outputs.calls])


def report_stage(ctx: ResearchContext, plan: ResearchPlan, bundle: SummaryBundle, outputs: ToolOutputs) -> Report:
    ctx.log("writing the report")
    report = write_drafts(ctx, plan, bundle, outputs)
    # The compressor's statements checked against the raw outputs (roles/compressor.py), per research.
    report.grounding = Grounding(
        grounded=sum(s.grounding.grounded for s in bundle.summaries),
        dropped=sum(s.grounding.dropped for s in bundle.summaries),
    )
    # Recurring partitions (<slug>--YYYY-MM-DD) get "What changed since <previous date>".
    report = add_what_changed(ctx, report, bundle)
    ctx.lineage.record_budget(ctx.partition_key, ctx.run_id, "research_report", ctx.budget.snapshot())
    return report


def run_research(
    question: str,
    settings: ResearchSettings,
    options: dict[str, Any] | None = None,
    log: Callable[[str], None] = logger.info,
    partition_key: str | None = None,
) -> tuple[ResearchContext, Report]:
    """The whole pipeline without Dagster (library use and fast tests). The stages and their
    order are the same ones the Dagster assets call, so both paths write the same files;
    ``partition_key`` names a dated partition of a recurring topic (``<slug>--YYYY-MM-DD``)."""
    # One session for the run, as `launcher.run_job` holds for the Dagster ops: the stages share
    # this process's connection, which is let go whenever another process waits for the file,
    # and committed and closed at the run's end.
    with LineageStore.session_at(settings.lineage_database) as lineage:
        key = register(lineage, question, options, partition_key=partition_key)
        ctx = open_context(key, settings, lineage, log=log)
        # One run per partition (the Dagster assets take the same lock per stage).
        with partition_lock(ctx.store.partition_dir, key, ctx.run_id, postgres_url=settings.postgres):
            plan = plan_stage(ctx)
            save_stage(ctx.store, "research_plan", plan)
            outputs = research_stage(ctx, plan)
            save_stage(ctx.store, "tool_outputs", outputs)
            bundle = compression_stage(ctx, plan, outputs)
            save_stage(ctx.store, "compressed_summaries", bundle)
            report = report_stage(ctx, plan, bundle, outputs)
            save_stage(ctx.store, "research_report", report)
    return ctx, report
