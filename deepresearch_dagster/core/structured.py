"""Ask a role for JSON, validate it with pydantic, repair once quoting the error."""

from __future__ import annotations

import json
import re
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from .context import ResearchContext
from .engines.base import Completion, EngineError
from .prompts import render

T = TypeVar("T", bound=BaseModel)
_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$", re.IGNORECASE)


class StructuredOutputError(Exception):
    """The model's answer stayed invalid after the repair round."""

    def __init__(self, role: str, error: str) -> None:
        super().__init__(f"{role} returned invalid output twice: {error}")
        self.role = role
        self.error = error


def parse_json_object(text: str) -> Any:
    text = _FENCE.sub("", text.strip())
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        start, end = text.find("{"), text.rfind("}")
        if start == -1 or end <= start:
            raise
        return json.loads(text[start : end + 1])


def _error_text(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'object'}: {e['msg']}" for e in exc.errors(include_url=False)
        )
    return f"not valid JSON ({exc})"


def record_completion(
    ctx: ResearchContext,
    role: str,
    completion: Completion,
    attempt: int,
    status: str,
    artifact: str | None,
    error: str | None = None,
) -> None:
    ctx.lineage.record_llm_call(
        ctx.partition_key,
        ctx.run_id,
        role,
        completion.model,
        attempt,
        status,
        completion.prompt_tokens,
        completion.completion_tokens,
        completion.latency_ms,
        artifact,
        error,
    )


def call_structured(
    ctx: ResearchContext,
    role: str,
    messages: list[dict[str, Any]],
    payload: dict[str, Any],
    model_cls: type[T],
    artifact: str | None = None,
) -> T:
    schema = model_cls.model_json_schema()
    last_error = ""
    for attempt in (1, 2):
        try:
            completion = ctx.engine.complete(role, messages, payload, json_schema=schema)
        except EngineError as exc:
            ctx.lineage.record_llm_call(
                ctx.partition_key,
                ctx.run_id,
                role,
                ctx.engine.model_for(role),
                attempt,
                "error",
                0,
                0,
                0.0,
                artifact,
                str(exc),
            )
            raise
        try:
            result = model_cls.model_validate(parse_json_object(completion.text))
        except (json.JSONDecodeError, ValidationError) as exc:
            last_error = _error_text(exc)
            record_completion(ctx, role, completion, attempt, "invalid", artifact, last_error)
            messages = [
                *messages,
                {"role": "assistant", "content": completion.text},
                {"role": "user", "content": render("repair", error=last_error)},
            ]
            payload = {**payload, "repair_error": last_error}
            continue
        record_completion(ctx, role, completion, attempt, "ok", artifact)
        return result
    raise StructuredOutputError(role, last_error)
