"""Every sentence of the executive summary and the key findings cites a source that verifies it.

Runs after citation verification (:func:`citations.verify_citations`), whoever wrote the report.
A sentence of those sections (``MUST_CITE``) left without a citation, because none was written or
because the one written named a source that does not say it and was removed, is in this order:

1. cited from the source that states it as written, without a model call: the verifier's own
   test (:func:`citations.find_support`) against each source;
2. rewritten once from its source (the one its removed citation named, else the one whose
   summary and extraction share most of its words): ``rewrite(section, sentence, n)`` asks the
   model with that source's summary and extraction only, and the answer must verify like the
   first text (every sentence cited, every citation verified) and not repeat the section;
3. dropped.

A line left with no sentence is removed, and so is a sub-heading left with no line under it; a
section left with no sentence holds ``EMPTY_NOTICE`` instead. The
sentences are read as ``core/evaluation/score.py`` reads them: a bold lead opening a paragraph
states nothing, and a citation after the full stop belongs to the sentence before it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, Field

from ..heuristics.report_critique import CITATION
from ..heuristics.report_critique import units as sentence_units
from ..text import content_terms
from .citations import CitationCheck, find_support, normalize, verify_citations

__all__ = ["MUST_CITE", "CitedSentences", "SentenceFix", "cite_every_sentence", "sentence_units"]

# The sections whose every sentence must cite (the scorer's MUST_CITE, by heading).
MUST_CITE = ("executive summary", "key findings")
# Model calls one report may spend on rewrites; the sentences past it are dropped.
MAX_REWRITES = 10
# A sentence that never cited is rewritten from the source sharing most of its words, when it
# shares this many content words and this share of them; otherwise nothing says what it is about.
MIN_SHARED_TERMS = 2
MIN_SHARED = 0.25
# What a section of those whose every sentence was dropped holds instead: a notice (bold, like
# a lead, so the scorer reads no claim in it), not an empty section.
EMPTY_NOTICE = "**No sentence of this section could be cited from the stored sources; see Limitations.**"
_NUMBERS = re.compile(r"\d+")
_PREFIX = re.compile(r"^(\s*(?:(?:[-*+]|\d+\.)\s+)?(?:\*\*[^*]+\*\*\s*)?)(.*)$")
_LEADS = re.compile(r"^\s*(?:(?:[-*+]|\d+\.)\s+)?(?:\*\*[^*]+\*\*\s*)?")


class SentenceFix(BaseModel):
    """One sentence that had no verified citation, and what became of it."""

    section: str
    sentence: str
    source: int | None = None  # the source it was cited or rewritten from
    text: str | None = None  # what stands in the report instead (None: dropped)
    by: str  # citation (cited as written) | model (rewritten) | dropped
    reason: str | None = None


class CitedSentences(BaseModel):
    markdown: str
    checks: list[CitationCheck] = Field(default_factory=list)  # the checks of added text
    fixes: list[SentenceFix] = Field(default_factory=list)
    rewrites_asked: int = 0

    @property
    def rewritten(self) -> list[SentenceFix]:
        return [f for f in self.fixes if f.by != "dropped"]

    @property
    def dropped(self) -> list[SentenceFix]:
        return [f for f in self.fixes if f.by == "dropped"]


def _claim(unit: str) -> str:
    """The sentence without its citations, as the verifier checks it."""
    return " ".join(CITATION.sub(" ", unit).split()).replace(" .", ".").strip()


def _cited(unit: str) -> bool:
    return CITATION.search(unit) is not None


def _bare(text: str) -> str:
    return normalize(CITATION.sub(" ", text)).rstrip(".!?; ")


def _removed_from(claim: str, checks: list[CitationCheck], entries_by_n: dict[int, Any]) -> int | None:
    """The source a removed citation of this sentence named (a real source, not an invented number)."""
    bare = _bare(claim)
    for c in checks:
        if not c.verified and c.n in entries_by_n and bare and _bare(c.sentence) and _bare(c.sentence) in bare:
            return c.n
    return None


def _closest(claim: str, entries_by_n: dict[int, list[dict[str, Any]]]) -> int | None:
    """The source whose summary and extraction share most of the sentence's words, if enough."""
    terms = set(content_terms(claim))
    best, best_shared = None, 0
    for n in sorted(entries_by_n):
        text = " ".join(f"{e['summary']} {' '.join(e['extraction'])}" for e in entries_by_n[n])
        shared = len(terms & set(content_terms(text)))
        if shared > best_shared:
            best, best_shared = n, shared
    if best is None or best_shared < MIN_SHARED_TERMS or best_shared < MIN_SHARED * len(terms):
        return None
    return best


def _supported_by(claim: str, entries_by_n: dict[int, list[dict[str, Any]]], raws: dict[str, str]) -> int | None:
    for n in sorted(entries_by_n):
        if find_support(claim, entries_by_n[n], raws):
            return n
    return None


def _one_line(markdown: str) -> str:
    """A model's rewrite as one line of prose: bullets, bold leads and line breaks taken out."""
    lines = [_LEADS.sub("", line).strip() for line in markdown.strip().splitlines()]
    return " ".join(line for line in lines if line and not line.startswith("#"))


def cite_every_sentence(
    markdown: str,
    checks: list[CitationCheck],
    entries_by_n: dict[int, list[dict[str, Any]]],
    raws: dict[str, str],
    rewrite: Callable[[str, str, int], str | None] | None = None,
    max_rewrites: int = MAX_REWRITES,
) -> CitedSentences:
    """``markdown`` (already verified: ``checks`` are its citation checks) with every sentence of
    the executive summary and the key findings cited and verified, or gone. ``rewrite`` is the
    one model call per sentence (None: a sentence no source states as written is dropped)."""
    result = CitedSentences(markdown=markdown)
    if not entries_by_n:
        return result  # nothing to cite: the report says the research found no source
    stated = _stated(markdown)
    out: list[str] = []
    section = ""
    heading: int | None = None  # the open sub-heading's index in ``out``
    had = kept_any = False  # whether lines stood under it, and whether one still does
    emptied: set[int] = set()
    top: int | None = None  # the open section's heading index in ``out``
    section_had = section_kept = False
    notices: set[int] = set()  # section headings whose every sentence was dropped
    for line in [*markdown.splitlines(), "## "]:  # the sentinel closes the last section
        stripped = line.strip()
        if stripped.startswith("#"):
            if heading is not None and had and not kept_any:
                emptied.add(heading)  # every line under it was dropped
            heading, had, kept_any = None, False, False
            if stripped.startswith("## ") or stripped == "##":
                if top is not None and section_had and not section_kept:
                    notices.add(top)
                top, section_had, section_kept = None, False, False
                section = stripped[2:].strip().lower()
                if section in MUST_CITE:
                    top = len(out)
            elif section in MUST_CITE:
                heading = len(out)
            out.append(line)
            continue
        if section not in MUST_CITE or not stripped:
            out.append(line)
            continue
        had = section_had = True
        prefix, content = _PREFIX.match(line).groups()  # type: ignore[union-attr]
        units = sentence_units(content)
        if all(_cited(u) for u in units):  # nothing to do (a bold lead alone has no sentence)
            out.append(line)
            kept_any = section_kept = True
            continue
        fixed = [
            u if _cited(u) else _fix(u, section, result, checks, entries_by_n, raws, rewrite, max_rewrites, stated)
            for u in units
        ]
        kept = [u for u in fixed if u]
        if kept:
            out.append(f"{prefix.rstrip()} {' '.join(kept)}" if prefix.strip() else " ".join(kept))
            kept_any = section_kept = True
    out.pop()  # the sentinel
    if not result.fixes:
        return result
    lines = []
    for i, line in enumerate(out):
        if i not in emptied:
            lines.append(line)
        if i in notices:  # a section left with no sentence says so, and states nothing uncited
            lines += ["", EMPTY_NOTICE, ""]
    text = "\n".join(lines)
    text = re.sub(r"\n{3,}", "\n\n", text).rstrip("\n")
    result.markdown = text + ("\n" if markdown.endswith("\n") else "")
    return result


def _stated(markdown: str) -> dict[str, set[str]]:
    """The cited sentences of each section that must cite, compared as :func:`_bare` reads them."""
    out: dict[str, set[str]] = {}
    section = ""
    for line in markdown.splitlines():
        stripped = line.strip()
        if stripped.startswith("## "):
            section = stripped[3:].strip().lower()
        elif section in MUST_CITE and stripped and not stripped.startswith("#"):
            content = _PREFIX.match(line).group(2)  # type: ignore[union-attr]
            out.setdefault(section, set()).update(_bare(u) for u in sentence_units(content) if _cited(u))
    return out


def _fix(
    unit: str,
    section: str,
    result: CitedSentences,
    checks: list[CitationCheck],
    entries_by_n: dict[int, list[dict[str, Any]]],
    raws: dict[str, str],
    rewrite: Callable[[str, str, int], str | None] | None,
    max_rewrites: int,
    stated: dict[str, set[str]],
) -> str | None:
    """What stands for an uncited sentence: itself cited, its rewrite, or None (dropped)."""
    claim = _claim(unit)
    heading = section[:1].upper() + section[1:]
    n = _supported_by(claim, entries_by_n, raws)
    if n is not None:
        text = _with_citation(unit, n)
        _, added = verify_citations(text, entries_by_n, raws)
        result.checks.extend(added)
        result.fixes.append(SentenceFix(section=heading, sentence=claim, source=n, text=text, by="citation"))
        return text
    n = _removed_from(claim, checks, entries_by_n) or _closest(claim, entries_by_n)
    if n is None:
        return _drop(result, heading, claim, None, "no source states it or shares its subject")
    if rewrite is None:
        return _drop(result, heading, claim, n, "no source states it as written")
    if result.rewrites_asked >= max_rewrites:
        return _drop(result, heading, claim, n, f"more than {max_rewrites} sentences to rewrite")
    result.rewrites_asked += 1
    answer = rewrite(heading, claim, n)
    if not answer:
        return _drop(result, heading, claim, n, "the rewrite failed")
    text = _one_line(answer)
    verified, added = verify_citations(text, entries_by_n, raws)
    units = sentence_units(verified)
    if not units or not all(_cited(u) for u in units) or not all(c.verified for c in added) or not added:
        return _drop(result, heading, claim, n, "the rewrite did not verify against its source")
    seen = stated.setdefault(section, set())
    if all(_bare(u) in seen for u in units):
        return _drop(result, heading, claim, n, "the rewrite repeats a sentence of the section")
    seen.update(_bare(u) for u in units)
    result.checks.extend(added)
    result.fixes.append(SentenceFix(section=heading, sentence=claim, source=n, text=verified, by="model"))
    return verified


def _drop(result: CitedSentences, section: str, claim: str, n: int | None, reason: str) -> None:
    result.fixes.append(SentenceFix(section=section, sentence=claim, source=n, by="dropped", reason=reason))
    return None


def _with_citation(unit: str, n: int) -> str:
    """The sentence with ``[n]`` after its full stop (the offline reporter's style)."""
    return f"{unit.rstrip()} [{n}]"
