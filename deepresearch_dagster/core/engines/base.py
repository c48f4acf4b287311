"""What every engine provides: one chat completion per role, optionally with tools."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

ROLES = ("planner", "researcher", "compressor", "reporter")


class EngineError(Exception):
    """The model could not be reached or refused; recorded, then surfaced without a traceback."""


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
