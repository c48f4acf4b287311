"""The extractive compressor: sentences scored against the step; listings become bullets."""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from typing import Any

from ..text import content_terms, count_sentences, split_sentences
from .terms import (
    ANAPHORA,
    EMPHASIS,
    INSTRUCTION_WORDS,
    LIST_MARKER,
    cap_words,
)


def _not_useful(reason: str, step_title: str) -> dict[str, Any]:
    return {
        "summary_title": _title(f"No relevant information for {step_title}", "in this output"),
        "summary": f"{reason} Nothing in it answers the step. The full output is kept on disk.",
        "extraction": [],
        "is_useful": False,
    }


def _title(text: str, pad: str) -> str:
    parts = text.split()[:12]
    for extra in pad.split():
        if len(parts) >= 5:
            break
        parts.append(extra)
    while len(parts) < 5:
        parts.append("findings")
    return " ".join(parts)


def compress_extractively(payload: dict[str, Any]) -> dict[str, Any]:
    """Extractive compression: sentences scored against the step. Always schema-valid."""
    raw: str = payload["raw"]
    step_title: str = payload["step_title"]
    if payload.get("kind") == "json":
        try:
            data = json.loads(raw)
        except json.JSONDecodeError:
            data = None
        if isinstance(data, dict):
            if "error" in data:
                return _not_useful("The tool call failed with an error.", step_title)
            if isinstance(data.get("results"), list):
                return _compress_search(data, step_title)
            if isinstance(data.get("matches"), list):
                return _compress_grep(data, step_title)
            if isinstance(data.get("content"), str):
                raw = data["content"]
        if not isinstance(data, dict) or not isinstance(data.get("content"), str):
            raw = " ".join(_strings(data)) if data is not None else raw
    return _compress_text(raw, payload)


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def _compress_search(data: dict[str, Any], step_title: str) -> dict[str, Any]:
    results = [r for r in data["results"] if isinstance(r, dict)]
    query = str(data.get("query", ""))
    if not results:
        return _not_useful(f'The search for "{query}" returned no results.', step_title)
    where = lambda r: r.get("path") or r.get("url") or ""  # noqa: E731
    return {
        "summary_title": _title(f"Search results for {cap_words(query, 8)}", "in the corpus"),
        "summary": (
            f"The search returned {len(results)} results. "
            f'The best match is "{results[0].get("title", "")}". '
            f"The top {min(3, len(results))} are listed with their locations."
        ),
        # The research team ranks and reads sources itself; memory keeps only the best pointers.
        "extraction": [f"{where(r)} — {r.get('title', '')}" for r in results[:3]],
        "is_useful": True,
    }


def _compress_grep(data: dict[str, Any], step_title: str) -> dict[str, Any]:
    matches = [m for m in data["matches"] if isinstance(m, dict)]
    pattern = str(data.get("pattern", ""))
    if not matches:
        return _not_useful(f'No stored artifact matched "{pattern}".', step_title)
    files = sorted({str(m.get("file")) for m in matches})
    return {
        "summary_title": _title(f"Artifact lines matching {cap_words(pattern, 6)}", "in stored outputs"),
        "summary": (
            f'The pattern "{pattern}" matched {len(matches)} lines. '
            f"The matches come from {len(files)} stored artifacts. "
            "Each extraction item gives the file, line number and text."
        ),
        "extraction": [f"{m.get('file')}:{m.get('line')}: {m.get('text')}" for m in matches[:10]],
        "is_useful": True,
    }


def _candidate_sentences(text: str) -> list[str]:
    out: list[str] = []
    for block in re.split(r"\n", text):
        block = EMPHASIS.sub("", LIST_MARKER.sub("", block)).strip()
        if not block or block.startswith("#") or not re.search(r"[.!?][\"')\]]*$", block):
            continue
        out.extend(s for s in split_sentences(block) if 40 <= len(s) <= 280)
    return out


def _compress_text(raw: str, payload: dict[str, Any]) -> dict[str, Any]:
    step_title = payload["step_title"]
    sentences = _candidate_sentences(raw)
    if not sentences:
        return _not_useful("The output contains no readable prose.", step_title)
    step_terms = set(content_terms(f"{step_title} {payload.get('step_description', '')}")) - INSTRUCTION_WORDS
    plan_terms = set(content_terms(payload.get("plan_title", ""))) - INSTRUCTION_WORDS - step_terms
    sent_terms = [set(content_terms(s)) for s in sentences]
    df = Counter(t for terms in sent_terms for t in terms)
    n = len(sentences)

    def score(i: int) -> float:
        terms = sent_terms[i]
        s = sum(math.log(1 + n / df[t]) for t in terms & step_terms)
        s += 0.5 * sum(math.log(1 + n / df[t]) for t in terms & plan_terms)
        if re.search(r"\d", sentences[i]):
            s += 0.5
        if ANAPHORA.match(sentences[i]):
            s *= 0.5  # "It…"/"These…" read badly once lifted out of their paragraph
        return s / (1 + len(terms) / 40)

    scores = [score(i) for i in range(n)]
    matched = set().union(*(sent_terms[i] & step_terms for i in range(n)))
    coverage = len(matched) / max(1, len(step_terms))
    if max(scores) < 1.5 or coverage < 0.25:
        return _not_useful("The output does not address the step's topic.", step_title)

    ranked = sorted(range(n), key=lambda i: (-scores[i], i))
    summary_idx = sorted(ranked[:3])
    # Extraction keeps factual sentences only (figures, dates), the summary carries the gist.
    extraction_idx = [i for i in ranked[3:] if scores[i] > 0 and re.search(r"\d", sentences[i])][:2]
    source_title = payload.get("source_title") or cap_words(sentences[0], 6)
    summary_sents = [sentences[i] for i in summary_idx]
    spare = [sentences[i] for i in ranked[3:] if i not in extraction_idx]
    padding = [f'The source is titled "{source_title}".', f"It contains about {len(raw.split())} words."]
    # Odd punctuation can make two picked sentences read back as one; top up until the joined
    # summary counts 3 sentences by the schema's own rule.
    while count_sentences(" ".join(summary_sents)) < 3 and (spare or padding):
        summary_sents.append((spare or padding).pop(0))
    return {
        "summary_title": _title(cap_words(source_title, 12), "— findings for this step"),
        "summary": " ".join(summary_sents),
        "extraction": [sentences[i] for i in sorted(extraction_idx)],
        "is_useful": True,
    }
