"""Evaluations in Dagster: one ``evaluations`` partition per suite × configuration.

``evaluation_results`` runs (or resumes) the research of every item of the partition's suite,
one ``research`` partition each, through ``research_job`` itself: each item is an ordinary
research in the UI (its four assets and checks), run in this process on the same instance.
Each report is then scored from its stored artifacts (``core.evaluation``, plain Python, as
``deepresearch eval`` does) and ``eval.json`` + ``eval.md`` are written under
``<artifacts>/evaluations/<partition>/``. The per-item table and the summary are the
materialization's markdown; its numeric figures (answer in report / raw / memory, facts,
uncited sentences, removed citations, tokens, seconds) are what the UI plots across
materializations, so a regression shows as a step in the plot.

The configuration a run was given is stored beside the results (``config.json``): launched from
the UI with an empty ``suite`` (a re-materialization, a backfill), the asset evaluates that
stored configuration again.
"""

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetsDefinition,
    AssetSelection,
    Config,
    Definitions,
    Failure,
    MaterializeResult,
    MetadataValue,
    asset,
    define_asset_job,
)
from dagster_duckdb import DuckDBResource
from pydantic import Field, ValidationError

from ..core.config import ResearchSettings, describe_validation_error
from ..core.errors import ResearchError, redact
from ..core.evaluation.report import evaluation_markdown, item_line, write_evaluation
from ..core.evaluation.run import (
    ANSWER_FIGURES,
    SUM_FIGURES,
    EvalConfig,
    Evaluation,
    evaluation_dir,
    read_evaluation,
    run_evaluation,
)
from ..core.evaluation.score import ItemScore
from ..core.evaluation.suite import SuiteItem
from ..core.requests import validate_options
from ..core.store.artifacts import atomic_write_bytes
from ..core.store.lineage import LineageStore
from .partitions import ensure_partition, evaluation_partitions
from .resources import ResearchConfig, lineage_store
from .runs import execute

GROUP = "evaluation"
ASSET_NAME = "evaluation_results"
CONFIG_FILE = "config.json"
EVALUATION_TAG = "deepresearch/evaluation"


class EvaluationConfig(Config):
    """An evaluation's configuration (``core.evaluation.run.EvalConfig``); an empty suite means
    the configuration stored with the partition by its last run."""

    suite: str = Field(
        default="", description="suite file (JSONL); empty = the configuration stored with this partition"
    )
    corpus: str | None = Field(default=None, description="one folder of documents for every item (else each item's)")
    engine: str | None = Field(default=None, description="auto | offline | openai (default: the environment's)")
    limit: int | None = Field(default=None, description="the first N items only")
    items: list[str] | None = Field(default=None, description="these item ids only")
    options: dict[str, Any] = Field(
        default_factory=dict, description="research size knobs (core.config.RequestOptions), e.g. max_steps"
    )
    judge_model: str | None = Field(default=None, description="an OpenAI-compatible model that judges the answers")
    recompress: str | None = Field(
        default=None, description="MODEL[/PROMPT_FILE]: replay the compressor on the stored raw outputs"
    )
    rerun: bool = Field(default=False, description="research every item again instead of resuming")


def _refuse(message: str) -> Failure:
    return Failure(description=message, allow_retries=False)


def resolve_config(config: EvaluationConfig, folder: Path) -> EvalConfig:
    """The launchpad's configuration (relative paths against the working folder), else the one
    stored in ``folder``; the launchpad's ``rerun`` applies to either."""
    if not config.suite.strip():
        stored = folder / CONFIG_FILE
        if not stored.is_file():
            raise _refuse(
                f"evaluation {folder.name} has no stored configuration ({stored}): give config.suite in the launchpad"
            )
        try:
            return EvalConfig.model_validate_json(stored.read_text("utf-8")).model_copy(update={"rerun": config.rerun})
        except ValueError as exc:
            raise _refuse(f"{stored} is not an evaluation configuration: {str(exc).splitlines()[0]}") from exc
    values = {name: getattr(config, name) for name in EvalConfig.model_fields}
    values["suite"] = str(Path(config.suite.strip()).expanduser().resolve())
    if config.corpus:
        values["corpus"] = str(Path(config.corpus).expanduser().resolve())
    try:
        values["options"] = validate_options(dict(config.options))
        validate_options({"engine": config.engine})
        return EvalConfig.model_validate(values)
    except ResearchError as exc:
        raise _refuse(f"invalid evaluation configuration: {exc}") from exc
    except ValidationError as exc:
        raise _refuse(f"invalid evaluation configuration: {describe_validation_error(exc)}") from exc


def store_config(config: EvalConfig, folder: Path) -> None:
    """What a later run with an empty suite evaluates again (``rerun`` is that run's own)."""
    folder.mkdir(parents=True, exist_ok=True)
    body = json.dumps(config.model_dump(mode="json", exclude={"rerun"}), indent=2, sort_keys=True) + "\n"
    atomic_write_bytes(folder / CONFIG_FILE, body.encode("utf-8"))


def _merged(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        out[key] = _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


class NestedRuns:
    """One research partition's ``research_job`` (or ``recompress_job``) run in this process on
    the evaluation run's instance, as ``launcher.run_job`` runs it: same resource configuration
    and log levels as the evaluation run, its ``deepresearch/*`` tags plus the evaluation's key.
    ``definitions`` builds the code location's definitions (only when a job is first run)."""

    def __init__(
        self, context: AssetExecutionContext, definitions: Callable[[], Definitions], lineage: LineageStore
    ) -> None:
        self.instance = context.instance
        self.lineage = lineage
        self._definitions = definitions
        self._built: Definitions | None = None
        run_config = context.run.run_config or {}
        self.resources: dict[str, Any] = dict(run_config.get("resources") or {})
        self.loggers = run_config.get("loggers")
        inherited = {k: v for k, v in context.run.tags.items() if k.startswith("deepresearch/")}
        self.tags = {**inherited, EVALUATION_TAG: context.partition_key}

    def run(self, job_name: str, partition_key: str, resources: dict[str, Any] | None = None) -> str | None:
        """The failure's one-line reason, or ``None``; an interrupted run stops the evaluation."""
        if self._built is None:
            self._built = self._definitions()
        ensure_partition(self.instance, partition_key)
        run_config: dict[str, Any] = {}
        if self.loggers:
            run_config["loggers"] = self.loggers
        merged = _merged(self.resources, resources or {})
        if merged:
            run_config["resources"] = merged
        with self.lineage.session():
            outcome = execute(self._built, job_name, partition_key, self.instance, run_config, self.tags)
        if outcome.success:
            return None
        reason = redact(outcome.message.strip().splitlines()[0] if outcome.message.strip() else "the run failed")
        if outcome.interrupted:
            # The nested run consumed the Ctrl-C / SIGTERM: stop the evaluation, not one item.
            raise _refuse(f"evaluation stopped at research partition {partition_key}: {reason}")
        return reason

    def research(self, partition_key: str) -> str | None:
        return self.run("research_job", partition_key)

    def recompress(self, partition_key: str, resources: dict[str, Any]) -> str | None:
        return self.run("recompress_job", partition_key, resources)


Judge = Callable[[SuiteItem, ItemScore, Path], dict[str, Any]]


def reusing_judge(judge: Judge, model: str, previous: Path) -> Judge:
    """The judge, except for an item whose research was resumed and that the same judge model
    already judged without error in ``previous`` (the partition's last eval.json): its verdict
    is kept instead of asking the model again (``deepresearch eval`` records its evaluation here
    right after judging it)."""
    known: dict[tuple[str, str | None], dict[str, Any]] = {}
    try:
        before = read_evaluation(previous)
    except ResearchError:
        before = None
    if before is not None and before.config.judge_model == model:
        known = {(s.id, s.partition_key): s.judge for s in before.items if s.judge and not s.judge.get("error")}

    def judge_or_reuse(item: SuiteItem, score: ItemScore, partition_dir: Path) -> dict[str, Any]:
        verdict = known.get((item.id, score.partition_key)) if score.resumed else None
        return verdict if verdict is not None else judge(item, score, partition_dir)

    return judge_or_reuse


def evaluate(
    context: AssetExecutionContext,
    config: EvalConfig,
    settings: ResearchSettings,
    lineage: LineageStore,
    runs: NestedRuns,
    folder: Path,
) -> Evaluation:
    """``run_evaluation`` (and the judge / compressor replay it was asked for), with one log
    line per item; known errors become one-line failures."""

    def progress(index: int, total: int, score: Any) -> None:
        context.log.info(item_line(index, total, score))

    try:
        judge = None
        if config.judge_model:
            from ..core.evaluation.judge import judge_for

            judge = reusing_judge(judge_for(config.judge_model, settings, lineage), config.judge_model, folder)
        evaluation = run_evaluation(config, settings, lineage, runs.research, progress, judge)
        if config.recompress:
            from ..core.evaluation.replay import recompress_evaluation

            evaluation = recompress_evaluation(evaluation, config.recompress, settings, lineage, runs.recompress)
    except ValidationError as exc:
        raise _refuse(f"evaluation failed: {describe_validation_error(exc)}") from exc
    except (ResearchError, ValueError) as exc:
        lines = redact(exc).strip().splitlines() or [type(exc).__name__]
        raise _refuse(f"evaluation failed: {lines[0]}") from exc
    return evaluation


def _rate(out: dict[str, Any], name: str, value: float | None) -> None:
    if value is not None:  # a rate without any item to measure it on is left out, not shown as 0
        out[name] = MetadataValue.float(float(value))


def figures(evaluation: Evaluation) -> dict[str, Any]:
    """The numeric metadata the UI plots across materializations."""
    s = evaluation.summary
    scored = [i for i in evaluation.items if i.status == "scored"]
    out: dict[str, Any] = {
        "items": s["all_items"],
        "scored": len(scored),
        "failed": s["failed"],
        "resumed": sum(i.resumed for i in scored),
        "answerable": s["answerable"],
    }
    for name in (*ANSWER_FIGURES, "facts"):
        _rate(out, f"{name}_pct", s.get(f"{name}_pct"))
    for split in ("dev", "heldout"):
        _rate(out, f"{split}_answer_in_report_pct", (s["by_split"].get(split) or {}).get("answer_in_report_pct"))
    for name in SUM_FIGURES:
        out[name] = int(s[name])
    out["wall_s"] = MetadataValue.float(float(s["wall_s"]))
    if s.get("dollars") is not None:
        out["dollars"] = MetadataValue.float(float(s["dollars"]))
    for name in ("judge_correct", "judge_supported", "judge_claims"):
        if name in s:
            out[name] = int(s[name])
    if evaluation.recompress:
        r = evaluation.recompress
        out |= {"recompress_kept": r["kept"], "recompress_injected_tokens": r["injected_tokens"]}
    return out


def _check(evaluation: Evaluation) -> AssetCheckResult:
    failed = [{"id": i.id, "reason": i.reason} for i in evaluation.items if i.status != "scored"]
    unread = [{"line": f.line, "id": f.id, "reason": f.reason} for f in evaluation.failures]
    return AssetCheckResult(
        check_name="every_item_scored",
        passed=not failed and not unread,
        severity=AssetCheckSeverity.WARN,
        metadata={
            "scored": len(evaluation.items) - len(failed),
            "failed_items": MetadataValue.json(failed),
            "unread_suite_lines": MetadataValue.json(unread),
        },
    )


def evaluation_assets(definitions: Callable[[], Definitions]) -> list[AssetsDefinition]:
    """The evaluation asset; ``definitions`` builds the definitions whose ``research_job`` (and
    ``recompress_job``) research the items (``build.py`` passes its own builder)."""

    @asset(
        name=ASSET_NAME,
        partitions_def=evaluation_partitions,
        group_name=GROUP,
        kinds={"python", "duckdb"},
        check_specs=[
            AssetCheckSpec(
                "every_item_scored",
                asset=ASSET_NAME,
                description="Every selected item of the suite was researched and scored (none failed) and every "
                "line of the suite file was read.",
            )
        ],
        description="Runs or resumes the research of every item of the partition's suite (one research partition "
        "each, through research_job), scores each report from its stored artifacts and writes eval.json and "
        "eval.md under <artifacts>/evaluations/<partition>/. The metadata holds the per-item table and the figures "
        "plotted across materializations. An empty config.suite evaluates the configuration stored by the "
        "partition's last run again.",
    )
    def evaluation_results(
        context: AssetExecutionContext, config: EvaluationConfig, research: ResearchConfig, duckdb: DuckDBResource
    ) -> MaterializeResult:
        settings = research.settings(duckdb.database)
        lineage = lineage_store(duckdb)
        key = context.partition_key
        folder = evaluation_dir(settings, key)
        eval_config = resolve_config(config, folder)
        if config.suite.strip():
            store_config(eval_config, folder)
        with lineage.session():
            runs = NestedRuns(context, definitions, lineage)
            evaluation = evaluate(context, eval_config, settings, lineage, runs, folder)
        if evaluation.key != key:
            context.log.info(f"configuration key {evaluation.key}; results are written under partition {key}")
        evaluation.key = key
        json_path, md_path = write_evaluation(evaluation, folder)
        if not any(i.status == "scored" for i in evaluation.items):
            first = next((i.reason for i in evaluation.items if i.reason), "unknown reason")
            raise _refuse(f"every item of the evaluation failed (first: {first}); see {md_path}")
        return MaterializeResult(
            metadata={
                "evaluation": MetadataValue.md(evaluation_markdown(evaluation)),
                **figures(evaluation),
                "engine": evaluation.engine,
                "suite": MetadataValue.path(evaluation.suite),
                "config": MetadataValue.json(eval_config.model_dump(mode="json")),
                "eval_json": MetadataValue.path(str(json_path)),
                "eval_md": MetadataValue.path(str(md_path)),
            },
            check_results=[_check(evaluation)],
        )

    return [evaluation_results]


evaluation_job = define_asset_job(
    "evaluation_job",
    selection=AssetSelection.keys(ASSET_NAME),
    partitions_def=evaluation_partitions,
    description="Evaluate a suite: research or resume every item (one research partition each) and score the "
    "reports (evaluation_results). Leave config.suite empty to evaluate the partition's stored configuration again.",
)
