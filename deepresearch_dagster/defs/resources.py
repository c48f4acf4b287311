"""Dagster resources: research settings and the DuckDB lineage database.

``ResearchConfig``'s per-research fields are generated from ``core.config.RequestOptions``, the
one list of research knobs, so the launchpad, the CLI flags and request files cannot drift.
Unset fields fall back to the configuration (environment, config file, defaults) read in the
run process; API keys are never part of resource config.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dagster import ConfigurableResource, InitResourceContext
from dagster_duckdb import DuckDBResource
from pydantic import Field, PrivateAttr

from ..core.config import RequestOptions, ResearchSettings, load_settings
from ..core.errors import ConfigError
from ..core.store.lineage import LINEAGE_FROM_CONFIG, LineageStore


class _ResearchConfigBase(ConfigurableResource):
    artifacts_dir: str | None = Field(default=None, description="artifact root folder")
    # Replays (recompress_job / rewrite_report_job) try another model or prompt version.
    compressor_model: str | None = Field(default=None, description="compressor model for this run")
    reporter_model: str | None = Field(default=None, description="reporter model for this run")
    compressor_prompt_file: str | None = Field(
        default=None, description="replacement compressor prompt file (its content hash is the prompt version)"
    )
    # Settings are read once per run (not once per op); keyed by the DuckDB path.
    _settings: dict[str, ResearchSettings] = PrivateAttr(default_factory=dict)

    def setup_for_execution(self, context: InitResourceContext) -> None:
        self._settings = {}

    def options(self) -> RequestOptions:
        return RequestOptions.model_validate({k: getattr(self, k) for k in RequestOptions.model_fields})

    def settings(self, duckdb_path: str) -> ResearchSettings:
        if duckdb_path not in self._settings:
            base = load_settings({"artifacts_dir": self.artifacts_dir, "duckdb_path": duckdb_path})
            self._settings[duckdb_path] = self._with_replay_overrides(base.with_options(self.options()))
        return self._settings[duckdb_path]

    def _with_replay_overrides(self, settings: ResearchSettings) -> ResearchSettings:
        models = dict(settings.models)
        for role, model in (("compressor", self.compressor_model), ("reporter", self.reporter_model)):
            if model:
                models[role] = model
        prompts = dict(settings.prompt_files)
        if self.compressor_prompt_file:
            path = Path(self.compressor_prompt_file).resolve()
            if not path.is_file():
                raise ConfigError(f"compressor prompt file not found: {path}")
            prompts["compressor"] = str(path)
        return settings.model_copy(update={"models": models, "prompt_files": prompts})


def option_fields(module: str, description_suffix: str = "") -> dict[str, Any]:
    """A class namespace with one Dagster config field per request option (``None`` = the
    configured default; engine and corpus as plain strings): the resource and the start job's
    launchpad both derive their fields from ``RequestOptions`` through this."""
    namespace: dict[str, Any] = {"__annotations__": {}, "__module__": module}
    for name, info in RequestOptions.model_fields.items():
        kind = info.annotation if name not in ("engine", "corpus_dir") else str | None
        namespace["__annotations__"][name] = kind
        namespace[name] = Field(default=None, description=f"{info.description}{description_suffix}")
    return namespace


ResearchConfig = type("ResearchConfig", (_ResearchConfigBase,), option_fields(__name__))
ResearchConfig.__doc__ = __doc__


def lineage_store(duckdb: DuckDBResource) -> LineageStore:
    """The lineage store on the resource's file. With the default connection settings it uses
    the process's shared connection (core/store/lineage.py), so the ops of a run do not pay a
    connect per statement; custom ``connection_config`` keeps a connection per statement."""
    if duckdb.database == LINEAGE_FROM_CONFIG:
        return LineageStore.at(LINEAGE_FROM_CONFIG)
    # DuckDB creates the file but not its folder; a missing folder would spin in backoff.
    Path(duckdb.database).parent.mkdir(parents=True, exist_ok=True)
    if not duckdb.connection_config:
        return LineageStore.at(duckdb.database)
    return LineageStore(duckdb.get_connection, str(Path(duckdb.database).resolve()))


def default_resources(settings: ResearchSettings | None = None) -> dict[str, object]:
    from .io_manager import ResearchIOManager, SharedRunIOManager

    settings = settings or load_settings()
    resources: dict[str, object] = {
        "research": ResearchConfig(),
        # Lineage in Postgres: the resource names the setting, not the URL with its password.
        "duckdb": DuckDBResource(
            database=LINEAGE_FROM_CONFIG if settings.lineage_postgres else str(settings.duckdb_file)
        ),
        "research_io_manager": ResearchIOManager(artifacts_dir=str(settings.artifacts_path)),
    }
    if settings.celery_broker and settings.artifacts_url:
        resources["io_manager"] = SharedRunIOManager()  # steps on several hosts
    return resources
