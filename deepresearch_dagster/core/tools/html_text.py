"""Readable text from simple HTML documents (corpus pages) using only the stdlib parser."""

from __future__ import annotations

import re
from html.parser import HTMLParser

_SKIP = {"script", "style", "nav", "footer", "header", "aside", "noscript", "form", "template"}
_BLOCK = {
    "p",
    "div",
    "section",
    "article",
    "main",
    "li",
    "ul",
    "ol",
    "br",
    "tr",
    "table",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "blockquote",
    "pre",
}


class _TextParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title = ""
        self._skip_depth = 0
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIP:
            self._skip_depth += 1
        elif tag == "title":
            self._in_title = True
        elif tag in _BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIP and self._skip_depth:
            self._skip_depth -= 1
        elif tag == "title":
            self._in_title = False
        elif tag in _BLOCK:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        elif not self._skip_depth:
            self.parts.append(data)


def html_to_text(html: str) -> tuple[str, str]:
    """Return ``(title, text)``; paragraphs separated by blank lines."""
    parser = _TextParser()
    parser.feed(html)
    parser.close()
    raw = "".join(parser.parts)
    paragraphs = [re.sub(r"[ \t\r\f\v]+", " ", p).strip() for p in raw.split("\n")]
    return parser.title.strip(), "\n\n".join(p for p in paragraphs if p)
