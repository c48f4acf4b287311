"""Source quality (seed 003 §9): credibility by domain type, recency with topic-dependent decay,
and corroboration — a claim counts as corroborated when a source from another domain states it too.

Local corpus documents are each their own origin (``corpus:<path>``): the corpus is curated, so
they get a fixed credibility, and two documents agreeing counts as corroboration.

Currency (issue 11): a corpus document that says it is superseded, lives in an archive folder or is
an older version of another document (as ``local_search`` reports in each result's ``status``)
has its score multiplied by ``SUPERSEDED_FACTOR`` and gets a warning; a document some of whose
figures a newer document restates (``status: outdated``) by ``OUTDATED_FACTOR``. Its date, when
the search listing gives one, feeds recency like a web page's publication date.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import date
from typing import Any
from urllib.parse import urlsplit

from ..documents.currency import in_archive
from ..text import content_terms, same_figure, split_sentences

CORPUS_CREDIBILITY = 0.7
HIGH = ("wikipedia.org", "nature.com", "science.org", "arxiv.org", "ieee.org", "acm.org", "nih.gov", "who.int")
NEWS = (
    "reuters.com",
    "apnews.com",
    "bbc.co.uk",
    "bbc.com",
    "nytimes.com",
    "theguardian.com",
    "ft.com",
    "economist.com",
)
BLOGS = ("medium.com", "substack.com", "blogspot.com", "wordpress.com", "tumblr.com", "reddit.com", "quora.com")
# Half-life of a source's relevance, in years, by how fast the topic moves.
FAST_TOPICS = re.compile(
    r"\b(price|market|stock|ai|model|release|latest|news|policy|regulation|startup|funding)\w*", re.I
)
SLOW_TOPICS = re.compile(r"\b(history|historical|origin|biography|ancient|century|who was|invent\w*)\b", re.I)
LOW_QUALITY = 0.45
SUPERSEDED_FACTOR = 0.4
OUTDATED_FACTOR = 0.8


@dataclass(frozen=True)
class SourceScore:
    source: str
    domain: str
    credibility: float
    recency: float
    corroboration: float
    score: float
    published: str | None
    currency: str = "current"  # current | outdated | superseded (corpus documents)
    superseded_by: str | None = None


def domain_of(source: str) -> str:
    if source.startswith(("http://", "https://")):
        host = (urlsplit(source).hostname or "").lower()
        return host.removeprefix("www.")
    return f"corpus:{source}"


def credibility(domain: str) -> float:
    if domain.startswith("corpus:"):
        return CORPUS_CREDIBILITY
    if domain.endswith((".gov", ".edu", ".int", ".mil")) or ".gov." in domain or ".ac." in domain:
        return 0.9
    if domain.endswith(HIGH):
        return 0.8
    if domain.endswith(NEWS):
        return 0.7
    if domain.endswith(BLOGS):
        return 0.35
    if domain.endswith(".org"):
        return 0.6
    return 0.5


def half_life_years(question: str) -> float:
    if SLOW_TOPICS.search(question):
        return 25.0
    if FAST_TOPICS.search(question):
        return 1.0
    return 4.0


def recency(published: str | None, today: date, half_life: float) -> float:
    match = re.match(r"(\d{4})(?:-(\d{2}))?(?:-(\d{2}))?", published or "")
    if not match:
        return 0.5  # undated: neither rewarded nor punished
    year, month, day = int(match.group(1)), int(match.group(2) or 6), int(match.group(3) or 15)
    try:
        age = max(0.0, (today - date(year, month, day)).days / 365.25)
    except ValueError:
        return 0.5
    return round(0.5 ** (age / half_life), 4)


def _claims(entry: dict[str, Any]) -> list[str]:
    return [*split_sentences(entry["summary"]), *entry["extraction"]]


def _similar(a: set[str], b: set[str]) -> bool:
    shared = a & b
    return len(shared) >= 4 and len(shared) / max(1, min(len(a), len(b))) >= 0.5


def corroborated_claims(entries: list[dict[str, Any]]) -> list[tuple[str, list[int]]]:
    """Claims (with the citation numbers of every source stating them) found in ≥2 domains."""
    claims = [
        (claim, e["n"], domain_of(e["source"]), set(content_terms(claim))) for e in entries for claim in _claims(e)
    ]
    out: list[tuple[str, list[int]]] = []
    seen: set[str] = set()
    for claim, n, domain, terms in claims:
        if claim in seen:
            continue
        twins = [(c, m) for c, m, d, t in claims if d != domain and (_similar(terms, t) or same_figure(claim, c))]
        if twins:
            # The twins are the same claim in other words: list it once.
            seen.update([claim, *(c for c, _ in twins)])
            out.append((claim, sorted({n, *(m for _, m in twins)})))
    return out


def listing_results(raws: dict[str, str]) -> list[dict[str, Any]]:
    """Every result row of the stored search listings (``*.json`` raw outputs), in order."""
    rows: list[dict[str, Any]] = []
    for name, text in raws.items():
        if not name.endswith(".json"):
            continue
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            continue
        rows += [r for r in (data.get("results", []) if isinstance(data, dict) else []) if isinstance(r, dict)]
    return rows


def corpus_status(raws: dict[str, str]) -> dict[str, dict[str, Any]]:
    """``path → {status, date, superseded_by, reason}`` from the stored ``local_search`` listings."""
    out: dict[str, dict[str, Any]] = {}
    for r in listing_results(raws):
        if not r.get("path") or "status" not in r:
            continue
        entry = out.setdefault(str(r["path"]), {"status": "current", "date": r.get("date")})
        # A document is as current as its worst passage: "superseded" > "outdated" > "current".
        rank = {"current": 0, "outdated": 1, "superseded": 2}
        if rank.get(str(r["status"]), 0) > rank.get(entry["status"], 0):
            entry["status"] = str(r["status"])
            entry["superseded_by"] = r.get("superseded_by")
            entry["reason"] = r.get("superseded_reason")
    return out


def currency_of(source: str, status: dict[str, dict[str, Any]] | None) -> tuple[str, str | None]:
    """(currency, superseded_by) of a source: web pages are "current"; corpus documents as listed."""
    if source.startswith(("http://", "https://")):
        return "current", None
    path = source.split("#", 1)[0]
    info = (status or {}).get(path)
    if info and info.get("status") in ("superseded", "outdated"):
        return str(info["status"]), info.get("superseded_by")
    if in_archive(path):
        return "superseded", None
    return "current", None


def score_sources(
    question: str,
    entries: list[dict[str, Any]],
    published: dict[str, str | None],
    today: date,
    status: dict[str, dict[str, Any]] | None = None,
) -> list[SourceScore]:
    life = half_life_years(question)
    published = dict(published)
    for path, info in (status or {}).items():
        if info.get("date"):
            published.setdefault(path, str(info["date"]))
    corroborated = corroborated_claims(entries)
    by_source: dict[str, list[dict[str, Any]]] = {}
    for e in entries:
        by_source.setdefault(e["source"], []).append(e)
    scores = []
    for source, items in sorted(by_source.items()):
        n = items[0]["n"]
        claims = [c for e in items for c in _claims(e)]
        backed = sum(1 for claim, ns in corroborated if n in ns and claim in claims)
        corroboration = round(backed / len(claims), 4) if claims else 0.0
        domain = domain_of(source)
        cred = credibility(domain)
        rec = recency(published.get(source), today, life)
        current, superseded_by = currency_of(source, status)
        factor = {"superseded": SUPERSEDED_FACTOR, "outdated": OUTDATED_FACTOR}.get(current, 1.0)
        scores.append(
            SourceScore(
                source=source,
                domain=domain,
                credibility=cred,
                recency=rec,
                corroboration=corroboration,
                score=round((0.5 * cred + 0.3 * rec + 0.2 * min(1.0, corroboration * 2)) * factor, 4),
                published=published.get(source),
                currency=current,
                superseded_by=superseded_by,
            )
        )
    return scores


def quality_warnings(scores: list[SourceScore], entries: list[dict[str, Any]]) -> list[str]:
    warnings = [
        f"Superseded source: `{s.source}`"
        + (f" (current version: `{s.superseded_by}`)" if s.superseded_by else "")
        + "; its figures are out of date and must not be reported as current."
        for s in scores
        if s.currency == "superseded"
    ]
    warnings += [
        f"Low-quality source ({s.score:.2f}: {s.domain}, credibility {s.credibility:.2f}, recency {s.recency:.2f}): "
        f"`{s.source}`."
        for s in scores
        if s.score < LOW_QUALITY and s.currency != "superseded"
    ]
    claims = {c for e in entries for c in _claims(e)}
    backed = {c for c, _ in corroborated_claims(entries)}
    single = len(claims - backed)
    if claims and single:
        warnings.append(
            f"{single} of {len(claims)} claims extracted from the sources rest on a single source; "
            "treat them as unconfirmed."
        )
    return warnings
