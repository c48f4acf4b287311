"""The heuristic critic: sufficiency from the question's parts answered, plan steps with a source and
bridges followed; the gaps are the follow-up queries."""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Any

from ..text import MONTH, content_terms, split_sentences, words
from .answer_types import specific
from .compression import PADDING
from .planning import content_query, enumerated_parts, research_terms, searchable_names
from .report import MAX_HOPS, all_steps, page_title, parts_of, unanswered
from .sentences import PRONOUN_LEAD
from .terms import SUBJECT_LEAD, names, sentence_case


def critique_heuristically(payload: dict[str, Any]) -> dict[str, Any]:
    """Sufficiency from the question's parts answered (a source with the kind of answer each asks for),
    the plan steps with a source, and the bridges not yet followed."""
    question = payload["question"]
    memory = payload.get("memory", [])
    # A part no source answers with the kind of answer it asks for is a gap, whatever words it covers.
    sources = [{**m, "n": i + 1, "extraction": m.get("extraction", [])} for i, m in enumerate(memory)]
    parts = parts_of(question)
    # The report's own reading of "answered": no gap for a part or step the report quotes an answer to.
    unanswered_parts, uncovered = unanswered({"question": question, "plan": payload["plan"], "sources": sources})
    coverage = 1 - len(unanswered_parts) / len(parts)
    # The best evidence names something the question does not (the bridge): the answer may be on that
    # thing's own page. Until it is followed, a factoid question (not a listed brief) is not answered.
    factoid = enumerated_parts(question) is None and len(parts) <= 2 and any(specific(p) for p in parts)
    searched = {q.lower() for s in all_steps(payload["plan"]) for q in s.get("queries") or []}
    hops = (unvisited(question, payload["plan"], memory) + bridges(question, memory, searched))[:MAX_BRIDGES]
    hops = hops if factoid else []
    steps = payload["plan"]["steps"]
    step_cov = 1 - len(uncovered) / len(steps) if steps else 1.0
    score = max(1, min(10, round(1 + 9 * (0.5 * coverage + 0.5 * step_cov))))
    if hops:
        score = min(score, BRIDGE_SUFFICIENCY)
    topic = " ".join(research_terms(question)[:4])
    gaps = [
        _gap(f"{name}: {sentence_case(question)}?" + (f" (named by {src})" if src else ""), q) for name, src, q in hops
    ]
    gaps += [
        _gap(f"Step '{s['title']}' found no usable source.", (s.get("queries") or [s["title"]])[-1]) for s in uncovered
    ]
    gaps += [
        _gap(f"No source yet answers '{sentence_case(p)}?'.", content_query(p, topic)) for p in unanswered_parts[:3]
    ]
    return {
        "sufficiency": score,
        "gaps": gaps[:10],
        "contradictions": [],
        "recommendation": "Sufficient to report." if not gaps else "Research the listed gaps before reporting.",
    }


def _gap(description: str, query: str) -> dict[str, str]:
    return {"description": description, "severity": "high", "suggested_query": query}


# An unfollowed bridge caps the sufficiency below the default threshold (7).
BRIDGE_SUFFICIENCY = 5
MAX_BRIDGES = 2
POOLED = 6  # candidate bridges searched together
MAX_RELATION_WORDS = 5


def _same(a: str, b: str) -> bool:
    """Two stems of one word family ("direct" and "director", "produc" and "producer")."""
    short, long_ = sorted((a, b), key=len)
    return a == b or (len(short) >= 5 and long_.startswith(short))


def _positions(sentence: str, terms: set[str]) -> list[int]:
    """Word positions in ``sentence`` whose stem is one of ``terms`` (or of its word family)."""
    stems = (content_terms(w) for w in words(sentence))
    return [i for i, stem in enumerate(stems) if stem and any(_same(stem[0], t) for t in terms)]


def _least_stated(terms: list[str], df: Counter[str]) -> list[str]:
    """The ``MAX_RELATION_WORDS`` of ``terms`` the evidence states least (``df``: sentences per stem),
    in order: a word every source repeats ranks no page above another ("reign terror", not
    "government ruling", for the body that ruled France during the Reign of Terror)."""

    def stated(t: str) -> float:
        stems = content_terms(t)
        return sum(df[s] for s in stems) / max(1, len(stems))

    kept = set(sorted(terms, key=stated)[:MAX_RELATION_WORDS])
    return [t for t in terms if t in kept]


def unvisited(question: str, plan: dict[str, Any], memory: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """``(name, "", name)`` for the question's names neither searched on their own (with at most three
    other words) nor read on a page about them."""
    queries = [set(content_terms(q)) for s in plan.get("steps", []) for q in s.get("queries") or []]
    pages = [set(content_terms(f"{m['source']} {m.get('summary_title', '')}")) for m in memory if m.get("source")]
    named = [(name, set(content_terms(name))) for name in searchable_names(question)]
    searched = [(n, t) for n, t in named if t and not any(t <= q and len(q - t) <= 3 for q in queries)]
    return [(n, "", n) for n, t in searched if not any(t <= p for p in pages)]


def bridges(
    question: str, memory: list[dict[str, Any]], searched: set[str] = frozenset()
) -> list[tuple[str, str, str]]:
    """``(name, source, query)`` for the names the best evidence for ``question`` gives that the
    question does not: what the answer is about when it lies one hop further (the bridge).

    Evidence sentences rank by the question's names they state whole, then by its terms (inverse
    frequency weights). The best source's new names are the candidates, nearest to the question's
    relation words (its words outside its names) first. When a candidate's own page was read, its
    sentences are the next hop. The query is the name and the question's words the hop's source
    does not state, those the evidence states least first."""
    sentences = [
        (s, str(m["source"]))
        for m in memory
        if m.get("source")
        for s in [*split_sentences(str(m.get("summary", ""))), *m.get("extraction", [])]
        if not PADDING.match(s)
    ]
    # What each source is about: the titles its file name or address and its summary give ("Neighbours.txt").
    about = {
        str(m.get("source")): [
            set(content_terms(t)) for t in (page_title(str(m.get("source"))), m.get("summary_title") or "")
        ]
        for m in memory
    }
    asked = set(content_terms(question))
    question_names = [t for t in (set(content_terms(n)) for n in names(question)) if t]
    named = set().union(*question_names)
    relation = asked - named
    # The verb of "Who produced the single that the singer born in 1952 was known for" asks the last
    # hop: the first hop is found by the rest of the question.
    lead = SUBJECT_LEAD.match(question.strip())
    first_hop = (relation - set(content_terms(lead.group(0).split()[-1]))) if lead else relation
    df = Counter(t for s, _ in sentences for t in set(content_terms(s)))

    def score(sentence: str, terms: set[str]) -> float:
        have = set(content_terms(sentence))
        return sum(math.log(1 + len(sentences) / (df[t] or 1)) for t in terms if any(_same(t, h) for h in have))

    def rank(x: tuple[str, str]) -> tuple[float, float]:
        held = [q for q in question_names if q <= set(content_terms(x[0]))]
        return -sum(score(x[0], q) for q in held), -score(x[0], first_hop | named)

    known = set(asked)  # the question's terms and those of every name followed so far
    pool, fallback = sentences, []
    for _ in range(MAX_HOPS):
        ranked = sorted(pool, key=rank)
        if not ranked or score(ranked[0][0], known) <= 0:
            break
        found: dict[str, tuple[bool, int, int]] = {}
        for source in dict.fromkeys(src for _, src in ranked):  # the next source when one gives none
            for order, (sentence, _) in enumerate(x for x in ranked if x[1] == source):
                new = _new_names(sentence, relation, known, question_names, order)
                found |= {n: min(k, found.get(n, k)) for n, k in new.items()}
            if found:
                break
        candidates = sorted(found, key=lambda n: found[n])
        source = source if found else ranked[0][1]
        # Evidence whose subject is a pronoun ("He starred as Benton Fraser" on "Paul Gross") is about
        # its page's title: a subject the question does not name is a bridge too, after the nearest name.
        best = next(x for x, src in ranked if src == source)
        title = page_title(source) if PRONOUN_LEAD.match(best) else ""
        for n in names(title, fragment=True)[:1]:
            terms = set(content_terms(n))
            if terms and not terms <= known and not any(q <= terms or terms <= q for q in question_names):
                candidates = [c for c in candidates[:1] if c != n] + [n] + [c for c in candidates[1:] if c != n]
        if not candidates:
            break
        text = " ".join(s for s, src in ranked if src == source)
        unmatched = [
            w
            for w in content_query(question).split()
            if not _positions(text, set(content_terms(w))) and not set(content_terms(w)) <= known - asked
        ]
        query = " ".join(_least_stated(unmatched, df))
        beyond = {n: [x for x in sentences if x[1] != source and _titled(n, about[x[1]])] for n in candidates}
        open_ = [n for n in candidates if not beyond[n]]
        # The nearest name alone, then the others in one query: the nearest is often not the bridge, and
        # term weighting ranks first the page of whichever name also states the question's other words.
        unfollowed = [(n, source, f"{n} {query}".strip()) for n in open_[:1]]
        if pool := open_[1 : POOLED + 1]:
            once = dict.fromkeys(f"{' '.join(pool)} {query}".split())  # each word once
            unfollowed.append((", ".join(pool), source, " ".join(once)))
        # The nearest name whose own page was read is the next hop (the others, if it leads nowhere);
        # a farther name's page (a pooled search read it) once the nearest unread name was searched.
        hop = next((n for n in candidates if beyond[n]), None)
        if hop is None or (hop != candidates[0] and unfollowed[0][2].lower() not in searched):
            return unfollowed
        fallback = fallback or unfollowed
        known |= set(content_terms(hop))
        pool = beyond[hop]
    return fallback


def _titled(name: str, titles: list[set[str]]) -> bool:
    """Whether a page with these titles is the page of ``name``: a title of the name's words and one more
    at most (the page of "Women of the World" is not "2004 FIFA U-19 Women's World Championship")."""
    terms = set(content_terms(name))
    return bool(terms) and any(terms <= title and len(title - terms) <= 1 for title in titles)


def _new_names(
    sentence: str, relation: set[str], known: set[str], question_names: list[set[str]], order: int
) -> dict[str, tuple[bool, int, int]]:
    """The sentence's names new to ``known`` (not a question's name extended, "Harris W. Fawell
    Congressional Papers", nor a date), each keyed by: no relation word in the sentence, the distance
    to the nearest one (else its position: the page is about the question's name), ``order``."""
    related = _positions(sentence, relation)
    out = {}
    for name in names(sentence):
        terms = set(content_terms(name))
        date = re.fullmatch(rf"(?:{MONTH})(?:\s+\d+)*", name, re.IGNORECASE)
        if date or not terms or terms <= known or any(q <= terms for q in question_names):
            continue
        at = _positions(sentence, terms)
        near = min((abs(p - q) for p in at for q in related), default=99) if related else min(at, default=99)
        out[name] = (not related, near, order)
    return out
