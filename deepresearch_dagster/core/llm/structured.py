"""Ask a role for JSON, normalize and validate it against the role's contract (and reject a copy
of the prompt's worked example), repair once quoting the error; store every invalid answer; a
per-role circuit breaker (seed 003 §11.3).

Fallback bookkeeping lives here too: each use of a role's fallback is one ``llm_calls`` row with
status ``fallback`` whose ``error`` starts with the kind of failure (``invalid``, ``error``,
``transient``, ``budget``, ``circuit open``). After ``BREAKER_THRESHOLD`` consecutive invalid
answers or deterministic errors of one role in a run (each a call that ended in the fallback),
the breaker opens: the rest of the run uses that role's fallback without calling the model.
"""

from __future__ import annotations

import json
import re
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from ..context import ResearchContext
from ..errors import BudgetExceeded, CredentialsError, ModelError, StructuredOutputError
from ..heuristics import OFFLINE_MODEL as FALLBACK_MODEL
from ..web.deadline import deadline
from .contracts import Contract, contract_for
from .engine import Attempt, Completion, EngineError, ToolCallRequest
from .example_leaks import find_leaks, leak_reason
from .prompts import render

T = TypeVar("T", bound=BaseModel)
BREAKER_THRESHOLD = 2
# Fallback kinds that count towards opening the breaker (transient outages and budget do not).
BREAKER_KINDS = ("invalid", "error", "circuit open")
INVALID_DIR = "invalid_answers"
_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$", re.IGNORECASE)


def parse_json_object(text: str) -> Any:
    # strict=False: small models write raw newlines and tabs inside JSON strings (seen from a
    # real llama.cpp server); they are plain text, so accept them rather than ask again.
    text = _FENCE.sub("", text.strip())
    try:
        return json.loads(text, strict=False)
    except json.JSONDecodeError:
        start, end = text.find("{"), text.rfind("}")
        if start == -1 or end <= start:
            raise
        return json.loads(text[start : end + 1], strict=False)


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
        cached_tokens=completion.cached_tokens,
        prompt_tps=completion.prompt_tps,
        gen_tps=completion.gen_tps,
    )
    if status == "ok":
        _remember(ctx, role, "ok", None)


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


def _answer(completion: Completion) -> dict[str, Any]:
    return {
        "model": completion.model,
        "text": completion.text,
        "tool_calls": [{"name": c.name, "arguments": c.arguments} for c in completion.tool_calls],
        "truncated": completion.truncated,
        "finish_reason": completion.finish_reason,
        "prompt_tokens": completion.prompt_tokens,
        "completion_tokens": completion.completion_tokens,
    }


def _replay(answer: dict[str, Any] | None, name: str) -> Completion | None:
    """A stored answer as a completion that cost nothing this time (0 tokens, 0 ms), with one
    ``cached`` attempt naming the file, so the audit shows where the answer came from."""
    if answer is None:
        return None
    try:
        return Completion(
            text=str(answer["text"]),
            model=str(answer["model"]),
            prompt_tokens=0,
            completion_tokens=0,
            latency_ms=0.0,
            tool_calls=[ToolCallRequest(str(c["name"]), dict(c["arguments"])) for c in answer.get("tool_calls", [])],
            attempts=[Attempt("cached", f"answer replayed from {name}")],
            truncated=bool(answer.get("truncated")),
            finish_reason=answer.get("finish_reason"),
        )
    except (KeyError, TypeError, ValueError):
        return None


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
    key = None
    if ctx.engine.name != "offline":
        # A resumed research replays the answers it already has (core/store/response_cache.py).
        sampling = {"temperature": ctx.settings.role_temperature(role), "max_tokens": ctx.settings.max_tokens.get(role)}
        key = ctx.responses.key(
            {"model": model, "role": role, "messages": messages, "schema": json_schema, "tools": tools, **sampling}
        )
        cached = _replay(ctx.responses.get(key), ctx.responses.name(key))
        if cached is not None:
            _record_attempts(ctx, role, cached.attempts, round_, artifact)
            return cached
    if ctx.engine.name != "offline" and breaker_open(ctx, role):
        raise CircuitOpenError(role)
    # Reserve the worst case first: raises BudgetExceeded before any money is spent.
    reservation = ctx.budget.reserve_llm(model, messages, ctx.settings.max_tokens.get(role, 4000))
    try:
        # The wall-time budget interrupts a call in flight (every socket operation is capped by it).
        with deadline(ctx.budget.remaining_wall_s()), ctx.lineage.waiting():
            completion = ctx.engine.complete(role, messages, payload, json_schema=json_schema, tools=tools)
    except EngineError as exc:
        ctx.budget.settle(reservation, llm_calls=1)
        _record_attempts(ctx, role, exc.attempts or [Attempt("error", str(exc))], round_, artifact)
        raise
    ctx.budget.settle_llm(reservation, model, completion.prompt_tokens, completion.completion_tokens)
    if key is not None and not completion.skipped:
        ctx.responses.put(key, _answer(completion))  # on disk before the caller acts on it
    _record_attempts(ctx, role, completion.attempts, round_, artifact)
    return completion


def call_structured(
    ctx: ResearchContext,
    role: str,
    messages: list[dict[str, Any]],
    payload: dict[str, Any],
    contract: Contract[T] | type[T],
    artifact: str | None = None,
) -> T:
    """The role's answer, normalized and validated against its contract (``core/llm/contracts``);
    one repair round quoting the error, then :class:`StructuredOutputError`. An answer that copies
    a prompt's worked example (``core/llm/example_leaks``) is invalid too. Every invalid answer
    is stored under ``invalid_answers/`` and linked from its ``llm_calls`` row."""
    contract = contract_for(contract)
    last_error = ""
    given = messages  # the request's input: a copied example is judged against it, not the repair turns
    for round_ in (1, 2):
        completion = complete_recorded(
            ctx, role, messages, payload, json_schema=contract.schema, artifact=artifact, round_=round_
        )
        try:
            result = contract.parse(parse_json_object(completion.text))
        except (json.JSONDecodeError, ValidationError) as exc:
            last_error = _error_text(exc)
        else:
            # Valid against the schema, yet the prompt's worked example rather than an answer.
            leaks = find_leaks(result.model_dump(mode="json"), given)
            if not leaks:
                record_completion(ctx, role, completion, round_, "ok", artifact)
                return result
            last_error = leak_reason(leaks)
        stored = store_invalid_answer(ctx, role, completion.text)
        record_completion(ctx, role, completion, round_, "invalid", stored, last_error)
        messages = [
            *messages,
            {"role": "assistant", "content": completion.text},
            {"role": "user", "content": render("repair", error=last_error)},
        ]
        payload = {**payload, "repair_error": last_error}
    raise StructuredOutputError(role, last_error)


def store_invalid_answer(ctx: ResearchContext, role: str, text: str) -> str:
    """Keep an invalid answer verbatim (atomic write): ``invalid_answers/<role>_<n>.txt``,
    relative to the partition folder; the path goes into the answer's ``llm_calls`` row."""
    folder = ctx.store.partition_dir / INVALID_DIR
    taken = {p.name for p in folder.glob(f"{role}_*.txt")} if folder.is_dir() else set()
    n = len(taken) + 1
    while f"{role}_{n}.txt" in taken:
        n += 1
    name = f"{INVALID_DIR}/{role}_{n}.txt"
    ctx.store.write_text(name, text)
    return name


# -- fallbacks and the circuit breaker ------------------------------------------------------


class CircuitOpenError(ModelError):
    """The role's breaker is open: its fallback is used without calling the model."""

    def __init__(self, role: str) -> None:
        super().__init__(
            f"{role}: {BREAKER_THRESHOLD} consecutive invalid answers or errors; "
            "the rest of this research uses its fallback"
        )
        self.role = role


def fallback_kind(exc: BaseException) -> str:
    if isinstance(exc, CircuitOpenError):
        return "circuit open"
    if isinstance(exc, StructuredOutputError):
        return "invalid"
    if isinstance(exc, BudgetExceeded):
        return "budget"
    if getattr(exc, "retryable", False):
        return "transient"
    return "error"


def record_fallback(
    ctx: ResearchContext,
    role: str,
    artifact: str | None,
    exc: BaseException,
    prompt_tokens: int = 0,
    completion_tokens: int = 0,
) -> None:
    """One ``llm_calls`` row (status ``fallback``) per use of a role's fallback; its error
    column says why (the kind first), which the breaker and the report read. Called in the
    role's ``except MODEL_FAILURES`` branch: a failure no fallback may absorb (rejected
    credentials: every later call would fail alike) is re-raised here instead."""
    if isinstance(exc, CredentialsError):
        raise exc
    error = f"{fallback_kind(exc)}: {exc}"
    ctx.lineage.record_llm_call(
        ctx.partition_key,
        ctx.run_id,
        role,
        FALLBACK_MODEL,
        3,
        "fallback",
        prompt_tokens,
        completion_tokens,
        0.0,
        artifact,
        error,
    )
    _remember(ctx, role, "fallback", error)


def _remember(ctx: ResearchContext, role: str, status: str, error: str | None) -> None:
    """An outcome this context recorded, for its breaker (once the breaker has read the role's)."""
    known = ctx.outcomes.get(role)
    if known is not None:
        known.insert(0, {"status": status, "error": error})


def breaker_open(ctx: ResearchContext, role: str, threshold: int = BREAKER_THRESHOLD) -> bool:
    """Open when the role's last ``threshold`` outcomes in this run (answers accepted, fallbacks
    that count) are all fallbacks after invalid answers or deterministic errors. Derived from
    the lineage, read once per context and then kept by its own records (``ctx.outcomes``), so
    every Dagster op of a run (each opens its own context) starts from the same breaker."""
    rows = ctx.outcomes.get(role)
    if rows is None:
        rows = ctx.outcomes[role] = ctx.lineage.role_outcomes(ctx.partition_key, [ctx.run_id], role)
    streak = 0
    for row in rows:
        if row["status"] == "ok":
            return False
        if (row["error"] or "").startswith(BREAKER_KINDS):
            streak += 1
            if streak >= threshold:
                return True
    return False
