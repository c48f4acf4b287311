"""OpenAI-compatible Chat Completions engine (OpenAI, Ollama, vLLM, llama.cpp, LM Studio...).

The SDK's own retries are off: this engine retries 429/5xx/connection errors/timeouts with
exponential backoff and full jitter (honouring ``Retry-After``), never retries auth errors,
shrinks the input on a context overflow, and reports every failed try as an ``Attempt``.
"""

from __future__ import annotations

import email.utils
import json
import random
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import openai

from ..text import estimate_tokens
from .engine import Attempt, Completion, EngineError, ToolCallRequest

RETRYABLE = (
    openai.RateLimitError,
    openai.InternalServerError,
    openai.APIConnectionError,
    openai.APIResponseValidationError,
)
_OVERFLOW_MARKERS = ("context_length_exceeded", "maximum context length", "context window", "too many tokens")


@dataclass
class RetryPolicy:
    max_attempts: int = 4
    base_s: float = 1.0
    max_s: float = 30.0
    rng: random.Random = field(default_factory=random.Random)

    def backoff(self, attempt: int) -> float:
        return self.rng.uniform(0, min(self.max_s, self.base_s * 2 ** (attempt - 1)))


def retry_after_seconds(exc: Exception, cap: float) -> float | None:
    response = getattr(exc, "response", None)
    if response is None:
        return None
    headers = response.headers
    if headers.get("retry-after-ms"):
        try:
            return min(cap, float(headers["retry-after-ms"]) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return min(cap, max(0.0, float(value)))
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(value)
        return min(cap, max(0.0, parsed.timestamp() - time.time())) if parsed else None


def is_context_overflow(exc: openai.BadRequestError) -> bool:
    text = f"{getattr(exc, 'code', '')} {exc}".lower()
    return any(marker in text for marker in _OVERFLOW_MARKERS)


def shrink_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Halve the longest message (keeping its head): raw data is on disk, prompts can lose it."""
    longest = max(range(len(messages)), key=lambda i: len(messages[i].get("content") or ""))
    content = messages[longest].get("content") or ""
    cut = content[: len(content) // 2] + "\n[... truncated to fit the model's context window]"
    return [*messages[:longest], {**messages[longest], "content": cut}, *messages[longest + 1 :]]


class OpenAIEngine:
    name = "openai"

    def __init__(
        self,
        models: dict[str, str],
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 120.0,
        temperature: float | dict[str, float] = 0.0,
        max_tokens: dict[str, int] | None = None,
        retry: RetryPolicy | None = None,
        response_format: Literal["json_schema", "json_object", "none"] = "json_schema",
    ) -> None:
        self.models = models
        # Local servers accept any key; the SDK insists on one being set.
        self.client = openai.OpenAI(
            base_url=base_url or None, api_key=api_key or "not-needed", timeout=timeout, max_retries=0
        )
        self.temperature = temperature if isinstance(temperature, dict) else dict.fromkeys(models, temperature)
        self.max_tokens = max_tokens or {}
        self.retry = retry or RetryPolicy()
        self.response_format = response_format

    def model_for(self, role: str) -> str:
        return self.models[role]

    def _format(self, json_schema: dict[str, Any] | None) -> dict[str, Any] | None:
        if json_schema is None or self.response_format == "none":
            return None
        if self.response_format == "json_schema":
            name = str(json_schema.get("title") or "answer")[:64]
            return {"type": "json_schema", "json_schema": {"name": name, "schema": json_schema, "strict": False}}
        return {"type": "json_object"}

    def complete(
        self,
        role: str,
        messages: list[dict[str, Any]],
        payload: dict[str, Any],
        json_schema: dict[str, Any] | None = None,
        tools: list[dict[str, Any]] | None = None,
    ) -> Completion:
        attempts: list[Attempt] = []
        shrinks = 0
        n = 0
        while True:
            n += 1
            kwargs: dict[str, Any] = {
                "model": self.model_for(role),
                "messages": messages,
                "temperature": self.temperature.get(role, 0.0),
            }
            if role in self.max_tokens:
                kwargs["max_tokens"] = self.max_tokens[role]
            if tools:
                kwargs["tools"] = tools
            elif (fmt := self._format(json_schema)) is not None:
                kwargs["response_format"] = fmt
            started = time.perf_counter()
            try:
                response = self.client.chat.completions.create(**kwargs)
            except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
                attempts.append(Attempt("error", f"{type(exc).__name__}: {exc.status_code}", _ms(started)))
                raise EngineError(
                    "the model server rejected the credentials: set OPENAI_API_KEY (or use --engine offline)", attempts
                ) from exc
            except openai.BadRequestError as exc:
                if is_context_overflow(exc) and shrinks < 3:
                    shrinks += 1
                    attempts.append(Attempt("shrink", "context overflow: input halved", _ms(started)))
                    messages = shrink_messages(messages)
                    continue
                if "response_format" in str(exc) and self.response_format == "json_schema":
                    # Older or smaller servers lack JSON-schema output; JSON mode is the next best.
                    self.response_format = "json_object"
                    attempts.append(Attempt("format_fallback", "json_schema unsupported; using json_object"))
                    continue
                attempts.append(Attempt("error", _describe(exc), _ms(started)))
                raise EngineError(f"{role} model call rejected: {_describe(exc)}", attempts) from exc
            except (*RETRYABLE, json.JSONDecodeError) as exc:
                wait = retry_after_seconds(exc, self.retry.max_s)
                wait = self.retry.backoff(n) if wait is None else wait
                if n >= self.retry.max_attempts:
                    attempts.append(Attempt("error", _describe(exc), _ms(started)))
                    raise EngineError(
                        f"{role} model call failed after {n} attempts: {_describe(exc)}", attempts, retryable=True
                    ) from exc
                attempts.append(Attempt("retry", _describe(exc), _ms(started), round(wait, 3)))
                time.sleep(wait)
                continue
            except openai.OpenAIError as exc:
                attempts.append(Attempt("error", _describe(exc), _ms(started)))
                raise EngineError(f"{role} model call failed: {_describe(exc)}", attempts) from exc
            return self._completion(response, kwargs["model"], messages, started, attempts)

    def _completion(
        self, response: Any, model: str, messages: list[dict[str, Any]], started: float, attempts: list[Attempt]
    ) -> Completion:
        if not getattr(response, "choices", None):
            raise EngineError("the model returned no choices", attempts)
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
            model=response.model or model,
            prompt_tokens=usage.prompt_tokens if usage else estimate_tokens(prompt_text),
            completion_tokens=usage.completion_tokens if usage else estimate_tokens(text),
            latency_ms=_ms(started),
            tool_calls=calls,
            attempts=attempts,
        )


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)


def _describe(exc: Exception) -> str:
    status = getattr(exc, "status_code", None)
    return f"{type(exc).__name__}{f' {status}' if status else ''}: {str(exc)[:300]}"
