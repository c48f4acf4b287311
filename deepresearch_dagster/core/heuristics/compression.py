"""The extractive compressor: question-focused BM25 over the output's own units; listings compacted.

An output is cut into units (sentences, table rows read with their header: "Round: Series B; Amount: $40M", list items,
records) after dropping the fetch header, code and non-English blocks, then scored against the step and the question's
entity (the plan title). The summary quotes the three best units whole, the extraction the next best within
``message_budget`` (a short fact sheet's facts may fill more). Headings are context only; nothing under a SUPERSEDED
heading is kept. Search listings become three short sentences, never larger than the listing.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ..text import (
    ENDS_SENTENCE,
    closed,
    content_terms,
    count_sentences,
    estimate_tokens,
    is_instruction,
    json_strings,
    split_sentences,
    structured_records,
    table_cells,
    words,
)
from .answer_types import answers, aspect_terms, counts
from .planning import DOCUMENT_GUIDANCE
from .sentences import context_dependent, has_fact, is_fragment, looks_english, looks_like_code, named_entities
from .terms import ASPECT_WORDS, EMPHASIS, INSTRUCTION_WORDS, LIST_MARKER, cap_words, names, topic_words

# The whole injected message may take this share of the raw output (goal: ≥ 95 % reduction per call), at most
# MAX_MESSAGE_TOKENS; a short fact sheet's facts may take FACT_RATIO of it (at most MAX_FACT_TOKENS).
TARGET_RATIO = 0.05
MAX_MESSAGE_TOKENS = 400
MAX_EXTRACTION = 10
MAX_TABLE_ROWS = 4  # rows of one table before other units get their turn
FACT_RATIO = 0.7
MAX_FACT_TOKENS = 220
FACT_SHEET_TOKENS = 800
# A fact scoring RELEVANT_FACT of the best unit or more answers the step; a longer document read is
# a fact sheet when at least MIN_RELEVANT_FACTS of its rows and list items beyond the summary do.
RELEVANT_FACT = 0.15
MIN_RELEVANT_FACTS = 3
DOCUMENT_TOOLS = {"read_document"}
LONG_SHEET_RATIO = 0.2
# Fixed token costs: the empty message, an artifact file name ("…_fetch_url.txt"), each extraction item's quotes.
JSON_TOKENS = 29
ARTIFACT_TOKENS = 3
ITEM_TOKENS = 3
MAX_TITLE_TOKENS = 12
# The contract's floor, whatever the budget: a title, three summary sentences of MAX_SENTENCE_TOKENS, padding.
PADDING_TOKENS = 40
SUMMARY_SENTENCES = 3
SUMMARY_CANDIDATES = 8
MAX_SUMMARY_WORDS = 50
MAX_SENTENCE_TOKENS = 60
MAX_UNIT_WORDS = 90
WINDOW_TOKENS = 40  # the window a longer run of text is read in (tokens once JSON-encoded)
FLOOR_TOKENS = (
    JSON_TOKENS + ARTIFACT_TOKENS + MAX_TITLE_TOKENS + SUMMARY_SENTENCES * MAX_SENTENCE_TOKENS + PADDING_TOKENS
)
_BM25_K1, _BM25_B = 1.2, 0.75
ANSWER_BONUS = 1.3

_FETCH_HEADER = re.compile(r"^\s*Title:[^\n]*?\s+URL:\s*\S+\s*(?:Note: truncated at \d+ bytes\s*)?", re.IGNORECASE)
_HEADER_TITLE = re.compile(r"^\s*Title:\s*(.*?)\s+URL:", re.IGNORECASE | re.DOTALL)
_MD_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_TABLE_SEP = re.compile(r"^:?-{2,}:?$")
_STALE_HEADING = re.compile(r"^#+\s*SUPERSEDED\b|·\s*status:\s*superseded\b", re.IGNORECASE)
_BANNER = re.compile(r"^#+\s*Source:\s*\S+\s*·", re.IGNORECASE)
_HEADING_NOISE = re.compile(r"\[passage \d+/\d+\]|\(page \d+\)|›")
_METADATA = re.compile(r"^(?:last updated|updated|date|dated|version|owner|prepared by|page)\b[^.;]{0,40}$", re.I)
_TOTAL_ROW = re.compile(r"^(?:[^:;]{1,40}:\s*)?(?:grand\s+)?(?:total|overall|all\s+\w+)\b", re.IGNORECASE)
_HTML = re.compile(r"<(?:p|div|span|a|html|body|table|li|h[1-6])[\s>]", re.IGNORECASE)


def _message(title: str, summary: str, extraction: list[str], useful: bool = True) -> dict[str, Any]:
    return {"summary_title": title, "summary": summary, "extraction": extraction, "is_useful": useful}


def _not_useful(reason: str, step_title: str) -> dict[str, Any]:
    title = _title(f"No relevant information for {step_title}", "in this output")
    return _message(title, f"{reason} Nothing in it answers the step. The full output is kept on disk.", [], False)


def _title(text: str, pad: str) -> str:
    """``text``'s first 12 words, topped up to the schema's 5 with ``pad``'s words, then "findings"."""
    parts = text.split()[:12]
    return " ".join(parts + [*pad.split(), *["findings"] * 5][: max(0, 5 - len(parts))])


def compress_extractively(payload: dict[str, Any]) -> dict[str, Any]:
    """Extractive compression: units scored against the step. Always schema-valid."""
    raw: str = payload["raw"]
    step_title: str = payload["step_title"]
    if payload.get("kind") == "json":
        try:
            data = json.loads(raw)
        except json.JSONDecodeError:
            data = None
        if isinstance(data, dict) and "error" in data:
            return _not_useful("The tool call failed with an error.", step_title)
        if isinstance(data, dict) and isinstance(data.get("results"), list):
            return _compress_search(data, payload, raw)
        if isinstance(data, dict) and isinstance(data.get("matches"), list):
            return _compress_grep(data, step_title)
        if isinstance(data, dict) and isinstance(data.get("content"), str):
            raw = data["content"]
        elif data is not None:
            raw = "\n".join(json_strings(data))
    elif raw.count("<") > 20 and _HTML.search(raw):
        raw, html_title = _html_text(raw)
        if html_title and not payload.get("source_title"):
            payload = {**payload, "source_title": html_title}
    return _compress_text(raw, payload)


def _html_text(html: str) -> tuple[str, str]:
    """Readable text of an HTML page a tool returned without extraction."""
    try:
        from ..web.extract import html_to_text

        title, text = html_to_text(html)
        return text, title
    except Exception:  # a parser failure must never fail the compression
        return re.sub(r"<[^>]+>", "\n", html), ""


# ------------------------------------------------------------------------------------------ listings


def _compress_search(data: dict[str, Any], payload: dict[str, Any], raw: str) -> dict[str, Any]:
    results = [r for r in data["results"] if isinstance(r, dict)]
    query = str(data.get("query", ""))
    if not results:
        return _not_useful(f'The search for "{query}" returned no results.', payload["step_title"])
    raw_tokens = estimate_tokens(raw)
    # The research team ranks and reads sources from the stored listing; memory keeps the gist: the hit count, the best
    # hit and its location, the next two titles, and snippets that answer the step ("Normandy, a region in France").
    answering = _answering_snippets(results, payload)
    for title_words, with_next in ((8, True), (6, True), (5, False), (3, False)):
        out = _listing_summary(query, results, title_words, with_next)
        for snippet in answering:
            items = [*out["extraction"], snippet]
            if _message_tokens(out["summary_title"], [out["summary"]], items) + 10 <= raw_tokens:
                out["extraction"].append(snippet)
        if estimate_tokens(json.dumps(out, ensure_ascii=False)) + 10 <= raw_tokens:
            break
    return out


MAX_SNIPPETS = 2


def _answering_snippets(results: list[dict[str, Any]], payload: dict[str, Any]) -> list[str]:
    """Up to ``MAX_SNIPPETS`` snippets, best first, that answer the step: on its topic (a name it asks about, or two
    of its words) and with the kind of answer it asks for."""
    titles = {_norm(str(r.get("title") or "")) for r in results}
    snippets = list(dict.fromkeys(str(r.get("snippet") or "").strip() for r in results))
    units = [
        Unit(t, "sentence", i, content_terms(t))
        for i, t in enumerate(snippets)
        if len(words(t)) >= 5 and _norm(t) not in titles
    ]
    if not units:
        return []
    weights, step_topic, entity = _weighted_query(payload)
    keys = _key_names(payload)
    score = _scorer(units, weights, entity, payload["step_title"])
    useful = [
        (score(u), u.text)
        for u in units
        if (any(k <= set(u.terms) for k in keys) or len((step_topic | entity) & set(u.terms)) >= 2)
        and answers(u.text, payload["step_title"])
    ]
    return [text for s, text in sorted(useful, key=lambda x: -x[0]) if s > 0][:MAX_SNIPPETS]


def _key_names(payload: dict[str, Any]) -> list[set[str]]:
    """The content terms of each name the step's title or the question mentions ("Audrey Williams"):
    a unit that names one of them is about what is asked, however few other words it shares."""
    text = f"{payload['step_title']}. {payload.get('plan_title', '')}"
    # "Windhoek, South-West Africa": each part of a name and its place is a name too.
    found = [p for n in names(text) for p in {n, *n.split(", ")}]
    return [t for t in (set(content_terms(n)) for n in found) if t]


def _short_title(title: str, n: int) -> str:
    """A title without its subtitle ("Who Is Building X: Companies and …" → "Who Is Building X")."""
    title = " ".join(title.replace('"', "").split())
    head = re.split(r"\s*[:|–—]\s+|\s+-\s+", title, maxsplit=1)[0]
    return cap_words(head if len(head.split()) >= 3 else title, n)


def _listing_summary(query: str, results: list[dict[str, Any]], title_words: int, with_next: bool) -> dict[str, Any]:
    def name(r: dict[str, Any], n: int) -> str:
        return _short_title(str(r.get("title") or r.get("path") or r.get("url") or "untitled"), n)

    def where(r: dict[str, Any]) -> str:
        return str(r.get("path") or r.get("url") or "")

    # Passage-level listings name one document several times: list each document once.
    documents: dict[str, dict[str, Any]] = {}
    for r in results:
        documents.setdefault(where(r) or name(r, 12), r)
    distinct = list(documents.values())
    best = distinct[0]
    of = f" from {len(distinct)} sources" if len(distinct) != len(results) else ""
    # No double quotes: each costs two tokens once the message is JSON-encoded.
    sentences = [
        f"The search returned {len(results)} results{of}.",
        f"Best match: {name(best, title_words)}" + (f" ({where(best)})." if where(best) else "."),
    ]
    rest = distinct[1:3]
    if rest and with_next:
        sentences.append("Next: " + "; ".join(name(r, max(4, title_words - 2)) for r in rest) + ".")
    elif rest:
        sentences.append(f"{len(distinct) - 1} other sources are in the stored listing.")
    else:
        sentences.append("No other source matched.")
    title = _title(f"Search results for {cap_words(query.replace(chr(34), ''), 8)}", "in the corpus")
    return _message(title, " ".join(sentences), [])


def _compress_grep(data: dict[str, Any], step_title: str) -> dict[str, Any]:
    matches = [m for m in data["matches"] if isinstance(m, dict)]
    pattern = str(data.get("pattern", ""))
    if not matches:
        return _not_useful(f'No stored artifact matched "{pattern}".', step_title)
    files = {str(m.get("file")) for m in matches}
    summary = (
        f'The pattern "{pattern}" matched {len(matches)} lines. The matches come from {len(files)} stored '
        "artifacts. Each extraction item gives the file, line number and text."
    )
    lines = [f"{m.get('file')}:{m.get('line')}: {m.get('text')}" for m in matches[:10]]
    return _message(_title(f"Artifact lines matching {cap_words(pattern, 6)}", "in stored outputs"), summary, lines)


# ------------------------------------------------------------------------------------------ units


@dataclass
class Unit:
    text: str
    kind: str  # sentence | row | item | record
    pos: int
    terms: list[str] = field(default_factory=list)
    context: set[str] = field(default_factory=set)  # terms of the heading above it
    block: int = 0  # the line (paragraph) it comes from
    table: int = -1  # the table a row belongs to (-1: not a row)
    keys: set[str] = field(default_factory=set)  # a record's field names ("commit", "author")


def _clean(text: str) -> str:
    return " ".join(EMPHASIS.sub("", _MD_LINK.sub(r"\1", text)).split())


def _cells(line: str) -> list[str]:
    return [_clean(c) for c in table_cells(line)]


def extract_units(raw: str) -> list[Unit]:
    """Sentences, table rows (with their header) and list items of a text output, in order."""
    raw = _FETCH_HEADER.sub("", raw, count=1)
    lines = raw.splitlines()
    units: list[Unit] = []
    heading: set[str] = set()
    header: list[str] | None = None
    seen: set[str] = set()
    # Log entries, key: value blocks and diff changes are one unit each, read like a table row with its header.
    records: dict[int, list[Any]] = {}
    for r in structured_records(lines):
        records.setdefault(r.start, []).append(r)
    record_end = -1

    def add(text: str, kind: str, keys: set[str] | frozenset[str] = frozenset()) -> None:
        text = text.strip()
        n = len(words(text))
        if n > MAX_UNIT_WORDS and kind in ("sentence", "item"):
            # An infobox run into one line ("… Population Total 2,913,123 …"): windows find the fact where it stands.
            start = end = 0
            for m in re.finditer(r"\S+", text):
                if end and _json_tokens(text[start : m.end()]) > WINDOW_TOKENS:
                    add(text[start:end], "item")
                    start = m.start()
                end = m.end()
            add(text[start:end], "item")
            return
        key = text.lower()
        if key in seen or n < (2 if kind != "sentence" else 5) or n > MAX_UNIT_WORDS or len(text) < 12:
            return
        # A table row (a record) is data whatever its first header says ("function: Field installation; …").
        # Untrusted content: an instruction is never a finding.
        code = kind not in ("row", "record") and looks_like_code(text)
        if code or not looks_english(text) or not re.search(r"[a-z]", text) or is_instruction(text):
            return
        seen.add(key)
        row_table = table if kind == "row" else -1
        # A record's field names are what it is (every entry of a log has them), not what it says.
        terms = [t for t in content_terms(text) if t not in keys]
        units.append(Unit(text, kind, len(units), terms, heading, block, row_table, set(keys)))

    block = 0
    table = -1
    in_table = False
    stale_level = 0  # the level of a "SUPERSEDED" heading whose figures are out of date (0: none)
    for i, line in enumerate(lines):
        if i < record_end:
            continue
        block = i
        if i in records and not stale_level:
            for record in records[i]:
                if record.intro:
                    heading = set(content_terms(record.intro))
                keys = set(content_terms(" ".join(record.keys))) - set(content_terms(record.values))
                add(_clean(record.text), "record", keys)
                record_end = max(record_end, record.end)
            continue
        st = line.strip()
        if not st:
            header = None
            in_table = False
            continue
        if st.startswith("#"):
            level = len(st) - len(st.lstrip("#"))
            if _STALE_HEADING.search(st):
                stale_level = stale_level or level
            elif stale_level and level < stale_level:
                stale_level = 0
        if stale_level:  # figures of a superseded document are never findings
            header = None
            continue
        is_row = st.startswith("|") and st.count("|") >= 2
        if is_row and not in_table:
            table += 1
        in_table = is_row
        if is_row:
            cells = _cells(st)
            if all(_TABLE_SEP.match(c) or not c for c in cells):
                continue
            nxt = lines[i + 1].strip() if i + 1 < len(lines) else ""
            if header is None and nxt.startswith("|") and all(_TABLE_SEP.match(c) or not c for c in _cells(nxt)):
                # "headcount_31dec2025" is an export's column name: its words are what rows match on.
                header = [c.replace("_", " ") for c in cells]
                continue
            names = header if header and len(header) == len(cells) else [""] * len(cells)
            row = (f"{h}: {c}" if h and h.lower() != c.lower() else c for h, c in zip(names, cells, strict=True) if c)
            add("; ".join(row), "row")
            continue
        header = None
        if st.startswith("#"):
            # Headings are context, never findings; the banner's metadata line says nothing.
            if not _BANNER.match(st):
                heading = set(content_terms(_HEADING_NOISE.sub(" ", st.lstrip("#"))))
            continue
        marker = LIST_MARKER.match(st)
        body = _clean(st[marker.end() :] if marker else st)
        sentences = split_sentences(body)
        if marker and len(sentences) <= 1:
            add(body, "item")
            continue
        for sentence in sentences:
            add(sentence, "sentence" if ENDS_SENTENCE.search(sentence) else "item")
    return units


# ------------------------------------------------------------------------------------------ scoring


def _weighted_query(payload: dict[str, Any]) -> tuple[dict[str, float], set[str], set[str]]:
    """Query term weights, the step's topic terms and the entity's terms. Step title words weigh most, then its
    description and queries, then the plan title (the entity). Words the step shares with the entity are discounted
    when the step has words of its own: in a document about the entity they are everywhere ("challenges" is the step;
    "solid-state batteries" is every sentence)."""
    queries = " ".join(str(q) for q in payload.get("queries") or [])
    title = topic_words(payload["step_title"])
    description = str(payload.get("step_description", "")).replace(DOCUMENT_GUIDANCE, "")
    described = topic_words(f"{description} {queries}") - title
    plan_title = payload.get("plan_title", "")
    # The entity without aspect words ("main challenges"), but compounds stay whole ("solid-state").
    compounds = {t for w in re.findall(r"\w+(?:-\w+)+", plan_title) for t in topic_words(w.replace("-", " "))}
    # Not the deliverable's words either ("Briefing on Acme": "briefing" is no part of Acme).
    entity = (topic_words(plan_title) - ASPECT_WORDS) | compounds
    step_topic = title | described
    own = step_topic - entity
    weights: dict[str, float] = {t: 1.0 for t in title} | {t: 0.7 for t in described}
    for t in entity:
        weights[t] = 0.35 if t in step_topic and own else weights.get(t, 0.4)
    # Generic answer words as a weak extra query ("challenges" → problems, costs): never enough on their own.
    for text, weight in ((payload["step_title"], 0.6), (payload.get("step_description", ""), 0.3)):
        for t in aspect_terms(text) - INSTRUCTION_WORDS:
            weights.setdefault(t, weight)
    return weights, step_topic, entity


def _scorer(units: list[Unit], weights: dict[str, float], entity: set[str] | None = None, asked: str = "") -> Any:
    """BM25 of a unit against the weighted query, with the statistics of ``units``. The entity's words count as one
    concept (the best plus a fifth of the rest): "solid-state batteries" is one match, not three. A unit holding the
    kind of answer ``asked`` for (a name it does not give, a date, a figure) scores ``ANSWER_BONUS`` more."""
    entity = entity or set()
    topic = (topic_words(asked) - ASPECT_WORDS) | entity
    before = {v.pos + 1: v for v in units}
    n = len(units)
    df = Counter(t for u in units for t in set(u.terms))
    avgdl = sum(len(u.terms) for u in units) / n or 1.0

    def score(u: Unit) -> float:
        tf = Counter(u.terms)
        dl = len(u.terms) or 1
        s = 0.0
        concept: list[float] = []
        for t, w in weights.items():
            if t in tf:
                idf = math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
                part = w * idf * tf[t] * (_BM25_K1 + 1) / (tf[t] + _BM25_K1 * (1 - _BM25_B + _BM25_B * dl / avgdl))
                if t in entity:
                    concept.append(part)
                else:
                    s += part
        if concept:
            s += max(concept) + 0.2 * (sum(concept) - max(concept))
        # The heading a row or item sits under tells what it is about ("## Funding" over a table).
        if u.kind != "sentence":
            s += 0.3 * sum(w for t, w in weights.items() if t in u.context | u.keys and t not in tf)
        if s > 0:
            distinct = sum(1 for t in weights if t in tf)
            s *= 1 + 0.15 * min(3, distinct - 1) if distinct > 1 else 1.0
            if has_fact(u.text):
                s *= 1.15
            if asked and answers(u.text, asked):
                s *= ANSWER_BONUS
            s *= 1 + 0.04 * min(3, named_entities(u.text))
            if u.kind == "sentence":
                lead = before.get(u.pos)
                if context_dependent(u.text):
                    # A riddle out of its paragraph, unless the sentence before stands alone (the report quotes both).
                    alone = lead and lead.block == u.block and not context_dependent(lead.text)
                    s *= 0.8 if alone else 0.5
                elif is_fragment(u.text):
                    s *= 0.7
            if topic and not topic & (set(u.terms) | u.context):
                s *= 0.5  # only the query's expansion words ("causes"): not about what is asked
        return s

    return score


def _compress_text(raw: str, payload: dict[str, Any]) -> dict[str, Any]:
    step_title = payload["step_title"]
    header = _HEADER_TITLE.match(raw)
    titled_as = payload.get("source_title") or (header.group(1).strip() if header else "")
    units = extract_units(raw)
    if not units:
        return _not_useful("The output contains no readable prose, table or list.", step_title)
    weights, step_topic, entity = _weighted_query(payload)
    # A document of the user's own (read_document) is read more generously than a web page below.
    own_document = payload.get("tool_name") in DOCUMENT_TOOLS
    score = _scorer(units, weights, entity, step_title)
    scores = [score(u) for u in units]
    # "It generates 240 megawatts": a sentence that continues a relevant one shares its topic.
    for i in range(1, len(units)):
        same_paragraph = units[i].block == units[i - 1].block
        if units[i].kind == "sentence" and same_paragraph and scores[i - 1] > 0 and context_dependent(units[i].text):
            scores[i] += 0.4 * scores[i - 1]
    # A table's total row sums up the rows the step matched ("Total: 412" under 9 teams' headcounts).
    best_score = max(scores, default=0.0)
    for i, u in enumerate(units):
        if u.kind == "row" and scores[i] > 0 and _TOTAL_ROW.match(u.text):
            scores[i] = max(scores[i], 0.5 * best_score)
    all_terms = {t for u in units for t in u.terms}
    top = sorted(range(len(units)), key=lambda i: (-scores[i], i))[:10]
    best = max(top, key=lambda i: (len((step_topic | entity) & set(units[i].terms)), scores[i]))
    best_matches = {t for t in step_topic | entity if t in units[best].terms}
    coverage = len(step_topic & all_terms) / max(1, len(step_topic))
    # A document about the question's entity is useful even when written as tables and lists.
    source_terms = set(content_terms(titled_as))
    # The question's entity as this step sees it: the plan-title words the step repeats.
    core = (entity & step_topic) or entity
    entity_units = sum(1 for u in units if core and len(core & set(u.terms)) >= max(1, (len(core) + 1) // 2))
    about_entity = bool(core) and (
        core <= source_terms or (entity_units >= 2 and len(core & all_terms) >= 0.6 * len(core))
    )
    # Two step words in one unit, a fifth of the step's words overall, and (if the question names an entity) half its
    # words or three step words in that unit: a page sharing only "manufacturers" and "addresses" is not about it.
    entity_cov = len(entity & all_terms) / len(entity) if entity else 1.0
    on_topic = len(best_matches) >= 2 and coverage >= 0.2 and (entity_cov >= 0.5 or len(best_matches) >= 3)
    if own_document and not on_topic and entity_cov >= 0.5:
        # An own document answering several asks in separate rows ("Average monthly churn: 3.1%") is on topic too.
        asked = topic_words(step_title) - entity
        answered = {t for i, u in enumerate(units) if scores[i] > 0 and _fact_unit(u) for t in asked & set(u.terms)}
        on_topic = len(answered) >= 2 and coverage >= 0.2
    # A document titled after the step's topic ("Leadership team" for "Leadership and governance") that states facts
    # answers it, whatever words its rows use. Only the step's title counts (its description is template text), and
    # not the planner's generic section names ("Limitations and outlook" vs "… — Outlook").
    title_topic = topic_words(step_title) - entity
    if own_document:
        # An own document named after a searched word ("headcount"): every row repeats it, so BM25 gives it ~0.
        searched = " ".join(re.findall(r"'([^']+)'", str(payload.get("step_description", ""))))
        title_topic |= topic_words(searched) - entity - ASPECT_WORDS
    titled = bool(title_topic & source_terms) and any(_fact_unit(u) for u in units)
    if titled and scores[best] <= 0:
        scores = [s if s > 0 else (0.01 if _fact_unit(u) else 0.0) for s, u in zip(scores, units, strict=True)]
    # A unit that names what the step or the question names is never "not useful", nor a document
    # named after something the step asks about ("Gila monster" for "Where are Gila monsters found").
    named = any(k <= set(u.terms) for k in _key_names(payload) for u in units)
    subject = set(content_terms(re.sub(r"\(.*?\)", "", payload.get("source_title") or "")))
    named = named or (bool(subject) and subject <= set(content_terms(step_title)))
    # Records whose fields name what the step asks about ("Commit:" for "the last three commits") answer it.
    typed = any((step_topic | entity) & u.keys for u in units)
    if not (on_topic or about_entity or titled or named or typed) or scores[best] <= 0:
        return _not_useful("The output does not address the step's topic.", step_title)

    raw_tokens = estimate_tokens(raw)
    short = raw_tokens <= FACT_SHEET_TOKENS
    budget = message_budget(raw_tokens)
    ranked = [i for i in sorted(range(len(units)), key=lambda i: (-scores[i], i)) if scores[i] > 0]
    top = scores[ranked[0]]
    # A title line repeated as text ("Board update Q4 2025" on page 1) is context, not a finding.
    title_key = _norm(titled_as)
    ranked = [i for i in ranked if not title_key or _norm(units[i].text) != title_key]
    if typed:
        # A listing's order is its tool's ranking (a log newest first): its first entries of the asked type lead, as
        # a search listing's best match does; entries whose values match the step follow.
        first = [i for i in ranked if units[i].keys & (step_topic | entity)]
        first = sorted(first)[:SUMMARY_SENTENCES]
        ranked = first + [i for i in ranked if i not in first]

    # Context-dependent sentences and fragments stay eligible (their scores are lowered): "It is named
    # after Erasto Mpemba" may be the answer; the reporter drops what cannot be quoted alone.
    eligible = [i for i in ranked if units[i].kind == "sentence" and _fits_summary(units[i].text)]
    eligible = eligible[:SUMMARY_CANDIDATES]
    for i in ranked:  # too few self-contained sentences: rows, items, then anything relevant
        if len(eligible) >= SUMMARY_SENTENCES:
            break
        if i not in eligible and _fits_summary(units[i].text):
            eligible.append(i)
    # Nothing short enough: the best unit all the same (a page whose one sentence answers is quoted).
    eligible = eligible or ranked[:1]
    summary_idx = eligible[:SUMMARY_SENTENCES]
    source_title = titled_as or units[0].text
    titles = _titles(source_title)
    # Whole sentences only: a quote is never cut inside the clause or list that carries its claim.
    summary_sents = [_as_sentence(units[i].text) for i in summary_idx]
    padding = _padding(source_title, raw)
    if not all(_fits_summary(units[i].text) for i in summary_idx):  # a unit over the floor's share: short padding
        padding.sort(key=_json_tokens)
    # Odd punctuation can make two picked sentences read back as one: top up to 3 by the schema's own count.
    while count_sentences(" ".join(summary_sents)) < SUMMARY_SENTENCES and padding:
        summary_sents.append(padding.pop(0))
    if count_sentences(" ".join(summary_sents)) > 10:
        # By the schema's own rule: dropping whole units could leave none (one unit of "0. 0. 0. …" reads as ten).
        summary_sents = split_sentences(" ".join(summary_sents))[:10]
    title = next((t for t in reversed(titles) if _message_tokens(t, summary_sents, []) <= budget), titles[0])
    used = _message_tokens(title, summary_sents, [])
    # Fact units matching the step (rows and bullets with figures, dates, names) may use a larger, bounded share: a
    # short fact sheet is mostly its facts. So may a longer own document when several rows and items beyond the summary
    # match (a board pack's KPI bullets): its size says nothing about how much of it answers. Web pages keep the plain
    # budget; figures in prose make no fact sheet (a page whose answer is one passage has none left over).
    relevant_facts = sum(
        1
        for i in ranked
        if i not in summary_idx
        and units[i].kind != "sentence"
        and scores[i] >= RELEVANT_FACT * top
        and _fact_unit(units[i])
    )
    fact_sheet = short or (own_document and relevant_facts >= MIN_RELEVANT_FACTS)
    fact_budget = message_budget(raw_tokens, fact_sheet=True) if fact_sheet else budget
    if fact_sheet and not short:
        # A long document keeps at most a fifth of its length: its answering rows and items, not a page of prose.
        fact_budget = min(fact_budget, max(budget, int(LONG_SHEET_RATIO * raw_tokens)))
    # Then a short document's other facts in reading order: the researcher read it for the step, and its rows rarely
    # repeat the step's words ("KPI: On-time rate; 2025: 96%"). A long page's stray figures stay on disk.
    rest = [i for i, u in enumerate(units) if short and scores[i] <= 0 and _fact_unit(u) and _norm(u.text) != title_key]
    said = _norm(" ".join(summary_sents))
    extraction_idx: list[int] = []
    per_table = Counter(units[i].table for i in summary_idx if units[i].table >= 0)
    # Twice: first at most MAX_TABLE_ROWS rows of any one table (twelve monthly rows must not
    # crowd out the KPI table's NPS row), then whatever room is left, in the same order.
    for table_cap in (MAX_TABLE_ROWS, MAX_EXTRACTION):
        for i in ranked + rest:
            if len(extraction_idx) >= MAX_EXTRACTION:
                break
            if i in summary_idx or i in extraction_idx or _METADATA.match(units[i].text):
                continue
            table = units[i].table
            if table >= 0 and per_table[table] >= table_cap:
                continue
            text = _norm(units[i].text)
            if text in said or any(_norm(s) in text for s in summary_sents):
                continue  # the summary says it already, or it repeats a summary clause
            # In a short fact sheet every fact counts, a weak match as much as none ("rest" below).
            factual = _fact_unit(units[i]) and (short or scores[i] >= RELEVANT_FACT * top or scores[i] <= 0)
            # A long document's prose sentences keep the plain bar: its rows and items are the sheet.
            sheet_unit = short or (fact_sheet and units[i].kind != "sentence")
            factual = factual and (sheet_unit or scores[i] >= 0.3 * top)
            if scores[i] < 0.3 * top and not factual:
                continue
            cost = _json_tokens(units[i].text) + ITEM_TOKENS
            if used + cost > (fact_budget if factual else budget):
                continue
            extraction_idx.append(i)
            per_table[table] += 1
            used += cost
    return _message(title, " ".join(summary_sents), [units[i].text for i in sorted(extraction_idx)])


# ------------------------------------------------------------------------------------------ size budget


def message_budget(raw_tokens: int, fact_sheet: bool = False) -> int:
    """Tokens the injected message may take for a raw output of ``raw_tokens`` tokens: ``TARGET_RATIO``
    of it (at most ``MAX_MESSAGE_TOKENS``); a fact sheet's facts may add up to ``FACT_RATIO`` of it to
    the floor's summary, never making the message larger than the sheet (``FLOOR_TOKENS`` overrides)."""
    budget = min(MAX_MESSAGE_TOKENS, int(TARGET_RATIO * raw_tokens))
    if fact_sheet:
        budget = max(budget, min(raw_tokens, FLOOR_TOKENS + min(MAX_FACT_TOKENS, int(FACT_RATIO * raw_tokens))))
    return budget


def _fits_summary(text: str) -> bool:
    return len(words(text)) <= MAX_SUMMARY_WORDS and _json_tokens(_as_sentence(text)) <= MAX_SENTENCE_TOKENS


# The padding sentences below: they say what a source is, never what it states.
PADDING = re.compile(r"^(?:The source is titled\b|It contains about \d+ words|The full output is kept on disk)")


def _padding(source_title: str, raw: str) -> list[str]:
    """Sentences that say what the source is, for a summary short of three sentences."""
    named = f'The source is titled "{cap_words(source_title, 12)}".'
    if _json_tokens(named) > PADDING_TOKENS // 2:  # symbols and long words: plain words only
        named = f'The source is titled "{cap_words(" ".join(re.findall(r"[A-Za-z0-9]+", source_title)), 12)}".'
    return [named, f"It contains about {len(raw.split())} words.", "The full output is kept on disk."]


def _json_tokens(text: str) -> int:
    """Tokens of ``text`` inside the JSON message (quotes, backslashes and controls escaped)."""
    return estimate_tokens(json.dumps(text, ensure_ascii=False)) - 2


def _message_tokens(title: str, sentences: list[str], items: list[str]) -> int:
    """The injected message's size, as the researcher's conversation counts it."""
    message = {"summary_title": title, "summary": " ".join(sentences), "extraction": items, "artifact_file": ""}
    return estimate_tokens(json.dumps(message, ensure_ascii=False)) + ARTIFACT_TOKENS


def _titles(source_title: str) -> list[str]:
    """Schema-valid titles of the source, shortest first (5 to 12 words)."""
    titles = dict.fromkeys(_title(_short_title(source_title, n), "— findings for this step") for n in range(5, 13))
    out = sorted(titles, key=_json_tokens)
    if _json_tokens(out[0]) > MAX_TITLE_TOKENS:  # symbols and long words: plain words only
        plain = cap_words(" ".join(re.findall(r"\w+", source_title)), 5)
        out.insert(0, _title(plain, "findings for this step"))
    return out


def _norm(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.lower()))


def _fact_unit(u: Unit) -> bool:
    """A unit that states a figure, a date or a name: a data row, a bullet or a sentence."""
    return (
        has_fact(u.text)
        or counts(u.text)
        or (u.kind != "sentence" and named_entities(u.text) >= 1)
        or u.text.count(": ") >= 2
    )


def _as_sentence(text: str) -> str:
    """A row or item placed in the summary reads as one sentence."""
    text = closed(text.strip())
    return text[:1].upper() + text[1:]
