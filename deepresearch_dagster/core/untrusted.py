"""Untrusted text (fetched pages, corpus documents, search listings): marked, not obeyed.

- **Spotlighting**: text from tools reaches a model only inside a data block opened and closed by
  a per-research marker (:func:`data_marker`), which the role prompts say encloses data. The
  marker looks random but is a hash of the partition key: same research, same bytes (the answer
  cache and byte-identical reruns depend on it).
- **Suspected injections**: text that addresses the model (``addresses_model``: instruction
  overrides, role tags, tool-call look-alikes) is found per sentence (per string of a JSON
  listing). The sources holding it are recorded on the tool call, kept out of working memory (a
  report sentence never rests on them) and named in the report's Limitations; the text itself is
  blanked before any model reads the output (:func:`redact`).
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any

from .models import SummaryRecord
from .naming import short_hash
from .text import addresses_model, json_strings, split_sentences
from .web.urls import normalize_url

REDACTED = "[text addressed to the model removed]"
UNNAMED = "(tool output)"  # the source of an output that names none


def data_marker(partition_key: str) -> str:
    """The research's data-block marker: deterministic, and not guessable from the text it encloses."""
    return f"DATA-{short_hash('untrusted-data:' + partition_key, 16).upper()}"


def spotlight(text: str, marker: str) -> str:
    """``text`` as one data block. A copy of the marker inside the text is removed, so the data
    cannot close its own block."""
    return f"<<<{marker}\n{text.replace(marker, '')}\n{marker}>>>"


@lru_cache(maxsize=256)
def _suspect_units(text: str) -> tuple[str, ...]:
    """Sentences (within lines: a role tag or a fake tool call is often a line of its own) that
    address the model. Memoized: a tool output is read for them when it is stored and again when
    its compression blanks them."""
    return tuple(s for line in text.splitlines() for s in split_sentences(line) if addresses_model(s))


def _listing(raw: str) -> dict[str, Any] | None:
    try:
        data = json.loads(raw)
    except json.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


def suspected_sources(raw: str, kind: str, source: str | None) -> list[str]:
    """The sources of a tool output that hold text addressing the model: the output's own source
    (a page or document; the artifact when it has none), or the results of a listing whose title
    or snippet does."""
    listing = _listing(raw) if kind == "json" else None
    if listing is None:
        return [source or UNNAMED] if _suspect_units(raw) else []
    found: list[str] = []
    for result in listing.get("results") or []:
        if isinstance(result, dict) and any(_suspect_units(s) for s in json_strings(result)):
            # Named as the read of that result will name its source (a page's URL normalized).
            url = result.get("url")
            found.append(normalize_url(str(url)) if url else str(result.get("path") or "(search result)"))
    return list(dict.fromkeys(found))


def _blank(text: str) -> str:
    for unit in _suspect_units(text):
        text = text.replace(unit, REDACTED)
    return text


def redact(raw: str, kind: str) -> str:
    """The output as a model may read it: every sentence that addresses the model replaced by a
    placeholder (the file on disk keeps every byte); a JSON listing stays valid JSON."""
    data = _listing(raw) if kind == "json" else None
    if data is None:
        return _blank(raw)
    if not any(_suspect_units(s) for s in json_strings(data)):
        return raw

    def walk(value: Any) -> Any:
        if isinstance(value, str):
            return _blank(value)
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    return json.dumps(walk(data), ensure_ascii=False, indent=2)


def set_aside(summaries: list[SummaryRecord]) -> list[SummaryRecord]:
    """Marks every summary whose source any of ``summaries`` suspects (a clean passage of a document
    whose other passage addresses the model, a page a listing's snippet flagged) as a suspected
    injection: it leaves working memory, so no report sentence rests on it. Returns the list."""
    suspects = {src for s in summaries for src in s.suspects}
    for s in summaries:
        if (s.source or UNNAMED) in suspects and not s.suspected_injection:
            s.suspected_injection, s.injected_tokens = True, 0
    return summaries


def without_address(markdown: str) -> str:
    """A model-written report body without any sentence that addresses a model (an instruction it
    read and repeated); a list item or line left empty goes too. Headings stay."""
    kept = []
    for line in markdown.splitlines():
        if line.startswith("#") or not _suspect_units(line):
            kept.append(line)
            continue
        rest = re.sub(r"  +", " ", _blank(line).replace(REDACTED, "")).rstrip()
        if rest.strip(" -*\t"):
            kept.append(rest)
    return "\n".join(kept)
