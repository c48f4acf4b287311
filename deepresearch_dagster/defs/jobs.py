"""Jobs: the full research, the two replays, and starting a question from the launchpad.

``start_research_job`` is the UI's front door: its launchpad opens with an empty question and
every per-research option (``core.config.RequestOptions``, empty = the configured default). The
op validates the question (coordinator) and options, registers the question, adds its
partition (slug + hash key) and tags its run with the key; the ``start_research_sensor`` then
launches ``research_job`` (all four assets) for that partition.

Replays re-materialize one stage of an existing partition from what is stored on disk; no
tool runs again. Their launchpad is prefilled with the ``research`` resource keys a replay
overrides (empty = the environment's setting).
"""

from pathlib import Path
from typing import Any

from dagster import (
    AssetSelection,
    Config,
    Failure,
    MetadataValue,
    OpExecutionContext,
    Output,
    define_asset_job,
    job,
    op,
)
from dagster_duckdb import DuckDBResource
from pydantic import Field, ValidationError

from ..core.config import RequestOptions, load_settings
from ..core.errors import InvalidQuestion
from ..core.naming import partition_key_for
from ..core.pipeline import register
from ..core.requests import RequestError, RequestQueue
from .assets import compressed_summaries, research_assets, research_report
from .partitions import ensure_partition, research_partitions
from .resources import lineage_store, option_fields

# The launchpad opens with an empty question to type into, not a sample to delete: Dagster folds a
# long default over several YAML lines, and replacing only the first line left the second one as
# a continuation that still validated ("No errors"), so the research asked a mixed question.
EMPTY_QUESTION = ""
EMPTY_HINT = "the question is empty: type it between the quotes of question in the launchpad"

research_job = define_asset_job(
    "research_job",
    selection=AssetSelection.assets(*research_assets),
    partitions_def=research_partitions,
    description="Plan, research, compress and report one research partition.",
)

recompress_job = define_asset_job(
    "recompress_job",
    selection=AssetSelection.assets(compressed_summaries),
    partitions_def=research_partitions,
    description=(
        "Replay: re-compress a partition's stored raw tool outputs, optionally with another compressor model "
        "(resources.research.config.compressor_model) or prompt file (compressor_prompt_file). Results are "
        "versioned by model + prompt version; no tool is called."
    ),
    # Empty strings, not None: the launchpad shows (and validates) these keys as they are.
    config={"resources": {"research": {"config": {"compressor_model": "", "compressor_prompt_file": ""}}}},
    tags={"deepresearch/replay": "recompress"},
)

rewrite_report_job = define_asset_job(
    "rewrite_report_job",
    selection=AssetSelection.assets(research_report),
    partitions_def=research_partitions,
    description=(
        "Replay: rewrite a partition's report from its stored compressed summaries, optionally with another "
        "reporter model (resources.research.config.reporter_model); no research tool is called."
    ),
    config={"resources": {"research": {"config": {"reporter_model": ""}}}},
    tags={"deepresearch/replay": "rewrite_report"},
)


class SubmitConfig(Config):
    question: str = Field(description="the research question")
    engine: str | None = Field(default=None, description="auto | offline | openai (default: the environment's)")
    options: dict[str, str] = Field(default_factory=dict, description="other request options, e.g. max_steps")


@op(description="Validate the question and queue it; the research_requests_sensor starts the research.")
def enqueue_research_request(context: OpExecutionContext, config: SubmitConfig) -> Output[str]:
    options: dict[str, Any] = {**config.options, "engine": config.engine}
    try:
        path = RequestQueue.for_settings(load_settings()).enqueue(config.question, options)
    except RequestError as exc:
        raise Failure(description=f"request rejected: {exc}") from exc
    key = partition_key_for(config.question.strip())
    context.log.info(f"queued {path.name}; the sensor will research partition {key}")
    return Output(key, metadata={"partition_key": key, "request_file": MetadataValue.path(str(path))})


@job(
    description="Submit a research question from the launchpad (queued for the research_requests_sensor).",
    config={
        "ops": {"enqueue_research_request": {"config": {"question": EMPTY_QUESTION, "engine": None, "options": {}}}}
    },
)
def submit_research_job() -> None:
    enqueue_research_request()


# The start run's tag holding the partition it registered; start_research_sensor reads it.
PARTITION_TAG = "deepresearch/partition"


def _start_config_fields() -> dict[str, Any]:
    """The question plus one field per request option (the resource's fields, same source)."""
    namespace = option_fields(__name__, " (empty = the configured default)")
    namespace["__annotations__"] = {"question": str, **namespace["__annotations__"]}
    namespace["question"] = Field(
        default=EMPTY_QUESTION,
        description="the research question as you would ask it, between the quotes: any punctuation or language, "
        "up to 10,000 characters",
    )
    return namespace


StartResearchConfig = type("StartResearchConfig", (Config,), _start_config_fields())
StartResearchConfig.__doc__ = "A research question and its per-research options (core.config.RequestOptions)."


def start_options(config: Any) -> RequestOptions:
    """The launchpad's options as RequestOptions ('' = unset); raises ValueError with the reason."""
    values = {k: getattr(config, k) for k in RequestOptions.model_fields}
    values = {k: (None if v == "" else v) for k, v in values.items()}
    if values["corpus_dir"]:
        corpus = Path(values["corpus_dir"]).expanduser().resolve()
        if not corpus.is_dir():
            raise ValueError(f"corpus folder not found: {corpus}")
        values["corpus_dir"] = str(corpus)
    try:
        options = RequestOptions.model_validate(values)
        load_settings().with_options(options)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'option'}: {e['msg']}" for e in exc.errors())
        raise ValueError(problems) from exc
    return options


@op(
    description="Validate the question and options, register the question, add its partition and tag this run "
    "with the key; the start_research_sensor then launches research_job (all four assets) for it."
)
def start_research(context: OpExecutionContext, config: StartResearchConfig, duckdb: DuckDBResource) -> Output[str]:
    try:
        options = start_options(config)
    except ValueError as exc:
        raise Failure(description=f"invalid option: {exc}", allow_retries=False) from exc
    if not config.question.strip():
        raise Failure(description=f"invalid question: {EMPTY_HINT}", allow_retries=False)
    try:
        key = register(lineage_store(duckdb), config.question, options.set_values())
    except InvalidQuestion as exc:
        raise Failure(description=f"invalid question: {exc}", allow_retries=False) from exc
    ensure_partition(context.instance, key)
    context.instance.add_run_tags(context.run_id, {PARTITION_TAG: key})
    context.log.info(
        f"registered partition {key}; start_research_sensor launches research_job for it within seconds "
        "(the daemon runs under `make dev`). Follow it under Runs; read the report on the research_report asset."
    )
    return Output(
        key,
        metadata={
            "partition_key": key,
            "question": config.question.strip(),
            "options": MetadataValue.json(options.set_values()),
            # Relative: opens in the same webserver, wherever it is served.
            "report_in_the_ui": MetadataValue.url(f"/assets/research_report?view=events&partition={key}"),
        },
    )


@job(
    description="Start a research from the launchpad: type the question as you would ask it (spaces, punctuation, "
    "any language) and set options if you like; research_job then materializes all four assets for its partition.",
    # A plain dict keeps the None options, so the launchpad lists every one of them (null = default).
    config={
        "ops": {
            "start_research": {"config": {"question": EMPTY_QUESTION, **dict.fromkeys(RequestOptions.model_fields)}}
        }
    },
    tags={"deepresearch/source": "ui"},
)
def start_research_job() -> None:
    start_research()


all_jobs = [research_job, recompress_job, rewrite_report_job, start_research_job, submit_research_job]
