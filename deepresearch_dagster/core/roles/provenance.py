"""Tool arguments need provenance, not obedience.

A URL the research team may fetch must have appeared, normalized, in the question, in a web
search result or among the links of a page this research fetched. A URL a model built (a query
string carrying text from working memory, an address an injected instruction named) is refused
with a recorded reason: the call is stored like any failed call, the research goes on.
``read_document`` paths are already confined to the files the corpus index knows (the tool
refuses any other), and artifact reads to the research's own folder.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from ..web.urls import normalize_url

# An http(s) URL in running text, up to whitespace or a closing bracket/quote.
_URL = re.compile(r"https?://[^\s<>\"'`)\]}]+", re.IGNORECASE)
_TRAILING = ".,;:!?"


def urls_in(text: str) -> list[str]:
    return [m.group(0).rstrip(_TRAILING) for m in _URL.finditer(text)]


@dataclass
class Provenance:
    """The normalized URLs this research has seen from a trusted origin or a tool's listing."""

    urls: set[str] = field(default_factory=set)

    @classmethod
    def of_question(cls, question: str) -> Provenance:
        return cls({normalize_url(u) for u in urls_in(question)})

    def admit(self, urls: list[str]) -> None:
        self.urls.update(normalize_url(u) for u in urls if u)

    def learn(self, tool: str, content: Any, links: list[str], source: str | None) -> None:
        """What a successful call adds: a search's result URLs, a fetched page's address and links."""
        if tool == "web_search" and isinstance(content, dict):
            self.admit([str(r.get("url") or "") for r in content.get("results") or [] if isinstance(r, dict)])
        elif tool == "fetch_url":
            self.admit([*links, source or ""])

    def refusal(self, tool: str, arguments: dict[str, Any]) -> str | None:
        """Why the call may not run (None when it may)."""
        if tool != "fetch_url":
            return None
        url = str(arguments.get("url") or "")
        if normalize_url(url) in self.urls:
            return None
        shown = json.dumps(url[:200])
        return (
            f"refused: {shown} did not appear in the question, a search result or a fetched page's links "
            "of this research (tool arguments need provenance)"
        )
