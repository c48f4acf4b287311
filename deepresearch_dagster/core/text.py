"""Text helpers shared by every role: tokenization, sentences, the token estimate."""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import Stemmer

_WORD = re.compile(r"[A-Za-z0-9]+(?:['’][A-Za-z]+)?")
# One token per word-ish run and one per other non-space character: the single local
# estimate used for raw and injected text alike, so the reduction ratio is comparable.
_TOKEN = re.compile(r"\w+|[^\w\s]", re.UNICODE)
# A sentence ends at . ! or ? (closing quotes and brackets stay with it) before a capital or digit.
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"'”’)\]]*(?=\s+[\"'“‘(\[]?[A-Z0-9])")

STOPWORDS = frozenset(
    """a about above after again against all also am an and any are as at be because been
    before being below between both but by can could did do does doing down during each
    few for from further had has have having he her here hers herself him himself his how
    i if in into is it its itself just me more most my myself no nor not now of off on
    once only or other our ours ourselves out over own same she should so some such than
    that the their theirs them themselves then there these they this those through to too
    under until up very was we were what when where which while who whom why will with
    would you your yours yourself yourselves what's how's which may might must shall
    within without across among per via vs versus etc e.g i.e""".split()
)


def estimate_tokens(text: str) -> int:
    """Local token estimate: words plus punctuation marks (close to BPE counts for English)."""
    return len(_TOKEN.findall(text))


def words(text: str) -> list[str]:
    return _WORD.findall(fold(text))


def fold(text: str) -> str:
    """``text`` without accents ("Akinoshū" → "Akinoshu", "Hernández" → "Hernandez"): a word is one
    word however it is typed (the corpus index folds them too), never split at its accent."""
    if text.isascii():
        return text
    return "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))


_POSSESSIVE = re.compile(r"['’]s$", re.IGNORECASE)


def content_terms(text: str) -> list[str]:
    """Lowercased, stemmed words without stopwords, for lexical scoring ("London's" is "london")."""
    return [t for t in map(_term, words(text)) if t]


# "Oct 2024" in a table and "October 2024" in a question are one month.
_MONTH_ABBREVIATIONS = {
    "jan": "january",
    "feb": "february",
    "mar": "march",
    "apr": "april",
    "jun": "june",
    "jul": "july",
    "aug": "august",
    "sep": "september",
    "sept": "september",
    "oct": "october",
    "nov": "november",
    "dec": "december",
}


@lru_cache(maxsize=65536)
def _term(word: str) -> str:
    low = _POSSESSIVE.sub("", word.lower())
    low = _MONTH_ABBREVIATIONS.get(low, low)
    return stem(low) if low not in STOPWORDS and len(low) > 1 else ""


_STEMMER = Stemmer.Stemmer("english")


def stem(word: str) -> str:
    """Snowball's English stemmer (PyStemmer, as the corpus index uses): "completed" and "completion",
    "using" and "use" share a stem."""
    return _STEMMER.stemWord(word)


# Abbreviations after which a full stop does not end the sentence. No maintained library serves
# here: NLTK's punkt needs its model downloaded from the nltk_data hub at run time (not on PyPI),
# and pySBD (last release 0.3.4, 2021) costs ~3 ms per kB on every split, which the schema's
# sentence counter and the compressor run many times per call. The rule below handles the cases
# that break quotes: titles, initials ("Thomas J. Watson"), numbering ("No. 1"), "e.g.", "U.S.".
_ALWAYS = frozenset(
    "mr mrs ms mx dr prof sr jr st mt ft gen gov sen rep rev hon capt lt col sgt cpl maj cmdr adm "
    "fr bros vs cf ca approx dept univ assn inc corp ltd co".split()
)
_BEFORE_NUMBER = frozenset(
    "no nos nr fig figs vol vols pp p ch chap sec art op ed eds "
    "jan feb mar apr jun jul aug sep sept oct nov dec".split()
)
_DOTTED = re.compile(r"(?:\b[A-Za-z]\.){2,}$")
_LAST_WORD = re.compile(r"([A-Za-z]+)\.[\"'”’)\]]*$")
_INITIAL = re.compile(r"[A-Z]\.\s")


def _abbreviation_before(piece: str, following: str) -> bool:
    """Whether ``piece`` ends with an abbreviation, so the split before ``following`` is wrong."""
    if _DOTTED.search(piece):
        return True  # e.g. i.e. U.S. a.m.
    match = _LAST_WORD.search(piece)
    if not match:
        return False
    word = match.group(1)
    low = word.lower()
    nxt = following.split()[0] if following.split() else ""
    if low in _ALWAYS:
        # "… to Harrowgate Civils Ltd. The contract …": a name's last word ends the sentence when
        # a function word opens the next ("Dr. Smith", "Acme Ltd. announced" do not).
        return not (nxt[:1].isupper() and nxt.strip(".,;:'’\"").lower() in STOPWORDS)
    if low in _BEFORE_NUMBER and following[:1].isdigit():
        return True
    if len(word) == 1 and word.isupper():
        # An initial: "Thomas J. Watson", "J. R. R. Tolkien" (preceded by a capitalized word or start),
        # "by J. W. Bazalgette" (another initial follows), "engineer J. Smith" (a name follows: a
        # capitalized word that is no function word, unlike "vitamin C. The" or "plan B. We").
        before = piece[: match.start()].split()
        if not before or before[-1][:1].isupper() or _INITIAL.match(following):
            return True
        return nxt[:1].isupper() and nxt.strip(".,;:'’\"").lower() not in STOPWORDS
    return False


_FIELD = re.compile(r"[^;:]{1,80}: [^;]+")  # "label: value", a field of a rendered table row or record


def _inside_fields(piece: str, following: str) -> bool:
    """Whether the split falls inside a run of ``label: value`` fields separated by ``;`` (a table
    row, a record): "…; Growing area (m²): 24,000; Est. 2025 revenue: £17.8M; …" is one row, and a
    quote cut at "Est." would drop the figure its label names."""
    *whole, cut = piece.split("; ")
    # The piece ends in a label cut short (no ": " yet), after whole fields; the next goes on with one.
    return (
        len(whole) >= 2
        and ": " not in cut
        and all(map(_FIELD.fullmatch, whole))
        and bool(_FIELD.fullmatch(following.split("; ", 1)[0]))
    )


def split_sentences(text: str) -> list[str]:
    """Split prose into sentences; the same rule counts sentences in compression output."""
    text = re.sub(r"\s+", " ", text).strip()
    if not text:
        return []
    out: list[str] = []
    cuts = [m.end() for m in _SENTENCE_END.finditer(text)]
    for piece in (text[a:b].strip() for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)):
        if not piece:
            continue
        if out and (_abbreviation_before(out[-1], piece) or _inside_fields(out[-1], piece)):
            out[-1] = f"{out[-1]} {piece}"
        else:
            out.append(piece)
    return out


def count_sentences(text: str) -> int:
    return len(split_sentences(text))


def normalize_for_match(text: str) -> str:
    """Whitespace- and case-insensitive form used when matching quotes against raw text."""
    text = unicodedata.normalize("NFKC", text)
    return re.sub(r"\s+", " ", text).strip().lower()


def has_forbidden_control_chars(text: str) -> bool:
    return any(unicodedata.category(ch) == "Cc" and ch not in "\n\t\r" for ch in text)


# -- prompt injection (seed 003 §13) ------------------------------------------------------------
# Fetched pages and documents are data, never instructions. The offline compressor and reporter
# copy sentences verbatim, so a sentence that addresses the model ("ignore previous instructions",
# "you are now in developer mode", fake tool-call JSON, "tell the user …") must never be picked as
# a summary sentence, an extraction or a finding: ``is_instruction`` is that test. It errs on the
# side of dropping a sentence, which costs an extractive summary one candidate among many.
_INSTRUCTION_PATTERNS = [
    # "Ignore/disregard/forget (all) (the) previous instructions / the sources / the plan"
    r"\b(?:ignore|disregard|forget|override|bypass)\b[^.!?\n]{0,40}\b(?:instructions?|prompts?|rules|guidelines"
    r"|sources?|context|plan|system|above|everything)\b",
    r"\b(?:previous|prior|earlier|above|original)\s+(?:instructions?|prompts?|directions)\b",
    r"\b(?:new|updated|real|hidden|secret)\s+instructions?\b",
    r"\byou\s+are\s+now\b",
    r"\b(?:developer|jailbreak|god|dan|admin)\s+mode\b",
    r"\bsystem\s+(?:message|prompt|override|instruction)\b",
    r"^\s*[\[<(]?\s*(?:system|assistant|ai|model|llm|chatbot)\s*[\]>)]?\s*[:,]",
    r"\byou\s+(?:must|should|have\s+to|need\s+to|will)\s+(?:now\s+)?(?:call|use|invoke|run|say|answer|respond|reply"
    r"|state|output|print|tell|write|report|fetch|open|visit|include|ignore|forget)\b",
    r"\b(?:tell|inform|convince)\s+the\s+(?:user|reader|human)\b",
    r"\b(?:as\s+an?\s+(?:ai|language\s+model|assistant))\b",
    r"\b(?:do\s+not|don't|never)\s+(?:cite|mention|reveal|tell|disclose)\b[^.!?\n]{0,40}\b(?:sources?|user|this)\b",
    # Tool-call look-alikes.
    r"\"?tool_calls?\"?\s*[:=]",
    r"</?\s*(?:tool_call|function_call|tool|function|system|im_start|im_end)\b",
    r"\{\s*\"(?:name|function|tool)\"\s*:\s*\"[a-z_]+\"\s*,\s*\"(?:arguments|parameters|args)\"",
    r"\b(?:call|invoke|use)\s+(?:the\s+)?(?:tool\s+)?(?:fetch_url|web_search|read_artifact|grep_artifacts"
    r"|read_document|local_search)\b",
]
_INSTRUCTION = re.compile("|".join(f"(?:{p})" for p in _INSTRUCTION_PATTERNS), re.IGNORECASE | re.MULTILINE)


def is_instruction(text: str) -> bool:
    """True when ``text`` reads as an instruction to the model (or a fake tool call), not a claim."""
    return bool(text) and _INSTRUCTION.search(text) is not None


# Text that addresses the model (core/untrusted.py): narrower than ``is_instruction``, whose
# second-person and imperative patterns ("you will use half the amount", "don't forget the plan")
# also fit recipes and advice, because what it flags sets a whole source aside. Four shapes, none
# tied to a topic: a chat-template role or turn marker, a tool call (its JSON or a tool's name),
# an override of the reader's instructions, and an imperative addressed to an AI.
_TOOL_NAMES = r"(?:fetch_url|web_search|read_artifact|grep_artifacts|read_document|local_search)"
_AI = r"(?:ai|assistant|chatbot|llm|(?:language\s+)?model|agent|gpt|claude)"
_ADDRESS_PATTERNS = [
    # Role and turn markers of chat templates: "<|im_start|>", "[INST]", "### System:", "system:".
    r"<\|[a-z_]+\|>|\[/?(?:inst|sys)\]|<</?sys>>",
    r"^\W{0,4}(?:system|assistant|developer)\s*(?:message|prompt)?\s*[\]>)]?\s*:",
    r"\bsystem\s+(?:message|prompt|override|instruction)s?\b",
    # Tool calls: their JSON, their tags, a tool named with a verb.
    r"\"?tool_calls?\"?\s*[:=]|</?\s*(?:tool_call|function_call)\b",
    r"\{\s*\"(?:name|function|tool)\"\s*:\s*\"[a-z_]+\"\s*,\s*\"(?:arguments|parameters|args)\"",
    rf"\b(?:call|invoke|use|run)\s+(?:the\s+)?(?:tool\s+)?{_TOOL_NAMES}\b",
    # Overrides: "ignore (all) (the) previous instructions", "disregard your rules", "forget the sources".
    r"\b(?:ignore|disregard|forget|override|bypass)\s+(?:all\s+|any\s+)?(?:of\s+)?(?:the\s+|your\s+|my\s+|these\s+"
    r"|those\s+)?(?:previous\s+|prior\s+|earlier\s+|above\s+|preceding\s+|original\s+|initial\s+|system\s+)?"
    r"(?:instructions?|prompts?|rules|guidelines|directives|sources|context)\b",
    r"\b(?:previous|prior|above|original)\s+instructions?\b|\b(?:new|updated|hidden|secret)\s+instructions?\s*:",
    r"\byou\s+are\s+now\b|\b(?:developer|jailbreak|god|dan)\s+mode\b",
    # An AI addressed: "Assistant, you must…", "as an AI model, …", "AI: write …", "tell the user …".
    rf"\b{_AI}\s*[,:]\s*(?:you\s+|please\s+)?(?:must|should|will|now|ignore|write|say|call|fetch|print|output|reply)\b",
    rf"\bas\s+an?\s+{_AI}\b\s*,",
    r"\b(?:tell|inform|convince)\s+the\s+(?:user|reader|human)\b",
]
_ADDRESS = re.compile("|".join(f"(?:{p})" for p in _ADDRESS_PATTERNS), re.IGNORECASE | re.MULTILINE)


def addresses_model(text: str) -> bool:
    """True when ``text`` speaks to the model reading it (an injected instruction), not about a topic."""
    return bool(text) and _ADDRESS.search(text) is not None


# The line under a Markdown table's header: "| --- | :--: |".
SEPARATOR_ROW = re.compile(r"\s*\|(?:\s*:?-{2,}:?\s*\|)+\s*")


def table_cells(line: str) -> list[str]:
    """The cells of a Markdown table row, stripped ("| a | b |" → ["a", "b"])."""
    return [c.strip() for c in line.strip().strip("|").split("|")]


def separator_row(line: str) -> bool:
    return SEPARATOR_ROW.fullmatch(line) is not None


# A sentence's end: its full stop, question or exclamation mark, then any closing quotes or brackets.
ENDS_SENTENCE = re.compile(r"[.!?][\"')\]”’]*$")


def closed(text: str) -> str:
    """``text`` ending like a sentence: a full stop added unless it already ends one."""
    return text if ENDS_SENTENCE.search(text) else f"{text}."


# A number as written: "2024", "1,400", "3.75" (dates, figures, amounts).
NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
# A month's name or abbreviation ("Oct", "October"), and a year from 1500 to 2099, for patterns.
MONTH = (
    r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sep(?:t(?:ember)?)?|"
    r"oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)"
)
YEAR = r"(?:1[5-9]|20)\d\d"
# A day-month-year date ("21 November 2022", "November 21, 2022"): a fact on its own, where the
# year alone is not.
FULL_DATE = re.compile(
    rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+({MONTH})\.?,?\s+(\d{{4}})\b|"
    rf"\b({MONTH})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s+(\d{{4}})\b",
    re.IGNORECASE,
)


@lru_cache(maxsize=16384)
def figures(text: str) -> frozenset[str]:
    """Every number in ``text`` as written ("2023." gives "2023")."""
    return frozenset(NUMBER.findall(text))


@lru_cache(maxsize=16384)
def key_figures(text: str) -> frozenset[str]:
    """The figures that make a statement's fact ("18.6" in "£18.6m" and "£18.6 million"; "21 November
    2022" and "November 21, 2022" alike), not years or small counts."""
    out = {f"{int(m[1] or m[5])} {(m[2] or m[4])[:3].lower()} {m[3] or m[6]}" for m in FULL_DATE.finditer(text)}
    for written in figures(FULL_DATE.sub(" ", text)):  # a date's day is no figure of its own
        figure = written.replace(",", "")
        try:
            value = float(figure)
        except ValueError:
            continue
        if value >= 10 and not (figure.isdigit() and 1500 <= value <= 2099):
            out.add(figure)
    return frozenset(out)


# Wording that sets a figure against another ("1,320, not the 1,350 first planned", "up from £38
# million"): the two statements disagree about it.
_REVISED = re.compile(
    r"\b(?:not|rather\s+than|instead\s+of|up\s+from|down\s+from|revised|originally|previously|earlier|"
    r"initially|was\s+expected|had\s+been|superseded|replac\w*)\b",
    re.IGNORECASE,
)


def same_figure(a: str, b: str) -> bool:
    """Whether two statements give the same specific fact in any wording: every figure of one is in
    the other, one of them is not a small whole number ("£41.2 million" and "Revised budget (£m):
    41.2", "2,584,000", "21 November 2022"), they share two more words, and neither sets a figure
    against an earlier one ("610 of 1,460 signed" and "1,180 of the 1,460" are two facts)."""
    key_a, key_b = key_figures(a), key_figures(b)
    shared = key_a & key_b
    if not shared or not (key_a <= key_b or key_b <= key_a):
        return False
    if not any(" " in k or "." in k or float(k) >= 100 for k in shared) or _REVISED.search(a) or _REVISED.search(b):
        return False
    return len({t for t in content_terms(a) if t.isalpha()} & {t for t in content_terms(b) if t.isalpha()}) >= 2


def json_strings(value: Any) -> list[str]:
    """Every string of a JSON value, in order (a search listing's or a tool result's text is in its
    strings)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in json_strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in json_strings(v)]
    return []


# "Author: Dev", "Max count: 10": a field of a structured record (a log entry, a key: value block).
KEY_VALUE = re.compile(r"^([A-Za-z][\w()/.-]{0,30}(?: [\w()/.-]{1,30}){0,2}):\s+(\S.*)$")
_KEY_ONLY = re.compile(r"^[A-Za-z][\w .()/-]{0,40}:$")
# A longer block of "Label: value" lines is a list of facts (a fact sheet), each line its own unit.
MAX_RECORD_FIELDS = 8


@dataclass(frozen=True)
class Record:
    """A block of ``Key: value`` lines: where it stands (lines ``start``..``end``), its lines and keys."""

    start: int
    end: int
    lines: tuple[str, ...]
    keys: tuple[str, ...]
    intro: str = ""  # a "Commit history:" line that introduces the records

    @property
    def text(self) -> str:
        """One line, like a table row read with its header: "Commit: 2bd41f4; Author: Dev; …"."""
        return "; ".join(line.rstrip(";") for line in self.lines)

    @property
    def values(self) -> str:
        return " ".join(m.group(2) if (m := KEY_VALUE.match(line)) else line for line in self.lines)


def key_value_records(lines: list[str]) -> list[Record]:
    """The structured records of a text: blocks of consecutive non-blank lines, two to eight and at
    least two thirds of them ``Key: value`` (a key of one to three words, values mostly not
    sentences), that are either repeated (two or more blocks with the same
    keys: a log, a listing) or most of the text. A memo's "To:/Date:" header above its prose stays
    prose; tables and headings are never records."""
    blocks: list[tuple[int, int]] = []
    i = 0
    while i < len(lines):
        if not lines[i].strip():
            i += 1
            continue
        j = i
        while j < len(lines) and lines[j].strip():
            j += 1
        blocks.append((i, j))
        i = j
    found: list[Record] = []
    for start, end in blocks:
        block = [ln.strip() for ln in lines[start:end]]
        intro = ""
        if len(block) > 2 and _KEY_ONLY.match(block[0]):
            intro, block = block[0].rstrip(":"), block[1:]
        pairs = [p for p in map(KEY_VALUE.match, block) if p]
        keys = tuple(p.group(1) for p in pairs)
        fields = 2 <= len(keys) <= MAX_RECORD_FIELDS and 3 * len(keys) >= 2 * len(block)
        # "Kitchen: please label food …." lines are prose: a record's values are mostly not sentences.
        prose = 2 * sum(1 for p in pairs if ENDS_SENTENCE.search(p.group(2))) >= len(pairs)
        if fields and not prose and not any(ln[0] in "|#" for ln in block):
            found.append(Record(start, end, tuple(block), keys, intro))
    shapes = Counter(frozenset(k.lower() for k in r.keys) for r in found)
    nonblank = sum(1 for ln in lines if ln.strip())
    if not found or (max(shapes.values()) < 2 and 2 * sum(len(r.lines) for r in found) <= nonblank):
        return []
    return found


_DIFF_FILE = re.compile(r"^\+\+\+ (?:b/)?(\S.*?)\s*$")
_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@")
MAX_HUNK_LINES = 6  # changed lines per unit: a longer hunk is several records


def diff_hunks(lines: list[str]) -> list[Record]:
    """The changes of a unified diff (``--- a/f``, ``+++ b/f``, ``@@ … @@``, then lines), each hunk
    as records "Changed file: f; added: …; removed: …" of at most ``MAX_HUNK_LINES`` changed lines
    (context lines are left out: they are what did not change). Outside a diff nothing is read."""
    out: list[Record] = []
    path, i = "", 0
    while i < len(lines):
        header = _DIFF_FILE.match(lines[i]) if i and lines[i - 1].startswith("--- ") else None
        if header:
            path = header.group(1)
        if not path or not _HUNK.match(lines[i]):
            i += 1
            continue
        start = i - 2 if header is None and i >= 2 and _DIFF_FILE.match(lines[i - 1]) else i
        j, changed = i + 1, []
        while j < len(lines) and lines[j][:1] in ("+", "-", " ", "\\") and not lines[j].startswith(("--- ", "+++ ")):
            if lines[j][:1] in "+-" and lines[j][1:].strip():
                changed.append(("added: " if lines[j][0] == "+" else "removed: ") + lines[j][1:].strip())
            j += 1
        for k in range(0, len(changed), MAX_HUNK_LINES):
            part = changed[k : k + MAX_HUNK_LINES]
            out.append(Record(start, j, (f"Changed file: {path}", *part), ("Changed file", "added", "removed")))
        i = j
    return out


def structured_records(lines: list[str]) -> list[Record]:
    """Key: value records and diff changes, in the order they stand."""
    return sorted(key_value_records(lines) + diff_hunks(lines), key=lambda r: (r.start, r.end))
