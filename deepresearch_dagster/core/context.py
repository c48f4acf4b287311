"""What every role needs for one research (ids, settings, engine, storage, lineage, budget),
and the factories that build those parts from :class:`ResearchSettings`."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from functools import cached_property, lru_cache

from .config import ROLES, ResearchSettings
from .errors import ResearchInterrupted
from .llm.budget import BudgetLedger, BudgetLimits
from .llm.engine import Engine
from .store.artifacts import ArtifactStore
from .store.lineage import LineageStore
from .store.response_cache import ResponseCache
from .web.fetch import FetchPolicy

logger = logging.getLogger("deepresearch")

_ENGINE_FIELDS = {
    "models",
    "context_window",
    "openai_base_url",
    "llm_timeout_s",
    "temperature",
    "role_temperatures",
    "max_tokens",
    "llm_max_attempts",
    "llm_backoff_base_s",
    "llm_backoff_max_s",
    "response_format",
    "llm_tokens_per_s",
    "llm_stream",
    "llm_idle_timeout_s",
}


def make_engine(settings: ResearchSettings) -> Engine:
    if settings.resolved_engine() == "offline":
        from .llm.offline import OfflineEngine

        return OfflineEngine()
    key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else None
    return _openai_engine(json.dumps(settings.model_dump(include=_ENGINE_FIELDS), sort_keys=True), key)


@lru_cache(maxsize=16)
def _openai_engine(config: str, api_key: str | None) -> Engine:
    """One client per configuration and process: every Dagster op opens a context, and a new
    client pays for a new connection pool and TLS context each time. The key is handed to the
    client only: never stored or logged."""
    from .llm.openai_engine import OpenAIEngine, RetryPolicy

    c = json.loads(config)
    return OpenAIEngine(
        models=c["models"],
        base_url=c["openai_base_url"],
        api_key=api_key,
        timeout=c["llm_timeout_s"],
        temperature={r: c["role_temperatures"].get(r, c["temperature"]) for r in ROLES},
        max_tokens=c["max_tokens"],
        retry=RetryPolicy(c["llm_max_attempts"], c["llm_backoff_base_s"], c["llm_backoff_max_s"]),
        response_format=c["response_format"],
        tokens_per_s=c["llm_tokens_per_s"],
        stream=c["llm_stream"],
        idle_timeout=c["llm_idle_timeout_s"],
        context_window=c["context_window"],
    )


def budget_limits(settings: ResearchSettings) -> BudgetLimits:
    return BudgetLimits(
        tokens=settings.budget_tokens,
        dollars=settings.budget_dollars,
        llm_calls=settings.budget_llm_calls,
        tool_calls=settings.budget_tool_calls,
        wall_s=settings.budget_wall_s,
    )


def make_ledger(settings: ResearchSettings) -> BudgetLedger:
    return BudgetLedger(budget_limits(settings), dict(settings.prices))


def fetch_policy(settings: ResearchSettings) -> FetchPolicy:
    return FetchPolicy(
        allow_loopback=settings.fetch_allow_loopback,
        allow_private=settings.fetch_allow_private,
        respect_robots=settings.fetch_respect_robots,
    )


@dataclass
class ResearchContext:
    partition_key: str
    question: str
    run_id: str
    settings: ResearchSettings
    engine: Engine
    lineage: LineageStore
    log: Callable[[str], None] = field(default=logger.info)
    today: str = field(default_factory=lambda: date.today().isoformat())
    budget: BudgetLedger | None = None
    # True once the user asked to stop (the Dagster layer passes its captured-interrupt flag).
    interrupted: Callable[[], bool] = field(default=lambda: False)
    # The circuit breaker's view of each role's outcomes in this run, newest first: read from the
    # lineage once per context (a Dagster op opens its own), then kept by this context's own
    # records (llm/structured.py), so a model call no longer waits for a lineage read.
    outcomes: dict[str, list[dict[str, str | None]]] = field(default_factory=dict, repr=False)

    def check_interrupt(self) -> None:
        if self.interrupted():
            raise ResearchInterrupted()

    def __post_init__(self) -> None:
        if self.budget is None:
            self.budget = make_ledger(self.settings)

    @cached_property
    def store(self) -> ArtifactStore:
        from .store.object_store import artifact_store

        return artifact_store(self.settings, self.partition_key)

    @cached_property
    def responses(self) -> ResponseCache:
        """Model answers already received for this research (replayed on resume)."""
        return ResponseCache(self.store)
