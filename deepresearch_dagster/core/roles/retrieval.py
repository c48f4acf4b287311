"""Breadth fan-out: query variants run concurrently, results are merged, deduplicated and ranked."""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from ..llm.engine import ToolCallRequest
from ..text import content_terms
from ..tools import Toolbox, ToolError, ToolResult
from ..web.urls import normalize_url


@dataclass(frozen=True)
class RankedSource:
    source: str  # normalized URL or corpus path
    title: str
    score: float
    provider_score: float
    lexical: float
    hits: int  # how many query variants returned it


def run_concurrently(
    toolbox: Toolbox, requests: list[ToolCallRequest], limit: int
) -> list[tuple[ToolResult | None, str | None, float]]:
    """Execute tool calls with at most ``limit`` in flight; results come back in request order
    (so file names and bytes stay deterministic whatever finishes first)."""
    import time

    def one(request: ToolCallRequest) -> tuple[ToolResult | None, str | None, float]:
        started = time.perf_counter()
        try:
            result = toolbox.call(request.name, request.arguments)
            return result, None, (time.perf_counter() - started) * 1000
        except ToolError as exc:
            return None, str(exc), (time.perf_counter() - started) * 1000

    if len(requests) <= 1 or limit <= 1:
        return [one(r) for r in requests]
    with ThreadPoolExecutor(max_workers=limit, thread_name_prefix="fanout") as pool:
        return list(pool.map(one, requests))


def source_key(result: dict[str, Any]) -> str | None:
    if result.get("url"):
        return normalize_url(str(result["url"]))
    if result.get("path"):
        return str(result["path"])
    return None


def rank_results(
    search_outputs: list[str],
    step_text: str,
    exclude: set[str] | None = None,
    weight: Callable[[str], float] | None = None,
) -> list[RankedSource]:
    """Merge raw search outputs (JSON text) → one ranked, deduplicated list.

    score = 0.5 × provider score (normalized within its own result list) + 0.5 × lexical
    relevance (share of the step's terms found in title + snippet, each term counted by its
    ``weight``: the corpus's idf, so a bridge's rare name outweighs the question's common words)
    + 0.05 per extra query variant that found the same source. Already-read sources go last, not away.
    """
    terms = set(content_terms(step_text))
    weights = {t: weight(t) if weight else 1.0 for t in terms}
    total = sum(weights.values())
    merged: dict[str, dict[str, Any]] = {}
    for raw in search_outputs:
        try:
            data = json.loads(raw)
        except json.JSONDecodeError:
            continue
        results = [r for r in data.get("results", []) if isinstance(r, dict)] if isinstance(data, dict) else []
        scores = [float(r["score"]) for r in results if isinstance(r.get("score"), (int, float))]
        top = max(scores) if scores and max(scores) > 0 else None
        for r in results:
            key = source_key(r)
            if key is None:
                continue
            provider = float(r["score"]) / top if top and isinstance(r.get("score"), (int, float)) else 0.5
            text_terms = set(content_terms(f"{r.get('title', '')} {r.get('snippet', '')}"))
            lexical = sum(weights[t] for t in terms & text_terms) / total if total else 0.0
            entry = merged.setdefault(
                key, {"title": str(r.get("title") or key), "provider": 0.0, "lexical": 0.0, "hits": 0}
            )
            entry["provider"] = max(entry["provider"], provider)
            entry["lexical"] = max(entry["lexical"], lexical)
            entry["hits"] += 1
    ranked = [
        RankedSource(
            source=key,
            title=e["title"],
            score=round(0.5 * e["provider"] + 0.5 * e["lexical"] + 0.05 * (e["hits"] - 1), 4),
            provider_score=round(e["provider"], 4),
            lexical=round(e["lexical"], 4),
            hits=e["hits"],
        )
        for key, e in merged.items()
    ]
    seen = exclude or set()
    ranked.sort(key=lambda r: (r.source in seen, -r.score, r.source))
    return ranked


CLOSE_RANK = 0.9  # a result scoring this share of the K-th result's score ranks close to it


def close_ranked(ranked: list[RankedSource], k: int, exclude: set[str] = frozenset()) -> int:
    """How many of ``ranked`` to read: the top ``k`` and every next one scoring at least
    ``CLOSE_RANK`` of the k-th (a source in ``exclude``, already read, ends the run)."""
    n = min(k, len(ranked))
    if n < k or k <= 0:
        return n
    floor = CLOSE_RANK * ranked[k - 1].score
    while n < len(ranked) and ranked[n].source not in exclude and ranked[n].score >= floor > 0:
        n += 1
    return n
