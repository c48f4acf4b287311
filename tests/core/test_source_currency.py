"""Supersession feeds source quality (issue 11, item 5)."""

from __future__ import annotations

import json
from datetime import date

import pytest

from deepresearch_dagster.core.documents.currency import currency
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


@pytest.mark.parametrize(
    ("line", "superseded"),
    [
        ("- **No liquid filling.** The porous separator and liquid are replaced by a thin solid film.", False),
        ("Status: closed. Both customers have confirmed that no listings were withdrawn.", False),
        ("> **SUPERSEDED.** This update has been replaced by the FY2025 Annual Report.", True),
        ("Effective 1 February 2025. Superseded by the 2026 price list from 1 February 2026.", True),
        ("Date: 2025-12-10. Status: superseded by the final KPIs of January 2026.", True),
    ],
)
def test_a_notice_speaks_of_the_document_not_of_something_it_describes(line, superseded):
    assert currency(f"# A document\n\n{line}\n\nMore text.", "notes/a.md")["superseded"] is superseded
