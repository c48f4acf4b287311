"""Tool arguments need provenance, not obedience.

A URL the research team may fetch must have appeared, normalized, in the question, in a web
search result or among the links of a page this research fetched. A URL a model built (a query
string carrying text from working memory, an address an injected instruction named) is refused
with a recorded reason: the call is stored like any failed call, the research goes on.
``read_document`` paths are already confined to the files the corpus index knows (the tool
refuses any other), and artifact reads to the research's own folder.

An outside tool (an MCP server's or a plugin's) is checked on every string argument the model
chose, by the argument's JSON-schema ``format`` (``uri``), its name (``url``, ``…_uri``) or its shape
(``scheme://``): a URL needs the same provenance as ``fetch_url``'s; a ``file:`` URL or a path-shaped
value (starting with ``/``, ``\\``, ``~/`` or a drive, or with a ``..`` segment) may not climb out
(``..``) nor name an absolute place outside the server's own folders (:attr:`Tool.roots`). The
server never receives a refused call.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

from ..tools.base import Tool
from ..web.urls import normalize_url

# An http(s) URL in running text, up to whitespace or a closing bracket/quote.
_URL = re.compile(r"https?://[^\s<>\"'`)\]}]+", re.IGNORECASE)
_TRAILING = ".,;:!?"
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")  # a URL of any scheme, as a whole argument
_DRIVE = re.compile(r"[A-Za-z]:[\\/]")
_URL_FORMATS = {"uri", "url", "iri", "uri-reference", "iri-reference"}


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

    def refusal(self, tool: str, arguments: dict[str, Any], offered: Tool | None = None) -> str | None:
        """Why the call may not run (None when it may). ``offered``: the tool called, whose origin
        says whether it is an outside one (MCP server, plugin) with every argument checked."""
        if tool == "fetch_url":
            return self._unseen(str(arguments.get("url") or ""))
        if offered is None or offered.origin == "builtin":
            return None
        properties = (offered.schema or {}).get("properties") or {}
        for key, value in arguments.items():
            if key in offered.fixed:  # set by the configuration whatever the model sent
                continue
            schema = properties.get(key) if isinstance(properties.get(key), dict) else {}
            for where, text in _strings(key, value):
                why = self._argument(key, text, schema, offered.roots)
                if why:
                    return f"refused: argument {where} of {tool}: {why.removeprefix('refused: ')}"
        return None

    def _unseen(self, url: str) -> str | None:
        if normalize_url(url) in self.urls:
            return None
        shown = json.dumps(url[:200])
        return (
            f"refused: {shown} did not appear in the question, a search result or a fetched page's links "
            "of this research (tool arguments need provenance)"
        )

    def _argument(self, key: str, text: str, schema: dict[str, Any], roots: tuple[str, ...]) -> str | None:
        url = schema.get("format") in _URL_FORMATS or key.lower().endswith(("url", "uri")) or _SCHEME.match(text)
        if url and text[:5].lower() == "file:":
            return escape(unquote(urlsplit(text).path), roots)
        if url:
            return self._unseen(text)
        return escape(text, roots) if "\n" not in text else None


def _strings(where: str, value: Any) -> Iterator[tuple[str, str]]:
    """Every string in an argument's value, with where it sits (``paths[2]``, ``filter.dir``)."""
    if isinstance(value, str):
        yield where, value
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _strings(f"{where}[{i}]", item)
    elif isinstance(value, dict):
        for k, item in value.items():
            yield from _strings(f"{where}.{k}", item)


def escape(path: str, roots: tuple[str, ...]) -> str | None:
    """Why a path-shaped value leaves the tool's folders (None: it does not, or is no path)."""
    shown = json.dumps(path[:200])
    if ".." in re.split(r"[\\/]", path):
        return f"{shown} climbs out of the folder it names ('..' segment; a path argument may not escape)"
    if not (path.startswith(("/", "\\", "~/")) or path == "~" or _DRIVE.match(path)):
        return None  # relative: inside whatever folder the tool works in
    place = os.path.normpath(os.path.expanduser(path))
    if any(os.path.commonpath([place, root]) == root for root in roots if place.startswith("/")):
        return None
    inside = ", ".join(roots) or "none configured"
    return f"{shown} is an absolute path outside the tool's folders ({inside}; a path argument may not escape)"
