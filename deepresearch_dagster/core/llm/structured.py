"""Ask a role for JSON, validate it with pydantic, repair once quoting the error."""

from __future__ import annotations

import json
import re
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from ..context import ResearchContext
from .engine import Attempt, Completion, EngineError
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


def _record_attempts(
    ctx: ResearchContext, role: str, attempts: list[Attempt], round_: int, artifact: str | None
) -> None:
    for a in attempts:
        ctx.lineage.record_llm_call(
            ctx.partition_key,
            ctx.run_id,
            role,
            ctx.engine.model_for(role),
            round_,
            a.status,
            0,
            0,
            a.latency_ms,
            artifact,
            a.error,
            a.wait_s,
        )


def complete_recorded(
    ctx: ResearchContext,
    role: str,
    messages: list[dict[str, Any]],
    payload: dict[str, Any],
    *,
    json_schema: dict[str, Any] | None = None,
    tools: list[dict[str, Any]] | None = None,
    artifact: str | None = None,
    round_: int = 1,
) -> Completion:
    """One engine call with every failed try (retries, shrinks, the final error) in DuckDB.
    The caller records the successful completion with its verdict (ok / invalid)."""
    model = ctx.engine.model_for(role)
    # Reserve the worst case first: raises BudgetExceeded before any money is spent.
    reservation = ctx.budget.reserve_llm(model, messages, ctx.settings.max_tokens.get(role, 4000))
    try:
        completion = ctx.engine.complete(role, messages, payload, json_schema=json_schema, tools=tools)
    except EngineError as exc:
        ctx.budget.settle(reservation, llm_calls=1)
        _record_attempts(ctx, role, exc.attempts or [Attempt("error", str(exc))], round_, artifact)
        raise
    ctx.budget.settle_llm(reservation, model, completion.prompt_tokens, completion.completion_tokens)
    _record_attempts(ctx, role, completion.attempts, round_, artifact)
    return completion


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
    for round_ in (1, 2):
        completion = complete_recorded(
            ctx, role, messages, payload, json_schema=schema, artifact=artifact, round_=round_
        )
        try:
            result = model_cls.model_validate(parse_json_object(completion.text))
        except (json.JSONDecodeError, ValidationError) as exc:
            last_error = _error_text(exc)
            record_completion(ctx, role, completion, round_, "invalid", artifact, last_error)
            messages = [
                *messages,
                {"role": "assistant", "content": completion.text},
                {"role": "user", "content": render("repair", error=last_error)},
            ]
            payload = {**payload, "repair_error": last_error}
            continue
        record_completion(ctx, role, completion, round_, "ok", artifact)
        return result
    raise StructuredOutputError(role, last_error)
