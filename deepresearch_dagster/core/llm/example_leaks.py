"""Answers that copy a prompt's worked example (issue 24): a small model asked for JSON may return
the example it was shown, which then reads as a fact of the research. Every example lives in
``prompts/examples.toml``, in one invented domain no user material contains; this module derives
its *distinctive strings* from that file, by general rules rather than a hand list:

- names: capitalized words that are never written in lowercase in the examples or the prompts
  and stand somewhere in mid-sentence ("Ystrowen"; not "Executive" of "Executive summary", nor
  "Only" or "The");
- figures with their unit: a number of two or more digits followed by a unit or counted noun
  ("412 passengers", "47-minute"; a year alone is no figure);
- phrases: every run of ``PHRASE_WORDS`` consecutive words of an example that holds at least
  ``MIN_PHRASE_NEW_WORDS`` words the prompts' own instructions never use ("only one source on
  low-temperature capacity"; not "and how it differs from the").

An answer that contains a distinctive string its request's input does not contain is a leak (a
phrase counts as contained when the input holds all its new words, in any order). The
input is every message except the model's own turns, with the examples themselves cut out of it
(the outline and section examples travel in user messages): the raw tool output, the working
memory, the question, the step context. :func:`find_leaks` is what ``call_structured`` and the
evaluation judge call on every parsed answer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ..text import STOPWORDS
from .prompts import EXAMPLE_PLACEHOLDER, PROMPT_DIR, load_examples

PHRASE_WORDS = 6
MIN_PHRASE_NEW_WORDS = 2  # content words of a phrase the prompts' instructions never use
MIN_FIGURE_DIGITS = 2
SHOWN_LEAKS = 4
_LETTERS = re.compile(r"[^\W\d_]+")
_WORDS = re.compile(r"[^\W_]+")
# After this, a word starts a sentence (or a string, a bullet, a parenthesis).
_INITIAL = re.compile(r"(?:^|[.!?:;\n])[\s\"'“‘(\[*-]*$")
_FIGURE = re.compile(r"(?<![\w.,])(\d[\d,]*(?:\.\d+)?)\s?-?\s?(%|°[CF]?|[^\W\d_][^\W_]*(?:/[^\W\d_]+)?)")


@dataclass(frozen=True)
class Distinctive:
    """One distinctive string of the examples: how it is found in an answer and in the input."""

    text: str
    kind: str  # name | figure | phrase
    pattern: re.Pattern[str]  # in an answer
    loose: re.Pattern[str]  # in the input (a name case-insensitively, even inside a longer word)
    # A phrase's words the prompts never use: an input that holds them all could have given it.
    new_words: tuple[str, ...] = ()
    # ASCII, lower case, in every match's fold (:func:`folded`): an answer whose fold lacks it
    # cannot match, so its pattern is not run (176 patterns on every parsed answer were most of
    # this check's time). None: no such shortcut.
    needle: str | None = None

    def in_answer(self, text: str, fold: str | None = None) -> bool:
        """``fold``: :func:`folded` of ``text``, for the shortcut."""
        if fold is not None and self.needle is not None and self.needle not in fold:
            return False
        return self.pattern.search(text) is not None

    def in_input(self, text: str) -> bool:
        if self.loose.search(text) is not None:
            return True
        if not self.new_words:
            return False
        folded = text.casefold()
        return all(w in folded for w in self.new_words)


def strings_of(value: Any) -> Iterator[str]:
    """Every string inside a JSON value (keys excluded)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings_of(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from strings_of(item)


def _fragments(values: Iterable[str]) -> list[str]:
    """The examples' text: the strings of a JSON example, any other example whole."""
    fragments: list[str] = []
    for value in values:
        try:
            fragments.extend(s for s in strings_of(json.loads(value)) if s.strip())
        except json.JSONDecodeError:
            fragments.append(value)
    return fragments


def instruction_text() -> str:
    """Every prompt template without its placeholders: the prompts' own words."""
    return "\n".join(EXAMPLE_PLACEHOLDER.sub(" ", p.read_text("utf-8")) for p in sorted(PROMPT_DIR.glob("*.md")))


def _names(fragments: list[str], instructions: str) -> list[str]:
    lowercase = {w.lower() for w in _LETTERS.findall(" ".join([instructions, *fragments])) if w[0].islower()}
    names: dict[str, None] = {}
    for fragment in fragments:
        for match in _LETTERS.finditer(fragment):
            word = match.group()
            if len(word) < 2 or not word[0].isupper() or word.lower() in lowercase:
                continue
            if not _INITIAL.search(fragment[: match.start()]):
                names[word] = None
    return list(names)


def _figures(fragments: list[str]) -> list[tuple[str, str, str]]:
    """(figure as written, number, unit) for each figure with a unit."""
    found: dict[str, tuple[str, str, str]] = {}
    for fragment in fragments:
        for match in _FIGURE.finditer(fragment):
            number, unit = match.group(1).rstrip(",."), match.group(2)
            if sum(c.isdigit() for c in number) < MIN_FIGURE_DIGITS or unit.lower() in STOPWORDS:
                continue
            found.setdefault(match.group().lower(), (match.group(), number, unit))
    return list(found.values())


def _phrases(fragments: list[str], instructions: str) -> list[tuple[list[str], tuple[str, ...]]]:
    """(words, the words among them the prompts never use) for each phrase."""
    known = {w.lower() for w in _WORDS.findall(instructions)} | STOPWORDS
    found: dict[tuple[str, ...], tuple[str, ...]] = {}
    for fragment in fragments:
        words = _WORDS.findall(fragment)
        for i in range(len(words) - PHRASE_WORDS + 1):
            window = tuple(words[i : i + PHRASE_WORDS])
            new = tuple(dict.fromkeys(w.casefold() for w in window if w.lower() not in known))
            if len(new) >= MIN_PHRASE_NEW_WORDS:
                found.setdefault(window, new)
    return [(list(w), new) for w, new in found.items()]


# The characters re.IGNORECASE matches with an ASCII letter that str.lower() does not turn into
# it (dotless i, long s; dotted capital I, whose lower() is two characters). With them mapped,
# every character that matches an ASCII letter or digit case-insensitively lowers to it (checked
# over all of Unicode when this was written), so a needle found in no fold is in no match.
_RE_FOLD = str.maketrans({"ı": "i", "ſ": "s", "İ": "i"})


def folded(text: str) -> str:
    """``text`` lowered as :meth:`Distinctive.in_answer`'s shortcut compares it."""
    return text.translate(_RE_FOLD).lower()


def _needle(literal: str) -> str | None:
    return literal.lower() if literal.isascii() else None


def _bounded(body: str) -> str:
    return rf"(?<![^\W_]){body}(?![^\W_])"


def derive(fragments: list[str], instructions: str) -> tuple[Distinctive, ...]:
    """The distinctive strings of the examples' text: names, then figures, then phrases."""
    out = [
        Distinctive(
            name,
            "name",
            re.compile(_bounded(re.escape(name))),
            re.compile(re.escape(name), re.IGNORECASE),
            needle=_needle(name),
        )
        for name in _names(fragments, instructions)
    ]
    for written, number, unit in _figures(fragments):
        # "412 passengers" is also "412-passenger"; the unit is matched as a prefix (plurals).
        stem = unit[:-1] if len(unit) > 3 and unit.isalpha() and unit.lower().endswith("s") else unit
        pattern = re.compile(rf"(?<![\d.,]){re.escape(number)}\s*-?\s*{re.escape(stem)}", re.IGNORECASE)
        out.append(Distinctive(written, "figure", pattern, pattern, needle=_needle(number)))
    for words, new in _phrases(fragments, instructions):
        pattern = re.compile(_bounded(r"[\W_]+".join(map(re.escape, words))), re.IGNORECASE)
        longest = max(words, key=len)
        out.append(Distinctive(" ".join(words), "phrase", pattern, pattern, new, _needle(longest)))
    return tuple(out)


class LeakDetector:
    """Distinctive strings of a set of worked examples (``{prompt: {placeholder: text}}``) and the
    check of an answer against them; :func:`detector` is the one for ``prompts/examples.toml``."""

    def __init__(self, examples: dict[str, dict[str, str]], instructions: str | None = None) -> None:
        # Every example as the prompts show it, longest first: cut out of the input.
        self.values = sorted({v for t in examples.values() for v in t.values() if v.strip()}, key=len, reverse=True)
        self.strings = derive(_fragments(self.values), instruction_text() if instructions is None else instructions)

    def input_text(self, messages: Iterable[dict[str, Any]]) -> str:
        """What a request gave the model to work from: every message but the model's own turns,
        with the worked examples cut out."""
        parts = []
        for message in messages:
            if message.get("role") == "assistant":
                continue
            content = message.get("content")
            if isinstance(content, list):  # content parts
                content = " ".join(str(p.get("text") or "") for p in content if isinstance(p, dict))
            parts.append(str(content or ""))
        text = "\n".join(parts)
        for value in self.values:
            text = text.replace(value, " ")
        return text

    def found_in(self, text: str) -> list[str]:
        """The distinctive strings ``text`` contains (whatever the input)."""
        fold = folded(text)
        return [d.text for d in self.strings if d.in_answer(text, fold)]

    def leaks(self, answer: Any, messages: Iterable[dict[str, Any]]) -> list[str]:
        """The distinctive strings ``answer`` (text, or a parsed JSON value: its strings) repeats
        that the request's input does not contain; empty when there is no leak."""
        text = answer if isinstance(answer, str) else "\n".join(strings_of(answer))
        fold = folded(text)
        hits = [d for d in self.strings if d.in_answer(text, fold)]
        if not hits:
            return []
        given = self.input_text(messages)
        return list(dict.fromkeys(d.text for d in hits if not d.in_input(given)))


@lru_cache(maxsize=1)
def detector() -> LeakDetector:
    return LeakDetector(load_examples())


def find_leaks(answer: Any, messages: Iterable[dict[str, Any]]) -> list[str]:
    """:meth:`LeakDetector.leaks` for the packaged examples."""
    return detector().leaks(answer, messages)


def leak_reason(leaks: list[str]) -> str:
    """The error an answer with leaks is rejected with (also the repair prompt's reason)."""
    shown = ", ".join(f'"{s}"' for s in leaks[:SHOWN_LEAKS])
    more = f" and {len(leaks) - SHOWN_LEAKS} more" if len(leaks) > SHOWN_LEAKS else ""
    return (
        f"it copies the prompt's worked example ({shown}{more}), which is not in the input; the "
        "example only shows the format: write the answer from the input"
    )


class ExampleLeak(ValueError):
    """An answer that copies a worked example (for callers that handle invalid answers as errors)."""
