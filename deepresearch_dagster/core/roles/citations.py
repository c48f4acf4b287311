"""Citation verification: every ``[n]`` must name a research source whose stored raw artifact
contains the supporting quote (after whitespace/case/markup normalization). Unverifiable
citations are removed from the text and counted."""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache
from typing import Any

from pydantic import BaseModel

from ..text import NUMBER, content_terms, separator_row, split_sentences, structured_records, table_cells

_CITED = re.compile(r"((?:\s*\[\d+\])+)")
_NUM = re.compile(r"\[(\d+)\]")
_MARKUP = re.compile(r"[*_`#>|]+")
_LIST = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*$")
_RUN_IN = re.compile(r"^\s*\*\*[^*]+\*\*\s*")
_PASSAGE = re.compile(r"\s*\[passage \d+/\d+\]$")
_PAGE = re.compile(r"\s*\(page (\d+)\)$")
# read_document's banner lines (tools/local_search.py: _banner) are headings, but not places.
_BANNER = re.compile(r"^(?:Source: |SUPERSEDED \(|Some figures here are restated)")


class CitationCheck(BaseModel):
    n: int
    sentence: str
    verified: bool
    quote: str | None = None
    artifact_file: str | None = None
    reason: str | None = None


def normalize(text: str) -> str:
    text = unicodedata.normalize("NFKC", text)
    text = _MARKUP.sub(" ", _LIST.sub("", text))
    return re.sub(r"\s+", " ", text).strip().lower()


@lru_cache(maxsize=8192)
def _terms(text: str) -> frozenset[str]:
    return frozenset(content_terms(text))


def _overlap(sentence_terms: set[str], other: str) -> float:
    return len(sentence_terms & _terms(other)) / len(sentence_terms) if sentence_terms else 0.0


# A report checks every sentence against the same few raw outputs: each raw output is read
# (normalized, its table rows, records and prose sentences found) once per process, not once
# per sentence and source. Keyed by the text itself, so a changed file is read anew.
Quoted = tuple[tuple[str, tuple[str, ...]], ...]  # (what a finding quotes, its normalized parts)


@lru_cache(maxsize=64)
def _read_raw(raw: str) -> tuple[str, Quoted, Quoted, tuple[str, ...]]:
    """(normalized text, table data rows as (line, cells), records as (text, fields), prose sentences)."""
    lines = raw.splitlines()
    rows = []
    for i, line in enumerate(lines):
        if not line.lstrip().startswith("|"):
            continue
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if separator_row("|" + nxt.strip().removeprefix("|")):  # its leading pipe may be left out
            continue  # a header row
        cells = [normalize(c) for c in table_cells(line)]
        rows.append((line.strip(), tuple(c for c in cells if c and not re.fullmatch(r"[-: ]+", c))))
    found = structured_records(lines)
    records = tuple((r.text, tuple(normalize(line) for line in r.lines)) for r in found)
    inside = {i for r in found for i in range(r.start, r.end)}
    # The sentences outside structured records: a record supports a finding only whole
    # (``record_support``) or quoted exactly, never as a paraphrase (a log without full stops
    # would read as one sentence holding every entry's words).
    prose = split_sentences("\n".join(line for i, line in enumerate(lines) if i not in inside) if inside else raw)
    return normalize(raw), tuple(rows), records, tuple(prose)


def find_support(sentence: str, entries: list[dict[str, Any]], raws: dict[str, str]) -> tuple[str, str] | None:
    """(quote, artifact file) from the source's raw artifacts that supports ``sentence``."""
    terms = set(content_terms(sentence))
    norm_sentence = normalize(sentence)
    numbers = _numbers(sentence)
    for e in entries:
        raw = raws.get(e["artifact_file"], "")
        norm_raw, _, _, prose = _read_raw(raw)
        if norm_sentence and norm_sentence in norm_raw:
            return sentence.strip(), e["artifact_file"]
        row = table_row_support(norm_sentence, raw) or record_support(norm_sentence, raw)
        if row:
            return row, e["artifact_file"]
        # A paraphrase is supported by a quote that shares most of its words and all its numbers.
        candidates = [*split_sentences(e["summary"]), *e["extraction"]]
        best = max(candidates, key=lambda c: _overlap(terms, c), default=None)
        if best and _overlap(terms, best) >= 0.5 and normalize(best) in norm_raw and numbers <= _numbers(best):
            return best, e["artifact_file"]
        raw_best = max(prose, key=lambda s: _overlap(terms, s), default=None)
        if raw_best and _overlap(terms, raw_best) >= 0.6 and numbers <= _numbers(raw_best):
            return raw_best, e["artifact_file"]
    return None


def _numbers(text: str) -> set[str]:
    """The figures a sentence states ("£1,400" and "1400" alike), for the paraphrase check."""
    return {n.replace(",", "") for n in NUMBER.findall(text)}


def table_row_support(norm_sentence: str, raw: str) -> str | None:
    """The raw Markdown table row a finding quotes as "Header: cell; Header: cell", or None.

    Every cell of the row must be in the finding (a cell may hold "; " itself, so the finding is
    not split back into cells), and the cells must make up 30 % of it or more: a header row's
    short names alone never support a finding."""
    for line, cells in _read_raw(raw)[1]:
        if (
            len(cells) >= 2
            and all(c in norm_sentence for c in cells)
            and sum(map(len, cells)) >= 0.3 * len(norm_sentence)
        ):
            return line
    return None


def record_support(norm_sentence: str, raw: str) -> str | None:
    """The raw record (a log entry, a block of ``Key: value`` lines, a diff's change) a finding
    quotes as "Key: value; Key: value", as the compressor reads it (``text.structured_records``),
    or None. Like a table row: every line of it in the finding, making up 30 % of it or more."""
    for text, fields in _read_raw(raw)[2]:
        if all(f in norm_sentence for f in fields) and sum(map(len, fields)) >= 0.3 * len(norm_sentence):
            return text
    return None


def verify_citations(
    markdown: str, entries_by_n: dict[int, list[dict[str, Any]]], raws: dict[str, str]
) -> tuple[str, list[CitationCheck]]:
    """Check each cited sentence; drop markers that fail. Returns the new text and every check."""
    checks: list[CitationCheck] = []
    out_lines = []
    for line in markdown.splitlines():
        pieces = _CITED.split(line)  # text, markers, text, markers, ...
        rebuilt = []
        for i in range(0, len(pieces), 2):
            text = pieces[i]
            rebuilt.append(text)
            if i + 1 >= len(pieces):
                continue
            # Bold run-in heads ("**Risks.** ID: R05; …") are markup, not part of the claim.
            sentence = split_sentences(_RUN_IN.sub("", _LIST.sub("", text)).strip())
            claim = sentence[-1] if sentence else text.strip()
            kept = []
            for n in (int(m) for m in _NUM.findall(pieces[i + 1])):
                entries = entries_by_n.get(n)
                if not entries:
                    checks.append(CitationCheck(n=n, sentence=claim, verified=False, reason="no such source"))
                    continue
                support = find_support(claim, entries, raws)
                if support is None:
                    checks.append(
                        CitationCheck(n=n, sentence=claim, verified=False, reason="quote not found in the artifact")
                    )
                    continue
                checks.append(
                    CitationCheck(n=n, sentence=claim, verified=True, quote=support[0], artifact_file=support[1])
                )
                kept.append(f"[{n}]")
            if kept:
                rebuilt.append(" " + "".join(kept))
        out_lines.append("".join(rebuilt).rstrip())
    return "\n".join(out_lines) + ("\n" if markdown.endswith("\n") else ""), checks


def locate(raw: str, quote: str | None, title: str | None = None) -> str | None:
    """Where in a stored document the quote stands: the heading path (and page) of the section
    that contains it, as ``read_document`` rendered it (``## Title › Section, page 3 [passage
    4/9]`` or ``## Section (page 3)``). None when the quote is not under any heading."""
    if not quote:
        return None
    wanted = normalize(quote)
    heading, block = None, []
    sections: list[tuple[str | None, str]] = []
    for line in raw.splitlines():
        match = _HEADING.match(line)
        if match:
            sections.append((heading, "\n".join(block)))
            heading, block = (None if _BANNER.match(match.group(1)) else match.group(1)), []
        else:
            block.append(line)
    sections.append((heading, "\n".join(block)))
    for heading, text in sections:
        if heading and wanted and wanted in normalize(text):
            where = _PASSAGE.sub("", heading)
            if title and where.startswith(f"{title} › "):
                where = where[len(title) + 3 :]
            elif title and where == title:
                return None  # the document's own title says nothing about the place
            page = _PAGE.search(where)
            if page:
                where = _PAGE.sub("", where) + f", page {page.group(1)}"
            return where or None
    return None
