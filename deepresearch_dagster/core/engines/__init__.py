"""LLM engines: the offline deterministic engine and the OpenAI-compatible client."""

from .base import Completion, Engine, EngineError, ToolCallRequest

__all__ = ["Completion", "Engine", "EngineError", "ToolCallRequest"]
