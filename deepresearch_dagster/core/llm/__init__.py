"""LLM engines: the offline deterministic engine and the OpenAI-compatible client."""

from .engine import Attempt, Completion, Engine, EngineError, ToolCallRequest

__all__ = ["Attempt", "Completion", "Engine", "EngineError", "ToolCallRequest"]
