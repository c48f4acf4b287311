"""Dagster resources: research settings and the DuckDB lineage database."""

from __future__ import annotations

from pathlib import Path

from dagster import ConfigurableResource
from dagster_duckdb import DuckDBResource
from pydantic import Field

from ..core.config import ResearchSettings
from ..core.store.lineage import LineageStore


class ResearchConfig(ConfigurableResource):
    """Unset fields fall back to environment variables (``DEEPRESEARCH_*``, ``OPENAI_BASE_URL``)
    read in the run process; API keys are never part of resource config."""

    engine: str | None = Field(default=None, description="auto | offline | openai")
    artifacts_dir: str | None = Field(default=None, description="artifact root folder")
    corpus_dir: str | None = Field(default=None, description="local corpus folder")
    max_steps: int | None = None
    max_tool_calls_per_step: int | None = None
    max_sources_per_step: int | None = None
    depth: int | None = None
    breadth: int | None = None
    # Replays (recompress_job / rewrite_report_job) try another model or prompt version.
    compressor_model: str | None = Field(default=None, description="compressor model for this run")
    reporter_model: str | None = Field(default=None, description="reporter model for this run")
    compressor_prompt_file: str | None = Field(
        default=None, description="replacement compressor prompt file (its content hash is the prompt version)"
    )

    def settings(self, duckdb_path: str) -> ResearchSettings:
        return self._with_replay_overrides(self._base_settings(duckdb_path))

    def _with_replay_overrides(self, settings: ResearchSettings) -> ResearchSettings:
        models = dict(settings.models)
        for role, model in (("compressor", self.compressor_model), ("reporter", self.reporter_model)):
            if model:
                models[role] = model
        prompts = dict(settings.prompt_files)
        if self.compressor_prompt_file:
            path = Path(self.compressor_prompt_file).resolve()
            if not path.is_file():
                raise FileNotFoundError(f"compressor prompt file not found: {path}")
            prompts["compressor"] = str(path)
        return settings.model_copy(update={"models": models, "prompt_files": prompts})

    def _base_settings(self, duckdb_path: str) -> ResearchSettings:
        return ResearchSettings.from_env(
            engine=self.engine,
            artifacts_dir=self.artifacts_dir,
            corpus_dir=self.corpus_dir,
            max_steps=self.max_steps,
            max_tool_calls_per_step=self.max_tool_calls_per_step,
            max_sources_per_step=self.max_sources_per_step,
            depth=self.depth,
            breadth=self.breadth,
            duckdb_path=duckdb_path,
        )


def lineage_store(duckdb: DuckDBResource) -> LineageStore:
    # DuckDB creates the file but not its folder; a missing folder would spin in backoff.
    Path(duckdb.database).parent.mkdir(parents=True, exist_ok=True)
    return LineageStore(duckdb.get_connection, str(Path(duckdb.database).resolve()))


def default_resources() -> dict[str, object]:
    from .io_manager import ResearchIOManager

    settings = ResearchSettings.from_env()
    return {
        "research": ResearchConfig(),
        "duckdb": DuckDBResource(database=str(settings.duckdb_file)),
        "research_io_manager": ResearchIOManager(artifacts_dir=str(settings.artifacts_path)),
    }
