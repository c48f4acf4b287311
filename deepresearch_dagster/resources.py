"""Dagster resources: research settings and the DuckDB lineage database."""

from __future__ import annotations

from pathlib import Path

from dagster import ConfigurableResource
from dagster_duckdb import DuckDBResource
from pydantic import Field

from .core.lineage import LineageStore
from .core.settings import ResearchSettings


class ResearchConfig(ConfigurableResource):
    """Unset fields fall back to environment variables (``DEEPRESEARCH_*``, ``OPENAI_BASE_URL``)
    read in the run process; API keys are never part of resource config."""

    engine: str | None = Field(default=None, description="auto | offline | openai")
    artifacts_dir: str | None = Field(default=None, description="artifact root folder")
    corpus_dir: str | None = Field(default=None, description="local corpus folder")
    max_steps: int | None = None
    max_tool_calls_per_step: int | None = None
    docs_per_step: int | None = None

    def settings(self, duckdb_path: str) -> ResearchSettings:
        return ResearchSettings.from_env(
            engine=self.engine,
            artifacts_dir=self.artifacts_dir,
            corpus_dir=self.corpus_dir,
            max_steps=self.max_steps,
            max_tool_calls_per_step=self.max_tool_calls_per_step,
            docs_per_step=self.docs_per_step,
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
