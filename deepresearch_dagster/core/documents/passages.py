"""Passages: sections cut into retrieval units of at most ~180 words. A long table is cut into
chunks of rows that each repeat the header, so a single row is findable and readable on its own."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..text import separator_row
from .model import Section

MAX_WORDS = 180
TABLE_ROWS = 12


@dataclass(frozen=True)
class Passage:
    doc: int  # index of the document in the corpus
    n: int  # 1-based position within the document
    heading: str  # heading path joined with " › "
    page: int | None
    text: str


def _blocks(text: str) -> list[str]:
    blocks: list[str] = []
    for block in re.split(r"\n\s*\n", text):
        lines = [line for line in block.splitlines() if line.strip()]
        if not lines:
            continue
        table = [i for i, line in enumerate(lines) if line.lstrip().startswith("|")]
        if table and len(table) == len(lines):
            blocks.extend(_table_chunks(lines))
        elif len(block.split()) > MAX_WORDS:
            blocks.extend(_long_block(lines))
        else:
            blocks.append("\n".join(lines))
    return blocks


def _table_chunks(lines: list[str]) -> list[str]:
    has_sep = len(lines) > 1 and separator_row(lines[1])
    header = lines[:2] if has_sep else lines[:1]
    rows = lines[len(header) :]
    if len(rows) <= TABLE_ROWS:
        return ["\n".join(lines)]
    return ["\n".join(header + rows[i : i + TABLE_ROWS]) for i in range(0, len(rows), TABLE_ROWS)]


def _long_block(lines: list[str]) -> list[str]:
    out: list[str] = []
    buf: list[str] = []
    words = 0
    units = lines if len(lines) > 1 else re.split(r"(?<=[.!?])\s+", lines[0])
    for unit in units:
        n = len(unit.split())
        if buf and words + n > MAX_WORDS:
            out.append(("\n" if len(lines) > 1 else " ").join(buf))
            buf, words = [], 0
        buf.append(unit)
        words += n
    if buf:
        out.append(("\n" if len(lines) > 1 else " ").join(buf))
    return out


def split_passages(doc_index: int, sections: list[Section]) -> list[Passage]:
    out: list[Passage] = []
    for section in sections:
        heading = " › ".join(section.heading)
        buf: list[str] = []
        words = 0
        for block in _blocks(section.text):
            n = len(block.split())
            if buf and words + n > MAX_WORDS:
                out.append(Passage(doc_index, len(out) + 1, heading, section.page, "\n\n".join(buf)))
                buf, words = [], 0
            buf.append(block)
            words += n
        if buf:
            out.append(Passage(doc_index, len(out) + 1, heading, section.page, "\n\n".join(buf)))
    return out
