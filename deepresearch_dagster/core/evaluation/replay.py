"""Compressor A/B over an evaluated suite: re-compress every item's stored raw outputs with
another model or prompt version (the ``recompress_job`` replay: no tool is called) and score
what the new working memory keeps of the gold answers, and the tokens it injects.

The research's current working memory is left as it was (the report was written from it); the
replayed version stays beside it as ``compressed_summaries.<model>.<prompt_version>.json``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..config import ResearchSettings
from ..errors import UsageError
from ..llm.prompts import prompt_version
from ..store.artifacts import atomic_write_bytes
from ..store.lineage import LineageStore
from .matching import any_in
from .run import Evaluation, summarize
from .score import working_memory_text
from .suite import load_suite

__all__ = ["parse_spec", "recompress_evaluation"]

OFFLINE = "offline"


def parse_spec(spec: str) -> tuple[str, str | None]:
    """``MODEL[/PROMPT_FILE]``: a model name may hold ``/`` (``org/model``), so the prompt is the
    longest tail after a ``/`` that names an existing file. ``offline`` is the offline compressor."""
    spec = spec.strip()
    for i, char in enumerate(spec):
        if char == "/" and Path(spec[i + 1 :]).is_file():
            return spec[:i] or OFFLINE, str(Path(spec[i + 1 :]).resolve())
    if not spec:
        raise UsageError("--recompress needs MODEL[/PROMPT_FILE]")
    return spec, None


def recompress_evaluation(
    evaluation: Evaluation,
    spec: str,
    settings: ResearchSettings,
    lineage: LineageStore,
    replay: Callable[[str, dict[str, Any]], str | None],
) -> Evaluation:
    """``replay(partition_key, resources_config)`` runs the recompress job on one partition."""
    model, prompt_file = parse_spec(spec)
    items = {i.id: i for i in load_suite(evaluation.suite).items}
    config: dict[str, Any] = {"compressor_prompt_file": prompt_file} if prompt_file else {}
    if model != OFFLINE:
        config |= {"compressor_model": model, "engine": "openai"}
    version = prompt_version("compressor", prompt_file)
    kept = kept_before = answerable = injected = injected_before = 0
    calls_before = calls_after = 0
    per_item: list[dict[str, Any]] = []
    scores = []
    for score in evaluation.items:
        if score.status != "scored" or not score.partition_key:
            scores.append(score)
            continue
        key = score.partition_key
        folder = settings.artifacts_path / key
        current = folder / "compressed_summaries.json"
        original = current.read_bytes()
        calls_before += lineage.tool_call_count(key)
        error = replay(key, {"research": {"config": config}})
        calls_after += lineage.tool_call_count(key)
        replayed = json.loads(current.read_text("utf-8"))
        atomic_write_bytes(current, original)  # the report's working memory stays current
        if error is not None:
            scores.append(score.model_copy(update={"status": "failed", "reason": f"recompress: {error}"}))
            continue
        memory, tokens = working_memory_text(replayed)
        item = items.get(score.id)
        has_gold = bool(item and item.answers and score.category == "answer")
        hit = bool(has_gold and item and any_in(memory, item.answers))
        answerable += has_gold
        kept += hit
        kept_before += bool(has_gold and score.answer_in_memory)
        injected += tokens
        injected_before += score.injected_tokens
        per_item.append({"id": score.id, "answer_in_memory": hit if has_gold else None, "injected_tokens": tokens})
        scores.append(score.model_copy(update={"answer_in_memory": hit if item and item.answers else None,
                                               "injected_tokens": tokens}))  # fmt: skip
    replayed_evaluation = evaluation.model_copy(update={"items": scores})
    replayed_evaluation.summary = summarize(scores)
    replayed_evaluation.recompress = {
        "compressor": model,
        "prompt_version": version,
        "answerable": answerable,
        "kept": kept,
        "kept_before": kept_before,
        "injected_tokens": injected,
        "injected_tokens_before": injected_before,
        "tool_calls_made": calls_after - calls_before,
        "items": per_item,
    }
    return replayed_evaluation
