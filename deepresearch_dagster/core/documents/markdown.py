"""Markdown and plain text: ``#`` headings give the heading path; tables and bullets stay as written."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .model import ExtractedDocument, Section

HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
MAX_TITLE_CHARS = 150


@dataclass
class MarkdownState:
    """Where a Markdown text read in pieces stands: enclosing headings, inside a code fence."""

    path: list[tuple[int, str]] = field(default_factory=list)
    in_fence: bool = False


def split_markdown(
    text: str, page: int | None = None, base: tuple[str, ...] = (), state: MarkdownState | None = None
) -> list[Section]:
    """Sections at each ATX heading; the heading path is the chain of enclosing headings.
    ``state`` carries the heading path and fence over from the previous piece of the same text."""
    sections: list[Section] = []
    path: list[tuple[int, str]] = list(state.path) if state else []
    buf: list[str] = []
    in_fence = state.in_fence if state else False

    def flush() -> None:
        body = "\n".join(buf).strip()
        if body:
            sections.append(Section((*base, *(h for _, h in path)), body, page))
        buf.clear()

    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
        match = None if in_fence else HEADING.match(line)
        if match:
            flush()
            level = len(match.group(1))
            path = [(lvl, h) for lvl, h in path if lvl < level]
            path.append((level, match.group(2).strip().strip("*_")))
            continue
        buf.append(line.rstrip())
    flush()
    if state is not None:
        state.path, state.in_fence = path, in_fence
    return sections


def first_title(text: str, fallback: str) -> str:
    for line in text.splitlines():
        match = HEADING.match(line)
        if match and len(match.group(1)) == 1:
            return match.group(2).strip()
    lines = [line.strip() for line in text.splitlines()[:50] if line.strip()]
    first = (lines[0] if lines else "").lstrip("#").strip()
    # A first line that reads as a paragraph (long, or several sentences) or as a sentence (it
    # ends like one) is not a title: the file's name says more, and stays short in the
    # references. Nor is the only line of a file: its one sentence is the document's content,
    # and a title is dropped from what is searched and quoted.
    sentences = len(re.findall(r"[.!?](?:\s|$)", first))
    if (
        not first
        or len(first) > MAX_TITLE_CHARS
        or sentences > 1
        or first.startswith("|")
        or first.endswith((".", "!"))
        or len(lines) == 1
    ):
        return " ".join(re.sub(r"[_\-]+", " ", fallback).split()) or fallback
    return first


def extract_markdown(data: bytes, stem: str) -> ExtractedDocument:
    text = decode_text(data)
    title = first_title(text, stem)
    return ExtractedDocument(title, without_title(split_markdown(text), title), "markdown")


def without_title(sections: list[Section], title: str) -> list[Section]:
    """The H1 title is the document's name, not a section heading of its own."""
    return [Section(s.heading[1:] if s.heading[:1] == (title,) else s.heading, s.text, s.page) for s in sections]


def extract_plain_text(data: bytes, stem: str) -> ExtractedDocument:
    text = decode_text(data)
    title = first_title(text, stem)
    # Memos and e-mail exports are hard-wrapped at ~70 columns: a sentence is one unit again.
    return ExtractedDocument(title, split_markdown(reflow(text)), "text")


_BULLET = re.compile(r"^\s*(?:[-*•▪]|\d{1,2}[.)])\s")


def _prose(line: str) -> bool:
    stripped = line.strip()
    return bool(stripped) and not _BULLET.match(stripped) and not re.search(r"\S\s{2,}\S", stripped)


def reflow(text: str) -> str:
    """Join the lines a PDF or a hard-wrapped text cut inside a paragraph or a bullet (a sentence
    cut at "…€7.9 million in" / "December 2024."); bullets, table-like lines, labelled lines
    ("Date: …") and lines ending a sentence keep their breaks."""
    out: list[str] = []
    for line in text.splitlines():
        prev = out[-1] if out else ""
        label = re.match(r"^[A-Z][\w ]{0,30}:\s", line.strip())  # "Date: …" starts its own line
        open_end = len(prev) > 40 and not re.search(r"[.!?:;]$", prev.strip())
        # A bullet's wrapped tail: indented or lower-case, never a bullet or a label of its own.
        bullet_tail = _BULLET.match(prev) and _prose(line) and (line[:1].isspace() or line.strip()[:1].islower())
        if open_end and not label and ((_prose(prev) and _prose(line)) or bullet_tail):
            out[-1] = prev.rstrip() + " " + line.strip()
        else:
            out.append(line.rstrip())
    return "\n".join(out)


def decode_text(data: bytes) -> str:
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    if b"\x00" in data[:4096]:
        raise_binary()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("cp1252", errors="replace")


def raise_binary() -> None:
    from .model import SkipFile

    raise SkipFile("binary content in a text file")
