"""Huge plain-text files (``.txt``, ``.md``, ``.csv``), streamed in bounded windows.

A text file larger than ``ingest.MAX_BYTES`` is never read whole: it is hashed and extracted a
window of :data:`WINDOW_BYTES` at a time, each window cut at a paragraph, line, sentence or word
boundary (the rest carried over to the next window), so memory stays bounded by the window whatever
the file's size. What is *indexed* is capped too (the index lives in memory): at most
:data:`MAX_INDEXED_BYTES` of a file, the first three quarters of the cap from its start and the
last quarter from its end (a log's latest entries are at its end). The document's
``meta["ingest_note"]`` says exactly which byte ranges were indexed.

:func:`read_text_window` reads any part of such a file by byte offset, a window at a time.
Binary formats (PDF, DOCX, PPTX, XLSX) and HTML have no streaming reader and stay skipped above
``MAX_BYTES`` with a reason saying so.
"""

from __future__ import annotations

import codecs
import csv
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from .markdown import MarkdownState, first_title, raise_binary, split_markdown, without_title
from .model import ExtractedDocument, Section, SkipFile, markdown_table
from .spreadsheet import csv_rows, sniff_dialect

WINDOW_BYTES = 4 * 1024 * 1024  # one read() never asks for more than this
MAX_INDEXED_BYTES = 64 * 1024 * 1024  # per file (the index is in memory: ~10 bytes per byte indexed)
TAIL_SHARE = 4  # a quarter of the cap goes to the end of a file larger than the cap
STREAMABLE = (".txt", ".md", ".markdown", ".csv")


def _open(path: Path) -> BinaryIO:
    """The one place a streamed file is opened (tests wrap it to watch the reads)."""
    return path.open("rb")


def streamable(rel: str | Path) -> bool:
    return Path(rel).suffix.lower() in STREAMABLE


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with _open(path) as f:
        while chunk := f.read(WINDOW_BYTES):
            h.update(chunk)
    return h.hexdigest()


def cache_key(sha: str) -> str:
    """Text-cache key of a streamed file: what was indexed depends on the cap, not only the bytes."""
    return f"{sha}-s{MAX_INDEXED_BYTES}"


class _Decoder:
    """UTF-8, switching to cp1252 for the rest of the file at the first invalid byte (as
    :func:`markdown.decode_text` does for a whole file)."""

    def __init__(self) -> None:
        self.encoding = "utf-8"
        self._dec = codecs.getincrementaldecoder("utf-8")("strict")

    def decode(self, data: bytes, final: bool = False) -> str:
        if self.encoding == "utf-8":
            pending = self._dec.getstate()[0]
            try:
                return self._dec.decode(data, final)
            except UnicodeDecodeError:
                self.encoding = "cp1252"
                self._dec = codecs.getincrementaldecoder("cp1252")("replace")
                data = pending + data
        return self._dec.decode(data, final)


def split_point(text: str, lines_only: bool = False) -> int:
    """Where to cut ``text`` so the cut falls between paragraphs, else lines, else sentences, else
    words (in its second half when possible); ``len(text)`` when nothing better exists."""
    floor = len(text) // 2
    for sep in ("\n\n", "\n") if lines_only else ("\n\n", "\n", ". ", " "):
        at = text.rfind(sep, floor)
        if at >= 0:
            return at + len(sep)
    if lines_only:
        at = text.rfind("\n")
        return at + 1 if at >= 0 else len(text)
    return len(text)


def _pieces(f: BinaryIO, span: list[int], decoder: _Decoder, lines_only: bool) -> Iterator[str]:
    """Text of bytes ``span[0]..span[1]`` (the end moved on to the end of its line, and set to
    where reading stopped) in pieces cut at boundaries, reading at most :data:`WINDOW_BYTES` at a
    time."""
    start, stop = span
    f.seek(start)
    pos, carry = start, ""
    while True:
        want = min(WINDOW_BYTES, max(0, stop - pos))
        data = f.read(want) if want else b""
        pos += len(data)
        done = not data
        if not done and pos >= stop:
            # Finish the line that straddles the cap (bounded: one more window at most).
            extra = f.read(WINDOW_BYTES)
            nl = extra.find(b"\n")
            extra = extra[: nl + 1] if nl >= 0 else extra
            data += extra
            pos += len(extra)
            done = True
        text = carry + decoder.decode(data, final=done)
        if done:
            span[1] = pos
            if text.strip():
                yield text
            return
        cut = split_point(text, lines_only)
        piece, carry = text[:cut], text[cut:]
        if piece.strip():
            yield piece


def _ranges(size: int) -> list[tuple[int, int]]:
    if size <= MAX_INDEXED_BYTES:
        return [(0, size)]
    tail = MAX_INDEXED_BYTES // TAIL_SHARE
    return [(0, MAX_INDEXED_BYTES - tail), (size - tail, size)]


def _line_start(f: BinaryIO, offset: int) -> int:
    """The first line start at or after ``offset`` (within one window)."""
    if offset == 0:
        return 0
    f.seek(offset - 1)
    data = f.read(WINDOW_BYTES)
    nl = data.find(b"\n")
    return offset + nl if nl >= 0 else offset


def stream_text_document(path: Path, rel: str | None = None) -> ExtractedDocument:
    """Extract a huge ``.txt`` / ``.md`` / ``.csv`` file window by window (see the module doc)."""
    rel = rel or path.name
    suffix = Path(rel).suffix.lower()
    if suffix not in STREAMABLE:
        raise SkipFile(f"unsupported file type {suffix}")
    size = path.stat().st_size
    stem = Path(rel).stem
    sections: list[Section] = []
    title = ""
    indexed: list[tuple[int, int]] = []
    csv_header: list[str] | None = None
    dialect: type[csv.Dialect] | csv.Dialect = csv.excel
    with _open(path) as f:
        head = f.read(min(4096, WINDOW_BYTES))
        if head.startswith(b"\xef\xbb\xbf"):
            head = head[3:]
        if b"\x00" in head:
            raise_binary()
        if not head.strip():
            raise SkipFile("empty file")
        for start, stop in _ranges(size):
            start = max(_line_start(f, start), indexed[-1][1] if indexed else 0)
            if start >= stop:
                continue
            if start == 0:
                f.seek(0)
                start = 3 if f.read(3) == b"\xef\xbb\xbf" else 0
            state = MarkdownState()
            span = [start, stop]
            for piece in _pieces(f, span, _Decoder(), lines_only=suffix == ".csv"):
                if not title:
                    title = first_title(piece[:100_000], stem) if suffix != ".csv" else stem.replace("_", " ")
                if suffix == ".csv":
                    if csv_header is None:
                        dialect = sniff_dialect(piece)
                    rows = csv_rows(piece, dialect)
                    if csv_header is None and rows:
                        csv_header = rows.pop(0)
                    if rows and csv_header is not None:
                        sections.append(Section((), markdown_table([csv_header, *rows])))
                else:
                    found = split_markdown(piece, state=state)
                    sections.extend(found if suffix == ".txt" else without_title(found, title))
            indexed.append((start, min(span[1], size)))
    if not sections:
        raise SkipFile("no text")
    fmt = {".txt": "text", ".csv": "csv"}.get(suffix, "markdown")
    doc = ExtractedDocument(title or stem, sections, fmt)
    covered = sum(b - a for a, b in indexed)
    if len(indexed) > 1 or indexed[-1][1] < size:
        spans = " and ".join(f"{a:,}–{b:,}" for a, b in indexed)
        doc.meta["ingest_note"] = (
            f"streamed: {size:,} bytes, over the {MAX_INDEXED_BYTES:,}-byte index cap; indexed bytes {spans} "
            f"({covered:,} bytes), the rest is not searchable"
        )
    else:
        doc.meta["ingest_note"] = f"streamed: all {size:,} bytes indexed, read {WINDOW_BYTES:,} bytes at a time"
    doc.meta["indexed_ranges"] = [list(r) for r in indexed]
    doc.meta["bytes"] = size
    return doc


@dataclass(frozen=True)
class TextWindow:
    text: str
    start: int  # byte offset of the window's first character
    end: int  # byte offset just past it: the next window's ``offset``
    size: int  # the file's size in bytes

    @property
    def eof(self) -> bool:
        return self.end >= self.size


def read_text_window(path: Path, offset: int = 0, max_bytes: int | None = None) -> TextWindow:
    """The text at byte ``offset`` of a (huge) text file: at most ``max_bytes`` (default and
    ceiling :data:`WINDOW_BYTES`), cut at a paragraph/line/sentence/word boundary unless at the
    end. Reading on from ``window.end`` gives the next window; the whole file is never loaded."""
    limit = min(max_bytes or WINDOW_BYTES, WINDOW_BYTES)
    size = path.stat().st_size
    offset = max(0, min(offset, size))
    with _open(path) as f:
        f.seek(offset)
        data = f.read(limit)
    # Never start or end inside a UTF-8 character.
    skip = 0
    while skip < min(3, len(data)) and 0x80 <= data[skip] < 0xC0:
        skip += 1
    data = data[skip:]
    start = offset + skip
    at_end = start + len(data) >= size
    if not at_end:
        back = 0
        while back < min(3, len(data)) and 0x80 <= data[-1 - back] < 0xC0:
            back += 1
        if back < len(data) and data[-1 - back] >= 0xC0:
            data = data[: len(data) - back - 1]
    encoding = "utf-8"
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError:
        encoding = "cp1252"  # one byte per character
        text = data.decode(encoding, errors="replace")
    length = len(data)
    if not at_end:
        text = text[: split_point(text)]
        length = len(text.encode("utf-8")) if encoding == "utf-8" else len(text)
    return TextWindow(text, start, start + length, size)


__all__ = [
    "MAX_INDEXED_BYTES",
    "STREAMABLE",
    "WINDOW_BYTES",
    "TextWindow",
    "read_text_window",
    "sha256_file",
    "stream_text_document",
    "streamable",
]
