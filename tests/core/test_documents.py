"""Ingestion per format (issue 11): sections, pages, Markdown tables; bad files skipped with a reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from deepresearch_dagster.core.documents import SkipFile, TextCache, extract_bytes, index_folder
from deepresearch_dagster.core.documents.currency import currency, document_date
from tests.fixtures.private_docs.build import docx_bytes, encrypted_pdf_bytes, pdf_bytes, pptx_bytes, xlsx_bytes

SOURCE = """# Harbor Labs quarterly update

Date: 2026-02-03

## 1. Finance

Revenue reached $4.2 million in Q4 2025.

| Metric | Value |
| --- | --- |
| Cash | $9,800,000 |
| Runway | 19 months |

<!-- page -->

## 2. Team

- Headcount: 48 people
- New CFO: Dana Okafor
"""


@pytest.mark.parametrize("ext, builder", [(".pdf", pdf_bytes), (".docx", docx_bytes), (".pptx", pptx_bytes)])
def test_binary_formats_keep_text_tables_and_headings(ext, builder):
    doc = extract_bytes(builder(SOURCE, "Harbor Labs quarterly update"), f"update{ext}")
    assert doc.title == "Harbor Labs quarterly update"
    assert "Revenue reached $4.2 million in Q4 2025." in doc.text
    assert "| Runway | 19 months |" in doc.text  # the table survives as a Markdown table
    assert any("Finance" in " ".join(s.heading) for s in doc.sections)
    assert "Dana Okafor" in doc.text


def test_pdf_sections_carry_page_numbers():
    doc = extract_bytes(pdf_bytes(SOURCE, "Harbor"), "update.pdf")
    pages = {s.page for s in doc.sections if "Dana Okafor" in s.text}
    assert pages == {2} and doc.meta["pages"] == 2


def test_pptx_slides_are_pages():
    doc = extract_bytes(pptx_bytes(SOURCE, "Harbor"), "deck.pptx")
    team = next(s for s in doc.sections if "Dana Okafor" in s.text)
    assert team.heading[0].startswith("Slide ") and team.page == int(team.heading[0].split()[1].rstrip(":"))
    assert "- Headcount: 48 people" in team.text


def test_xlsx_sheets_become_tables_with_formatted_numbers():
    src = "# Book\n\n## Funding\n\n| Round | Amount | Share |\n| --- | --- | --- |\n| Seed | $1,500,000 | 12% |\n"
    doc = extract_bytes(xlsx_bytes(src, "Book"), "book.xlsx")
    assert doc.sections[0].heading == ("Funding",)
    assert "| Seed | $1,500,000 | 12% |" in doc.text


def test_csv_markdown_html_and_text():
    csv_doc = extract_bytes(b'Round,Amount\nSeed,"1,500,000"\nSeries A,9000000\n', "rounds.csv")
    assert "| Seed | 1,500,000 |" in csv_doc.text
    md = extract_bytes(b"# Title\n\n## Part\n\n### Sub\n\nBody text here.\n", "doc.md")
    assert md.title == "Title" and md.sections[0].heading == ("Part", "Sub")
    html = (
        b"<html><head><title>Fleet</title></head><body><nav>Home | About</nav><h1>Fleet</h1>"
        b"<p>The fleet grew strongly this year across every depot we run.</p><h2>By depot</h2>"
        b"<table><tr><th>Depot</th><th>Vans</th></tr><tr><td>North</td><td>120</td></tr></table>"
        b"<ul><li>Electric share 64%</li><li>Diesel share 36%</li></ul><footer>Copyright</footer></body></html>"
    )
    page = extract_bytes(html, "fleet.html")
    assert "| North | 120 |" in page.text and "- Electric share 64%" in page.text
    assert "Copyright" not in page.text and "Home | About" not in page.text
    assert extract_bytes(b"Plain notes\n\nSecond paragraph.", "notes.txt").title == "Plain notes"


@pytest.mark.parametrize(
    "name, data, reason",
    [
        ("locked.pdf", None, "encrypted"),
        ("broken.pdf", b"%PDF-1.4\n" + bytes(range(256)) * 4, "corrupt PDF"),
        ("broken.docx", b"PK\x03\x04garbage" * 10, "corrupt DOCX"),
        ("locked.xlsx", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 600, "encrypted XLSX"),
        ("broken.pptx", b"not a zip at all", "corrupt PPTX"),
        ("empty.md", b"  \n", "empty"),
    ],
)
def test_bad_files_raise_skip_with_reason(name, data, reason):
    if data is None:
        data = encrypted_pdf_bytes(SOURCE, "Harbor")
    with pytest.raises(SkipFile, match=reason):
        extract_bytes(data, name)


def test_index_folder_skips_bad_files_caches_and_reindexes_incrementally(tmp_path: Path):
    root = tmp_path / "docs"
    root.mkdir()
    (root / "a.md").write_text("# A\n\nAlpha figures: 12 units.\n")
    (root / "b.docx").write_bytes(docx_bytes(SOURCE, "B"))
    (root / "locked.pdf").write_bytes(encrypted_pdf_bytes(SOURCE, "Harbor"))
    (root / "huge.txt").write_text("x" * 200_000)
    (root / ".hidden.md").write_text("# hidden\n")
    cache = TextCache(tmp_path / "cache")
    first = index_folder(root, cache, max_bytes=100_000, progress=False)
    assert [p for p, _ in first.documents] == ["a.md", "b.docx"]
    reasons = dict(first.skipped)
    assert reasons["locked.pdf"].startswith("encrypted") and reasons["huge.txt"].startswith("oversized")
    assert first.extracted == 3  # a.md, b.docx, locked.pdf (the oversized file is never read)

    again = index_folder(root, cache, max_bytes=100_000, progress=False)
    assert again.extracted == 0 and again.hashed == 0 and again.from_cache == 4  # the manifest knows them all
    assert dict(again.skipped) == reasons

    (root / "a.md").write_text("# A\n\nAlpha figures: 13 units.\n")
    (root / "c.md").write_bytes((root / "a.md").read_bytes())  # same content: served by sha256
    third = index_folder(root, cache, max_bytes=100_000, progress=False)
    assert third.extracted == 1 and third.hashed == 2
    assert "13 units" in dict(third.documents)["c.md"].text


def test_currency_dates_and_supersession_markers():
    assert document_date("Report\nLast updated: 14 March 2025\n", "x.md") == "2025-03-14"
    assert document_date("No date here", "pricing_2024-06.md") == "2024-06"
    info = currency("# Price list\nThis version is superseded by the 2026 price list.\n", "pricing.md")
    assert info["superseded"] and info["superseded_by"].startswith("2026 price list")
    assert currency("# Price list\nThis price list supersedes the 2025 one.\n", "p.md")["superseded"] is False
    assert currency("# Old\n", "Archive/2024/old.md")["superseded"] is True


def test_a_paragraph_first_line_is_not_the_title():
    para = " ".join(f"Sentence number {i} says something about heat." for i in range(14))
    doc = extract_bytes(f"{para}\n\nMore text.\n".encode(), "long_first_line.txt")
    assert doc.title == "long first line"
    doc = extract_bytes(b"Quarterly figures 2026\n\nRevenue rose.\n", "q.txt")
    assert doc.title == "Quarterly figures 2026"


def test_huge_one_line_document_is_dated_from_its_head_and_read_a_window_at_a_time(tmp_path: Path):
    import time

    from deepresearch_dagster.core.tools.local_search import MAX_READ_CHARS, ReadDocumentArgs, corpus_tools, open_corpus

    body = "Published 2025-03-04. " + "Asphalt stores heat during the day and releases it at night. " * 80_000
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "huge.txt").write_text(body)  # ~4.9 MB, no newline
    started = time.perf_counter()
    assert document_date(body, "huge.txt") == "2025-03-04"
    assert time.perf_counter() - started < 1.0  # the head only, not 5 MB of regex search
    corpus = open_corpus(str(tmp_path / "corpus"), str(tmp_path / "cache"))
    read = next(t for t in corpus_tools(corpus) if t.name == "read_document")
    text = read.run(ReadDocumentArgs(path="huge.txt")).content
    assert len(text) < MAX_READ_CHARS + 5_000
    assert "call read_document with start=" in text
    nxt = int(text.rsplit("start=", 1)[1].split("]")[0])
    more = read.run(ReadDocumentArgs(path="huge.txt", start=nxt, end=nxt + 1000)).content
    assert f"[passage {nxt}/" in more and len(more) < MAX_READ_CHARS + 5_000
