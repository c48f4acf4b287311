"""The extractive reporter: report sections quoting the working memory with citations.

Findings are the sentences (and table rows) of the compressed summaries, kept only when they
stand alone (no leading anaphora, dangling "these two worlds", verb-less fragments) and touch the
question or their step; near-duplicates from different sources are merged with their citations
combined; each finding is placed under the step whose topic it answers best. The executive
summary answers the question's parts in the question's order with the best-supported findings.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from ..text import (
    ENDS_SENTENCE,
    YEAR,
    closed,
    content_terms,
    figures,
    fold,
    is_instruction,
    key_figures,
    same_figure,
    split_sentences,
    words,
)
from .answer_types import MEASURE_WORDS, answered, answers, asked_kinds, aspect_terms, specific, supplies
from .compression import PADDING
from .planning import enumerated_parts
from .sentences import PRONOUN_LEAD, context_dependent, has_fact, is_fragment, refers_back
from .terms import ASPECT_WORDS, DO_LEAD, EMPHASIS, antecedent, names, question_parts, sentence_case, topic_words

REPORT_SECTIONS = ("Executive summary", "Key findings", "Analysis", "Limitations", "Suggested next steps")
CORROBORATED_INTRO = "These findings are stated by two or more independent sources:"
NONE_CORROBORATED = "No finding was stated by more than one independent source"
# The executive summary and key findings of a research that found nothing to quote: a notice in
# bold (the scorer reads no claim in it), since every sentence of those sections must cite.
NO_FINDINGS = "**The research found no useful sources; see Limitations.**"
_SINGLE_SOURCE_COUNT = re.compile(r"\b\d+ of (\d+) claims extracted from the sources rest on a single source")
MAX_FINDING_WORDS = 60
MAX_SUMMARY_PER_PART = 2
ANSWER_KIND_WEIGHT = 1.5
PROXIMITY_WEIGHT = 1.0  # per pair of words side by side in the question and in a finding
MAX_HOPS = 3  # bridges the critic follows, and the executive summary from the finding stating a question's name
HOME_WEIGHT = 1.0
LISTED_WEIGHT = 1.0
_ASKS = re.compile(
    r"^(?:(?:by|in|at|for|from|to|on|with|of|since|until)\s+)?(?:what|how|why|which|who|whom|whose|when|where|whether|does|do|did|is|are|was|were|can|could|should|"
    r"will|would|has|have|had)\b",
    re.IGNORECASE,
)


# The words that say a sentence gives a cause ("due", "because"), not what it is the cause of.
CAUSE_WORDS = aspect_terms("cause")


def extractive_section(heading: str, payload: dict[str, Any]) -> str:
    """One report section quoting the working memory; every factual sentence cites ``[n]``."""
    writer = {
        "Executive summary": _exec_summary,
        "Key findings": _key_findings,
        "Analysis": _analysis,
        "Limitations": _limitations,
        "Suggested next steps": _next_steps,
    }.get(heading)
    return writer(payload) if writer else "No content for this section."


def all_steps(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [*plan["steps"], *plan.get("followup_steps", [])]


# ------------------------------------------------------------------------------------------ findings


@dataclass
class Finding:
    text: str
    terms: set[str]
    cites: list[int]
    step_id: str  # the step whose search found it
    order: int
    placed: str = ""  # the step it answers best
    listed: bool = False  # quoted from a search listing's snippet only: its source was not read
    # Each extra citation (a twin's, a shorter finding's) with the sentence it was merged for.
    merged: dict[int, str] = field(default_factory=dict)
    # Findings it holds whose sources its wording would not verify against: the same figure stated
    # by another source, quoted apart as corroboration.
    also: list[Finding] = field(default_factory=list)

    def quoted(self, close: bool = False) -> str:
        """The finding as the report quotes it: each sentence followed by its source, and an extra
        citation after the sentences its merged sentence states (else the closest): none left uncited."""
        text = closed(self.text) if close else self.text
        sentences = split_sentences(text)
        cites: list[list[int]] = [[self.cites[0]] for _ in sentences]
        terms = [set(content_terms(s)) for s in sentences]
        for n in self.cites[1:]:
            other = set(content_terms(self.merged.get(n, self.text)))
            scores = [_overlap(t, other) for t in terms]
            closest = max(range(len(scores)), key=lambda i: (scores[i], i))
            for i in [i for i, score in enumerate(scores) if score >= 0.6] or [closest]:
                cites[i].append(n)
        return " ".join(f"{s} {''.join(f'[{n}]' for n in c)}" for s, c in zip(sentences, cites, strict=True))


def _is_data_row(text: str) -> bool:
    """A table row read with its header ("Round: Series B; Amount: $40M"): self-describing data."""
    return text.count(": ") >= 2 and "; " in text


# A document's pointers to other reading ("Further reading: S. Johnson, The Ghost Map (2006)",
# "*See also:* Great Stink; …"): titles of other works, never a finding.
_REFERENCES = re.compile(
    r"(?:^|\s)[*_]*(?:further\s+reading|see\s+also|external\s+links|bibliography|references)\s*[*_]*:", re.IGNORECASE
)


def without_references(sentence: str) -> str:
    """The sentence without a trailing "See also: …" list that a page's layout ran into it."""
    match = _REFERENCES.search(sentence)
    return sentence[: match.start()].strip() if match else sentence


def _title_like(text: str) -> bool:
    """A document's title or heading line ("How Brennock Was Paid For: A Short Financial History"):
    nearly every word capitalized, its small words too ("West Chicago is a city in DuPage County,
    Illinois" is a sentence of names)."""
    longer = [w for w in words(text) if len(w) >= 2 and w.isalpha()]
    return len(longer) >= 4 and sum(w[0].isupper() for w in longer) >= 0.8 * len(longer)


# A time said relative to when the document was written ("opened yesterday", "last month"): read
# without the document's date it states a wrong or no time, unless the sentence also has a year.
_RELATIVE_TIME = re.compile(
    r"\b(?:yesterday|today|tonight|tomorrow|(?:this|last|next)\s+(?:morning|afternoon|evening|night|week|"
    r"weekend|month|year|spring|summer|autumn|fall|winter|season)|(?:a|one|two|three)\s+(?:days?|weeks?|months?)"
    r"\s+ago|recently|earlier\s+this\s+\w+)\b",
    re.IGNORECASE,
)
_YEAR = re.compile(rf"\b{YEAR}\b")
# A page's marked aside or link to other reading ("In other news, …", "Sidebar: …", "ELSEWHERE IN
# ARTS: …", "Read more: …"): another story, whatever words it shares with the question.
_ASIDE = re.compile(
    r"^[*_]*(?:aside|sidebar|elsewhere(?:\s+\w+){0,3}|in\s+other\s+news|also\s+in\s+the\s+news|read\s+more|"
    r"related(?:\s+stories|\s+articles)?|advertisement|sponsored)[*_]*\s*[:,—–-]",
    re.IGNORECASE,
)
_PURPOSE = re.compile(r"^To\s+[a-z]+\b")
_MAIN_CLAUSE = re.compile(r",\s+(?!(?:and\s+|or\s+)?to\b)")
# A document's outline number before a sentence ("5.1 The capital cost …"): layout, not content.
_OUTLINE_NUMBER = re.compile(r"^\d+\.(?:\d+\.?)*\s+(?=[A-Z])")


def usable(sentence: str, opening: bool = False) -> bool:
    """Whether a sentence can be quoted on its own in a report; an ``opening`` one (the first of its
    document) may lean on the document's subject, which its citation's title names."""
    s = sentence.strip()
    if _title_like(s) and not _is_data_row(s):
        return False
    # A question ("Q: Why did it take so long?") asks; a request to readers ("Please put …") asks too.
    if s.endswith("?") or s.lower().startswith("please ") or _ASIDE.match(s):
        return False
    if _RELATIVE_TIME.search(s) and not _YEAR.search(s):
        return False
    # "To seek approval of X, to approve Y, and to authorise Z.": a report's purpose, no clause.
    if _PURPOSE.match(s) and not _MAIN_CLAUSE.search(s):
        return False
    if (
        not s
        # each sentence: a passage quoted with the sentence it continues is longer than either
        or max(len(words(x)) for x in split_sentences(s) or [s]) > MAX_FINDING_WORDS
        or s.endswith(":")
        or not (s.lstrip("¡¿\"'“‘(")[:1].isupper() or s[:1].isdigit())
    ):
        return _is_data_row(s)
    if _is_data_row(s) or (_fact_item(s) and (opening or not context_dependent(s))):
        return True
    # A pronoun or "these two worlds" needs the sentence before it (in a passage, the first's).
    leans = not opening and context_dependent((split_sentences(s) or [s])[0])
    return not leans and not is_fragment(s) and not is_instruction(s)


# "Off-Peak membership £46 per month (weekdays before 4pm)", "Lantern country sourdough (800 g): £5.20":
# a list item (no full stop) that names a thing and a figure is a data point, verb or no verb.
def _fact_item(text: str) -> bool:
    n = len(words(text))
    return 3 <= n <= 25 and text[:1].isupper() and not ENDS_SENTENCE.search(text) and has_fact(text)


def _overlap(a: set[str], b: set[str]) -> float:
    """Share of ``a``'s terms found in ``b`` (the citation verifier's own measure)."""
    return len(a & b) / len(a) if a else 0.0


def _near_duplicate(a: set[str], b: set[str]) -> bool:
    """The same sentence in other words: most of the words of both (not only the shorter one's, which
    in a corpus about one thing are often just its name: "the Tamsin energy centre")."""
    shared = a & b
    return len(shared) >= 4 and len(shared) / max(1, len(a), len(b)) >= 0.6


def _question_terms(question: str) -> set[str]:
    return topic_words(question) - ASPECT_WORDS


# Headings before a document's first sentence: its title, a banner, its first passage's heading.
_OPENING = re.compile(r"#(?!.*\[passage (?!1/)\d+/)")


def preceding_sentences(entries: list[dict[str, Any]], raws: dict[str, str]) -> dict[str, dict[str, str]]:
    """By artifact file, the sentence before each quoted sentence that leans on it, from the raw output
    and within its paragraph: "Its final cost was £4.2 million" reads alone only after "The main
    drainage opened in 1865." (the report quotes the two together)."""
    out: dict[str, dict[str, str]] = {}
    for e in entries:
        name = str(e.get("artifact_file") or "")
        raw = None if name.endswith(".json") else raws.get(name)  # a listing's JSON has no paragraphs
        if not raw:
            continue
        # Compared as the compressor quoted them: without Markdown emphasis ("about **£4.2 million**").
        paragraphs = [" ".join(EMPHASIS.sub("", p).split()) for p in re.split(r"\n\s*\n", raw)]
        for q in [" ".join(q.split()) for q in [*split_sentences(e.get("summary", "")), *e.get("extraction", [])]]:
            for i, paragraph in enumerate(paragraphs):
                at = paragraph.find(q.rstrip("."))  # a clause the compressor cut off ends in "." it lacks
                before = split_sentences(paragraph[:at]) if at > 0 else []
                if at == 0 and PRONOUN_LEAD.match(q) and all(_OPENING.match(p) for p in paragraphs[:i] if p):
                    # The document's first sentence, its subject a pronoun: the subject its title names.
                    out.setdefault(name, {})[q] = ""
                    break
                if before and refers_back(q, before[-1]):
                    # Sentences opening with the same pronoun continue one subject: "He …" leans on the
                    # "X (born 1977) is …" three sentences of "He …" back.
                    k = len(before)
                    while k > 1 and before[k - 1].split()[:1] == q.split()[:1]:
                        k -= 1
                    lead = before[k - 1]
                    if refers_back(lead, before[k - 2] if k > 1 else ""):
                        # The sentence before leans on its own one ("… by contrast, …"): back to one that reads alone.
                        start = len(before) - 1
                        while start and refers_back(before[start], before[start - 1]):
                            start -= 1
                        lead = " ".join(before[start:])
                    out.setdefault(name, {})[q] = lead
                    break
    return out


def findings(payload: dict[str, Any]) -> list[Finding]:
    """Usable, on-topic, de-duplicated findings, each placed under the step it answers best."""
    question = _question_terms(payload["question"])
    # A step's own topic: its title and description, without the question's words every step shares.
    step_terms = {
        str(s["step_id"]): (topic_words(f"{s['title']} {s.get('description', '')}") - question)
        | aspect_terms(s["title"])
        for s in all_steps(payload["plan"])
    }
    out: list[Finding] = []
    order = 0
    led: dict[tuple[int, str], Finding] = {}  # the finding that quotes a lead, by source and lead
    for src in payload["sources"]:
        before = payload.get("preceding", {}).get(str(src.get("artifact_file") or ""), {})
        for sentence in [*split_sentences(src["summary"]), *src["extraction"]]:
            sentence = without_references(" ".join(sentence.split()))
            order += 1
            lead, leading = before.get(sentence), None
            if lead:
                # "It lent £88m" with the sentence it continues; a second sentence on the same subject
                # joins the finding that quotes the lead already, once (a second read repeats it).
                joined = led.get((src["n"], lead))
                if joined is not None:
                    if sentence not in joined.text and usable(f"{joined.text} {sentence}"):
                        joined.text = f"{joined.text} {sentence}"
                        joined.terms |= set(content_terms(sentence))
                    continue
                if usable(f"{lead} {sentence}"):
                    sentence, leading = f"{lead} {sentence}", (src["n"], lead)
            sentence = _OUTLINE_NUMBER.sub("", sentence, count=1)
            if not usable(sentence, opening=lead == "") or PADDING.match(sentence):
                continue
            terms = set(content_terms(sentence))
            own = step_terms.get(str(src["step_id"]), set())
            # The compressor kept it for this step: a figure, date or data row stays even when it
            # shares no word with the question ("Director: M. Albrecht; Role: Independent chair").
            if not terms & (question | own) and not (has_fact(sentence) or _is_data_row(sentence)):
                continue  # off-topic: shares nothing with the question or its step
            numbers = figures(sentence)
            twin = next((f for f in out if _near_duplicate(terms, f.terms) and figures(f.text) == numbers), None)
            if twin is not None:
                # The same fact in other words: one finding, citations combined — but only when the
                # kept wording would verify against this source too; the fuller wording of one source.
                if twin.cites == [src["n"]] and twin.text in sentence:
                    twin.text, twin.terms = sentence, terms
                    if leading:
                        led[leading] = twin
                elif src["n"] not in twin.cites and _overlap(twin.terms, terms) >= 0.6:
                    twin.cites.append(src["n"])
                    twin.merged[src["n"]] = sentence
                twin.listed = twin.listed and bool(src.get("listed"))
                continue
            out.append(Finding(sentence, terms, [src["n"]], str(src["step_id"]), order, listed=bool(src.get("listed"))))
            if leading:
                led[leading] = out[-1]
    # A finding another one holds is one finding, the fuller: a sentence also quoted with the one before
    # it, or the same dated or figured fact with a detail added ("The bridge opened on 21 November
    # 2022." and "21 November 2022 – New bridge opens, 219 days late.").
    kept: list[Finding] = []
    for f in sorted(out, key=lambda f: (-len(figures(f.text)), -len(f.text))):
        fuller = next((g for g in kept if _holds(g, f)), None)
        if fuller is None:
            kept.append(f)
        # Its citations join only where the fuller wording verifies against their sources too: the
        # same words, or most of them and no figure the other source lacks.
        elif f.text in fuller.text or (
            figures(fuller.text) == figures(f.text) and _overlap(fuller.terms, f.terms) >= 0.6
        ):
            for n in f.cites:
                if n not in fuller.cites:
                    fuller.cites.append(n)
                    fuller.merged[n] = f.merged.get(n, f.text)
        else:
            fuller.also.append(f)
    out = [f for f in out if any(f is g for g in kept)]
    for f in out:
        scores = {sid: len(f.terms & t) for sid, t in step_terms.items()}
        home = scores.get(f.step_id, 0)
        best = max(scores, key=lambda sid: (scores[sid], sid == f.step_id), default=f.step_id)
        # Moved only on clear evidence: two more topic words than its own step shares with it.
        f.placed = best if scores.get(best, 0) >= home + 2 else f.step_id
    return out


def _holds(g: Finding, f: Finding) -> bool:
    """Whether ``g`` states all that ``f`` does: ``f``'s words, or its key figures and all its numbers
    about the same subject."""
    key = key_figures(f.text)
    return f.text in g.text or (
        bool(key)
        # a table row's cells never stand in for the sentence that says what they are
        and not (_is_data_row(g.text) and not _is_data_row(f.text))
        and key <= key_figures(g.text)
        and figures(f.text) <= figures(g.text)
        and _same_subject(f.terms, g.terms)
    )


def term_weights(found: list[Finding]) -> dict[str, float]:
    """How much sharing each word says, from 0.5 (a word in every finding: the research's own topic,
    "Kestrel Bay heat network") to 2 (a word in one: "outturn"); an inverse document frequency over
    the findings."""
    df = Counter(t for f in found for t in f.terms)
    n = len(found)
    scale = math.log(n + 1) or 1.0
    return {t: 0.5 + 1.5 * math.log((n + 1) / k) / scale for t, k in df.items()}


def _rank(
    f: Finding,
    terms: set[str],
    kinds: frozenset[str] = frozenset(),
    home: str = "",
    stress: frozenset[str] = frozenset(),
    weights: dict[str, float] | None = None,
    pairs: frozenset[frozenset[str]] = frozenset(),
) -> tuple[float, int]:
    weight = weights or {}
    score = sum(weight.get(t, 1.0) for t in f.terms & terms)
    score += 0.5 * (len(f.cites) - 1) + (0.3 if has_fact(f.text) else 0.0)
    score += PROXIMITY_WEIGHT * adjacent(f.text, pairs)
    # The words only this part of the question uses ("built" in "When was X built") count twice.
    score += sum(weight.get(t, 1.0) for t in f.terms & stress)
    # Placed under the step that asks the part.
    score += HOME_WEIGHT if home and f.placed == home else 0.0
    # A sentence with the kind of answer the part asks for (a date for "when", money for "cost"),
    # when it is about the part at all: "due to higher steel prices" does not explain another event.
    if f.terms & terms:
        score += ANSWER_KIND_WEIGHT * supplies(f.text, set(kinds))
    score -= 0.01 * max(0, len(words(f.text)) - 35)
    # A sentence only seen in a listing's snippet is weaker evidence than one read in its source.
    score -= LISTED_WEIGHT if f.listed else 0.0
    return (-score, f.order)


def phrase_pairs(text: str) -> frozenset[frozenset[str]]:
    """The pairs of words side by side in ``text`` (function words aside), except those inside one of its
    names, which any mention of the name repeats: what stating its phrase, not only its words, means."""
    within = [set(content_terms(n)) for n in names(text)]
    pairs = (frozenset(p) for p in pairwise(content_terms(text)))
    return frozenset(p for p in pairs if len(p) == 2 and not any(p <= n for n in within))


def adjacent(text: str, pairs: frozenset[frozenset[str]]) -> int:
    """How many of ``pairs`` stand side by side in ``text``: "the first published computer program" states
    the question's phrase, "the first substantial computer programming manuals" shares its words."""
    return sum(frozenset(p) in pairs for p in pairwise(content_terms(text))) if pairs else 0


def _states(f: Finding, name: str) -> bool:
    """Whether ``f`` states ``name`` (folded) as written, capitals and all ("Brand", the play; not
    "the brand represents 410 hotels")."""
    return re.search(rf"(?<!\w){re.escape(name)}(?!\w)", fold(f.text)) is not None


def _chain(
    best: Finding,
    pool: list[Finding],
    found: list[Finding],
    named: tuple[str, ...],
    part: str,
    part_terms: set[str],
    kinds: frozenset[str],
    weights: dict[str, float],
    sources: list[dict[str, Any]],
) -> list[Finding]:
    """The findings that lead from the question to its answer: the best ranked of ``pool`` stating the
    question's rarest name, then up to ``MAX_HOPS`` findings of other sources that name a thing the one
    before names and the question does not (the bridge: "Paul Gross" for "who did the actor who starred
    as Benton Fraser have a child with") and hold what the part asks for, ranked by the part's words the
    one before does not state (a child, not the actor). The first of the name's findings that leads
    somewhere starts it; ``best`` when no finding states a name."""
    asked, titles = set(content_terms(part)), {s["n"]: page_title(str(s.get("source") or "")) for s in sources}
    pages = {n: set(content_terms(title)) for n, title in titles.items()}

    def next_hop(first: Finding, rest: list[Finding]) -> Finding | None:
        mentioned = [*names(first.text), *(titles[n] for n in first.cites)]
        # "Hinds County, Mississippi", "Trent Reznor of Nine Inch Nails": one run of capitals, two names.
        places = {p for n in mentioned for p in n.split(", ")}
        mentioned += [p for n in places for p in n.split(" of ") if len(p.split()) > 1 or p == n]
        bridges = [b for b in (set(content_terms(n)) for n in mentioned) if b and not b <= asked]
        rest = [
            f
            for f in rest
            if not set(f.cites) & set(first.cites)
            # It names the bridge, or is on the bridge's own page ("Population … Total 2,913,123" on Kansas's).
            and any(b <= f.terms or b == pages[f.cites[0]] for b in bridges)
            and answers(f.text, part)
        ]
        terms = part_terms - first.terms
        return min(rest, key=lambda f: _rank(f, terms, kinds, weights=weights), default=None)

    stating = {n: [f for f in pool if _states(f, n)] for n in named}
    rarest = min((n for n in named if stating[n]), key=lambda n: sum(_states(f, n) for f in found), default=None)
    starts = stating[rarest][: MAX_HOPS + 1] if rarest else [best]
    for chain in ([start] for start in starts):
        while len(chain) <= MAX_HOPS and (hop := next_hop(chain[-1], [f for f in found if f not in chain])):
            chain.append(hop)
        if len(chain) > 1:
            return chain
    return starts[:1]


def ranked_findings(payload: dict[str, Any]) -> list[Finding]:
    """The findings, those that answer the question best first (by the summary's own ranking)."""
    found = findings(payload)
    terms, weights = _question_terms(payload["question"]), term_weights(found)
    return sorted(found, key=lambda f: _rank(f, terms, weights=weights))


# ------------------------------------------------------------------------------------------ sections


def parts_of(question: str) -> list[str]:
    """The question's parts, in its order ("What are X, and how are Y?" → two parts)."""
    return question_parts(question) or [question.strip()]


def _answers(payload: dict[str, Any]) -> list[tuple[list[str], list[Finding]]]:
    """Each part of the question with the findings that answer it best, in the question's order;
    parts whose best answer is one finding share a paragraph."""
    found = findings(payload)
    weights = term_weights(found)
    question = _question_terms(payload["question"])
    steps = all_steps(payload["plan"])
    used: set[int] = set()
    out: list[tuple[list[str], list[Finding]]] = []
    parts = parts_of(payload["question"])
    listed = enumerated_parts(str(payload["question"])) is not None
    if (listed or (len(parts) == 1 and len(words(parts[0])) > 15)) and len(payload["plan"]["steps"]) > 1:
        # A request that lists its parts ("(1) … (2) …", a bullet list), or one long request:
        # the plan's steps are its parts, titled briefly.
        parts = [str(s["title"]) for s in payload["plan"]["steps"]]
    # What each part asks, without the words its "it" or "them" stands for ("how are manufacturers
    # addressing them" asks how, not about "the main challenges").
    unresolved = question_parts(str(payload["question"]), resolve=False)
    unresolved = unresolved if len(unresolved) == len(parts) else parts
    # "large" in "How large is X" is how the question asks, not what sources say ("112 metres").
    own = [topic_words(part) - ASPECT_WORDS - MEASURE_WORDS for part in parts]
    # What the question is about ("the Kestrel Bay heat network" in "By how much did the Kestrel Bay
    # heat network exceed …") is every part's subject, named or not: never a word to stress.
    subject = set(content_terms(antecedent(parts[0]) or "")) if parts and DO_LEAD.match(parts[0]) else set()
    asked = [asked_kinds(part) for part in parts]
    named = tuple(fold(n) for n in names(str(payload["question"])) if content_terms(n))
    stated: set[str] = set()
    for k, part in enumerate(parts):
        aspects = aspect_terms(unresolved[k])
        part_terms = own[k] | aspects
        # The step that asks this part: its findings rank higher (HOME_WEIGHT).
        home = max(steps, key=lambda s: len(part_terms & set(content_terms(s["title"]))), default={"step_id": ""})
        home_id = str(home["step_id"])
        # Candidates share a word this part asks about and the others do not ("because" only ranks).
        others = set().union(*(terms for i, terms in enumerate(own) if i != k))
        distinctive = own[k] - others or own[k] or part_terms
        kinds = frozenset(asked[k])
        # The kinds of answer only other parts ask for ("41 million pounds" is for "what did it cost").
        theirs = set().union(*(a for i, a in enumerate(asked) if i != k)) - kinds
        # … or a word of the part and the kind of answer it asks for ("112 metres" for "How large is X").
        answer_terms = part_terms - CAUSE_WORDS
        pool = [
            f
            for f in found
            if f.terms & distinctive or (kinds and f.terms & answer_terms and supplies(f.text, set(kinds)))
        ]
        stress = frozenset(own[k] - others - subject)
        # The part's own words say more than the generic words of its aspect ("causes", "due").
        mine = {t: w * (0.5 if t in aspects - own[k] else 1.0) for t, w in weights.items()}
        pairs = phrase_pairs(part)
        pool.sort(key=lambda f: _rank(f, part_terms, kinds, home_id, stress, mine, pairs))
        limit = MAX_SUMMARY_PER_PART if len(parts) > 1 else 2 * MAX_SUMMARY_PER_PART
        # The same figure in other words ("£18.6m", "£18.6 million") is stated once in the summary.
        pool = [f for f in pool if id(f) in used or not _repeats(f, stated)]
        # Beyond its best finding a part quotes only findings of the kind it asks for (a date, money),
        # of the aspect it asks about (a problem, a plan: not any sentence naming the topic), or with
        # a name it does not give when it asks where or which thing; the rest are for other parts.
        hits = (
            [f for f in pool if supplies(f.text, set(kinds))]
            if kinds
            else [f for f in pool if answers(f.text, part)]
            if specific(part)
            else [f for f in pool if f.terms & aspects]
            if aspects
            else pool
        )
        best = (hits or pool)[:1]
        # The best answer to this part already answers an earlier one ("It opened on 21 November
        # 2022, 219 days after the contract date"): the two parts share that paragraph.
        shared = None
        if best and kinds and supplies(best[0].text, set(kinds)):
            shared = next((i for i, (_, quoted) in enumerate(out) if any(f is best[0] for f in quoted)), None)
        pool = [f for f in pool if id(f) not in used]
        hits = [f for f in hits if id(f) not in used]
        limit = 0 if shared is not None else limit  # answered there: more would be weaker candidates
        picked = _distinct(hits or pool, limit)
        if len(picked) < limit and not (kinds and hits):
            # Too few findings use the part's words: add the best of those found for the step that asks it.
            extra = [
                f
                for f in found
                if f.placed == home_id
                and id(f) not in used
                and f not in picked
                and (supplies(f.text, set(kinds)) or not supplies(f.text, theirs))
                and not _repeats(f, stated)
            ]
            ranked = sorted(extra, key=lambda f: _rank(f, part_terms | question, kinds, weights=weights))
            picked = _distinct(picked + ranked, limit)
        if picked and len(parts) == 1 and specific(part):
            chain = _chain(picked[0], pool, found, named, part, part_terms, kinds, weights, payload["sources"])
            picked = [*chain, *(f for f in picked if f not in chain)]  # then the part's other candidates
        used.update(id(f) for f in picked)
        # A table row's bare cell ("Revised budget (£m): 41.2") does not say what the figure is; a
        # later part may still quote the sentence that does ("… in the sum of £41.2 million").
        stated |= {x for f in picked if not _is_data_row(f.text) for x in key_figures(f.text)}
        if shared is None:
            out.append(([part], picked))
        else:
            out[shared] = ([*out[shared][0], part], out[shared][1] + picked)
    return out


def page_title(source: str) -> str:
    """The title a file name or address gives, without its extension or disambiguation."""
    return re.sub(r"\s*\(.*?\)|\.\w+$", "", source.rsplit("/", 1)[-1])


def unanswered(payload: dict[str, Any]) -> tuple[list[str], list[dict[str, Any]]]:
    """The question's parts that no finding answers (``answered``), and the plan's steps with no
    finding placed under them nor answering their title: the critic's gaps. The report quotes every
    finding, so a part it names unanswered is one no quoted sentence answers."""
    found = findings(payload)
    texts = [f.text for f in found]
    parts = [part for part in parts_of(payload["question"]) if answered(part, texts) is None]
    placed = {f.placed for f in found}
    steps = payload["plan"]["steps"]
    return parts, [s for s in steps if str(s["step_id"]) not in placed and answered(str(s["title"]), texts) is None]


def _distinct(ranked: list[Finding], limit: int) -> list[Finding]:
    """The best ``limit`` findings, none repeating a figure of a better one."""
    picked: list[Finding] = []
    for f in ranked:
        if len(picked) < limit and not any(_repeats(f, key_figures(g.text)) for g in picked):
            picked.append(f)
    return picked


def _repeats(f: Finding, stated: set[str]) -> bool:
    """Whether ``f`` mostly restates figures already stated ("£18.6m" after "£18.6 million"); a
    table row sharing a column's value or two with another row ("homes connected: 1150") does not."""
    key = key_figures(f.text)
    return bool(key) and (key <= stated if _is_data_row(f.text) else 2 * len(key & stated) >= len(key))


def _same_subject(a: set[str], b: set[str]) -> bool:
    """Two findings with the same figures are one fact when they also share most of the shorter one's
    words ("carried 412,000 passengers" and "passenger journeys reached 412,000"), not when only
    the number matches or one adds a detail the other lacks."""
    words_a, words_b = {t for t in a if t.isalpha()}, {t for t in b if t.isalpha()}
    shorter = min(words_a, words_b, key=len)
    return len(words_a & words_b) >= max(1, len(shorter) // 2)


def _exec_summary(payload: dict[str, Any]) -> str:
    found = findings(payload)
    if not found:
        return NO_FINDINGS  # a notice, not a claim: nothing to cite
    paragraphs: list[str] = []
    for asked, picked in (answer for answer in _answers(payload) if answer[1]):
        # The part itself as the paragraph's lead, question words and all ("Large is the tunnel" reads not).
        lead = " ".join(sentence_case(part) + ("?" if _ASKS.match(part) else ".") for part in asked)
        # Run together in a paragraph, a data row needs its full stop to stay a sentence of its own.
        paragraphs.append(f"**{lead}** " + " ".join(f.quoted(close=True) for f in picked))
    if not paragraphs:
        best = sorted(found, key=lambda f: _rank(f, _question_terms(payload["question"])))[:3]
        paragraphs.append(" ".join(f.quoted(close=True) for f in best))
    return "\n\n".join(paragraphs)


def _key_findings(payload: dict[str, Any]) -> str:
    """The findings under the step each answers; a step with none is left out (Limitations names
    it), since a bullet saying so would be the one sentence of the section that cites nothing."""
    found = findings(payload)
    if not found:
        return NO_FINDINGS
    blocks: list[str] = []
    for step in all_steps(payload["plan"]):
        sid = str(step["step_id"])
        mine = [f for f in found if f.placed == sid]
        if mine:
            bullets = "\n".join(f"- {f.quoted()}" for f in sorted(mine, key=lambda f: f.order))
            blocks.append(f"### {sid}. {step['title']}\n\n{bullets}")
    return "\n\n".join(blocks)


def corroborated(payload: dict[str, Any]) -> list[list[Finding]]:
    """Facts stated by two or more independent sources: a finding whose wording verifies against each,
    or findings of different sources giving the same figure about the same thing, each with its citation."""
    found = findings(payload)
    groups = [[f] for f in found if len(f.cites) >= 2]
    grouped = {id(f) for group in groups for f in group}
    for f in found:
        if id(f) in grouped:
            continue
        cited = set(f.cites)
        group = [f]
        for g in [*f.also, *found]:
            # The same figure about the same subject ("1,000 cycles" and "1,000 ohm" are two facts)
            # from another source (so never ``f`` itself).
            independent = id(g) not in grouped and not cited & set(g.cites)
            if independent and same_figure(f.text, g.text) and _same_subject(f.terms, g.terms):
                group.append(g)
                cited |= set(g.cites)
        if len(group) >= 2:
            groups.append(group)
            grouped |= {id(g) for g in group}
    return groups


def _analysis(payload: dict[str, Any]) -> str:
    rounds = payload.get("critic_rounds", [])
    backed = corroborated(payload)
    bullets = "\n".join("- " + " ".join(f.quoted(close=True) for f in group[:3]) for group in backed[:6])
    parts = [CORROBORATED_INTRO, bullets] if backed else [f"{NONE_CORROBORATED}."]
    if rounds:
        scores = ", ".join(f"round {r['round']}: {r['verdict']['sufficiency']}/10" for r in rounds)
        parts.append(f"The critic's sufficiency scores were {scores}.")
        contradictions = rounds[-1]["verdict"].get("contradictions") or []
        if contradictions:
            parts.append("The critic noted contradictions: " + "; ".join(contradictions[:3]))
    return "\n\n".join(parts)


def _limitations(payload: dict[str, Any]) -> str:
    lines = ["- Every finding is a sentence quoted from a compressed source summary, not a synthesis."]
    empty = [s["title"] for s in unanswered(payload)[1]]
    if empty:
        lines.append("- No usable finding answers: " + "; ".join(f"'{t}'" for t in empty) + ".")
    return "\n".join(lines)


# A gap that names the question it finds unanswered ("No source yet answers 'Who led X?'.").
_GAP_QUESTION = re.compile(r"'([^']+\?)'")


def _recorded_gaps(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """The critic's last gaps, without those the report's findings answer (``answered``): the
    critic may have judged fewer sources than the report quotes."""
    rounds = payload.get("critic_rounds") or []
    gaps = payload.get("open_gaps") or (rounds[-1]["verdict"].get("gaps") if rounds else None) or []
    texts = [f.text for f in findings(payload)]
    asked = [_GAP_QUESTION.search(str(g.get("description", ""))) for g in gaps]
    return [g for g, m in zip(gaps, asked, strict=True) if not (m and answered(m.group(1), texts))]


def _next_steps(payload: dict[str, Any]) -> str:
    gaps = _recorded_gaps(payload)
    rounds = payload.get("critic_rounds") or []
    if not gaps:
        return "- The critic named no open gaps; widen the corpus or enable web search to test the findings."
    lines = [f'- {g["description"]} Suggested query: "{g["suggested_query"]}".' for g in gaps[:5]]
    if not payload.get("open_gaps") and rounds and rounds[-1].get("decision") == "sufficient":
        score = rounds[-1]["verdict"]["sufficiency"]
        lines.insert(0, f"The critic judged the evidence sufficient ({score}/10) but recorded these gaps:\n")
    return "\n".join(lines)


def reconcile_corroboration(markdown: str) -> str:
    """After citation verification: a finding left with fewer than two citations is no longer
    "stated by two or more sources"; drop it from that list (and the list if it empties). A report
    whose Analysis names no corroborated finding says all its extracted claims rest on one source."""
    at = markdown.find(CORROBORATED_INTRO)
    after = markdown[at + len(CORROBORATED_INTRO) :]
    match = re.match(r"\s*\n((?:- .*(?:\n|$))+)", after) if at >= 0 else None
    if match:
        bullets = [line for line in match.group(1).splitlines() if len(set(re.findall(r"\[(\d+)\]", line))) >= 2]
        kept = CORROBORATED_INTRO + "\n\n" + "\n".join(bullets) + "\n"
        block = kept if bullets else f"{NONE_CORROBORATED} once citations were verified.\n"
        markdown = markdown[:at] + block + after[match.end() :]
    if NONE_CORROBORATED in markdown:
        all_single = r"All \1 claims extracted from the sources rest on a single source"
        markdown = _SINGLE_SOURCE_COUNT.sub(all_single, markdown)
    return markdown


def rewrite_from_source(sentence: str, entries: list[dict[str, Any]]) -> str:
    """The extractive rewrite of a sentence its source does not state as written: the sentence of
    that source's summary or extraction that shares most of its words (half of them at least),
    quoted with its citation; NONE when the source has no such sentence."""
    terms = set(content_terms(sentence))
    candidates = [
        (_overlap(terms, set(content_terms(c))), -i, e["n"], " ".join(c.split()))
        for e in entries
        for i, c in enumerate([*split_sentences(e.get("summary", "")), *e.get("extraction", [])])
        if usable(" ".join(c.split()))
    ]
    best = max(candidates, default=None)
    if best is None or best[0] < 0.5:
        return "NONE"
    return f"{best[3]} [{best[2]}]"


DIRECT_ANSWER = (
    "The planner judged this question answerable from model knowledge and the depth was 0, so no "
    "tools were called and no sources were consulted. The offline engine has no model knowledge of "
    "its own: configure a model for a direct answer, or run with depth 1 or more to research it."
)
