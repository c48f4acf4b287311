"""Lexical helpers shared by the offline heuristics: topic words, caps, sentence case."""

from __future__ import annotations

import re

from ..text import STOPWORDS, content_terms, fold
from .sentences import IRREGULAR, VERB_STEMS, has_verb

# Words of the task, the request and the plan's templates, not the topic ("a brief", "cite sources";
# not "write" or "produce", which questions ask about too): matching them says nothing.
INSTRUCTION_WORDS = set(
    content_terms(
        "search corpus read relevant documents document extract concrete facts figures dates named "
        "examples find answer question sub-question key terms what how why which who main identify "
        "investigate background overview introduction context summary step research plan evidence tool "
        "tools query much many far today moving worry large big quantify wherever allow possible brief "
        "briefing report memo analysis assessment profile dossier specific cite citation numbers names "
        "please detail detailed due diligence its their current including include limitations outlook future"
    )
)
QUESTION_LEAD = re.compile(
    r"^(?:(?:what|how|why|which|who|whom|when|where|whether)(?:\s+(?:are|is|was|were|do|does|did|"
    r"can|could|should|will|would|has|have|had))?|does|do|did|is|are|was|were|can|could|should|"
    r"will|would|explain|describe|compare|tell me about|give me)\b[\s,]*",
    re.IGNORECASE,
)
LIST_MARKER = re.compile(r"^\s*(?:[-*+>]|\d+[.)])\s+")
EMPHASIS = re.compile(r"\*\*|__|`")
# A question's parts: after "?" or ";", before ", and how …", and before ", who …" in "What caused
# X, who designed Y, and what did it cost?" ("where" after a comma is usually a relative clause:
# "Paris, where …"; "which" is one when a verb follows it, see ``clause_breaks``).
CLAUSE_SPLIT = re.compile(
    r"\s*(?:[;?]\s*|,?\s+and\s+(?=(?:how|what|why|which|who|when|where|whether|does|do|is|are|can)\b)"
    r"|,\s+(?=(?:how|what|why|who|when|whether|which)\s+\w))",
    re.IGNORECASE,
)


def clause_breaks(text: str) -> list[re.Match[str]]:
    """Where ``text`` breaks into parts: "…, which company carried it out" asks a new part (a noun
    after "which"); "Lyon, which had no river port, …" is a relative clause (a verb or a function word)."""
    out = []
    for m in CLAUSE_SPLIT.finditer(text):
        after = text[m.end() :].split()[:2]
        relative = m.group(0).strip() == "," and after[0].lower() == "which" and len(after) == 2
        if not (relative and (after[1].lower() in STOPWORDS or has_verb(f"Someone {after[1]}"))):
            out.append(m)
    return out


_ASKING = re.compile(r"^\W*(?:how|what|why|which|who|whom|whose|when|where|whether)\b", re.IGNORECASE)
_PRONOUN = re.compile(r"\b(?:it|they|them|(its|their))\b", re.IGNORECASE)
COPULA_LEAD = re.compile(r"^(?:what|how|when|where|why|which|who)\s+(?:are|is|was|were)\s+", re.IGNORECASE)
SUBJECT_LEAD = re.compile(
    r"^(?:what|who|which)\s+(?!(?:are|is|was|were|do|does|did|can|could|should|will|would|has|have|had)\b)"
    r"[a-z]+(?:ed|s)\s+",
    re.IGNORECASE,
)
PARTICIPLE_END = re.compile(rf"\s+(?:[a-z]+ed|run|{'|'.join(IRREGULAR)})$", re.I)
# "When did …", "By how much did …", "What heat source does …": a question whose subject follows its
# auxiliary.
DO_LEAD = re.compile(
    r"^(?:(?:by|in|at|for|from|to|since|until)\s+)?(?:what(?:\s+[a-z]+){0,2}|which(?:\s+[a-z]+){0,2}|"
    r"how(?:\s+(?:much|many|long|often))?|when|where|why)\s+(?:did|does|do|will|can|could|would|should)\s+",
    re.IGNORECASE,
)
# Adverbs between a subject and its verb ("the network first deliver", "the plant originally cost").
_ADVERB = re.compile(r"^(?:first|ever|still|also|actually|finally|eventually|really|[a-z]+ly)$", re.IGNORECASE)
# "the ferry service's …", "Acme's …", "the Thames Tideway Tunnel's …" (a name, or two plain words)
_POSSESSOR = re.compile(r"((?:the\s+)?(?:(?:[A-Z][\w-]*\s+)*[A-Z][\w-]*|(?:[a-z][\w-]*\s+)?[a-z][\w-]*))['’]s\s+\w")
# "the final cost of the Kell dredging": a later "it" is the dredging, not its cost.
_ATTRIBUTE_OF = re.compile(
    r"(?:the\s+)?(?:[a-z]+\s+)?(?:cost|costs|price|budget|value|size|length|height|depth|width|capacity|total|"
    r"amount|date|duration|outcome|result|purpose|scope)\s+of\s+(.+)$",
    re.IGNORECASE,
)
_NP_CUT = re.compile(r"\s+(?:in|of|for|on|at|to|from|with|by|facing|[a-z]+ing)\s", re.IGNORECASE)


def antecedent(clause: str) -> str | None:
    """The thing a question part asks about, for a later part's "it" or "them" ("the Tunnel" in "When
    was the Tunnel built"); None for shapes whose subject cannot be told from its verb."""
    clause = clause.strip(" ,.?;:")
    lead = COPULA_LEAD.match(clause) or SUBJECT_LEAD.match(clause)
    if _PRONOUN.search(clause) and (lead or not DO_LEAD.match(clause)):
        return None
    if not lead:
        # "When did the Ardle Spirit enter service": the subject runs to the first known verb.
        asked = DO_LEAD.match(clause)
        rest = clause[asked.end() :].split() if asked else []
        verb = next((i for i, w in enumerate(rest) if i and w.lower() in VERB_STEMS), None)
        if verb is None and len(rest) >= 2 and rest[-1].islower() and rest[-2][:1].isupper():
            verb = len(rest) - 1  # "When did Acme launch": a name, then one verb
        while verb and verb > 1 and _ADVERB.match(rest[verb - 1]):
            verb -= 1
        # "By how much did the network exceed its budget": "its" after the verb is the subject's own.
        subject = " ".join(rest[:verb]) if verb else ""
        return subject if subject and not _PRONOUN.search(subject) else None
    rest = PARTICIPLE_END.sub("", clause[lead.end() :]).strip()
    possessor = (_POSSESSOR.match(rest) or _ATTRIBUTE_OF.match(rest)) if COPULA_LEAD.match(clause) else None
    if possessor:  # "What was the ferry service's punctuality rate": a later "it" is the service
        return possessor.group(1)
    words = rest.split()
    if not words or len(words) > 12:
        return None
    if len(words) > 6:  # "the main problems facing London's Victorian sewer system" → "the main problems"
        cut = next((m.start() for m in _NP_CUT.finditer(rest) if len(rest[: m.start()].split()) >= 2), None)
        rest = rest[:cut] if cut else rest
    return rest


def question_parts(question: str, resolve: bool = True) -> list[str]:
    """The question's parts in its order, each readable alone: "When was the Tunnel built, how large is
    it, and how is it funded?" → "When was the Tunnel built", "how large is the Tunnel", "how is the
    Tunnel funded" (a part's "it"/"them" is the nearest earlier part's subject, unless not ``resolve``)."""
    text = " ".join(question.split())
    bounds = [0, *(x for m in clause_breaks(text) for x in m.span()), len(text)]
    pieces = [text[a:b].strip(" ,.?;:") for a, b in zip(bounds[::2], bounds[1::2], strict=True)]
    # A phrase that asks nothing and is a name and one word at most ("Besides Little Rock, Arkansas,
    # what city …") is said of the part after it, not a part of its own.
    for i in range(len(pieces) - 1):
        named = set(content_terms(" ".join(names(pieces[i]))))
        if named and not _ASKING.match(pieces[i]) and len(set(content_terms(pieces[i])) - named) <= 1:
            pieces[i + 1], pieces[i] = f"{pieces[i]}, {pieces[i + 1]}", ""
    out: list[str] = []
    subject: str | None = None
    for part in (c for c in pieces if c):
        if subject and resolve:  # a subject is known from an earlier part
            part = _PRONOUN.sub(lambda m, s=subject: f"{s}'s" if m.group(1) else s, part)
        out.append(part)
        subject = antecedent(part) or subject
    return out


def cap_words(text: str, n: int) -> str:
    return " ".join(text.split()[:n])


HYPHENATED = re.compile(r"[A-Za-z0-9]+(?:[-'’][A-Za-z0-9]+)*")
# Words that name an aspect of a topic rather than the topic itself.
ASPECT_WORDS = set(
    content_terms(
        "main key major primary biggest challenges challenge problems issues benefits advantages "
        "disadvantages effects impact impacts causes role history current state status latest"
    )
)


def topic_words(text: str) -> set[str]:
    """``text``'s content terms without task words ("find", "documents"): what it is about."""
    return set(content_terms(text)) - INSTRUCTION_WORDS


def topic_terms(text: str, drop_aspects: bool = False) -> list[str]:
    """Distinct topic words of ``text`` (hyphenated words kept whole), without task words."""
    skip = INSTRUCTION_WORDS | (ASPECT_WORDS if drop_aspects else set())
    kept: dict[str, None] = {}
    for low in (w.lower() for w in HYPHENATED.findall(fold(text))):
        terms = set(content_terms(low.replace("-", " ")))
        if terms and not terms <= skip and low not in STOPWORDS:
            kept[low] = None
    return list(kept)


_QUOTED = re.compile(r'["“]([^"”]{2,80})["”]')
_TOKEN = re.compile(r"[^\s,;:()?!\"“”]+")
# Lower-case words inside a name ("Republic of China", "Bank of the West", "Simon & Simon").
_JOINERS = frozenset("of the de del da di du von van der la le &".split())


def names(text: str, fragment: bool = False) -> list[str]:
    """The names ``text`` mentions, in order: quoted titles and runs of capitalized words ("Republic of
    China"), without a possessive "'s"; a name and the place after its comma are one ("Ford County,
    Kansas"; not a list: "A, B and C"). A lone capitalized word is no name when it opens a sentence
    (not the start of a ``fragment``) or describes the noun after it ("a Jamaican singer")."""
    found = [q.strip(" '’.,") for q in _QUOTED.findall(text)]
    runs: list[tuple[int, int, str]] = []  # start, end, name
    run: list[str] = []
    start = end = 0
    opening = owner = False

    def close() -> None:
        while run and run[-1].lower() in _JOINERS:
            run.pop()
        if run and not (opening and len(run) == 1):
            runs.append((start, end, " ".join(run)))
        run.clear()

    for token in _TOKEN.finditer(text):
        raw = token.group(0)
        if run and re.search(r"[(\"“]\s*$", text[: token.start()]):
            close()  # a bracket or a quote starts something else
        word = re.sub(r"['’]s$", "", raw.strip("'’\"“”‘")) or raw
        capital = word[:1].isupper() and (word.lower() not in STOPWORDS or word.isupper())
        if capital or (run and (word[:1].isdigit() or word.lower() in _JOINERS)):
            if not run:
                start = token.start()
                opening = (start == 0 and not fragment) or bool(re.search(r"[.?!]\s*$", text[:start]))
            run.append(word.rstrip(".") if len(word) > 3 else word)
            end = token.start() + len(raw.rstrip(".,'’\"”"))
            owner = bool(re.search(r"['’]s$", raw))  # "Gisvi's city": a name before its noun
            stop = raw.endswith(".") and len(word.rstrip(".")) > 2  # a sentence's end, not "Mr." or "W."
            if stop or raw[-1:] in '"”' or text[token.end() : token.end() + 1] in tuple(",;:()?!"):
                close()  # punctuation ends the name
        else:
            # One capitalized word before a noun describes it: "a Jamaican reggae singer".
            noun = word.isalpha() and word.lower() not in STOPWORDS and not has_verb(f"Someone {word}")
            if len(run) == 1 and not owner and noun:
                run.clear()
            close()
    close()
    for i, (a_start, a_end, a) in enumerate(runs):
        nxt = runs[i + 1] if i + 1 < len(runs) else None
        after = text[nxt[1] :] if nxt else ""
        if (
            nxt
            and text[a_end : nxt[0]] == ", "
            and not (i and text[runs[i - 1][1] : a_start] == ", ")
            and not re.match(r",?\s+(?:and|or)\b|, [A-Z]", after)
        ):
            found.append(f"{a}, {nxt[2]}")
            runs[i + 1] = (nxt[0], nxt[1], "")
        elif a:
            found.append(a)
    return list(dict.fromkeys(n for n in found if n))


def sentence_case(text: str) -> str:
    text = text.strip(" ,.?;:")
    return text[:1].upper() + text[1:]
