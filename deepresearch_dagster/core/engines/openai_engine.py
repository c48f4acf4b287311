"""OpenAI-compatible Chat Completions engine (OpenAI, Ollama, vLLM, llama.cpp, LM Studio...)."""

from __future__ import annotations

import json
import time
from typing import Any

import openai

from ..text import estimate_tokens
from .base import Completion, EngineError, ToolCallRequest


class OpenAIEngine:
    name = "openai"

    def __init__(
        self,
        models: dict[str, str],
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 120.0,
        temperature: float = 0.0,
        max_retries: int = 2,
    ) -> None:
        self.models = models
        # Local servers accept any key; the SDK insists on one being set.
        self.client = openai.OpenAI(
            base_url=base_url or None,
            api_key=api_key or "not-needed",
            timeout=timeout,
            max_retries=max_retries,
        )
        self.temperature = temperature

    def model_for(self, role: str) -> str:
        return self.models[role]

    def complete(
        self,
        role: str,
        messages: list[dict[str, Any]],
        payload: dict[str, Any],
        json_schema: dict[str, Any] | None = None,
        tools: list[dict[str, Any]] | None = None,
    ) -> Completion:
        kwargs: dict[str, Any] = {
            "model": self.model_for(role),
            "messages": messages,
            "temperature": self.temperature,
        }
        if tools:
            kwargs["tools"] = tools
        elif json_schema is not None:
            kwargs["response_format"] = {"type": "json_object"}
        started = time.perf_counter()
        try:
            response = self.client.chat.completions.create(**kwargs)
        except openai.AuthenticationError as exc:
            raise EngineError(
                "the model server rejected the API key: set OPENAI_API_KEY (or use --engine offline)"
            ) from exc
        except openai.OpenAIError as exc:
            raise EngineError(f"{role} model call failed: {type(exc).__name__}: {exc}") from exc
        latency_ms = (time.perf_counter() - started) * 1000
        if not response.choices:
            raise EngineError(f"{role} model returned no choices")
        message = response.choices[0].message
        text = message.content or ""
        calls = []
        for tc in message.tool_calls or []:
            try:
                args = json.loads(tc.function.arguments or "{}")
            except json.JSONDecodeError:
                args = {"_invalid_json": tc.function.arguments}
            calls.append(ToolCallRequest(tc.function.name, args if isinstance(args, dict) else {}))
        usage = response.usage
        prompt_text = "\n".join(str(m.get("content") or "") for m in messages)
        return Completion(
            text=text,
            model=response.model or kwargs["model"],
            prompt_tokens=usage.prompt_tokens if usage else estimate_tokens(prompt_text),
            completion_tokens=usage.completion_tokens if usage else estimate_tokens(text),
            latency_ms=latency_ms,
            tool_calls=calls,
        )
