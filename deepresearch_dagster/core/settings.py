"""Research settings: defaults, then environment variables, then per-request options."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from .engines.base import ROLES, Engine
from .tools.local_search import DEFAULT_CORPUS

DEFAULT_MODELS = {
    "planner": "gpt-4o-mini",
    "researcher": "gpt-4o-mini",
    "compressor": "gpt-4o-mini",
    "reporter": "gpt-4o",
}

# Options a single research request may override (stored with the request in DuckDB).
REQUEST_OPTIONS = ("engine", "corpus_dir", "max_steps", "max_tool_calls_per_step", "docs_per_step")


class ResearchSettings(BaseModel):
    engine: Literal["auto", "offline", "openai"] = "auto"
    artifacts_dir: str = "artifacts"
    duckdb_path: str = ""
    corpus_dir: str = ""
    max_steps: int = Field(default=5, ge=1, le=7)
    max_tool_calls_per_step: int = Field(default=4, ge=1, le=20)
    docs_per_step: int = Field(default=2, ge=1, le=10)
    report_lookups: int = Field(default=3, ge=0, le=10)
    openai_base_url: str | None = None
    models: dict[str, str] = Field(default_factory=lambda: dict(DEFAULT_MODELS))
    llm_timeout_s: float = 120.0

    @classmethod
    def from_env(cls, **overrides: Any) -> ResearchSettings:
        env = os.environ
        values: dict[str, Any] = {
            "engine": env.get("DEEPRESEARCH_ENGINE", "auto"),
            "artifacts_dir": env.get("DEEPRESEARCH_ARTIFACTS_DIR", "artifacts"),
            "duckdb_path": env.get("DEEPRESEARCH_DUCKDB", ""),
            "corpus_dir": env.get("DEEPRESEARCH_CORPUS", ""),
            "openai_base_url": env.get("OPENAI_BASE_URL") or None,
            "models": {r: env.get(f"DEEPRESEARCH_MODEL_{r.upper()}", DEFAULT_MODELS[r]) for r in ROLES},
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    def with_options(self, options: dict[str, Any]) -> ResearchSettings:
        picked = {k: v for k, v in options.items() if k in REQUEST_OPTIONS and v not in (None, "")}
        return self.model_copy(update=ResearchSettings(**{**self.model_dump(), **picked}).model_dump())

    @property
    def artifacts_path(self) -> Path:
        return Path(self.artifacts_dir).resolve()

    @property
    def duckdb_file(self) -> Path:
        return Path(self.duckdb_path).resolve() if self.duckdb_path else self.artifacts_path / "lineage.duckdb"

    @property
    def corpus_path(self) -> Path:
        return Path(self.corpus_dir).resolve() if self.corpus_dir else DEFAULT_CORPUS

    def resolved_engine(self) -> Literal["offline", "openai"]:
        if self.engine != "auto":
            return self.engine
        configured = os.environ.get("OPENAI_API_KEY") or self.openai_base_url
        return "openai" if configured else "offline"

    def make_engine(self) -> Engine:
        if self.resolved_engine() == "offline":
            from .engines.offline import OfflineEngine

            return OfflineEngine()
        from .engines.openai_engine import OpenAIEngine

        # The key is read here and handed to the client only: never stored or logged.
        return OpenAIEngine(
            models=self.models,
            base_url=self.openai_base_url,
            api_key=os.environ.get("OPENAI_API_KEY"),
            timeout=self.llm_timeout_s,
        )
