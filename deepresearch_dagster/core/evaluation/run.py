"""Run a suite: research each item (or resume it), score it from its artifacts, aggregate.

Each item is one research partition whose key is derived from the question and every setting
that changes the research (engine, corpus, size knobs, models and server for a model engine):
an item already researched with the same settings is scored from its stored artifacts, never
re-run. How a research runs is the caller's (the CLI and the Dagster asset run the Dagster
``research_job``; tests may call the pipeline directly), so this module needs no Dagster.

An evaluation is written under ``<artifacts>/evaluations/<key>/`` as ``eval.json`` (every item
and the summary) and ``eval.md`` (the same as tables), where ``key`` names the suite and the
configuration (one Dagster ``evaluations`` partition each).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, Field

from ..config import ResearchSettings
from ..errors import ResearchError, SuiteError
from ..naming import short_hash, slugify
from ..store.lineage import LineageStore
from .score import ItemScore, score_item
from .suite import ItemFailure, Suite, SuiteItem, load_suite, split_of

__all__ = [
    "EvalConfig",
    "Evaluation",
    "Researcher",
    "evaluation_dir",
    "item_partition_key",
    "run_evaluation",
    "summarize",
]

EVALUATIONS_FOLDER = "evaluations"
# The figures summed or counted per group of items, in the order tables show them.
ANSWER_FIGURES = ("answer_in_report", "answer_in_summary", "answer_in_findings", "answer_in_memory", "answer_in_raw")
SUM_FIGURES = (
    "facts_found",
    "facts_total",
    "stale",
    "verified_citations",
    "removed_citations",
    "uncited_sentences",
    "ungrounded_figures",
    "contradictions",
    "duplicated_sentences",
    "tokens",
    "tool_calls",
    "raw_tokens",
    "injected_tokens",
)


class EvalConfig(BaseModel):
    """What an evaluation runs: the suite and the settings every item's research gets."""

    suite: str
    corpus: str | None = Field(default=None, description="one folder for every item (else each item's own)")
    engine: str | None = None
    limit: int | None = Field(default=None, ge=1)
    items: list[str] | None = None
    options: dict[str, Any] = Field(default_factory=dict, description="research size knobs (RequestOptions)")
    judge_model: str | None = None
    recompress: str | None = Field(default=None, description="MODEL[/PROMPT_FILE]: replay the compressor only")
    rerun: bool = Field(default=False, description="research every item again instead of resuming")

    def identity(self) -> dict[str, Any]:
        """The settings that make two evaluations the same one (not limit/items/rerun)."""
        return self.model_dump(include={"corpus", "engine", "options", "judge_model", "recompress"})


class Evaluation(BaseModel):
    key: str
    suite: str
    config: EvalConfig
    engine: str
    models: dict[str, str] = Field(default_factory=dict)
    items: list[ItemScore]
    failures: list[ItemFailure] = Field(default_factory=list)
    summary: dict[str, Any] = Field(default_factory=dict)
    # A compressor replay: what the replayed memory keeps, per item, beside the original.
    recompress: dict[str, Any] | None = None


class Researcher(Protocol):
    """Runs one item's research partition (already registered); returns an error or ``None``."""

    def __call__(self, partition_key: str) -> str | None: ...


def evaluation_key(config: EvalConfig, engine: str) -> str:
    stem = slugify(Path(config.suite).stem, 32, sep="-", hash_on_cut=False)
    identity = json.dumps({"suite": str(Path(config.suite).resolve()), **config.identity()}, sort_keys=True)
    return f"{stem}-{engine}-{short_hash(identity)}"


def evaluation_dir(settings: ResearchSettings, key: str) -> Path:
    return settings.artifacts_path / EVALUATIONS_FOLDER / key


def research_options(config: EvalConfig, suite: Suite, item: SuiteItem) -> dict[str, Any]:
    options = {k: v for k, v in config.options.items() if v is not None}
    if config.engine:
        options["engine"] = config.engine
    corpus = suite.corpus_of(item, config.corpus)
    if corpus:
        options["corpus_dir"] = corpus
    return options


def item_partition_key(question: str, options: dict[str, Any], settings: ResearchSettings) -> str:
    """One partition per question and research settings; a model engine adds its models and
    server, so another model is another research (the offline engine has neither)."""
    effective = settings.with_options(options)
    engine = effective.resolved_engine()
    identity: dict[str, Any] = {"question": question.strip(), "options": options, "engine": engine}
    if engine == "openai":
        identity |= {"models": effective.models, "server": effective.openai_base_url}
    slug = slugify(question, 40, sep="-", hash_on_cut=False)
    return f"{slug}-{short_hash(json.dumps(identity, sort_keys=True, default=str))}"


def _select(suite: Suite, config: EvalConfig) -> tuple[list[SuiteItem], list[ItemFailure]]:
    items = suite.items
    failures = list(suite.failures)
    if config.items:
        wanted = set(config.items)
        unknown = sorted(wanted - {i.id for i in items})
        failures += [ItemFailure(id=i, reason="no such item in the suite") for i in unknown]
        items = [i for i in items if i.id in wanted]
    if config.limit:
        items = items[: config.limit]
    return items, failures


def _missing_corpus(suite: Suite, config: EvalConfig, item: SuiteItem) -> str | None:
    corpus = suite.corpus_of(item, config.corpus)
    if corpus and not Path(corpus).is_dir():
        return f"corpus folder not found: {corpus}"
    return None


def run_evaluation(
    config: EvalConfig,
    settings: ResearchSettings,
    lineage: LineageStore,
    research: Researcher,
    progress: Callable[[int, int, ItemScore], None] | None = None,
    judge: Callable[[SuiteItem, ItemScore, Path], dict[str, Any]] | None = None,
) -> Evaluation:
    """Research (or resume) and score every selected item; an item that fails is recorded with
    its reason and the others go on. Writes ``eval.json`` and ``eval.md``."""
    from ..pipeline import register

    suite = load_suite(config.suite)
    items, failures = _select(suite, config)
    if not items:
        raise SuiteError(f"no item of {config.suite} matches --items {','.join(config.items or [])}")
    engine = settings.with_options({"engine": config.engine} if config.engine else {}).resolved_engine()
    key = evaluation_key(config, engine)
    scores: list[ItemScore] = []
    for index, item in enumerate(items, start=1):
        split = split_of(item.id)
        started = time.monotonic()
        score = _research_and_score(config, suite, item, split, settings, lineage, research, register)
        if score.wall_s is None:  # no stage times recorded: the time this call took
            score.wall_s = round(time.monotonic() - started, 2)
        if score.status == "scored" and judge is not None:
            score.judge = judge(item, score, settings.artifacts_path / str(score.partition_key))
        scores.append(score)
        if progress is not None:
            progress(index, len(items), score)
    models = next((s.models for s in scores if s.models), {})
    evaluation = Evaluation(
        key=key, suite=suite.path, config=config, engine=engine, models=models, items=scores, failures=failures
    )
    evaluation.summary = summarize(scores)
    return evaluation


def _research_and_score(
    config: EvalConfig,
    suite: Suite,
    item: SuiteItem,
    split: str,
    settings: ResearchSettings,
    lineage: LineageStore,
    research: Researcher,
    register: Callable[..., str],
) -> ItemScore:
    failed = ItemScore(id=item.id, question=item.question, category=item.category, split=split, status="failed")
    problem = _missing_corpus(suite, config, item)
    if problem:
        return failed.model_copy(update={"reason": problem})
    options = research_options(config, suite, item)
    try:
        key = item_partition_key(item.question, options, settings)
    except (ValueError, ResearchError) as exc:
        return failed.model_copy(update={"reason": f"invalid research settings: {exc}"})
    failed.partition_key = key
    partition_dir = settings.artifacts_path / key
    done = (partition_dir / "report.json").is_file() and lineage.research_status(key) == "succeeded"
    resumed = done and not config.rerun
    if not resumed:
        try:
            register(lineage, item.question, options, partition_key=key)
        except ResearchError as exc:
            return failed.model_copy(update={"reason": str(exc)})
        error = research(key)
        if error is not None:
            return failed.model_copy(update={"reason": error})
    try:
        score = score_item(item, split, partition_dir, lineage.evaluation_figures(key))
    except (OSError, ValueError, KeyError) as exc:
        return failed.model_copy(update={"reason": f"cannot score the stored research: {exc}"})
    score.engine = settings.with_options(options).resolved_engine()
    score.resumed = resumed
    return score


def _rate(hits: int, n: int) -> float | None:
    return round(100 * hits / n, 1) if n else None


def _group(scores: list[ItemScore]) -> dict[str, Any]:
    scored = [s for s in scores if s.status == "scored"]
    group: dict[str, Any] = {"items": len(scores), "scored": len(scored), "failed": len(scores) - len(scored)}
    answerable = [s for s in scored if s.answer_in_report is not None]
    group["answerable"] = len(answerable)
    for name in ANSWER_FIGURES:
        hits = sum(bool(getattr(s, name)) for s in answerable)
        group[name] = hits
        group[f"{name}_pct"] = _rate(hits, len(answerable))
    for name in SUM_FIGURES:
        group[name] = sum(getattr(s, name) for s in scored)
    group["facts_pct"] = _rate(group["facts_found"], group["facts_total"])
    walls = [s.wall_s for s in scored if s.wall_s is not None]
    group["wall_s"] = round(sum(walls), 1)
    costs = [s.dollars for s in scored]
    group["dollars"] = None if any(c is None for c in costs) else round(sum(c or 0.0 for c in costs), 6)
    fallbacks: dict[str, int] = {}
    for s in scored:
        for role, n in s.fallbacks.items():
            fallbacks[role] = fallbacks.get(role, 0) + n
    group["fallbacks"] = dict(sorted(fallbacks.items()))
    judged = [s.judge for s in scored if s.judge]
    if judged:
        group["judge_correct"] = sum(bool(j.get("correct")) for j in judged)
        group["judge_supported"] = sum(int(j.get("supported", 0)) for j in judged)
        group["judge_claims"] = sum(int(j.get("claims", 0)) for j in judged)
    return group


def summarize(scores: list[ItemScore]) -> dict[str, Any]:
    """The figures over every item; the answer figures count the plain-answer items only (yes/no,
    non-verbatim and answers named in the question are reported apart, by category)."""
    plain = [s for s in scores if s.category in ("answer", "facts", "judge_only")]
    summary = _group(plain)
    summary["all_items"] = len(scores)
    summary["failed"] = sum(s.status == "failed" for s in scores)
    summary["by_category"] = {c: _group([s for s in scores if s.category == c]) for c in _ordered(scores, "category")}
    summary["by_split"] = {p: _group([s for s in plain if s.split == p]) for p in _ordered(plain, "split")}
    return summary


def _ordered(scores: list[ItemScore], field: str) -> list[str]:
    return sorted({getattr(s, field) for s in scores})


def read_evaluation(path: str | Path, settings: ResearchSettings | None = None) -> Evaluation:
    """An ``eval.json``, its folder, or (with settings) an evaluation key."""
    candidate = Path(path)
    if candidate.is_dir():
        candidate = candidate / "eval.json"
    if not candidate.is_file() and settings is not None:
        candidate = evaluation_dir(settings, str(path)) / "eval.json"
    if not candidate.is_file():
        raise SuiteError(f"no evaluation at {path} (an eval.json, its folder, or an evaluation key)")
    try:
        return Evaluation.model_validate_json(candidate.read_text("utf-8"))
    except ValueError as exc:
        raise SuiteError(f"{candidate} is not an evaluation: {str(exc).splitlines()[0]}") from exc
