"""The critique of a finished report, and its deterministic revision (issue 30).

A second reading of the report as a reader takes it: the question's parts it leaves unanswered,
sentences of one section that deny what another states with a citation ("No usable finding
answers: 'Costs'" above a Key findings section that lists the costs), sentences of the
executive summary and key findings without a citation, sentences stated twice, findings about
nothing the question or the plan asks, and figures cited only from superseded documents.

Every issue names the section that must change and the sentence at fault as it stands, so the
revision rewrites only that section (``roles/revision.py``). The deterministic revision removes the
named sentence (for a denial, only the part of it that is denied), and answers an unanswered part
with the extractive executive summary's paragraph for it when the sources answer it. It is the
offline engine's revision and the fallback of a model's.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any, Literal

from pydantic import BaseModel, Field

from ..text import closed, content_terms, split_sentences
from .answer_types import answered
from .report import _ASKS, extractive_section, parts_of
from .terms import sentence_case, topic_words

__all__ = [
    "KINDS",
    "ReportCritique",
    "ReportIssue",
    "critique_report",
    "revise_deterministically",
]

KINDS = ("unanswered", "contradiction", "uncited", "duplicate", "off_topic", "stale")
# Sections every sentence of which must cite (roles/cited_sentences.MUST_CITE), and those whose
# sentences are claims a reader takes away (roles/reporter.CITED, plus a direct answer): the
# scorer's reading too (core/evaluation/score.py).
MUST_CITE = ("executive summary", "key findings")
CLAIM_SECTIONS = ("executive summary", "key findings", "analysis", "answer")
# Sentences shorter than this are headings in disguise ("None.", "See Limitations."): never duplicates.
MIN_DUPLICATE_WORDS = 5
CITATION = re.compile(r"\[\d+(?:\s*,\s*\d+)*\]")
_CITATION_AFTER_END = re.compile(r"((?:[.!?][\"'”’)]*)+)((?:\s*\[\d+(?:\s*,\s*\d+)*\])+)")
_LEAD = re.compile(r"^(\s*(?:(?:[-*+]|\d+\.)\s+)?)(\*\*[^*]+\*\*\s*)?(.*)$")
# A sentence saying the research found nothing on something ("No usable finding answers: …",
# "Step 2 found no source", "could not establish the cost").
_NOTHING = re.compile(
    r"\b(?:no|nothing|none|not\s+(?:find|found|establish|answer|state)\w*|could\s+not|did\s+not|cannot|found\s+no)\b",
    re.IGNORECASE,
)
_RESEARCH_WORDS = re.compile(r"\b(?:source|finding|evidence|result|answer|information|data|found|step)s?\b", re.I)
# A quoted title: it opens after a space or a colon and closes before punctuation or a space, so
# the apostrophe of "Nolan's films" stays inside it.
_QUOTED = re.compile(r"(?:^|(?<=[\s:;(]))['‘\"“](.{3,}?)['’\"”](?=[;,.:)]|\s|$)")
_STEP = re.compile(r"\bstep\s+([A-Za-z]?\d+(?:_\d+)?)\b", re.IGNORECASE)
_SUBHEADING = re.compile(r"^###\s+([A-Za-z]?\d+(?:_\d+)?)\.\s+(.+?)\s*$")
# A line that calls a figure older, not current (core/evaluation/score.py reads stale lines so).
STALE_NOTE = re.compile(r"supersed|outdated|archiv|previous|earlier|older|stale|no longer|formerly", re.I)
# Words a denial uses about the research itself, not about its subject.
_DENIAL_WORDS = set(content_terms("usable useful finding findings answers answer source sources found step could"))


class ReportIssue(BaseModel):
    kind: Literal["unanswered", "contradiction", "uncited", "duplicate", "off_topic", "stale"]
    section: str = Field(description="the heading of the section to revise, as the report writes it")
    sentence: str = Field(default="", description="the sentence at fault as it stands (empty: a part not answered)")
    detail: str = Field(default="", description="what is wrong: the part not answered, the sentence contradicted")


class ReportCritique(BaseModel):
    issues: list[ReportIssue] = Field(default_factory=list)

    def counts(self) -> dict[str, int]:
        return {k: sum(1 for i in self.issues if i.kind == k) for k in KINDS}

    @property
    def total(self) -> int:
        return len(self.issues)

    def sections(self) -> list[str]:
        return list(dict.fromkeys(i.section for i in self.issues))

    def markdown(self) -> str:
        if not self.issues:
            return "No issues."
        return "\n".join(
            f"- **{i.kind}** ({i.section}): {i.sentence or i.detail}"
            + (f" — {i.detail}" if i.sentence and i.detail else "")
            for i in self.issues
        )


# ------------------------------------------------------------------------------------ reading


class _Sentence(BaseModel):
    section: str  # heading as written
    line: int  # index of its line in the markdown
    text: str  # as written, with its citations
    lead: str = ""  # the bold lead of its paragraph, if any

    @property
    def claim(self) -> str:
        return " ".join(CITATION.sub(" ", self.text).split()).replace(" .", ".").strip()

    @property
    def cited(self) -> bool:
        return CITATION.search(self.text) is not None

    @property
    def numbers(self) -> set[int]:
        return {int(n) for m in CITATION.findall(self.text) for n in re.findall(r"\d+", m)}


def citations_before_end(text: str) -> str:
    """``… Lilu. [1] A lilu …`` → ``… Lilu [1]. A lilu …``: a citation after the full stop (or a
    closing quote) belongs to the sentence before it; the move keeps every offset."""
    return _CITATION_AFTER_END.sub(lambda m: f"{m.group(2)}{m.group(1)}", text)


def units(text: str) -> list[str]:
    """``text`` as its sentences, each with the citations that belong to it, in its own words: the
    scorer's reading (a citation after the full stop moved before it, then :func:`split_sentences`)
    mapped back onto the text (the move keeps every offset), so "Hank Williams, Jr. [2]" keeps its
    abbreviation's full stop."""
    text = " ".join(text.split())
    moved = citations_before_end(text)
    out, at = [], 0
    for sentence in split_sentences(moved):
        start = moved.find(sentence, at)
        if start < 0:  # not expected: split_sentences only cuts and joins with one space
            return [text] if text else []
        at = start + len(sentence)
        out.append(text[start:at])
    return out


def sentence_key(sentence: str) -> str:
    """A sentence's words, lower case, without citations or punctuation: two copies compare equal."""
    return " ".join(re.findall(r"\w+", CITATION.sub(" ", sentence).lower()))


def read_sentences(markdown: str) -> tuple[list[_Sentence], dict[str, list[tuple[str, str, int]]]]:
    """Every sentence of the report body by section (headings, the echoed question and the
    references left out), and each section's ``### <id>. <title>`` sub-headings with the number
    of cited sentences under each."""
    out: list[_Sentence] = []
    subheadings: dict[str, list[tuple[str, str, int]]] = {}
    section = ""
    for i, line in enumerate(markdown.splitlines()):
        stripped = line.strip()
        if stripped.startswith("## "):
            section = stripped[3:].strip()
            if section.lower() == "references":
                break
            continue
        match = _SUBHEADING.match(stripped)
        if match and section:
            subheadings.setdefault(section.lower(), []).append((match.group(1), match.group(2), 0))
            continue
        if not section or not stripped or stripped.startswith("#"):
            continue
        _, lead, content = _LEAD.match(stripped).groups()  # type: ignore[union-attr]
        for unit in units(content):
            s = _Sentence(section=section, line=i, text=unit, lead=(lead or "").strip("* "))
            out.append(s)
            subs = subheadings.get(section.lower())
            if subs and s.cited:
                sid, title, n = subs[-1]
                subs[-1] = (sid, title, n + 1)
    return out, subheadings


# ------------------------------------------------------------------------------------- checks


def critique_report(markdown: str, payload: dict[str, Any] | None = None) -> ReportCritique:
    """Every check on ``markdown``; those that need the question, the plan or the sources
    (unanswered parts, off-topic findings, stale figures) run when ``payload`` gives them."""
    sentences, subheadings = read_sentences(markdown)
    issues = duplicates(sentences) + contradictions(sentences, subheadings) + uncited(sentences)
    if payload:
        issues += unanswered(sentences, payload) + off_topic(sentences, payload) + stale(sentences, payload)
    return ReportCritique(issues=issues)


def faults(markdown: str) -> dict[str, int]:
    """The checks that need nothing but the report: what ``deepresearch eval`` counts."""
    sentences, subheadings = read_sentences(markdown)
    return {
        "contradictions": len(contradictions(sentences, subheadings)),
        "duplicated_sentences": len(duplicates(sentences)),
    }


def duplicates(sentences: list[_Sentence]) -> list[ReportIssue]:
    """A sentence stated again: within any section, or between the executive summary, the key
    findings and a direct answer (the Analysis quotes findings to compare their sources)."""
    seen: dict[tuple[str, str], _Sentence] = {}
    out = []
    for s in sentences:
        key = sentence_key(s.text)
        if len(key.split()) < MIN_DUPLICATE_WORDS:
            continue
        scope = s.section.lower() if s.section.lower() not in (*MUST_CITE, "answer") else "claims"
        first = seen.setdefault((scope, key), s)
        if first is not s:
            out.append(
                ReportIssue(kind="duplicate", section=s.section, sentence=s.text, detail=f"already in {first.section}")
            )
    return out


def uncited(sentences: list[_Sentence]) -> list[ReportIssue]:
    return [
        ReportIssue(kind="uncited", section=s.section, sentence=s.text, detail="no verified citation")
        for s in sentences
        if s.section.lower() in MUST_CITE and not s.cited
    ]


def denied(sentence: str) -> list[str]:
    """What a sentence says the research found nothing on: its quoted phrases, its ``step <id>``
    references, or else its own subject words; empty when it denies nothing."""
    if not (_NOTHING.search(sentence) and _RESEARCH_WORDS.search(sentence)):
        return []
    quoted = [q.strip() for q in _QUOTED.findall(sentence)]
    steps = [f"step {m}" for m in _STEP.findall(sentence)]
    if quoted or steps:
        return quoted + steps
    terms = topic_words(sentence) - _DENIAL_WORDS
    return [" ".join(sorted(terms))] if len(terms) >= 2 else []


def _stated_elsewhere(
    topic: str, section: str, sentences: list[_Sentence], subheadings: dict[str, list[tuple[str, str, int]]]
) -> str | None:
    """Where another section states ``topic`` with a citation: a sub-heading with cited lines
    under it (``step 2`` or its title), or a cited sentence holding all of its words."""
    step = re.fullmatch(r"step\s+(\S+)", topic, re.IGNORECASE)
    terms = set(content_terms(topic))
    for name, subs in subheadings.items():
        if name == section.lower():
            continue
        for sid, title, n in subs:
            if n and (
                (step and sid.lower() == step.group(1).lower()) or (terms and terms <= set(content_terms(title)))
            ):
                return f"{sid}. {title}"
    if step or len(terms) < 2:
        return None
    return next(
        (s.text for s in sentences if s.cited and s.section != section and terms <= set(content_terms(s.text))),
        None,
    )


def contradictions(sentences: list[_Sentence], subheadings: dict[str, list[tuple[str, str, int]]]) -> list[ReportIssue]:
    """A sentence saying nothing was found on something another section states with a citation."""
    out = []
    for s in sentences:
        if s.cited or s.section.lower() == "suggested next steps":
            continue
        for topic in denied(s.text):
            where = _stated_elsewhere(topic, s.section, sentences, subheadings)
            if where:
                out.append(
                    ReportIssue(
                        kind="contradiction",
                        section=s.section,
                        sentence=s.text,
                        detail=f"says nothing was found on '{topic}', yet the report states: {where}",
                    )
                )
    return out


def answers(part: str, sentence: _Sentence) -> bool:
    """A cited sentence of a claim section that answers ``part`` by the one reading of "answered"
    the reporter and the critic share (``answer_types.answered``)."""
    return (
        sentence.cited and sentence.section.lower() in CLAIM_SECTIONS and answered(part, [sentence.claim]) is not None
    )


def unanswered(sentences: list[_Sentence], payload: dict[str, Any]) -> list[ReportIssue]:
    parts = parts_of(str(payload["question"]))
    section = next((s.section for s in sentences if s.section.lower() in ("executive summary", "answer")), None)
    return [
        ReportIssue(kind="unanswered", section=section or "Executive summary", detail=part)
        for part in parts
        if not any(answers(part, s) for s in sentences)
    ]


def _asked_terms(payload: dict[str, Any]) -> set[str]:
    plan = payload.get("plan") or {}
    texts = [str(payload["question"])]
    for step in [*plan.get("steps", []), *plan.get("followup_steps", [])]:
        texts += [str(step.get("title", "")), str(step.get("description", "")), *map(str, step.get("queries") or [])]
    return set(content_terms(" ".join(texts)))


def off_topic(sentences: list[_Sentence], payload: dict[str, Any]) -> list[ReportIssue]:
    """A finding that shares no word with the question or the plan (its steps and follow-ups), cited
    from sources whose titles share none either: a detail of an on-topic document ("its shear
    modulus is 60 GPa") is the document's subject, not off it."""
    asked = _asked_terms(payload)
    titles = {
        int(e["n"]): set(
            content_terms(f"{e.get('summary_title') or ''} {e.get('source_title') or ''} {e.get('source')}")
        )
        for e in payload.get("sources") or []
    }
    return [
        ReportIssue(kind="off_topic", section=s.section, sentence=s.text, detail="about nothing the question asks")
        for s in sentences
        if s.section.lower() in MUST_CITE
        and s.cited
        and not set(content_terms(s.claim)) & asked
        and not any(titles.get(n, set()) & asked for n in s.numbers)
    ]


def stale(sentences: list[_Sentence], payload: dict[str, Any]) -> list[ReportIssue]:
    """A claim cited only from sources that are superseded or outdated, not marked as older."""
    old = set(payload.get("stale_sources") or [])
    return [
        ReportIssue(kind="stale", section=s.section, sentence=s.text, detail="cited only from a superseded source")
        for s in sentences
        if old
        and s.section.lower() in CLAIM_SECTIONS
        and s.numbers
        and s.numbers <= old
        and not STALE_NOTE.search(s.text)
    ]


# ----------------------------------------------------------------------------------- revision


def revise_deterministically(body: str, heading: str, issues: list[ReportIssue], payload: dict[str, Any]) -> str:
    """The section ``body`` (under ``## heading``) without the sentences ``issues`` name, a denial
    kept for what it rightly denies; an unanswered part answered with the extractive executive
    summary's paragraph for it, when the sources answer it and the section does not state it yet."""
    faulty = {i.sentence for i in issues if i.sentence and i.kind not in ("contradiction", "duplicate")}
    denials: dict[str, list[str]] = {}
    for i in issues:
        if i.kind == "contradiction":
            topic = re.match(r"says nothing was found on '(.+?)', yet", i.detail)
            denials.setdefault(i.sentence, []).append(topic.group(1) if topic else "")
    parsed = []  # each line, its bullet or bold lead, and its sentences (none for a heading or a blank)
    for line in body.splitlines():
        prefix, lead, content = _LEAD.match(line).groups()  # type: ignore[union-attr]
        prose = content.strip() and not line.strip().startswith("#")
        parsed.append((line, prefix, lead, units(content) if prose else None))
    # A sentence stated again loses the copies the critique counted, never its first: a section that
    # holds the first copy too keeps it (the copies share one text, so removing by text took both).
    copies = Counter(u for *_, said in parsed for u in said or [])
    keep = {s: copies[s] - n for s, n in Counter(i.sentence for i in issues if i.kind == "duplicate").items()}
    lines: list[str] = []
    for line, prefix, lead, said in parsed:
        if said is None:
            lines.append(line)
            continue
        kept = []
        for unit in said:
            if unit in faulty or keep.get(unit, 1) <= 0:
                continue
            if unit in keep:
                keep[unit] -= 1
            if unit in denials:
                unit = _undeny(unit, denials[unit])
                if not unit:
                    continue
            kept.append(unit)
        if kept:
            lines.append(f"{prefix}{lead or ''}{' '.join(kept)}")
        elif lead and not prefix.strip():
            continue  # a bold lead left with nothing after it introduces nothing
    text = _without_empty_subheadings("\n".join(lines))
    for issue in issues:
        if issue.kind == "unanswered":
            paragraph = _answer_paragraph(issue.detail, payload)
            if paragraph and sentence_key(paragraph) not in sentence_key(text):
                text = f"{text.rstrip()}\n\n{paragraph}" if text.strip() else paragraph
    return text.strip()


def _undeny(sentence: str, topics: list[str]) -> str:
    """A denial without the quoted items another section contradicts ("No usable finding answers:
    'A'; 'B'." → "… 'B'."); empty when nothing it denies still stands."""
    quoted = list(_QUOTED.finditer(sentence))
    left = [q.group(1) for q in quoted if q.group(1).strip() not in topics]
    if not quoted or not left or len(left) == len(quoted):
        return ""
    return sentence[: quoted[0].start()] + "; ".join(f"'{q}'" for q in left) + "."


def _without_empty_subheadings(text: str) -> str:
    lines = text.splitlines()
    out: list[str] = []
    for i, line in enumerate(lines):
        if line.strip().startswith("### "):
            rest = next((x for x in lines[i + 1 :] if x.strip()), "")
            if not rest or rest.strip().startswith("#"):
                continue
        out.append(line)
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out))


def _answer_paragraph(part: str, payload: dict[str, Any]) -> str | None:
    """A paragraph answering ``part``, led by the part: the extractive executive summary's paragraph
    for it when a sentence of it answers the part, else the first sentence of the sources' summaries
    and extractions that does, with its citation; None when no source answers it."""
    if not payload.get("sources"):
        return None
    wanted = " ".join(re.findall(r"\w+", part.lower()))
    for paragraph in extractive_section("Executive summary", payload).split("\n\n"):
        _, lead, content = _LEAD.match(paragraph).groups()  # type: ignore[union-attr]
        cited = [CITATION.sub(" ", u) for u in units(content) if CITATION.search(u)]
        if wanted and wanted in " ".join(re.findall(r"\w+", (lead or "").lower())) and answered(part, cited):
            return paragraph.strip()
    candidates = [
        (" ".join(c.split()), e["n"])
        for e in payload["sources"]
        for c in [*split_sentences(str(e.get("summary", ""))), *e.get("extraction", [])]
        if c.strip()
    ]
    best = answered(part, [c for c, _ in candidates])
    if best is None:
        return None
    n = next(n for c, n in candidates if c == best)
    return f"**{sentence_case(part)}{'?' if _ASKS.match(part) else '.'}** {closed(best)} [{n}]"
