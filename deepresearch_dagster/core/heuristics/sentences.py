"""Sentence checks shared by the extractive compressor and reporter: does a sentence stand alone?

Rules of thumb, not a parser: they flag sentences leaning on text the reader will not see ("these two worlds"),
verb-less fragments, code and non-English prose. Both roles quote sentences out of their paragraph.
"""

from __future__ import annotations

import re

from bm25s.stopwords import STOPWORDS_FRENCH, STOPWORDS_GERMAN, STOPWORDS_ITALIAN, STOPWORDS_SPANISH

from ..text import STOPWORDS, content_terms, stem, words

# Words that relate a sentence to the one before it ("however", "by contrast", "as a result").
_CONNECTIVES = (
    r"also|too|still|thus|hence|therefore|however|moreover|furthermore|meanwhile|"
    r"instead|likewise|similarly|nevertheless|nonetheless|besides|then|otherwise|in addition|"
    r"by contrast|in contrast|as a result|for this reason|even so|on the other hand|at the same time|in turn"
)
# A sentence that opens by pointing back at something said before it.
LEADING_ANAPHORA = re.compile(
    r"^[\"'“‘(]?(?:it|its|it's|this(?!\s+(?:year|month|week|decade|century|spring|summer|autumn|winter)\b)|these|each|those|that|such|they|them|their|theirs|he|she|his|her|him|"
    r"there|here|both|neither|either|the latter|the former|the same|another|other|others|"
    rf"but|and|or|so|yet|{_CONNECTIVES}|"
    # "Second, the anchors …" needs its "First"; "To address this, the Board …" its "this".
    r"second|secondly|third|thirdly|fourth|fifth|finally|lastly|"
    r"(?:to|in|for|despite|after|before|given|unlike|because\s+of|as\s+part\s+of|in\s+response\s+to)\s+"
    r"[a-z]*\s*(?:this|that|these|those|it|them)(?!\s+(?:year|month|week|decade|century)\b))\b",
    re.IGNORECASE,
)
# A noun phrase whose referent is in another sentence: "these two worlds".
DANGLING = re.compile(
    r"\b(?:these|those|such)\s+(?:(?:two|three|four|several|few|many)\s+)?[a-z]{3,}"
    r"|\bthis\s+(?!year\b|month\b|week\b|decade\b|century\b|morning\b|spring\b|summer\b|autumn\b|"
    r"fall\b|winter\b|is\b|was\b|has\b|means\b|way\b)[a-z]{3,}"
    r"|\bthe (?:latter|former|above|aforementioned)\b"
    r"|\b(?:as|was|were) (?:mentioned|noted|discussed|described|shown) (?:above|earlier|before|previously)\b"
    r"|^the (?:catch|problem|answer|reason|result|difference|trick|point|question|idea|twist|upshot) (?:is|was) "
    r"(?:that|to|simple)\b",
    re.IGNORECASE,
)
# … or says so after its subject, set off by commas: "An electric vehicle pack, by contrast, contains …".
PARENTHETICAL = re.compile(rf"^(?:[^\s,]+\s+){{0,7}}[^\s,]+,\s+(?:{_CONNECTIVES})\s*,", re.IGNORECASE)
# "Lithium is also extremely light": "also" right after the subject's verb continues a paragraph.
ALSO_EARLY = re.compile(r"^(?:\S+\s+){1,6}?(?:also|too|as well)\b", re.I)
_OPENERS = frozenset("after before during since later then when while in at on by for from with".split())
_PRONOUNS = frozenset("he she they it his her their its him them".split())
# A sentence about the subject its page is titled after ("It is located in Cumbria", "His debut …").
PRONOUN_LEAD = re.compile(r"^\W*(?:he|she|it|they|his|her|its|their)\b", re.IGNORECASE)


def refers_back(sentence: str, before: str) -> bool:
    """Whether ``sentence`` leans on ``before``, the sentence ahead of it: a pointing word, or a definite subject
    ``before`` introduces in another form ("Ada Lovelace translated …" / "The translation, …"; not "The Hague")."""
    lead = re.match(r"The\s+([a-z][\w-]*)", sentence.strip())
    return context_dependent(sentence) or bool(lead and set(content_terms(lead.group(1))) & set(content_terms(before)))


def _early_pronoun(sentence: str) -> bool:
    """A personal pronoun among the first six words with no name before it ("After the war he
    wrote …", "In 1911 it merged …"); "Toyota said its cells …" names its subject first."""
    tokens = sentence.split()[:6]
    for k, token in enumerate(tokens):
        if token.lower().strip(",;:") in _PRONOUNS:
            before = tokens[1:k] if tokens and tokens[0].lower() in STOPWORDS | _OPENERS else tokens[:k]
            return not any(t[:1].isupper() for t in before)
    return False


_AUX = frozenset(
    "is are was were be been being am has have had do does did can could will would may might must shall "
    "should isn't aren't wasn't weren't hasn't haven't hadn't don't doesn't didn't can't couldn't won't "
    "wouldn't".split()
)
VERB_STEMS = frozenset(
    """accept account achieve add draw affect agree aim allow announce appear apply argue arrive ask
    become begin believe belong bring build buy call carry cause change claim close come compare
    consider consist contain continue control cost count create cut decide deliver depend describe
    design develop die drive drop earn enable end enter estimate exceed expand expect explain face
    fall feel find finish follow force form found gain get give go grow happen hold hope identify
    imply improve include increase indicate involve join keep know lack last lead learn leave let lie like
    limit live look lose make mean measure meet move need note offer open operate own pay plan play
    point prefer prevent produce promise propose protect prove provide publish put raise reach read
    receive record reduce refer reflect release rely remain remove replace report represent require
    rest result return reveal rise run say see seem sell send serve set show sit slow solve speak
    spend stand start state stay stop store study suffer suggest supply support survive take talk
    target tell tend test think track turn understand use vary want warn win work write yield""".split()
)
IRREGULAR = frozenset(
    """began begun brought built bought came chose chosen did done drew drawn drove driven ate fell
    felt fought found flew flown forgot gave given went gone got gotten grew grown held hid kept knew
    known laid led left lent lay lost made meant met paid put quit ran rose said saw seen sold sent
    set shook shot showed shown shut sang sat slept spoke spoken spent stood stole struck swam took
    taken taught tore told thought threw thrown understood woke won wore wrote written""".split()
)
_FACT = re.compile(r"\d|%|\$|€|£")


def context_dependent(sentence: str) -> bool:
    """Whether the sentence leans on text before it. A definite description passes ("the company operated 5,842
    sailings"): its source, cited beside it, names the company."""
    s = sentence.strip()
    return bool(
        LEADING_ANAPHORA.match(s)
        or PARENTHETICAL.match(s)
        or any(not _this_verb(m.group(0), m.start()) for m in DANGLING.finditer(s))
        or ALSO_EARLY.match(s)
        or _early_pronoun(s)
    )


def _this_verb(match: str, start: int) -> bool:
    """ "…, this implies a runway of 21 months": mid-sentence "this" + a verb points back inside its own sentence."""
    parts = match.lower().split()
    if start == 0 or len(parts) != 2 or parts[0] != "this" or not parts[1].endswith("s"):
        return False
    word = parts[1]
    stems = {word[:-1], word[:-2], word[:-3] + "y" if word.endswith("ies") else ""}
    return bool(stems & VERB_STEMS)


# Words before which a bare verb is a noun ("the use"), and prepositions after which an "-s" form is a plural noun.
_NOT_SUBJECT = frozenset(
    "the a an to of for in on with by its their this that these those his her our your my from at as".split()
)
_OBJECT_START = frozenset("a an the more most less its their his her some many several about up".split())
_PREPOSITIONS = frozenset("of for".split())


def has_verb(sentence: str) -> bool:
    """A crude finite-verb test: an auxiliary, a past form, or a known verb in a verb form."""
    # Compound adjectives ("lithium-based", "well-known") are not verbs.
    tokens = [w.lower() for w in words(re.sub(r"\w+(?:-\w+)+", "compound", sentence))]
    for i, w in enumerate(tokens):
        if w == "may" and any(t.isdigit() for t in tokens[max(0, i - 1) : i + 2]):
            continue  # the month in a dateline ("Evening Courier, 12 May 2024"), not "may fail"
        if w in _AUX or w in IRREGULAR:
            return True
        if w.endswith("ed") and len(w) > 4 and i > 0:
            return True
        if i == 0:
            continue
        prev, nxt = tokens[i - 1], tokens[i + 1] if i + 1 < len(tokens) else ""
        if w in VERB_STEMS and prev not in _NOT_SUBJECT and not prev.isdigit():
            return True  # "they use", "Lanthanum and zirconium also add"
        if (
            prev.endswith("s")
            and prev not in STOPWORDS
            and nxt
            and w.isalpha()
            and w not in STOPWORDS
            and stem(w) in (w, w[:-1])  # no suffix the stemmer strips ("-tion", "-ly", "-ing", "-s")
        ):
            return True  # a plural subject and a bare verb: "cool roofs reflect sunlight"
        if (
            w.endswith("s")
            and not w.endswith("ss")
            and prev not in STOPWORDS
            and (nxt in _OBJECT_START or nxt.isdigit())
        ):
            return True  # "heat kills more Americans", "Toyota targets 2027"
        base = w[:-2] if w.endswith("es") else w[:-1] if w.endswith("s") else w
        if w != base and (base in VERB_STEMS or w[:-1] in VERB_STEMS) and prev not in STOPWORDS:
            if nxt in _PREPOSITIONS:
                continue  # "efficiency targets for", a plural noun
            return True  # "Toyota targets 2027", not "the targets"
    return False


def is_fragment(sentence: str) -> bool:
    """A verb-less piece of prose (a caption, a list item lifted out of its list)."""
    return len(words(sentence)) < 4 or not has_verb(sentence)


# Function words of languages often met in English research material (bm25s's lists, shipped with the corpus index).
_FOREIGN = frozenset().union(STOPWORDS_FRENCH, STOPWORDS_GERMAN, STOPWORDS_SPANISH, STOPWORDS_ITALIAN)


_NON_ASCII_LETTER = re.compile(r"[^\W\d_A-Za-z]")
_ASCII_LETTER = re.compile(r"[A-Za-z]")
_CODE_START = re.compile(
    r"^(?://|/\*|\*\s|#include|import\s+\w|from\s+\w+\s+import|def\s|class\s+\w+[:(]|function\b|var\s|"
    r"const\s|let\s|return\b|\$\s|>>>|<\w)"
)
_CODE_CHAR = re.compile(r"[{}\[\]();=<>\\|$#*`~^]")


def looks_english(text: str) -> bool:
    """English prose uses English function words; a French comment block does not. A gloss in brackets ("(Russian:
    Серге́й Ивано́в)") and a capitalized name ("Peter schießt den Vogel ab") are English prose too."""
    text = re.sub(r"\([^()]*\)", " ", text)
    other = len(_NON_ASCII_LETTER.findall(text))
    if other and other / (other + len(_ASCII_LETTER.findall(text))) > 0.15:
        return False
    ws = words(text)
    if len(ws) < 6:
        return True
    foreign = sum(1 for w in ws if w in _FOREIGN and w not in STOPWORDS)
    english = sum(1 for w in ws if w.lower() in STOPWORDS)
    return not (foreign >= 2 and foreign > english)


def looks_like_code(text: str) -> bool:
    s = text.strip()
    return bool(_CODE_START.match(s)) or (bool(s) and len(_CODE_CHAR.findall(s)) / len(s) > 0.06)


def has_fact(text: str) -> bool:
    """Numbers, dates, money or percentages."""
    return bool(_FACT.search(text))


def named_entities(text: str) -> int:
    """Capitalized words that do not open the sentence: a rough count of names."""
    tokens = text.split()
    return sum(1 for w in tokens[1:] if w[:1].isupper() and w.strip(".,;:()\"'").lower() not in STOPWORDS)
