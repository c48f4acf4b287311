"""Compression of every tool output (seed 000 §4), content-addressed so nothing is done twice.

The cache key covers the raw bytes' sha256, the step context, the compressor model and the
prompt version; the research loop and the Dagster compression op share it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..context import ResearchContext
from ..errors import MODEL_FAILURES, StructuredOutputError
from ..heuristics.compression import compress_extractively
from ..llm.contracts import COMPRESSOR
from ..llm.prompts import prompt_text, prompt_version
from ..llm.structured import call_structured, record_fallback
from ..models import CompressionResult, SummaryRecord, ToolCallRecord
from ..naming import short_hash
from ..text import content_terms, estimate_tokens

RAW_CONTEXT_MODEL = "none (raw context)"
# Beyond this many characters the model sees the head of the output; the file keeps it all.
MAX_RAW_CHARS_IN_PROMPT = 48_000


@dataclass(frozen=True)
class StepContext:
    plan_title: str
    step_title: str
    step_description: str
    tool_name: str


def cache_key(raw_sha256: str, step: StepContext, model: str, version: str) -> str:
    material = json.dumps(
        [raw_sha256, step.plan_title, step.step_title, step.step_description, step.tool_name, model, version]
    )
    return short_hash(material, 32)


def _payload(step: StepContext, record: ToolCallRecord, raw_text: str, kind: str) -> dict[str, Any]:
    """The compressor's out-of-band inputs (seed 000 §4.3), as data for any engine."""
    return {
        "plan_title": step.plan_title,
        "step_title": step.step_title,
        "step_description": step.step_description,
        "tool_name": step.tool_name,
        "raw": raw_text,
        "kind": kind,
        "source_title": record.source_title,
    }


def passthrough(step: StepContext, record: ToolCallRecord, raw_text: str, kind: str) -> SummaryRecord:
    """Baseline without compression (``context_mode=raw``, for benchmarks): the raw output is the
    context; the extractive summary is kept only so the rest of the pipeline has its fields."""
    payload = _payload(step, record, raw_text, kind)
    return SummaryRecord(
        call_id=record.call_id,
        step_id=record.step_id,
        artifact_file=record.artifact_file,
        source=record.source,
        source_title=record.source_title,
        result=CompressionResult.model_validate(compress_extractively(payload)),
        injected_tokens=estimate_tokens(raw_text),
        cache_key="",
        compressor_model=RAW_CONTEXT_MODEL,
        prompt_version="",
        fallback=False,
        raw_context=True,
    )


def compress(
    ctx: ResearchContext, step: StepContext, record: ToolCallRecord, raw_text: str, kind: str
) -> SummaryRecord:
    if ctx.settings.context_mode == "raw":
        return passthrough(step, record, raw_text, kind)
    model = ctx.engine.model_for("compressor")
    version = prompt_version("compressor", ctx.settings.prompt_files.get("compressor"))
    key = cache_key(record.sha256, step, model, version)
    cached = ctx.lineage.get_compression(key)
    if cached is not None:
        result, fallback = CompressionResult.model_validate(cached[0]), cached[1]
    else:
        result, fallback = _compress_fresh(ctx, step, record, raw_text, kind)
        ctx.lineage.put_compression(key, record.sha256, model, version, result.model_dump(), fallback)
    summary = SummaryRecord(
        call_id=record.call_id,
        step_id=record.step_id,
        artifact_file=record.artifact_file,
        source=record.source,
        source_title=record.source_title,
        result=result,
        injected_tokens=0,
        cache_key=key,
        compressor_model=model,
        prompt_version=version,
        fallback=fallback,
    )
    injected = summary.injected
    if injected is not None:
        summary.injected_tokens = estimate_tokens(injected.to_message()["content"])
    return summary


# A summary may paraphrase, but most of its content words must come from the output it summarizes.
MAX_UNGROUNDED_SHARE = 0.5


def _ungrounded_share(result: CompressionResult, raw_text: str) -> float:
    """Share of the summary's and extraction's content words absent from the raw output (0 when
    the result is not useful: nothing of it enters the context)."""
    if not result.is_useful:
        return 0.0
    terms = set(content_terms(" ".join([result.summary, *result.extraction])))
    if not terms:
        return 0.0
    return len(terms - set(content_terms(raw_text))) / len(terms)


def _compress_fresh(
    ctx: ResearchContext, step: StepContext, record: ToolCallRecord, raw_text: str, kind: str
) -> tuple[CompressionResult, bool]:
    payload = _payload(step, record, raw_text, kind)
    shown = raw_text[:MAX_RAW_CHARS_IN_PROMPT]
    if len(raw_text) > len(shown):
        shown += f"\n[... {len(raw_text) - len(shown)} more characters stored in the artifact file]"
    template = prompt_text("compressor", ctx.settings.prompt_files.get("compressor"))
    messages = [
        {"role": "system", "content": template.format(**payload, today=ctx.today)},
        {"role": "user", "content": shown},
    ]
    try:
        result = call_structured(ctx, "compressor", messages, payload, COMPRESSOR, record.artifact_file)
        # Listings (JSON) are summarized in the model's own words; documents and pages are quoted.
        ungrounded = _ungrounded_share(result, f"{raw_text} {step.step_title}") if kind == "text" else 0.0
        if ungrounded > MAX_UNGROUNDED_SHARE:
            # Schema-valid but not drawn from the output (a model inventing text): no citation to it
            # could ever verify, so the extractive compressor, which only quotes, does this call.
            raise StructuredOutputError(
                "compressor", f"{ungrounded:.0%} of the summary's words do not occur in the raw output"
            )
        if not result.is_useful and kind == "text":
            # A "not useful" verdict discards the evidence for good; a second opinion that costs
            # nothing: when the extractive compressor finds sentences on the step's topic in a
            # document or page, they are kept (a weak model's verdict is not final).
            second = CompressionResult.model_validate(compress_extractively(payload))
            if second.is_useful:
                record_fallback(
                    ctx,
                    "compressor",
                    record.artifact_file,
                    StructuredOutputError("compressor", "'not useful' verdict on an output that matches the step"),
                    estimate_tokens(raw_text),
                    estimate_tokens(second.model_dump_json()),
                )
                return second, True
        return result, False
    except MODEL_FAILURES as exc:
        # The extractive compressor is free: a spent budget never leaves a call uncompressed.
        ctx.log(f"compression of call {record.call_id} fell back to the extractive compressor: {exc}")
        failure = exc
    result = CompressionResult.model_validate(compress_extractively(payload))
    record_fallback(
        ctx,
        "compressor",
        record.artifact_file,
        failure,
        estimate_tokens(raw_text),
        estimate_tokens(result.model_dump_json()),
    )
    return result, True
