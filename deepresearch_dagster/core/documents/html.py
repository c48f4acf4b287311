"""HTML through the project's web extractor (``core.web.extract.extract_html``, trafilatura).

Before extraction, tables become Markdown table rows, list items ``- `` bullets and headings ``#``
lines, so the extractor's plain-text output keeps structure that would otherwise be flattened.
"""

from __future__ import annotations

import lxml.html
from lxml import etree

from ..web.extract import extract_html, html_visible_text
from .markdown import decode_text, split_markdown
from .model import ExtractedDocument, SkipFile, markdown_table


def _replace(node: lxml.html.HtmlElement, lines: list[str]) -> None:
    parent = node.getparent()
    if parent is None:
        return
    index = parent.index(node)
    tail = node.tail
    parent.remove(node)
    for offset, line in enumerate(lines):
        p = lxml.html.Element("p")
        p.text = line
        parent.insert(index + offset, p)
    if tail and tail.strip():
        p = lxml.html.Element("p")
        p.text = tail
        parent.insert(index + len(lines), p)


def _structure(html: str) -> str:
    try:
        tree = lxml.html.document_fromstring(html)
    except (etree.ParserError, ValueError):
        return html
    for table in reversed(tree.xpath("//table")):
        rows = [[c.text_content() for c in tr.xpath("./th | ./td")] for tr in table.xpath(".//tr")]
        text = markdown_table(rows)
        _replace(table, text.splitlines() if text else [])
    for li in reversed(tree.xpath("//li")):
        if li.xpath(".//li"):
            continue
        _replace(li, ["- " + " ".join(li.text_content().split())])
    for level in range(1, 7):
        for h in tree.xpath(f"//h{level}"):
            text = " ".join(h.text_content().split())
            _replace(h, ["#" * level + " " + text] if text else [])
    return lxml.html.tostring(tree, encoding="unicode")


def extract_html_document(data: bytes, stem: str) -> ExtractedDocument:
    raw = decode_text(data)
    if not raw.strip():
        raise SkipFile("empty HTML file")
    title, text = extract_html(_structure(raw))
    if not text.strip():
        text = html_visible_text(raw)
    sections = split_markdown(text)
    title = (title or "").lstrip("#").strip() or stem
    sections = [
        s.__class__(s.heading[1:] if s.heading[:1] == (title,) else s.heading, s.text, s.page) for s in sections
    ]
    return ExtractedDocument(title, sections, "html")
