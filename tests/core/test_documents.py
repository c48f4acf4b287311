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
    (root / "huge.pdf").write_bytes(b"%PDF-1.7\n" + b"x" * 200_000)
    (root / "huge.txt").write_text("Huge notes\n\n" + "x " * 100_000)  # over the cap, but text: streamed
    (root / ".hidden.md").write_text("# hidden\n")
    cache = TextCache(tmp_path / "cache")
    first = index_folder(root, cache, max_bytes=100_000, progress=False)
    assert [p for p, _ in first.documents] == ["a.md", "b.docx", "huge.txt"]
    reasons = dict(first.skipped)
    assert reasons["locked.pdf"].startswith("encrypted") and reasons["huge.pdf"].startswith("oversized")
    assert ".pdf files are read whole" in reasons["huge.pdf"]
    assert dict(first.notes)["huge.txt"].startswith("streamed: all 200,012 bytes indexed")
    assert first.extracted == 4  # a.md, b.docx, locked.pdf, huge.txt (the oversized PDF is never read)

    again = index_folder(root, cache, max_bytes=100_000, progress=False)
    assert again.extracted == 0 and again.hashed == 0 and again.from_cache == 5  # the manifest knows them all
    assert dict(again.skipped) == reasons and again.notes == first.notes

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
    assert currency("# Old list\nDO NOT USE — see the 2026 list.\n", "p.md")["superseded"] is True
    # An instruction about part of the use of a current document is no notice of its own.
    assert currency("# Price list\n- Do not use this list for new-build plots.\n", "p.md")["superseded"] is False


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


@pytest.fixture
def small_windows(monkeypatch: pytest.MonkeyPatch):
    from deepresearch_dagster.core.documents import stream

    monkeypatch.setattr(stream, "WINDOW_BYTES", 1024)
    return stream


def test_streamed_markdown_keeps_its_heading_path_and_title_across_windows(tmp_path: Path, small_windows):
    filler = "\n\n".join(f"Paragraph {i} about berth operations and tides." for i in range(120))
    text = f"# Port log\n\n## Cranes\n\n{filler}\n\n### Gantry four\n\nGantry four lifts 40 tonnes.\n"
    path = tmp_path / "log.md"
    path.write_text(text)
    doc = small_windows.stream_text_document(path)
    assert doc.title == "Port log" and doc.format == "markdown"
    assert len(doc.sections) > 3  # one or more per window, each cut between paragraphs
    assert all(s.heading == ("Cranes",) for s in doc.sections[:-1])  # carried over window after window
    assert doc.sections[-1] == type(doc.sections[-1])(("Cranes", "Gantry four"), "Gantry four lifts 40 tonnes.")
    paragraphs = [p for s in doc.sections for p in s.text.split("\n\n")]
    assert paragraphs[:2] == [
        "Paragraph 0 about berth operations and tides.",
        "Paragraph 1 about berth operations and tides.",
    ]
    assert len(paragraphs) == 121  # no paragraph cut in two at a window edge


def test_streamed_csv_repeats_the_header_in_every_window(tmp_path: Path, small_windows):
    path = tmp_path / "fleet.csv"
    path.write_text("depot;vessels\n" + "".join(f"Depot {i};{i * 3}\n" for i in range(300)))
    doc = small_windows.stream_text_document(path)
    assert doc.format == "csv" and doc.title == "fleet" and len(doc.sections) > 3
    assert all(s.text.startswith("| depot | vessels |\n| --- | --- |") for s in doc.sections)
    rows = [line for s in doc.sections for line in s.text.splitlines()[2:]]
    assert rows[0] == "| Depot 0 | 0 |" and rows[-1] == "| Depot 299 | 897 |" and len(rows) == 300


def test_a_streamed_cp1252_file_is_decoded_and_a_binary_one_skipped(tmp_path: Path, small_windows):
    path = tmp_path / "old.txt"
    path.write_bytes(("Plain ascii line.\n" * 100).encode() + "Caf\xe9 cr\xe8me at the quay.\n".encode("cp1252"))
    doc = small_windows.stream_text_document(path)
    assert "Café crème at the quay." in doc.text
    (tmp_path / "bin.txt").write_bytes(b"\x00\x01" * 5000)
    with pytest.raises(SkipFile, match="binary"):
        small_windows.stream_text_document(tmp_path / "bin.txt")


def test_a_streamed_file_is_extracted_again_when_the_index_cap_changes(tmp_path: Path, small_windows, monkeypatch):
    from deepresearch_dagster.core.documents.ingest import quick_fingerprint

    root = tmp_path / "docs"
    root.mkdir()
    (root / "big.txt").write_text("Big log\n\n" + "\n\n".join(f"Entry {i} at berth {i % 9}." for i in range(2000)))
    cache = TextCache(tmp_path / "cache")
    first = index_folder(root, cache, max_bytes=4096, progress=False)
    assert first.extracted == 1 and "all" in dict(first.notes)["big.txt"]
    assert index_folder(root, cache, max_bytes=4096, progress=False).extracted == 0
    assert quick_fingerprint(root, cache, max_bytes=4096) is not None
    monkeypatch.setattr(small_windows, "MAX_INDEXED_BYTES", 8192)
    assert quick_fingerprint(root, cache, max_bytes=4096) is None  # the manifest's entry is stale
    capped = index_folder(root, cache, max_bytes=4096, progress=False)
    assert capped.extracted == 1 and "over the 8,192-byte index cap" in dict(capped.notes)["big.txt"]
    assert len(dict(capped.documents)["big.txt"].text) < len(dict(first.documents)["big.txt"].text) / 2


@pytest.mark.parametrize(
    ("path", "text", "draft"),
    [
        ("drafts/results.md", "# FY2025 results\n\nRevenue was £47.9m.", True),
        ("finance/fy2025_results_DRAFT.md", "# FY2025 results", True),
        ("finance/results.md", "# FY2025 results\n\n**DRAFT** — numbers will change after the close.", True),
        ("finance/results.md", "# FY2025 results\n\nStatus: draft", True),
        # Naming a draft is not being one.
        ("finance/budget_memo.txt", "MEMO\n\nIt replaces the working draft circulated before Christmas.", False),
        ("legal/drafting_guide.md", "# How we draft contracts", False),
    ],
)
def test_a_draft_loses_to_the_final_document(path, text, draft):
    found = currency(text, path)
    assert found["superseded"] is draft
    assert (found["superseded_reason"] or "").find("draft") >= 0 if draft else found["superseded_reason"] is None


def test_hard_wrapped_text_and_wrapped_bullets_are_reflowed():
    text = (
        "To:      Board of Directors\nDate:    9 February 2026\n\n"
        "We plan for EBITDA to be close to break-even in Q4 2026 but negative for the\n"
        "year as a whole (budget: a loss of £1.1m). Capex is budgeted at £2.4m.\n\n"
        "- Operating regions: South West England, South Wales and the West Midlands. A fourth depot\n"
        "  in Leeds (Yorkshire) opens in June 2026.\n- Headcount at year end: 412.\n"
    )
    doc = extract_bytes(text.encode(), "memo.txt")
    body = "\n".join(s.text for s in doc.sections)
    assert "negative for the year as a whole" in body
    assert "A fourth depot in Leeds (Yorkshire) opens in June 2026." in body
    assert "To:      Board of Directors\nDate:" in body  # labelled header lines keep their breaks
    assert "\n- Headcount at year end: 412." in body
