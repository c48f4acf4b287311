"""Word (python-docx) and PowerPoint (python-pptx): the maintained, pure-Python readers of the
OOXML formats. Headings give the section path, tables become Markdown tables, list paragraphs
become ``- `` bullets; each slide is a section whose page is the slide number."""

from __future__ import annotations

import io
import re
import zipfile
from typing import Any

from .model import ExtractedDocument, Section, SkipFile, markdown_table

OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
HEADING_STYLE = re.compile(r"^heading\s*(\d)$", re.IGNORECASE)


def _open_zip(data: bytes, kind: str) -> None:
    if data.startswith(OLE_MAGIC):
        # Password-protected OOXML files are wrapped in an OLE compound file.
        raise SkipFile(f"encrypted {kind} (password-protected Office file)")
    if not zipfile.is_zipfile(io.BytesIO(data)):
        raise SkipFile(f"corrupt {kind}: not a ZIP package")


def extract_docx_document(data: bytes, stem: str) -> ExtractedDocument:
    import docx
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    _open_zip(data, "DOCX")
    try:
        document = docx.Document(io.BytesIO(data))
    except Exception as exc:  # python-docx raises several types for broken packages
        raise SkipFile(f"corrupt DOCX: {type(exc).__name__}: {str(exc)[:120]}") from exc
    title = (document.core_properties.title or "").strip()
    sections: list[Section] = []
    path: list[tuple[int, str]] = []
    buf: list[str] = []

    def flush() -> None:
        body = "\n\n".join(b for b in buf if b.strip()).strip()
        if body:
            sections.append(Section(tuple(h for _, h in path), re.sub(r"\n{3,}", "\n\n", body)))
        buf.clear()

    bullets: list[str] = []

    def end_list() -> None:
        if bullets:
            buf.append("\n".join(bullets))
            bullets.clear()

    for child in document.element.body.iterchildren():
        tag = child.tag.rsplit("}", 1)[-1]
        if tag == "p":
            para = Paragraph(child, document)
            text = " ".join(para.text.split())
            style = (para.style.name if para.style is not None else "") or ""
            if not text:
                continue
            if style.lower() == "title":
                title = title or text
                continue
            match = HEADING_STYLE.match(style)
            if match:
                end_list()
                flush()
                level = int(match.group(1))
                path = [(lvl, h) for lvl, h in path if lvl < level]
                path.append((level, text))
                continue
            is_list = "list" in style.lower() or child.find(".//{*}numPr") is not None
            if is_list:
                bullets.append(f"- {text}")
            else:
                end_list()
                buf.append(text)
        elif tag == "tbl":
            end_list()
            table = Table(child, document)
            rows = [[cell.text for cell in _unique_cells(row)] for row in table.rows]
            buf.append(markdown_table(rows))
    end_list()
    flush()
    if not sections:
        raise SkipFile("DOCX has no text")
    return ExtractedDocument(title or stem, sections, "docx")


def _unique_cells(row: Any) -> list[Any]:
    """Merged cells repeat in python-docx; keep each underlying cell once."""
    seen: set[int] = set()
    out = []
    for cell in row.cells:
        if id(cell._tc) not in seen:
            seen.add(id(cell._tc))
            out.append(cell)
    return out


def extract_pptx_document(data: bytes, stem: str) -> ExtractedDocument:
    from pptx import Presentation

    _open_zip(data, "PPTX")
    try:
        deck = Presentation(io.BytesIO(data))
    except Exception as exc:
        raise SkipFile(f"corrupt PPTX: {type(exc).__name__}: {str(exc)[:120]}") from exc
    title = (deck.core_properties.title or "").strip()
    sections: list[Section] = []
    for number, slide in enumerate(deck.slides, 1):
        slide_title = ""
        if slide.shapes.title is not None and slide.shapes.title.has_text_frame:
            slide_title = " ".join(slide.shapes.title.text_frame.text.split())
        blocks: list[str] = []
        for shape in _shapes(slide.shapes):
            if slide.shapes.title is not None and shape.shape_id == slide.shapes.title.shape_id:
                continue
            if getattr(shape, "has_table", False) and shape.has_table:
                rows = [[cell.text for cell in row.cells] for row in shape.table.rows]
                blocks.append(markdown_table(rows))
            elif getattr(shape, "has_text_frame", False) and shape.has_text_frame:
                lines = []
                for para in shape.text_frame.paragraphs:
                    text = " ".join("".join(r.text for r in para.runs).split())
                    if text:
                        lines.append(("  " * para.level) + f"- {text}" if _is_bullet(shape, para) else text)
                if lines:
                    blocks.append("\n".join(lines))
        if slide.has_notes_slide and slide.notes_slide.notes_text_frame is not None:
            notes = " ".join(slide.notes_slide.notes_text_frame.text.split())
            if notes:
                blocks.append(f"Speaker notes: {notes}")
        if number == 1 and not title:
            title = slide_title
        heading = (f"Slide {number}: {slide_title}" if slide_title else f"Slide {number}",)
        body = "\n\n".join(b for b in blocks if b)
        if body or slide_title:
            sections.append(Section(heading, body or slide_title, number))
    if not sections:
        raise SkipFile("PPTX has no text")
    return ExtractedDocument(title or stem, sections, "pptx", {"slides": len(deck.slides)})


def _shapes(shapes: Any) -> list[Any]:
    out = []
    for shape in shapes:
        if shape.shape_type == 6:  # MSO_SHAPE_TYPE.GROUP
            out.extend(_shapes(shape.shapes))
        else:
            out.append(shape)
    return out


def _is_bullet(shape: Any, para: Any) -> bool:
    # Body placeholders are bulleted by the layout; other text boxes only when indented.
    return bool(getattr(shape, "is_placeholder", False) and shape.placeholder_format.idx != 0) or para.level > 0
