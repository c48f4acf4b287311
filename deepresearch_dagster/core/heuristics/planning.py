"""The heuristic planner: any question shape → one step per requested part.

Shapes, tried in order: enumerated parts ("(1) … (2) …", bullet lines); comparisons ("Compare A and B on x, y": one
step per aspect or entity); imperative requests ("Prepare a brief on <entity>'s x, y and z": the instruction is dropped,
the listed parts remain); entity-centric ("Tell me about Acme Robotics": overview, figures, risks); questions
(background, one step per sub-question, limitations/outlook). Step titles name the part's topic and queries combine the
entity with the part, never instruction verbs ("prepare", "be specific").
"""

from __future__ import annotations

import re
from typing import Any

from ..text import content_terms
from .answer_types import specific, stated_as
from .terms import (
    COPULA_LEAD,
    DO_LEAD,
    PARTICIPLE_END,
    QUESTION_LEAD,
    antecedent,
    cap_words,
    clause_breaks,
    names,
    question_parts,
    sentence_case,
    topic_terms,
)

# Whole sentences that tell the writer how to write, not what to find.
INSTRUCTION_SENTENCE = re.compile(
    r"^(?:please\s+)?(?:be\s+(?:specific|concise|precise|clear|thorough|brief|exact)|cite|citing|include|use|"
    r"make\s+sure|keep|focus\s+on\s+(?:facts|numbers)|format|answer|write\s+(?:it|in)|note\s+that|mention|"
    r"provide\s+(?:sources|citations|references)|add\s+(?:sources|citations)|reference|quote|state|"
    r"list\s+(?:your\s+)?sources|where\s+possible|if\s+possible|do\s+not|don't|avoid|limit)\b",
    re.IGNORECASE,
)
TRAILING_INSTRUCTION = re.compile(
    r"[,;]?\s*(?:and\s+)?(?:please\s+)?(?:cite|citing|with)\s+(?:your\s+|all\s+|the\s+)?"
    r"(?:sources|citations|references)\b.*$",
    re.IGNORECASE,
)
IMPERATIVE = re.compile(
    r"^(?:please\s+)?(?:(?:could|can|would)\s+you\s+(?:please\s+)?)?(?:i\s+(?:need|want)\s+(?:you\s+to\s+)?)?"
    r"(prepare|write|draft|produce|create|compile|give|provide|put\s+together|make|summari[sz]e|research|"
    r"investigate|analy[sz]e|assess|evaluate|review|find|tell|explain|describe|outline|report|list|build|"
    r"profile|examine|study|brief|cover|look\s+into|dig\s+into|map\s+out)\b\s*",
    re.IGNORECASE,
)
DELIVERABLE = re.compile(
    r"^(?:me\s+|us\s+)?(?:(?:a|an|the|some)\s+)?((?:[\w-]+\s+){0,3}?(?:brief|briefing|report|memo|memorandum|"
    r"summary|overview|analysis|assessment|note|profile|review|dossier|write-up|writeup|rundown|breakdown|"
    r"study|evaluation|investigation|account|picture|comparison))\s*(?:on|about|of|for|covering|regarding|into)\s+",
    re.IGNORECASE,
)
ABOUT = re.compile(r"^(?:me\s+|us\s+)?(?:everything\s+|all\s+)?(?:about|on|into|out\s+about)\s+", re.IGNORECASE)
COMPARISON = re.compile(
    r"\b(?:compare|comparison\s+of|versus|vs\.?|differences?\s+between|how\s+does\s+.+?\s+compare)\b", re.IGNORECASE
)
# Enumeration markers: "(1)", "1.", "1)", "(a)", "a)" — accepted only when numbered in sequence.
MARKER = re.compile(r"(?:(?<=\s)|^)(?:\((\d{1,2})\)|(\d{1,2})[.)]|\(([a-h])\)|([a-h])\))(?=\s)", re.IGNORECASE)
BULLET = re.compile(r"^\s*(?:[-*•+▪–]|\d{1,2}[.)]|\(\d{1,2}\))\s+(.+)$")
POSSESSIVE_LEAD = re.compile(r"^(?:its|their|his|her|the\s+company's|the\s+company’s|the\s+firm's)\s+", re.IGNORECASE)
LIST_SPLIT = re.compile(r"\s*(?:,\s*(?:and\s+|or\s+)?|;\s*|\s+and\s+(?!how\b|what\b|why\b))", re.IGNORECASE)


_DANGLING_END = re.compile(r"(?:[\s,;:]+(?:and|or)\b)+[\s,;:]*$|[\s,;:]+$", re.IGNORECASE)


def plan_heuristically(payload: dict[str, Any]) -> dict[str, Any]:
    raw = str(payload["question"])
    question = " ".join(raw.split())
    max_steps = int(payload.get("max_steps", 5))
    plan = (
        _enumerated_plan(raw, question, max_steps)
        or _comparison_plan(question, max_steps)
        or _imperative_plan(question, max_steps)
        or _question_plan(question, max_steps)
    )
    # The offline engine knows nothing of its own: every question is researched.
    plan["direct_answer"] = False
    # Whatever the input, the plan keeps the schema's bounds (title 3–200, description 10–2000).
    title = " ".join(str(plan["plan_title"]).split())[:200]
    # Too short a topic ("Who is of?" gives "Of") titles the plan with the whole question.
    whole = question.rstrip("?!. ")[:200]
    plan["plan_title"] = title if len(title) >= 3 else whole if len(whole) >= 3 else f"Research: {whole or 'question'}"
    # A title never ends on a dangling "and" or comma, whatever shape produced it.
    plan["steps"] = [(_DANGLING_END.sub("", t) or t, d, qs) for t, d, qs in plan["steps"]]
    plan["steps"] = [
        {
            "step_id": i,
            "title": (t if len(t) >= 3 else f"Step {i}: {t}")[:200],
            "description": d[:2000],
            "queries": [q[:300] for q in dict.fromkeys(q for q in qs if q.strip())][:5],
        }
        for i, (t, d, qs) in enumerate(plan["steps"][:max_steps], 1)
    ]
    return plan


# --- parsing helpers -----------------------------------------------------------------------------


def drop_instructions(text: str) -> str:
    """Remove sentences that only tell the writer how to write ("Be specific…", "Cite your sources.")."""
    sentences = re.split(r"(?<=[.!?])\s+(?=[A-Z(])", text.strip())
    kept = [s for s in sentences if not INSTRUCTION_SENTENCE.match(s.strip())]
    return TRAILING_INSTRUCTION.sub("", " ".join(kept)).strip()


def split_lead(text: str) -> tuple[str | None, str]:
    """``(deliverable, rest)``: "Prepare a due-diligence brief on X" → ("due-diligence brief", "X")."""
    match = IMPERATIVE.match(text)
    if not match:
        return None, text
    rest = text[match.end() :]
    deliverable = DELIVERABLE.match(rest)
    if deliverable:
        return deliverable.group(1).strip(), rest[deliverable.end() :]
    about = ABOUT.match(rest)
    if about:
        return "overview", rest[about.end() :]
    return match.group(1).lower(), rest


def entity_of(text: str) -> str:
    """The named subject of a lead: "Acme Robotics, the Lisbon-based startup" → "Acme Robotics"."""
    text = IMPERATIVE.sub("", text.strip(" :,.;-—"), count=1)
    # "Where does Acme, the Lisbon startup, stand…": the subject follows the question's lead words.
    asked = QUESTION_LEAD.match(text)
    if asked and asked.end() < len(text) and text[asked.end() :][:1].isupper():
        text = text[asked.end() :]
    about = re.search(r"\b(?i:on|about|of|for|regarding|at)\s+(?=[A-Z0-9])", text)
    if about and names(text[about.end() :], fragment=True):
        text = text[about.end() :]
    # The name ends at a clause, a sentence end or an audience ("Orion Labs for our board").
    head = re.split(
        r"\s*(?:,|\(|—|–|:|;|\?|\.\s|\s-\s|\bincluding\b|\bcovering\b|\bwith\b|\bfocus|"
        r"\bfor\s+(?:our|my|your|their|us|me)\b)",
        text,
        maxsplit=1,
    )[0]
    head = re.sub(r"(?:'s|’s)$", "", head.strip())
    # "We're weighing an investment in Brightfurrow": a lone capitalized first word is grammar.
    named = names(head) or names(head, fragment=True)
    # The name an appositive describes is the subject ("Brackenfold Veterinary Group (the Leeds-based vet group)").
    described = re.match(r"\s*(?:,|\(|—|–)\s*(?:the|a|an)\s", text[len(head) :])
    if named and described and head.rstrip(" .'’s").endswith(named[-1]):
        return named[-1]
    if named and len(head.split()) > 6:
        return named[0]
    return " ".join(head.split()[:8]).strip(" .")


def clean_part(part: str, entity: str = "") -> str:
    part = TRAILING_INSTRUCTION.sub("", part)
    part = re.sub(r"^\s*(?:and|or|also|then|plus)\s+", "", part.strip(" ,;:.?"), flags=re.IGNORECASE)
    if entity:
        part = re.sub(rf"^(?:the\s+)?{re.escape(entity)}(?:'s|’s)?\s+", "", part, flags=re.IGNORECASE)
    part = POSSESSIVE_LEAD.sub("", part)
    return re.sub(r"\s*(?:,|;)?\s*(?:and|or)$", "", part.strip(" ,;:.?")).strip()


def sub_aspects(part: str) -> list[str]:
    """ "funding history and current financial trajectory" → both halves, each a query of its own."""
    pieces = [p for p in LIST_SPLIT.split(part) if p and len(p.split()) >= 1]
    return [p for p in pieces if topic_terms(p)] if len(pieces) > 1 else []


def enumerated_parts(raw: str) -> tuple[str, list[str]] | None:
    """``(lead, parts)`` when the request lists its parts; None otherwise."""
    lines = [line for line in raw.splitlines() if line.strip()]
    bullets = [m.group(1) for line in lines if (m := BULLET.match(line))]
    if len(bullets) >= 2:
        lead_lines = [line for line in lines if not BULLET.match(line)]
        lead = " ".join(lead_lines[:1]) if lead_lines else ""
        return lead, [" ".join(b.split()) for b in bullets]
    text = " ".join(raw.split())
    markers = list(MARKER.finditer(text))
    if len(markers) < 2:
        return _inline_list(text)
    labels = [(m.group(1) or m.group(2) or m.group(3) or m.group(4)).lower() for m in markers]
    expected = [str(i) for i in range(1, len(labels) + 1)] if labels[0].isdigit() else list("abcdefgh"[: len(labels)])
    if labels != expected:
        return None
    ends = [m.start() for m in markers[1:]] + [len(text)]
    parts = [text[m.end() : end] for m, end in zip(markers, ends, strict=True)]
    # The last part ends where the instructions begin ("… (4) governance. Be specific…").
    parts[-1] = re.split(r"(?<=[.!?])\s+(?=[A-Z])", parts[-1].strip(), maxsplit=1)[0]
    return text[: markers[0].start()], parts


# "… ? Cover its finances, its products and pricing, its customers, and the main risks."
INLINE_LIST = re.compile(
    r"(?:^|(?<=[.?!:])\s+)(?:please\s+)?(?:cover|covering|include|including|address|focus\s+on|look\s+at)"
    r"\s*:?\s+(?P<items>[^.?!]+)[.?!]?",
    re.IGNORECASE,
)


def _inline_list(text: str) -> tuple[str, list[str]] | None:
    """``(lead, parts)`` for a sentence that lists three or more parts after "Cover"/"Include"."""
    match = INLINE_LIST.search(text)
    if not match or match.start() == 0:
        return None
    # Commas separate the parts; "and" may join words inside one ("finances and funding").
    items = [i for i in re.split(r"\s*[,;]\s*(?:and\s+|or\s+)?", match.group("items")) if i.strip()]
    if len(items) < 3:
        return None
    return text[: match.start()].strip(), items


# --- plan shapes ---------------------------------------------------------------------------------


def _quoted(queries: list[str]) -> str:
    """ "'a'", "'a' and 'b'", "'a', 'b' and 'c'": every search phrase, so that whoever reads the step
    (the compressor gets its description, not its queries) knows the words it is answered in."""
    quoted = [f"'{q}'" for q in dict.fromkeys(queries)]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} and {quoted[-1]}"


def part_title(part: str, limit: int = 12) -> str:
    """A part's title: whole when short, else cut at its last list boundary within ``limit`` words
    ("Money: revenue, margin and EBITDA, the Series B and any debt" → "…, the Series B")."""
    text = sentence_case(part)
    if len(text.split()) <= limit:
        return text
    cuts = [m.start() for m in LIST_SPLIT.finditer(text) if len(text[: m.start()].split()) in range(3, limit + 1)]
    cut = text[: cuts[-1]] if cuts else cap_words(text, limit)
    return re.sub(r"(?:\s+(?:and|or|the|of|a|an|to|for|in|with))+$", "", cut.strip(" ,;:"), flags=re.IGNORECASE)


def _step_for_part(part: str, entity: str) -> tuple[str, str, list[str]]:
    named = set(content_terms(entity))
    # The entity leads every query once; its name inside the part ("has Acme raised") adds nothing.
    terms = [t for t in topic_terms(part) if not set(content_terms(t)) <= named] or topic_terms(part)
    # A long part names more aspects than one query holds: the rest are searched six at a time, so
    # "…, cash, runway and the FY2026 budget" is looked for too (searches run in this order).
    chunks = [terms[:8], *(terms[i : i + 6] for i in range(8, len(terms), 6))]
    queries = [f"{entity} {' '.join(chunk)}".strip() for chunk in chunks]
    aspects = sub_aspects(part) or ([part] if len(terms) <= 3 else [])
    # Only the aspect queries that search for a word no earlier query has (searches are few).
    searched = {t for q in queries for t in content_terms(q)}
    for query in (" ".join([entity, *topic_terms(a)[:6]]).strip() for a in aspects):
        if new := set(content_terms(query)) - searched:
            queries.append(query)
            searched |= new
    if len(queries) == 1 and len(terms) > 1:
        queries.append(f"{entity} {terms[0]}".strip())
    about = f" of {entity}" if entity else ""
    description = f"Find the {part}{about}. Search the documents for {_quoted(queries)} and {DOCUMENT_GUIDANCE}"
    return part_title(part), description, queries


# Guidance for a model researcher on reading documents, not the step's topic (the compressor drops these words).
DOCUMENT_GUIDANCE = (
    "extract the exact numbers, dates, names and table rows that answer it; prefer current documents over "
    "superseded ones."
)
NOUN_DELIVERABLES = {"brief", "briefing", "report", "memo", "summary", "overview", "analysis", "assessment", "profile"}


def _title(deliverable: str | None, entity: str, fallback: str) -> str:
    if not entity:
        return cap_words(sentence_case(fallback), 16)
    if not deliverable or (deliverable not in NOUN_DELIVERABLES and " " not in deliverable.strip()):
        # "Summarise Acme for our board": the deliverable named anywhere in the request, else an overview.
        named = re.search(rf"\b({'|'.join(sorted(NOUN_DELIVERABLES))})\b", fallback, re.IGNORECASE)
        deliverable = named.group(1).lower() if named else "overview"
    return cap_words(
        sentence_case(f"Overview of {entity}" if deliverable == "overview" else f"{deliverable} on {entity}"), 16
    )


def _parts_plan(parts: list[str], entity: str, max_steps: int, title: str) -> dict[str, Any]:
    if len(parts) > max_steps:  # the plan is capped: the last step takes the remaining parts
        parts = [*parts[: max_steps - 1], "; ".join(parts[max_steps - 1 :])]
    return {"plan_title": title, "steps": [_step_for_part(p, entity) for p in parts]}


def _enumerated_plan(raw: str, question: str, max_steps: int) -> dict[str, Any] | None:
    found = enumerated_parts(raw)
    if not found:
        return None
    lead, parts = found
    deliverable, rest = split_lead(drop_instructions(lead))
    entity = entity_of(rest) if rest.strip(" :,.") else ""
    parts = [p for p in (clean_part(p, entity) for p in parts) if p and topic_terms(p)]
    return (
        _parts_plan(parts, entity, max_steps, _title(deliverable, entity, lead or question)) if len(parts) > 1 else None
    )


def _comparison_plan(question: str, max_steps: int) -> dict[str, Any] | None:
    text = drop_instructions(question)
    if not COMPARISON.search(text):
        return None
    body = re.sub(r"^.*?\b(?:compare|comparison\s+of|differences?\s+between)\s+", "", text, flags=re.I).rstrip(" ?.")
    aspects: list[str] = []
    split = re.split(r"\s+(?:on|in\s+terms\s+of|across|regarding|by|for)\s+", body, maxsplit=1, flags=re.I)
    if len(split) == 2:
        body, aspect_text = split
        aspects = [clean_part(a) for a in LIST_SPLIT.split(aspect_text) if clean_part(a)]
    how = re.match(r"^how\s+does\s+(.+?)\s+compare\s+(?:with|to|against)\s+(.+)$", text.rstrip(" ?."), re.I)
    sides = (
        list(how.groups()) if how else re.split(r"\s+(?:vs\.?|versus|and|with|to|against)\s+|\s*,\s*", body, flags=re.I)
    )
    entities = [e for e in (entity_of(s) for s in sides if s.strip()) if e][:4]
    if len(entities) < 2:
        return None
    versus = " vs ".join(entities)
    if aspects:
        steps = [
            (
                cap_words(sentence_case(f"{aspect}: {versus}"), 12),
                f"Compare {versus} on {aspect}. Search each for '{terms}' and extract figures and dates for each side.",
                [f"{e} {terms}" for e in entities],
            )
            for aspect, terms in ((a, " ".join(topic_terms(a)[:6])) for a in aspects[:max_steps])
        ]
    else:  # each side searched by its name (no template words), then both together
        steps = [(e, f"Find what the sources state about {e}.", [e]) for e in entities[: max_steps - 1]]
        steps.append((versus, f"Find what the sources state about {versus} together.", [" ".join(entities)]))
    return {"plan_title": cap_words(f"Comparison of {' and '.join(entities)}", 16), "steps": steps}


def _imperative_plan(question: str, max_steps: int) -> dict[str, Any] | None:
    # "What do we know about X" asks for an overview of X, as "Tell me about X" does.
    text = re.sub(r"^what\s+do\s+(?:we|you)\s+know\s+about\b", "Tell me about", drop_instructions(question), flags=re.I)
    deliverable, rest = split_lead(text)
    rest = rest.strip(" .?")
    if deliverable is None:  # a bare name ("Tidewater Robotics") asks for an overview of it too
        found = names(rest, fragment=True)
        if QUESTION_LEAD.match(rest) or len(rest.split()) > 6 or not found:
            return None
        if len(found[0].split()) < len(rest.split()) - 2:
            return None
        deliverable = "overview"
    if not rest:
        return None
    # "<entity>: a, b and c" / "<entity>'s a, b and c" / "<entity>, covering a, b and c"
    match = re.match(r"^(.+?)(?::|(?:'s|’s)\s|,\s*(?:covering|including|with|focusing on)\s)\s*(.+)$", rest)
    if match:
        entity = entity_of(match.group(1))
        parts = [clean_part(p, entity) for p in LIST_SPLIT.split(match.group(2))]
        parts = [p for p in parts if p and topic_terms(p)]
        if len(parts) >= 2:
            return _parts_plan(parts, entity, max_steps, _title(deliverable, entity, rest))
        if len(parts) == 1:
            return _entity_steps(entity, max_steps, _title(deliverable, entity, rest), focus=parts[0])
    if QUESTION_LEAD.match(rest) or clause_breaks(rest):
        return _question_plan(rest, max_steps, title=_title(deliverable, entity_of(rest), rest))
    entity = entity_of(rest)
    found = names(rest, fragment=True)
    if found and len(found[0].split()) >= len(re.sub(r"^(?:the|a|an)\s+", "", rest, flags=re.I).split()) - 1:
        return _entity_steps(found[0], max_steps, _title(deliverable, found[0], rest))
    return _question_plan(rest, max_steps, title=_title(deliverable, entity, rest))


def _entity_steps(entity: str, max_steps: int, title: str, focus: str | None = None) -> dict[str, Any]:
    parts = [focus] if focus else []
    parts += ["overview and history", "key figures, products and customers", "risks, issues and outlook"]
    steps = [_step_for_part(p, entity) for p in parts[:max_steps]]
    for title_, _, queries in steps:
        if title_.lower().startswith("overview"):
            queries.insert(0, entity)
    return {"plan_title": title, "steps": steps}


def content_query(*texts: str) -> str:
    """The topic words of ``texts`` once each, in order (no stem twice), then the words sources state
    what they ask for in (``stated_as``: "how large" → size, length, capacity): the question's content."""
    # … the word after "how" asks the measure ("how much", "how tall"): sources do not write it.
    words = [
        re.sub(r"['’]s$", "", w) for text in texts for w in topic_terms(re.sub(r"\bhow\s+\w+", " ", text, flags=re.I))
    ]
    words += [w for text in texts for w in stated_as(text)]
    seen: set[str] = set()
    kept = []
    for w in words:
        stems = set(content_terms(w.replace("-", " ")))
        if stems and not stems <= seen:
            kept.append(w)
            seen |= stems
    return " ".join(kept)


def searchable_names(text: str) -> list[str]:
    """The names of ``text`` that make a search of their own (no word twice, over 3 letters: "UK" is too short)."""
    return [" ".join(dict.fromkeys(n.split())) for n in names(text) if len(re.sub(r"\W", "", n)) > 3]


def _question_plan(question: str, max_steps: int, title: str | None = None) -> dict[str, Any]:
    """One step per part, searched with the part's content and its names. A question that asks for an
    account ("What are the challenges …", "Why …") also gets background and limitations steps."""
    clauses = question_parts(question) or [question]
    # "By how much did the Kestrel Bay heat network exceed …": the topic is the subject, not its verb.
    subject = antecedent(clauses[0]) if DO_LEAD.match(clauses[0]) else None
    topic_words = topic_terms(subject or clauses[0], drop_aspects=True) or topic_terms(question) or ["the question"]
    topic = " ".join(topic_words[:6])
    account = not all(specific(c) for c in clauses)
    steps = []
    if len(clauses) > 1:  # one part: its own step searches the topic (a background would read it first)
        what = f"Find background on {topic}. Search the corpus for '{topic}' and read the most relevant documents."
        steps.append((f"Background: {topic}", what, list(dict.fromkeys([topic, *searchable_names(question)[:2]]))))
    for clause in clauses[: max(1, max_steps - len(steps) - account)]:
        # The part's content with the question's topic (its own words alone search every subject of
        # the corpus), and each name it mentions alone (a name's own page is often the first hop).
        queries = list(dict.fromkeys([content_query(clause, topic) or topic, *searchable_names(clause)]))[:3]
        what = f"Search for {_quoted(queries)} and extract the facts, figures, dates and names that answer it."
        steps.append((cap_words(sentence_case(clause), 14), f"Answer the sub-question '{clause}?'. {what}", queries))
    if account and len(steps) < max_steps:
        outlook = [f"{topic} limitations cost outlook", f"{topic} risks open problems"]
        what = f"Identify the limitations, risks, costs, open problems and expected timelines for {topic}."
        steps.append((f"Limitations and outlook: {topic}", f"{what} Search for '{outlook[0]}'.", outlook))
    return {"plan_title": title or _question_title(question), "steps": steps}


# Leads whose remainder names the topic ("What are the risks of X" → "The risks of X"). Any other lead governs what
# follows ("Who wrote …"): cut, it would leave a title that starts mid-phrase.
TITLE_LEAD = re.compile(
    r"^(?:(?:what|who)\s+(?:is|are|was|were)|explain|describe|compare|tell\s+me\s+about|give\s+me)\b[\s,]*",
    re.IGNORECASE,
)


def _question_title(question: str) -> str:
    """A question's plan title: without its lead when the rest names the topic (``TITLE_LEAD``), else its own words
    up to 16, ended at a part boundary (no "Much does the lantern weigh")."""
    text = question.rstrip("?. ").strip()
    stripped = TITLE_LEAD.sub("", text).strip()
    fragment = COPULA_LEAD.match(text) and PARTICIPLE_END.search(text)
    if not clause_breaks(text) and len(stripped) >= 3 and not fragment:
        return cap_words(sentence_case(stripped), 16)
    if len(text.split()) <= 16:
        return sentence_case(text)
    cuts = [m.start() for m in clause_breaks(text) if len(text[: m.start()].split()) <= 16]
    return sentence_case(text[: cuts[-1]]) if cuts else cap_words(sentence_case(text), 16)


def research_terms(question: str) -> list[str]:
    """The topic words of a request, without its instructions ("prepare a brief", "cite sources")."""
    found = enumerated_parts(question)
    text = " ".join(question.split())
    if found:
        lead, parts = found
        text = " ".join([lead, *parts])
    deliverable, rest = split_lead(drop_instructions(text))
    return topic_terms(rest if deliverable else text)
