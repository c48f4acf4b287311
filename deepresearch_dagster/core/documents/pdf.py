"""PDF through pypdf (already a dependency, pure Python, maintained): one section per page so
citations can name the page; numbered headings ("2. Fleet operations") open sub-sections."""

from __future__ import annotations

import io
import logging
import re

from .markdown import reflow
from .model import ExtractedDocument, Section, SkipFile, markdown_table

NUMBERED_HEADING = re.compile(r"^(?:\d{1,2}(?:\.\d{1,2})*\.?|[IVX]{1,4}\.)\s+[A-Z][^.!?:|]{2,70}$")
MAX_PAGES = 2000


def extract_pdf_document(data: bytes, stem: str) -> ExtractedDocument:
    from pypdf import PdfReader
    from pypdf.errors import FileNotDecryptedError, PdfReadError

    # pypdf logs every repair it attempts on a broken file; the skip reason says enough.
    logging.getLogger("pypdf").setLevel(logging.ERROR)
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            # Many "protected" PDFs only restrict printing: an empty user password opens them.
            try:
                if not reader.decrypt(""):
                    raise SkipFile("encrypted PDF (password required)")
            except (NotImplementedError, FileNotDecryptedError) as exc:
                raise SkipFile(f"encrypted PDF ({exc})") from exc
        pages = reader.pages
        count = len(pages)
    except SkipFile:
        raise
    except (PdfReadError, ValueError, KeyError, TypeError, OSError) as exc:
        raise SkipFile(f"corrupt PDF: {type(exc).__name__}: {str(exc)[:120]}") from exc
    if count > MAX_PAGES:
        raise SkipFile(f"oversized PDF: {count} pages > {MAX_PAGES}")
    title = ""
    try:
        if reader.metadata is not None and reader.metadata.title:
            title = str(reader.metadata.title).strip()
    except Exception:  # broken metadata must not cost the text
        title = ""
    sections: list[Section] = []
    heading: tuple[str, ...] = ()
    unreadable = 0
    for number, page in enumerate(pages, 1):
        try:
            text = page.extract_text() or ""
        except Exception:  # one undecodable page must not fail the document
            unreadable += 1
            continue
        buf: list[str] = []
        for line in text.splitlines():
            line = line.rstrip()
            if NUMBERED_HEADING.match(line.strip()) and len(line.split()) <= 10:
                if buf and "\n".join(buf).strip():
                    sections.append(Section(heading, "\n".join(buf).strip(), number))
                buf = []
                heading = (line.strip(),)
                continue
            buf.append(line)
        if "\n".join(buf).strip():
            sections.append(Section(heading, "\n".join(buf).strip(), number))
    sections = [Section(s.heading, column_tables(reflow(s.text)), s.page) for s in sections]
    if not sections:
        raise SkipFile("PDF has no extractable text (scanned image?)")
    if not title:
        title = next((line.strip() for line in sections[0].text.splitlines() if line.strip()), stem)[:200]
    return ExtractedDocument(title, sections, "pdf", {"pages": count, "unreadable_pages": unreadable})


def column_tables(text: str) -> str:
    """Runs of 2+ lines whose cells are separated by 2+ spaces (a text-layer table) → Markdown table."""
    lines = text.splitlines()
    out: list[str] = []
    run: list[list[str]] = []

    def flush() -> None:
        if len(run) >= 2 and len({len(r) for r in run}) == 1:
            out.extend(["", markdown_table(run), ""])
        else:
            out.extend("   ".join(r) for r in run)
        run.clear()

    for line in lines:
        cells = [c for c in re.split(r"\s{2,}", line.strip()) if c]
        if len(cells) >= 2:
            if run and len(cells) != len(run[0]):
                flush()
            run.append(cells)
        else:
            flush()
            out.append(line)
    flush()
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip()
