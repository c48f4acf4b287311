"""One contract per structured role: the JSON schema the model is sent, the deterministic
normalization applied to its answer, and the pydantic model that validates the result.

The schema holds exactly the fields the model writes (nothing internal) and every constraint
JSON Schema can express (lengths, enums, array sizes, required fields, no extra keys). What it
cannot express — sequential step ids, 3–10 sentences, 5–12 word titles, duplicates — is
*normalized*, never rejected: renumber, trim, split or pad, de-duplicate, clamp. Property
(``tests/core/llm/test_contracts.py``): every instance that validates against the schema a role
sent is accepted after normalization. Answers outside the schema are normalized as far as they
can be and otherwise rejected by the pydantic model (then repaired once, then the fallback).

Normalizers are total: any JSON value in, a JSON value out, never an exception.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from ..heuristics.report import REPORT_SECTIONS
from ..models import MAX_STEPS, CompressionResult, CriticVerdict, Outline, ReportBody, ResearchPlan, Selection
from ..text import closed, count_sentences, split_sentences

T = TypeVar("T", bound=BaseModel)


@dataclass(frozen=True)
class Contract(Generic[T]):
    name: str  # also the response_format name: [a-z_]
    schema: dict[str, Any]
    model: type[T]
    normalize: Callable[[Any], Any] = field(default=lambda data: data)

    def parse(self, data: Any) -> T:
        """Normalize, then validate (raises pydantic's ValidationError)."""
        return self.model.model_validate(self.normalize(data))


def generic_contract(model: type[T]) -> Contract[T]:
    """A model without a hand-written contract: pydantic's schema, no normalization."""
    return Contract(model.__name__.lower(), model.model_json_schema(), model)


# -- schema helpers -------------------------------------------------------------------------


def _string(min_length: int = 0, max_length: int | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    if min_length:
        schema["minLength"] = min_length
    if max_length is not None:
        schema["maxLength"] = max_length
    return schema


def _array(items: dict[str, Any], min_items: int = 0, max_items: int | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "array", "items": items}
    if min_items:
        schema["minItems"] = min_items
    if max_items is not None:
        schema["maxItems"] = max_items
    return schema


def _object(properties: dict[str, dict[str, Any]], title: str | None = None) -> dict[str, Any]:
    """Every property required and nothing else allowed (also what strict servers demand)."""
    schema: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }
    return {"title": title, **schema} if title else schema


# -- normalization helpers ------------------------------------------------------------------


def _text(value: Any) -> str | None:
    """A one-line string: whitespace collapsed (str.split's notion, as word counts use)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        value = str(value)
    if not isinstance(value, str):
        return None
    return " ".join(value.split())


def _texts(value: Any, max_items: int | None = None, max_length: int | None = None) -> list[str] | Any:
    """Non-empty, de-duplicated (case-insensitively) one-line strings; a lone string is a list
    of one; anything that is not a list is returned unchanged for the model to reject."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        return value
    out: list[str] = []
    seen: set[str] = set()
    for item in value:
        text = _text(item) if not isinstance(item, dict) else _text(" — ".join(str(v) for v in item.values()))
        if not text:
            continue
        text = text[:max_length] if max_length else text
        if text.lower() in seen:
            continue
        seen.add(text.lower())
        out.append(text)
    return out[:max_items] if max_items is not None else out


def _bool(value: Any) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in {"true", "yes", "1", "false", "no", "0"}:
        return value.strip().lower() in {"true", "yes", "1"}
    return value


def _integer(value: Any) -> int | None:
    """3, 3.0 and "3" as 3; anything else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().isdecimal():
        return int(value.strip())
    return value if isinstance(value, int) else None


def _met(raw: Any, minimum: int) -> bool:
    """Whether a raw value met the schema's minimum length. Padding only ever repairs what
    trimming broke: a text the schema already refused stays too short, so the model is asked
    again (a copied placeholder such as ``"string"`` is never padded into a plan)."""
    return isinstance(raw, str) and len(raw) >= minimum


def _pick(data: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """Only the contract's keys: extra keys a model adds (reasoning, notes) are dropped."""
    return {k: data[k] for k in keys if k in data}


# -- planner --------------------------------------------------------------------------------

PLAN_TITLE = (3, 200)
STEP_TITLE = (3, 200)
STEP_DESCRIPTION = (10, 2000)
QUERY = (2, 300)
QUERIES_PER_STEP = (1, 4)  # what the schema asks for; the plan model accepts up to 10
MAX_QUERIES = 10


def plan_schema(max_steps: int = MAX_STEPS) -> dict[str, Any]:
    max_steps = max(1, min(int(max_steps), MAX_STEPS))
    step = _object(
        {
            "step_id": {"type": "integer", "minimum": 1, "maximum": max_steps},
            "title": _string(*STEP_TITLE),
            "description": _string(*STEP_DESCRIPTION),
            "queries": _array(_string(*QUERY), *QUERIES_PER_STEP),
        }
    )
    return _object(
        {
            "plan_title": _string(*PLAN_TITLE),
            "direct_answer": {"type": "boolean"},
            "steps": _array(step, 1, max_steps),
        },
        "research_plan",
    )


def normalize_plan(data: Any, max_steps: int = MAX_STEPS) -> Any:
    """Trim, pad too-short texts, de-duplicate queries across the plan, clamp to ``max_steps``
    steps, renumber step ids 1..n."""
    if not isinstance(data, dict):
        return data
    out = _pick(data, ("plan_title", "direct_answer", "steps"))
    title = _text(out.get("plan_title"))
    if title is not None:
        if len(title) < PLAN_TITLE[0] and _met(out["plan_title"], PLAN_TITLE[0]):
            title = f"Research plan: {title}" if title else "Research plan"
        out["plan_title"] = title[: PLAN_TITLE[1]]
    direct = _bool(out.get("direct_answer", False))
    out["direct_answer"] = direct if isinstance(direct, bool) else False
    steps = out.get("steps")
    if isinstance(steps, list):
        limit = max(1, min(int(max_steps), MAX_STEPS))
        asked: set[str] = set()
        kept: list[Any] = []
        for raw in steps:
            step = _normalize_step(raw, len(kept) + 1, asked)
            if step is not None:
                kept.append(step)
            if len(kept) >= limit:
                break
        out["steps"] = kept
    return out


def _normalize_step(raw: Any, number: int, asked: set[str]) -> dict[str, Any] | None:
    if isinstance(raw, str):
        raw = {"title": raw, "description": raw}
    if not isinstance(raw, dict):
        return None
    raw_title, raw_description = raw.get("title"), raw.get("description")
    title = _text(raw_title) or ""
    description = _text(raw_description) or ""
    if raw_title is None and description:
        title = raw_title = " ".join(description.split()[:10])  # lenient: a step without a title
    if raw_description is None and title:
        description = raw_description = title
    if len(title) < STEP_TITLE[0] and _met(raw_title, STEP_TITLE[0]):
        title = f"Step {number}: {title}" if title else f"Step {number}"
    title = title[: STEP_TITLE[1]]
    short = len(description) < STEP_DESCRIPTION[0]
    if short and (_met(raw_description, STEP_DESCRIPTION[0]) or raw.get("description") is None):
        # Trimmed below the minimum (the raw text was schema-valid) or derived from the title.
        description = f"{title}. {description}" if description and description != title else title
        if len(description) < STEP_DESCRIPTION[0]:
            description = f"Research step {number}: {description}"
    queries = _texts(raw.get("queries", []), max_length=QUERY[1])
    fresh = []
    for q in queries if isinstance(queries, list) else []:
        if q.lower() not in asked:
            asked.add(q.lower())
            fresh.append(q)
    return {
        "step_id": str(number),
        "title": title,
        "description": description[: STEP_DESCRIPTION[1]],
        "queries": fresh[:MAX_QUERIES],
    }


def planner_contract(max_steps: int = MAX_STEPS) -> Contract[ResearchPlan]:
    return Contract("research_plan", plan_schema(max_steps), ResearchPlan, lambda data: normalize_plan(data, max_steps))


# -- compressor ------------------------------------------------------------------------------

TITLE_WORDS = (5, 12)
SUMMARY_SENTENCES = (3, 10)
MAX_EXTRACTION = 25
# A sentence boundary for text.split_sentences: punctuation (closing quotes may follow; see
# text.closed) before whitespace, and an upper-case letter or digit (an opening quote may precede)
# after it.
_STARTS_SENTENCE = re.compile(r"^[\"'“‘(\[]?[A-Z0-9]")
# Neutral, true statements used only when an answer holds too little text to make 3 sentences.
PAD_SENTENCES = (
    "The full tool output is kept in its artifact file.",
    "No further detail was given in the summary.",
    "The extraction lists the remaining facts.",
)
PAD_TITLE_WORDS = ("summary", "of", "one", "tool", "output")


TITLE_MIN, SUMMARY_MIN = 3, 20


def compression_schema() -> dict[str, Any]:
    return _object(
        {
            "summary_title": _string(TITLE_MIN, 160),
            "summary": _string(SUMMARY_MIN, 3000),
            "extraction": _array(_string(1, 600), 0, MAX_EXTRACTION),
            "is_useful": {"type": "boolean"},
        },
        "compression",
    )


def _as_sentence(text: str, first: bool) -> str:
    """Make one boundary-free piece end like a sentence and (unless first) start like one."""
    text = closed(text)
    if not first and not _STARTS_SENTENCE.match(text):
        text = text[0].upper() + text[1:] if text[0].isascii() and text[0].islower() else f"Note: {text}"
    return text


def fit_sentences(summary: str, extras: list[str], lo: int = 3, hi: int = 10) -> tuple[str, list[str]]:
    """``summary`` as ``lo``..``hi`` sentences by ``text.count_sentences``: the overflow is
    returned (it moves to the extraction), a shortfall is filled from ``extras`` (the answer's
    own extraction and title), then from neutral pad sentences. Every addition is checked by
    counting, so the result holds whatever the sentence splitter's rules (abbreviations, …)."""
    pieces = split_sentences(summary)
    overflow = pieces[hi:]
    text = " ".join(pieces[:hi])
    if count_sentences(text) >= lo:
        return text, overflow
    known = {p.lower().rstrip(".!?") for p in pieces}
    fresh = []
    for extra in extras:
        for piece in split_sentences(extra):
            if piece.lower().rstrip(".!?") not in known:
                known.add(piece.lower().rstrip(".!?"))
                fresh.append(piece)
    # Pads repeat: one may merge into a sentence that ends with an abbreviation, the next cannot.
    for piece in [*fresh, *PAD_SENTENCES * lo]:
        if count_sentences(text) >= lo:
            break
        text = f"{_as_sentence(text, True)} {_as_sentence(piece, False)}" if text else _as_sentence(piece, True)
    pieces = split_sentences(text)
    return " ".join(pieces[:hi]), [*overflow, *pieces[hi:]]


def fit_title(title: str, summary: str, lo: int = 5, hi: int = 12) -> str:
    """``title`` as ``lo``..``hi`` words: cut after ``hi``, padded from the summary's words."""
    words = title.split()[:hi]
    if len(words) < lo:
        seen = {w.lower() for w in words}
        for word in summary.split():
            word = word.strip(".,;:!?\"'()[]")
            if word and word.lower() not in seen and len(words) < lo:
                seen.add(word.lower())
                words.append(word)
        words += list(PAD_TITLE_WORDS[: max(0, lo - len(words))])
    return " ".join(words)


def normalize_compression(data: Any) -> Any:
    """Sentences split/padded to 3–10, title cut/padded to 5–12 words, extraction trimmed and
    de-duplicated, ``is_useful`` read from yes/no strings."""
    if not isinstance(data, dict):
        return data
    out = _pick(data, ("summary_title", "summary", "extraction", "is_useful"))
    extraction = _texts(out.get("extraction", []))
    title = _text(out.get("summary_title"))
    summary = _text(out.get("summary"))
    if summary is not None and _met(out["summary"], SUMMARY_MIN):
        extras = [*(extraction if isinstance(extraction, list) else []), *([title] if title else [])]
        summary, overflow = fit_sentences(summary, extras, *SUMMARY_SENTENCES)
        out["summary"] = summary
        if isinstance(extraction, list):
            extraction = _texts([*extraction, *overflow])
    if title is not None:
        fitted = fit_title(title, summary or "", *TITLE_WORDS)
        out["summary_title"] = fitted if _met(out["summary_title"], TITLE_MIN) else title
    out["extraction"] = extraction
    if "is_useful" in out:
        out["is_useful"] = _bool(out["is_useful"])
    return out


COMPRESSOR = Contract("compression", compression_schema(), CompressionResult, normalize_compression)


# -- critic ----------------------------------------------------------------------------------

SEVERITY = {"high": "high", "medium": "medium", "low": "low", "critical": "high", "important": "medium"}
SEVERITY["minor"] = "low"
MAX_GAPS = 10


def critic_schema() -> dict[str, Any]:
    gap = _object(
        {
            "description": _string(3, 400),
            "severity": {"type": "string", "enum": ["low", "medium", "high"]},
            "suggested_query": _string(*QUERY),
        }
    )
    return _object(
        {
            "sufficiency": {"type": "integer", "minimum": 1, "maximum": 10},
            "gaps": _array(gap, 0, MAX_GAPS),
            "contradictions": _array(_string(1, 500), 0, 10),
            "recommendation": _string(0, 1000),
        },
        "critic_verdict",
    )


def _score(value: Any) -> Any:
    if isinstance(value, str) and (match := re.search(r"-?\d+(?:\.\d+)?", value)):
        value = float(match.group())
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return max(1, min(10, round(value)))
    return value


def _gap(raw: Any) -> dict[str, Any] | None:
    if isinstance(raw, str):
        raw = {"description": raw, "suggested_query": raw}
    if not isinstance(raw, dict):
        return None
    description = (_text(raw.get("description")) or "")[:400]
    query = (_text(raw.get("suggested_query")) or "")[: QUERY[1]]
    if len(description) < 3 or len(query) < QUERY[0]:
        return None
    severity = SEVERITY.get((_text(raw.get("severity")) or "").lower(), "medium")
    return {"description": description, "severity": severity, "suggested_query": query}


def normalize_verdict(data: Any) -> Any:
    """Score rounded and clamped to 1–10, gaps trimmed (unusable ones dropped), severities
    mapped onto low/medium/high, duplicate queries dropped, lists clamped."""
    if not isinstance(data, dict):
        return data
    out = _pick(data, ("sufficiency", "gaps", "contradictions", "recommendation"))
    if "sufficiency" in out:
        out["sufficiency"] = _score(out["sufficiency"])
    gaps = out.get("gaps", [])
    if isinstance(gaps, list):
        kept, queries = [], set()
        for raw in gaps:
            gap = _gap(raw)
            if gap and gap["suggested_query"].lower() not in queries:
                queries.add(gap["suggested_query"].lower())
                kept.append(gap)
        out["gaps"] = kept[:MAX_GAPS]
    out["contradictions"] = _texts(out.get("contradictions", []), max_items=10)
    recommendation = out.get("recommendation", "")
    out["recommendation"] = (_text(recommendation) or "")[:1000] if recommendation is not None else ""
    return out


CRITIC = Contract("critic_verdict", critic_schema(), CriticVerdict, normalize_verdict)


# -- reporter ----------------------------------------------------------------------------------

MIN_BODY = 20
BODY_PAD = " (no further detail was written for this part)"


def outline_schema(headings: tuple[str, ...] = REPORT_SECTIONS) -> dict[str, Any]:
    section = _object({"heading": {"type": "string", "enum": list(headings)}, "points": _array(_string(1, 400), 0, 8)})
    return _object({"sections": _array(section, 1, len(headings))}, "report_outline")


def normalize_outline(data: Any) -> Any:
    if not isinstance(data, dict):
        return data
    out = _pick(data, ("sections",))
    sections = out.get("sections")
    if isinstance(sections, list):
        kept = []
        for raw in sections:
            if isinstance(raw, str):
                raw = {"heading": raw, "points": []}
            if not isinstance(raw, dict) or _text(raw.get("heading")) is None:
                continue
            points = _texts(raw.get("points", []), max_items=8)
            kept.append({"heading": _text(raw.get("heading")), "points": points if isinstance(points, list) else []})
        out["sections"] = kept
    return out


def body_schema() -> dict[str, Any]:
    return _object({"markdown": _string(MIN_BODY, 20000)}, "report_section")


def normalize_body(data: Any) -> Any:
    """Markdown kept as written (line breaks matter), trimmed; a body shorter than 20
    characters once trimmed says so instead of being rejected."""
    if isinstance(data, str):
        data = {"markdown": data}
    if not isinstance(data, dict):
        return data
    out = _pick(data, ("markdown",))
    body = out.get("markdown")
    if _met(body, MIN_BODY):
        body = body.strip()
        if len(body) < MIN_BODY:
            body = (body + BODY_PAD).strip()
        out["markdown"] = body
    return out


MAX_SELECTED = 12


def selection_schema() -> dict[str, Any]:
    return _object({"ids": _array({"type": "integer", "minimum": 1}, 1, MAX_SELECTED)}, "report_selection")


def normalize_selection(data: Any) -> Any:
    """Numbers kept in order, once each; "3" or 3.0 read as 3; a bare list read as the ids."""
    if isinstance(data, list):
        data = {"ids": data}
    if not isinstance(data, dict):
        return data
    out = _pick(data, ("ids",))
    ids = out.get("ids")
    if isinstance(ids, list):
        seen: list[int] = []
        for raw in ids:
            n = _integer(raw)
            if n is not None and n >= 1 and n not in seen:
                seen.append(n)
        out["ids"] = seen[:MAX_SELECTED]
    return out


OUTLINE = Contract("report_outline", outline_schema(), Outline, normalize_outline)
SELECTION = Contract("report_selection", selection_schema(), Selection, normalize_selection)
SECTION = Contract("report_section", body_schema(), ReportBody, normalize_body)


def all_contracts() -> dict[str, Contract[Any]]:
    """Every contract a role sends (the planner's for each possible step limit)."""
    contracts: dict[str, Contract[Any]] = {
        f"planner[max_steps={n}]": planner_contract(n) for n in range(1, MAX_STEPS + 1)
    }
    contracts.update(
        {
            "compressor": COMPRESSOR,
            "critic": CRITIC,
            "reporter.outline": OUTLINE,
            "reporter.section": SECTION,
            "reporter.selection": SELECTION,
        }
    )
    return contracts


_BY_MODEL: dict[type[BaseModel], Contract[Any]] = {
    ResearchPlan: planner_contract(),
    CompressionResult: COMPRESSOR,
    CriticVerdict: CRITIC,
    Outline: OUTLINE,
    ReportBody: SECTION,
    Selection: SELECTION,
}


def contract_for(model_or_contract: type[T] | Contract[T]) -> Contract[T]:
    if isinstance(model_or_contract, Contract):
        return model_or_contract
    return _BY_MODEL.get(model_or_contract) or generic_contract(model_or_contract)
