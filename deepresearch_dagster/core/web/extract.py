"""Main-content extraction: HTML (trafilatura) and PDF (pypdf) to plain text, plus a token-F1 metric."""

from __future__ import annotations

import io
import re
from collections import Counter

import lxml.html
import trafilatura
from lxml import etree
from trafilatura.settings import use_config

# EXTRACTION_TIMEOUT=0: trafilatura's timeout uses signal.alarm, which only works in the main thread;
# Dagster runs ops in worker threads.
_CONFIG = use_config()
_CONFIG.set("DEFAULT", "EXTRACTION_TIMEOUT", "0")

_TOKEN = re.compile(r"\w+")
_BLOCKS_IN_CELL = ".//p | .//div | .//table | .//h1 | .//h2 | .//h3 | .//article"
# A cell with this much text or this many block children is page layout, not tabular data.
_LAYOUT_CELL_CHARS = 2000
_LAYOUT_CELL_BLOCKS = 4


def extract_html(html: str, url: str | None = None) -> tuple[str | None, str]:
    """Return (title, main text) of an HTML page; paragraphs are separated by blank lines."""
    tree = _parse(html)
    if tree is None:
        return None, ""
    title = _title(tree, url)
    _unwrap_layout_tables(tree)
    text = trafilatura.extract(
        tree,
        url=url,
        output_format="txt",
        favor_recall=True,  # a research agent would rather read a little boilerplate than miss content
        include_comments=False,
        include_tables=True,
        include_images=False,
        include_links=False,
        config=_CONFIG,
    )
    if not text:
        # Tiny or unusual pages make trafilatura give up; the visible text is better than nothing.
        body = tree.find(".//body")
        text = _visible_text(body if body is not None else tree)
    return title, _paragraphs(text)


def extract_pdf(data: bytes) -> tuple[str | None, str]:
    """Return (title, text) of a PDF; pages are separated by blank lines."""
    from pypdf import PdfReader  # imported lazily: only PDF fetches pay for it

    reader = PdfReader(io.BytesIO(data))
    title: str | None = None
    try:
        meta = reader.metadata
        if meta is not None and meta.title:
            title = str(meta.title).strip() or None
    except Exception:  # broken metadata must not cost us the text
        title = None
    pages = []
    for page in reader.pages:
        try:
            pages.append((page.extract_text() or "").strip())
        except Exception:  # one undecodable page should not fail the document
            continue
    return title, "\n\n".join(p for p in pages if p)


def token_f1(predicted: str, expected: str) -> float:
    """Bag-of-words F1 over lowercase ``\\w+`` tokens (the usual content-extraction score)."""
    pred = Counter(_TOKEN.findall(predicted.lower()))
    gold = Counter(_TOKEN.findall(expected.lower()))
    if not pred and not gold:
        return 1.0
    common = sum((pred & gold).values())
    if common == 0:
        return 0.0
    precision = common / sum(pred.values())
    recall = common / sum(gold.values())
    return 2 * precision * recall / (precision + recall)


def html_visible_text(html: str) -> str:
    """All visible text of an HTML fragment (scripts and styles dropped)."""
    tree = _parse(html)
    return "" if tree is None else _visible_text(tree)


def _parse(html: str) -> lxml.html.HtmlElement | None:
    if not html or not html.strip():
        return None
    try:
        return lxml.html.document_fromstring(html)
    except (etree.ParserError, ValueError):
        # ValueError: str input with an XML encoding declaration; bytes let lxml honour it.
        try:
            return lxml.html.document_fromstring(html.encode("utf-8", errors="replace"))
        except etree.ParserError:
            return None


def _title(tree: lxml.html.HtmlElement, url: str | None) -> str | None:
    meta = trafilatura.extract_metadata(tree, default_url=url)
    if meta is not None and meta.title:
        return meta.title.strip()
    node = tree.find(".//title")
    text = node.text_content().strip() if node is not None else ""
    return text or None


def _unwrap_layout_tables(tree: lxml.html.HtmlElement) -> None:
    """Turn layout tables (whole articles inside a cell) into divs.

    Otherwise trafilatura renders the article as one giant table row and paragraph breaks are lost.
    """
    for cell in tree.xpath("//td | //th"):
        blocks = cell.xpath(_BLOCKS_IN_CELL)
        if len(blocks) < _LAYOUT_CELL_BLOCKS and len(cell.text_content()) < _LAYOUT_CELL_CHARS:
            continue
        table = next((a for a in cell.iterancestors("table")), None)
        if table is None:
            continue
        # Only this table's own structure: data tables nested inside the layout stay tables.
        own = [
            node
            for node in table.iter("table", "thead", "tbody", "tfoot", "tr", "td", "th", "caption")
            if node is table or next(node.iterancestors("table")) is table
        ]
        for node in own:
            node.tag = "div"
            for attr in ("colspan", "rowspan"):
                node.attrib.pop(attr, None)


def _visible_text(node: lxml.html.HtmlElement) -> str:
    for bad in node.xpath(".//script | .//style | .//noscript | .//template"):
        bad.drop_tree()
    return re.sub(r"[ \t]+", " ", node.text_content()).strip()


def _paragraphs(text: str) -> str:
    """One blank line between blocks; list items and table rows stay on consecutive lines."""
    lines = [line.strip() for line in text.splitlines()]
    lines = [line for line in lines if line]
    parts: list[str] = []
    for prev, line in zip([None, *lines], lines, strict=False):
        if prev is not None:
            parts.append("\n" if _is_run_line(prev) and _is_run_line(line) else "\n\n")
        parts.append(line)
    return "".join(parts)


def _is_run_line(line: str) -> bool:
    return line.startswith(("- ", "* ", "|"))
