"""Research settings: defaults, then environment variables, then per-request options."""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from .llm.budget import DEFAULT_PRICES, BudgetLimits
from .llm.engine import ROLES, Engine
from .tools.local_search import DEFAULT_CORPUS
from .web.fetch import FetchPolicy

DEFAULT_MODELS = {
    "planner": "gpt-4o-mini",
    "researcher": "gpt-4o-mini",
    "compressor": "gpt-4o-mini",
    "critic": "gpt-4o-mini",
    "reporter": "gpt-4o",
}

# Output budgets per role: compressions are short by contract, reports are long.
DEFAULT_MAX_TOKENS = {"planner": 1500, "researcher": 800, "compressor": 900, "critic": 900, "reporter": 4000}

# Options a single research request may override (stored with the request in DuckDB).
REQUEST_OPTIONS = (
    "engine",
    "corpus_dir",
    "max_steps",
    "max_tool_calls_per_step",
    "max_sources_per_step",
    "depth",
    "breadth",
    "budget_tokens",
    "budget_dollars",
    "budget_llm_calls",
    "budget_tool_calls",
    "budget_wall_s",
)


# Scalar settings read from the environment when set (pydantic converts the strings).
ENV_FIELDS = {
    "temperature": "DEEPRESEARCH_TEMPERATURE",
    "llm_timeout_s": "DEEPRESEARCH_LLM_TIMEOUT",
    "llm_max_attempts": "DEEPRESEARCH_LLM_MAX_ATTEMPTS",
    "llm_backoff_base_s": "DEEPRESEARCH_LLM_BACKOFF_BASE",
    "llm_backoff_max_s": "DEEPRESEARCH_LLM_BACKOFF_MAX",
    "response_format": "DEEPRESEARCH_RESPONSE_FORMAT",
    "max_steps": "DEEPRESEARCH_MAX_STEPS",
    "max_tool_calls_per_step": "DEEPRESEARCH_MAX_TOOL_CALLS_PER_STEP",
    "max_sources_per_step": "DEEPRESEARCH_MAX_SOURCES_PER_STEP",
    "depth": "DEEPRESEARCH_DEPTH",
    "breadth": "DEEPRESEARCH_BREADTH",
    "fanout_concurrency": "DEEPRESEARCH_FANOUT_CONCURRENCY",
    "sufficiency_threshold": "DEEPRESEARCH_SUFFICIENCY_THRESHOLD",
    "budget_tokens": "DEEPRESEARCH_BUDGET_TOKENS",
    "budget_dollars": "DEEPRESEARCH_BUDGET_DOLLARS",
    "budget_llm_calls": "DEEPRESEARCH_BUDGET_LLM_CALLS",
    "budget_tool_calls": "DEEPRESEARCH_BUDGET_TOOL_CALLS",
    "budget_wall_s": "DEEPRESEARCH_BUDGET_WALL_S",
    "tool_cache_ttl_s": "DEEPRESEARCH_TOOL_CACHE_TTL",
    "fetch_allow_loopback": "DEEPRESEARCH_FETCH_ALLOW_LOOPBACK",
    "fetch_allow_private": "DEEPRESEARCH_FETCH_ALLOW_PRIVATE",
    "fetch_respect_robots": "DEEPRESEARCH_FETCH_RESPECT_ROBOTS",
    "enable_fetch": "DEEPRESEARCH_ENABLE_FETCH",
    "context_mode": "DEEPRESEARCH_CONTEXT_MODE",
    "min_context_reduction_pct": "DEEPRESEARCH_MIN_CONTEXT_REDUCTION",
}


class ResearchSettings(BaseModel):
    engine: Literal["auto", "offline", "openai"] = "auto"
    artifacts_dir: str = "artifacts"
    duckdb_path: str = ""
    corpus_dir: str = ""
    max_steps: int = Field(default=5, ge=1, le=7)
    max_tool_calls_per_step: int = Field(default=8, ge=1, le=30)
    max_sources_per_step: int = Field(default=2, ge=1, le=10)  # top-K results read per step
    depth: int = Field(default=1, ge=0, le=5)  # reflection rounds after the first pass
    breadth: int = Field(default=3, ge=1, le=8)  # query variants searched per step
    fanout_concurrency: int = Field(default=4, ge=1, le=16)
    sufficiency_threshold: int = Field(default=7, ge=1, le=10)
    max_followups_per_round: int = Field(default=2, ge=1, le=5)
    budget_tokens: int = Field(default=400_000, ge=0)
    budget_dollars: float = Field(default=2.0, ge=0)
    budget_llm_calls: int = Field(default=300, ge=0)
    budget_tool_calls: int = Field(default=150, ge=0)
    budget_wall_s: float = Field(default=3600.0, ge=0)
    report_lookups: int = Field(default=3, ge=0, le=10)
    openai_base_url: str | None = None
    models: dict[str, str] = Field(default_factory=lambda: dict(DEFAULT_MODELS))
    max_tokens: dict[str, int] = Field(default_factory=lambda: dict(DEFAULT_MAX_TOKENS))
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    # Per-role overrides of ``temperature`` (DEEPRESEARCH_TEMPERATURE_<ROLE>).
    role_temperatures: dict[str, float] = Field(default_factory=dict)
    llm_timeout_s: float = 120.0
    llm_max_attempts: int = Field(default=4, ge=1, le=10)
    llm_backoff_base_s: float = Field(default=1.0, ge=0.0)
    llm_backoff_max_s: float = Field(default=30.0, ge=0.0)
    response_format: Literal["json_schema", "json_object", "none"] = "json_schema"
    # "raw" injects whole tool outputs instead of summaries: the baseline for benchmarks only.
    context_mode: Literal["compressed", "raw"] = "compressed"
    # Role -> replacement prompt file (replays: recompress with another prompt version).
    prompt_files: dict[str, str] = Field(default_factory=dict)
    tool_cache_ttl_s: float = Field(default=86_400.0, ge=0.0)
    # The tool_outputs asset check fails below this context reduction (seed 000 §10: > 80 %).
    min_context_reduction_pct: float = Field(default=80.0, ge=0.0, le=100.0)
    fetch_allow_loopback: bool = False
    fetch_allow_private: bool = False
    fetch_respect_robots: bool = True
    enable_fetch: bool = False

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
            "max_tokens": {
                r: int(env.get(f"DEEPRESEARCH_MAX_TOKENS_{r.upper()}", DEFAULT_MAX_TOKENS[r])) for r in ROLES
            },
        }
        values["role_temperatures"] = {
            r: float(env[f"DEEPRESEARCH_TEMPERATURE_{r.upper()}"])
            for r in ROLES
            if env.get(f"DEEPRESEARCH_TEMPERATURE_{r.upper()}")
        }
        for field_name, var in ENV_FIELDS.items():
            if env.get(var):
                values[field_name] = env[var]
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

    def budget_limits(self) -> BudgetLimits:
        return BudgetLimits(
            tokens=self.budget_tokens,
            dollars=self.budget_dollars,
            llm_calls=self.budget_llm_calls,
            tool_calls=self.budget_tool_calls,
            wall_s=self.budget_wall_s,
        )

    def prices(self) -> dict[str, tuple[float, float]]:
        """Price table per 1M tokens; DEEPRESEARCH_PRICES (JSON {"model": [in, out]}) extends it."""
        table = dict(DEFAULT_PRICES)
        extra = os.environ.get("DEEPRESEARCH_PRICES")
        if extra:
            table.update({k: (float(v[0]), float(v[1])) for k, v in json.loads(extra).items()})
        return table

    def fetch_policy(self) -> FetchPolicy:
        return FetchPolicy(
            allow_loopback=self.fetch_allow_loopback,
            allow_private=self.fetch_allow_private,
            respect_robots=self.fetch_respect_robots,
        )

    def make_engine(self) -> Engine:
        if self.resolved_engine() == "offline":
            from .llm.offline import OfflineEngine

            return OfflineEngine()
        # The key is read here and handed to the client only: never stored or logged.
        return _openai_engine(
            json.dumps(self.model_dump(include=_ENGINE_FIELDS), sort_keys=True), os.environ.get("OPENAI_API_KEY")
        )


_ENGINE_FIELDS = {
    "models",
    "openai_base_url",
    "llm_timeout_s",
    "temperature",
    "role_temperatures",
    "max_tokens",
    "llm_max_attempts",
    "llm_backoff_base_s",
    "llm_backoff_max_s",
    "response_format",
}


@lru_cache(maxsize=16)
def _openai_engine(config: str, api_key: str | None) -> Engine:
    """One client per configuration and process: every Dagster op opens a context, and a new
    client pays for a new connection pool and TLS context each time."""
    from .llm.openai_engine import OpenAIEngine, RetryPolicy

    c = ResearchSettings.model_validate(json.loads(config))
    return OpenAIEngine(
        models=c.models,
        base_url=c.openai_base_url,
        api_key=api_key,
        timeout=c.llm_timeout_s,
        temperature={r: c.role_temperatures.get(r, c.temperature) for r in ROLES},
        max_tokens=c.max_tokens,
        retry=RetryPolicy(c.llm_max_attempts, c.llm_backoff_base_s, c.llm_backoff_max_s),
        response_format=c.response_format,
    )
