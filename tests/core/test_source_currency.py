"""Supersession feeds source quality (issue 11, item 5)."""

from __future__ import annotations

import json
from datetime import date

from deepresearch_dagster.core.roles.source_quality import corpus_status, quality_warnings, score_sources


def _entry(n: int, source: str) -> dict:
    return {"n": n, "source": source, "summary": "The Nimbus Pro seat costs 2,450 euros a month.", "extraction": []}


def test_superseded_and_archived_documents_score_lower_and_are_flagged():
    listing = {
        "query": "nimbus price",
        "results": [
            {"path": "pricing_2026.md", "status": "current", "date": "2026-01-01"},
            {
                "path": "old/pricing_2025.md",
                "status": "superseded",
                "date": "2025-01-01",
                "superseded_by": "pricing_2026.md",
                "superseded_reason": "a newer version exists",
            },
            {"path": "q3.md", "status": "outdated", "date": "2025-10-01", "superseded_by": "board.pdf"},
        ],
    }
    status = corpus_status({"step1__local_search.json": json.dumps(listing), "x.txt": "not json"})
    assert status["old/pricing_2025.md"]["status"] == "superseded"
    entries = [
        _entry(1, "pricing_2026.md"),
        _entry(2, "old/pricing_2025.md"),
        _entry(3, "q3.md"),
        _entry(4, "archive/x.md"),
    ]
    scores = {s.source: s for s in score_sources("Nimbus pricing", entries, {}, date(2026, 2, 1), status=status)}
    assert scores["pricing_2026.md"].currency == "current"
    assert scores["old/pricing_2025.md"].currency == "superseded"
    assert scores["old/pricing_2025.md"].superseded_by == "pricing_2026.md"
    assert scores["q3.md"].currency == "outdated"
    assert scores["archive/x.md"].currency == "superseded"  # archive folder, even when never listed
    current = scores["pricing_2026.md"].score
    assert scores["old/pricing_2025.md"].score < scores["q3.md"].score < current
    assert scores["pricing_2026.md"].published == "2026-01-01"  # corpus dates feed recency
    warnings = quality_warnings(list(scores.values()), entries)
    assert any("Superseded source: `old/pricing_2025.md` (current version: `pricing_2026.md`)" in w for w in warnings)
