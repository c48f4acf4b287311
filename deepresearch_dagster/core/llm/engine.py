"""What every engine provides: one chat completion per role, optionally with tools."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from ..errors import EngineError

__all__ = ["ROLES", "Attempt", "Completion", "Engine", "EngineError", "ToolCallRequest"]

ROLES = ("planner", "researcher", "compressor", "critic", "reporter")


@dataclass(frozen=True)
class Attempt:
    """A failed try before (or instead of) a completion; each becomes a DuckDB row."""

    # retry | shrink | format_fallback | truncated | error. ``format_fallback`` records a
    # capability answer (the server rejected response_format / tools / the system role); its
    # ``error`` quotes the server's own message.
    status: str
    error: str
    latency_ms: float = 0.0
    wait_s: float = 0.0


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
    # finish_reason == "length": the answer was cut at max_tokens. Callers must not quote a
    # truncated answer back (a repair round should ask for a shorter answer instead).
    truncated: bool = False
    finish_reason: str | None = None
    # True when the engine answered without asking the server (e.g. a tools-only call to a
    # server known to reject ``tools``): empty text, no tool calls, zero tokens.
    skipped: bool = False
    # Prompt tokens the provider served from its prompt cache (OpenAI / vLLM
    # ``usage.prompt_tokens_details.cached_tokens``, llama.cpp ``timings.cache_n``); 0 when unreported.
    cached_tokens: int = 0
    # Prompt-processing and generation speed of the answering attempt, tokens per second: the
    # server's own figures when it reports them (llama.cpp ``timings``), else measured on the
    # stream (time to the first token, then the rest); None when neither is known.
    prompt_tps: float | None = None
    gen_tps: float | None = None


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
