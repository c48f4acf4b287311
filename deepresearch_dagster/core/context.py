"""What every role needs for one research: ids, settings, engine, storage and lineage."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from functools import cached_property

from .config import ResearchSettings
from .llm.budget import BudgetLedger
from .llm.engine import Engine
from .store.artifacts import ArtifactStore
from .store.lineage import LineageStore

logger = logging.getLogger("deepresearch")


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

    def __post_init__(self) -> None:
        if self.budget is None:
            self.budget = BudgetLedger(self.settings.budget_limits(), self.settings.prices())

    @cached_property
    def store(self) -> ArtifactStore:
        return ArtifactStore(self.settings.artifacts_path, self.partition_key)
