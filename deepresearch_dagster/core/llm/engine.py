"""What every engine provides: one chat completion per role, optionally with tools."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

ROLES = ("planner", "researcher", "compressor", "critic", "reporter")


@dataclass(frozen=True)
class Attempt:
    """A failed try before (or instead of) a completion; each becomes a DuckDB row."""

    status: str  # retry | shrink | format_fallback | error
    error: str
    latency_ms: float = 0.0
    wait_s: float = 0.0


class EngineError(Exception):
    """The model could not be reached or refused; recorded, then surfaced without a traceback."""

    def __init__(self, message: str, attempts: list[Attempt] | None = None, retryable: bool = False) -> None:
        super().__init__(message)
        self.attempts = attempts or []
        # True when a later run may succeed (server down, rate limited); False for bad credentials.
        self.retryable = retryable


@dataclass(frozen=True)
class ToolCallRequest:
    name: str
    arguments: dict[str, Any]


@dataclass
class Completion:
    text: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    latency_ms: float
    tool_calls: list[ToolCallRequest] = field(default_factory=list)
    attempts: list[Attempt] = field(default_factory=list)


class Engine(Protocol):
    name: str

    def model_for(self, role: str) -> str: ...

    def complete(
        self,
        role: str,
        messages: list[dict[str, Any]],
        payload: dict[str, Any],
        json_schema: dict[str, Any] | None = None,
        tools: list[dict[str, Any]] | None = None,
    ) -> Completion:
        """``messages`` is what a chat model reads; ``payload`` the same input as data, which
        the offline engine uses instead of parsing prose."""
        ...
