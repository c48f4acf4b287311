"""Passage-level local_search / read_document and currency ranking (issue 11)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deepresearch_dagster.core.tools import Toolbox, ToolError
from deepresearch_dagster.core.tools.local_search import LocalCorpus, corpus_tools
from tests.fixtures.private_docs.build import docx_bytes, pdf_bytes

WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa".split()


@pytest.fixture(scope="module")
def haystack(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """500 files, 2,000 passages; one table row in one file states the fact."""
    root = tmp_path_factory.mktemp("haystack")
    for i in range(500):
        rows = "\n".join(f"| part {i}-{r} | {(i * 7 + r) % 900} units | {WORDS[(i + r) % 16]} |" for r in range(30))
        if i == 271:
            rows += "\n| Zephyr valve recall rate | 0.37% | confirmed |"
        prose = " ".join(WORDS[(i + j) % 16] for j in range(150))
        (root / f"memo_{i:03d}.md").write_text(
            f"# Memo {i}\n\n## Notes\n\n{prose}.\n\n## Inventory\n\n"
            f"| Part | Quantity | Code |\n| --- | --- | --- |\n{rows}\n"
        )
    return root


def test_a_fact_in_one_table_row_is_found_among_thousands_of_passages(haystack: Path):
    corpus = LocalCorpus(haystack)
    assert len(corpus.passages) >= 2000
    box = Toolbox(corpus_tools(corpus))
    result = box.call("local_search", {"query": "Zephyr valve recall rate", "k": 3}).content
    top = result["results"][0]
    assert top["path"] == "memo_271.md" and top["heading"] == "Inventory"
    assert top["snippet"] == "Part: Zephyr valve recall rate; Quantity: 0.37%; Code: confirmed"
    assert {"path", "title", "score", "snippet", "heading", "page", "passage", "status", "date"} <= set(top)
    # The passage range reads back the row with the document title and heading path.
    text = box.call("read_document", {"path": top["path"], "start": top["passage"]}).content
    assert "| Zephyr valve recall rate | 0.37% | confirmed |" in text
    assert f"## Memo 271 › Inventory [passage {top['passage']}/" in text
    whole = box.call("read_document", {"path": "memo_271.md"}).content
    assert whole.startswith("# Memo 271\n") and "Zephyr valve recall rate" in whole
    with pytest.raises(ToolError):
        box.call("read_document", {"path": "memo_271.md", "start": 999})


@pytest.fixture
def versions(tmp_path: Path) -> Path:
    root = tmp_path / "company"
    (root / "archive").mkdir(parents=True)
    (root / "drafts").mkdir()
    (root / "pricing_2026.md").write_text(
        "# Nimbus price list 2026\n\nEffective 1 January 2026.\n\n| Product | Monthly price |\n| --- | --- |\n"
        "| Nimbus Pro | €2,450 per seat |\n"
    )
    (root / "archive" / "pricing_2025.md").write_text(
        "# Nimbus price list 2025\n\nEffective 1 January 2025.\n\n| Product | Monthly price |\n| --- | --- |\n"
        "| Nimbus Pro | €2,200 per seat |\n"
    )
    (root / "drafts" / "kpis_draft.md").write_text(
        "# Nimbus KPIs draft\n\nDate: 2025-12-01. This draft is superseded by the final Nimbus KPIs report.\n\n"
        "- Nimbus churn rate: 4.1%\n"
    )
    (root / "kpis_final.docx").write_bytes(
        docx_bytes("# Nimbus KPIs report\n\nDate: 2026-01-10.\n\n- Nimbus churn rate: 2.9%\n", "Nimbus KPIs report")
    )
    (root / "q3_update.md").write_text("# Nimbus Q3 update\n\nDate: 2025-10-01\n\nCustomers: 1,150 accounts\n")
    (root / "board_pack.pdf").write_bytes(
        pdf_bytes("# Nimbus board pack\n\nDate: 2026-01-20\n\nCustomers: 1,420 accounts\n", "Nimbus board pack")
    )
    return root


def test_superseded_and_outdated_documents_lose_to_current_ones(versions: Path):
    corpus = LocalCorpus(versions)
    docs = {d.path: d for d in corpus.documents}
    assert docs["archive/pricing_2025.md"].superseded and docs["archive/pricing_2025.md"].superseded_by == (
        "pricing_2026.md"
    )
    assert docs["drafts/kpis_draft.md"].superseded and docs["drafts/kpis_draft.md"].superseded_by == "kpis_final.docx"
    assert docs["q3_update.md"].outdated and not docs["board_pack.pdf"].outdated
    box = Toolbox(corpus_tools(corpus))

    def top(query: str) -> dict:
        return box.call("local_search", {"query": query}).content["results"][0]

    assert top("Nimbus Pro monthly price")["path"] == "pricing_2026.md"
    assert top("Nimbus churn rate")["path"] == "kpis_final.docx"
    assert top("Nimbus customers accounts")["path"] == "board_pack.pdf"
    listing = box.call("local_search", {"query": "Nimbus Pro monthly price"}).content["results"]
    old = next(r for r in listing if r["path"] == "archive/pricing_2025.md")
    assert old["status"] == "superseded" and old["superseded_by"] == "pricing_2026.md"
    read = box.call("read_document", {"path": "archive/pricing_2025.md"})
    assert "SUPERSEDED" in read.content and read.source_title.endswith("(superseded)")
    json.dumps(listing)  # the listing stays plain JSON


def test_disk_cache_serves_a_second_corpus_without_extracting(versions: Path, tmp_path: Path):
    first = LocalCorpus(versions, cache_dir=tmp_path / "cache")
    second = LocalCorpus(versions, cache_dir=tmp_path / "cache")
    assert first.indexed.extracted == 6 and second.indexed.extracted == 0 and second.indexed.hashed == 0
    assert [d.path for d in second.documents] == [d.path for d in first.documents]
    assert [(d.superseded, d.outdated) for d in second.documents] == [
        (d.superseded, d.outdated) for d in first.documents
    ]
    query = "Nimbus Pro monthly price"
    assert [(h.document.path, h.score) for h in second.search(query, passages=True)] == [
        (h.document.path, h.score) for h in first.search(query, passages=True)
    ]
    # One changed file: only it is extracted again, and the index is rebuilt.
    (versions / "q3_update.md").write_text("# Nimbus Q3 update\n\nDate: 2025-10-01\n\nCustomers: 1,151 accounts\n")
    third = LocalCorpus(versions, cache_dir=tmp_path / "cache")
    assert third.indexed.extracted == 1 and "1,151" in third.get("q3_update.md").text
