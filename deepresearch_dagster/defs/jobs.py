"""Jobs: the full research, the two replays, and submitting a question from the launchpad.

Replays re-materialize one stage of an existing partition from what is stored on disk; no
tool runs again. Their launchpad is prefilled with the ``research`` resource keys a replay
overrides (unset keys fall back to the environment, as in every run).
"""

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
from pydantic import Field

from ..core.naming import partition_key_for
from ..core.requests import RequestError, RequestQueue
from .assets import compressed_summaries, research_assets, research_report
from .partitions import research_partitions

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
    config={"resources": {"research": {"config": {"compressor_model": None, "compressor_prompt_file": None}}}},
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
    config={"resources": {"research": {"config": {"reporter_model": None}}}},
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
        path = RequestQueue.from_env().enqueue(config.question, options)
    except RequestError as exc:
        raise Failure(description=f"request rejected: {exc}") from exc
    key = partition_key_for(config.question.strip())
    context.log.info(f"queued {path.name}; the sensor will research partition {key}")
    return Output(key, metadata={"partition_key": key, "request_file": MetadataValue.path(str(path))})


@job(description="Submit a research question from the launchpad (queued for the research_requests_sensor).")
def submit_research_job() -> None:
    enqueue_research_request()


all_jobs = [research_job, recompress_job, rewrite_report_job, submit_research_job]
