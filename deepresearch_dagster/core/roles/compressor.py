"""Compression of every tool output (seed 000 §4), content-addressed so nothing is done twice.

The cache key covers the raw bytes' sha256, the step context, the compressor model and the
prompt version; the research loop and the Dagster compression op share it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from ..context import ResearchContext
from ..errors import MODEL_FAILURES, StructuredOutputError
from ..heuristics.compression import compress_extractively
from ..llm.contracts import COMPRESSOR
from ..llm.grounding import Evidence
from ..llm.prompts import prompt_text, prompt_version, render
from ..llm.structured import call_structured, record_fallback, store_invalid_answer
from ..models import CompressionResult, Grounding, SummaryRecord, ToolCallRecord
from ..naming import short_hash
from ..text import estimate_tokens, is_instruction, split_sentences
from ..untrusted import UNNAMED, data_marker, redact, set_aside, spotlight

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
        result, fallback, grounding = CompressionResult.model_validate(cached[0]), cached[1], Grounding(**cached[2])
    else:
        result, fallback, grounding = _compress_fresh(ctx, step, record, raw_text, kind)
        ctx.lineage.put_compression(
            key, record.sha256, model, version, result.model_dump(), fallback, grounding.model_dump()
        )
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
        grounding=grounding,
        suspects=record.suspected_injection,
    )
    set_aside([summary])
    injected = summary.injected
    if injected is not None:
        summary.injected_tokens = estimate_tokens(injected.to_message()["content"])
    return summary


# A summary may paraphrase, but most of its content words must come from the output it summarizes.
MAX_UNGROUNDED_SHARE = 0.5


def _drop_unsupported(result: CompressionResult, evidence: Evidence) -> tuple[CompressionResult | None, int, list[str]]:
    """The answer without the summary sentences and extraction bullets that state a figure or a name
    the output does not (None when fewer summary sentences than the contract asks for remain), how
    many statements were kept, and each dropped one with what the output lacks."""
    dropped: list[str] = []

    def supported(items: list[str]) -> list[str]:
        kept = []
        for item in items:
            if is_instruction(item):  # a model that repeated an instruction it read: never memory
                dropped.append(f"{item!r} (addresses the model)")
                continue
            missing = evidence.missing(item)
            if missing:
                dropped.append(f"{item!r} (not in the output: {', '.join(missing)})")
            else:
                kept.append(item)
        return kept

    sentences, extraction = supported(split_sentences(result.summary)), supported(result.extraction)
    kept = len(sentences) + len(extraction)
    if not dropped:
        return result, kept, []
    try:
        update = {"summary": " ".join(sentences), "extraction": extraction}
        return CompressionResult.model_validate(result.model_dump() | update), kept, dropped
    except ValidationError:
        return None, kept, dropped


def _grounded(
    ctx: ResearchContext,
    result: CompressionResult,
    evidence: Evidence,
    messages: list[dict[str, Any]],
    payload: dict[str, Any],
    artifact: str,
    tally: Grounding,
) -> CompressionResult:
    """Grounding at compression time: unsupported statements never enter working memory. The answer
    that had any is kept under ``invalid_answers/``; when too little is left, the model is asked once
    more, quoting them, and then :class:`StructuredOutputError` (the extractive compressor)."""
    for round_ in (1, 2):
        grounded, kept, dropped = _drop_unsupported(result, evidence) if result.is_useful else (result, 0, [])
        tally.dropped += len(dropped)
        if dropped:
            stored = store_invalid_answer(ctx, "compressor", result.model_dump_json(indent=2))
            ctx.log(f"compression of {artifact}: dropped {len(dropped)} statement(s) not in the output ({stored})")
        if grounded is not None:
            tally.grounded = kept
            return grounded
        if round_ == 2:
            break
        error = "these statements give figures or names that the tool output does not contain: " + "; ".join(dropped)
        messages = [
            *messages,
            {"role": "assistant", "content": result.model_dump_json()},
            {"role": "user", "content": render("repair", error=error)},
        ]
        result = call_structured(ctx, "compressor", messages, payload | {"repair_error": error}, COMPRESSOR, artifact)
    raise StructuredOutputError("compressor", "too few of its statements are supported by the raw output")


def _compress_fresh(
    ctx: ResearchContext, step: StepContext, record: ToolCallRecord, raw_text: str, kind: str
) -> tuple[CompressionResult, bool, Grounding]:
    payload = _payload(step, record, raw_text, kind)
    if (record.source or UNNAMED) in record.suspected_injection:
        # Set aside whatever it says (core/untrusted.py): no model reads it, the extractive
        # compressor (which never keeps an instruction) summarizes it for the audit.
        return CompressionResult.model_validate(compress_extractively(payload)), False, Grounding()
    # The model reads the output with what addresses it blanked, inside the research's data block.
    readable = redact(raw_text, kind)
    shown = readable[:MAX_RAW_CHARS_IN_PROMPT]
    if len(readable) > len(shown):
        shown += f"\n[... {len(readable) - len(shown)} more characters stored in the artifact file]"
    template = prompt_text("compressor", ctx.settings.prompt_files.get("compressor"))
    marker = data_marker(ctx.partition_key)
    messages = [
        {"role": "system", "content": template.format(**payload, today=ctx.today, data_marker=marker)},
        {"role": "user", "content": spotlight(shown, marker)},
    ]
    tally = Grounding()
    try:
        result = call_structured(ctx, "compressor", messages, payload, COMPRESSOR, record.artifact_file)
        if ctx.engine.name != "offline":  # the offline engine is the extractive compressor: it quotes
            evidence = Evidence.of_output(
                raw_text, kind, [step.plan_title, step.step_title, step.step_description, record.source_title or ""]
            )
            # Listings (JSON) are summarized in the model's own words; documents and pages are quoted.
            if kind == "text" and result.is_useful:
                ungrounded = evidence.unknown_share(" ".join([result.summary, *result.extraction]))
                if ungrounded > MAX_UNGROUNDED_SHARE:
                    # Schema-valid but not drawn from the output (a model inventing text): no citation
                    # to it could ever verify, so the extractive compressor, which only quotes, does it.
                    raise StructuredOutputError(
                        "compressor", f"{ungrounded:.0%} of the summary's words do not occur in the raw output"
                    )
            result = _grounded(ctx, result, evidence, messages, payload, record.artifact_file, tally)
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
                return second, True, tally
        return result, False, tally
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
    return result, True, tally
