"""Evaluation suites: a JSONL file, one question a line, with what a good report must state.

A line: ``id``, ``question``, ``answers`` (gold strings, any one counts) and/or ``facts`` (all
should appear: a string, or ``{"fact", "patterns"}`` whose regular expressions must all match),
optional ``stale`` (figures that must not be stated as current), ``corpus`` (a folder, relative
to the suite file), ``yes_no`` and ``answer_verbatim_in_support``. The descriptive fields of the
multi-hop format (``dataset``, ``type``, ``level``, ``supporting_files``, ``context_files``,
``evidence``) and its attribution (``source``, ``license``) are kept and never scored; any
other field is an error, so a typo such as ``answer`` for ``answers`` is reported instead of
silently scoring nothing.

Importers turn other formats into suites: SQuAD-style JSON, the private-document gold lists of
``tests/fixtures/private_docs/<name>/gold.json`` and DeepResearch Bench's ``query.jsonl``
(questions only: scoring those needs a judge model).
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..errors import SuiteError
from .matching import any_in, normalize

__all__ = [
    "IMPORTERS",
    "Fact",
    "ItemFailure",
    "Suite",
    "SuiteItem",
    "load_suite",
    "split_of",
    "write_suite",
]


class Fact(BaseModel):
    """A gold fact stated in other words by different reports: every pattern must match."""

    model_config = ConfigDict(extra="forbid")
    fact: str = Field(description="the fact in words (shown when it is missing)")
    patterns: list[str] = Field(min_length=1, description="regular expressions, case-insensitive; all must match")
    id: str | None = None

    @field_validator("patterns")
    @classmethod
    def _compiles(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"pattern {pattern!r} does not compile: {exc}") from exc
        return patterns

    def found_in(self, text: str) -> bool:
        return all(re.search(p, text, re.IGNORECASE) for p in self.patterns)


GoldItem = str | Fact


class SuiteItem(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, max_length=200)
    question: str = Field(min_length=1)
    answers: list[str] = Field(default_factory=list, description="gold answers; any one counts")
    facts: list[GoldItem] = Field(default_factory=list, description="gold facts; all should appear")
    stale: list[GoldItem] = Field(default_factory=list, description="figures that must not be stated as current")
    corpus: str | None = Field(default=None, description="folder of documents, relative to the suite file")
    yes_no: bool = False
    answer_verbatim_in_support: bool | None = None
    # Descriptive fields of the multi-hop format: kept with the item, never scored.
    dataset: str | None = None
    type: str | None = None
    level: str | None = None
    supporting_files: list[str] | None = None
    context_files: list[str] | None = None
    evidence: list[Any] | None = None
    # Where the item comes from and under which licence (attribution travels with a copied item).
    source: dict[str, Any] | str | None = None
    license: str | None = None

    @property
    def category(self) -> Literal["answer", "yes_no", "non_verbatim", "in_question", "facts", "judge_only"]:
        """How the item is scored and reported. String presence cannot tell a right yes/no, an
        answer in other words, or an answer the question already names (``Which is older, A or
        B?``): those are reported apart instead of being counted right or wrong."""
        if self.answers:
            if self.yes_no or all(normalize(a) in ("yes", "no") for a in self.answers):
                return "yes_no"
            if self.answer_verbatim_in_support is False:
                return "non_verbatim"
            if any_in(self.question, self.answers):
                return "in_question"
            return "answer"
        return "facts" if self.facts or self.stale else "judge_only"


class ItemFailure(BaseModel):
    """A suite line that could not be read, or an item whose research failed."""

    line: int | None = None
    id: str | None = None
    reason: str


class Suite(BaseModel):
    path: str
    items: list[SuiteItem]
    failures: list[ItemFailure] = Field(default_factory=list)

    def corpus_of(self, item: SuiteItem, override: str | None = None) -> str | None:
        """The item's corpus folder (absolute): the override, else its own relative to the suite."""
        if override:
            return str(Path(override).resolve())
        if item.corpus:
            return str((Path(self.path).parent / item.corpus).resolve())
        return None


def _reason(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"]) or "line"
        message = "unknown field" if error["type"] == "extra_forbidden" else error["msg"]
        parts.append(f"{where}: {message}")
    return "; ".join(parts)


def load_suite(path: str | Path) -> Suite:
    """Read a suite; a bad line becomes a failure with its reason, the others are kept. A file
    that cannot be read at all, or that holds no item, is a :class:`SuiteError`."""
    path = Path(path)
    try:
        text = path.read_text("utf-8-sig")
    except FileNotFoundError as exc:
        raise SuiteError(f"suite file not found: {path}") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise SuiteError(f"cannot read suite {path}: {exc}") from exc
    items: list[SuiteItem] = []
    failures: list[ItemFailure] = []
    seen: set[str] = set()
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            failures.append(ItemFailure(line=number, reason=f"not JSON: {exc.msg} at column {exc.colno}"))
            continue
        if not isinstance(data, dict):
            failures.append(ItemFailure(line=number, reason="not a JSON object"))
            continue
        item_id = str(data.get("id")) if data.get("id") is not None else None
        try:
            item = SuiteItem.model_validate(data)
        except ValidationError as exc:
            failures.append(ItemFailure(line=number, id=item_id, reason=_reason(exc)))
            continue
        if item.id in seen:
            failures.append(ItemFailure(line=number, id=item.id, reason="duplicate id"))
            continue
        seen.add(item.id)
        items.append(item)
    if not items:
        detail = f" ({failures[0].reason} on line {failures[0].line})" if failures else ""
        raise SuiteError(f"suite {path} has no readable item{detail}")
    return Suite(path=str(path.resolve()), items=items, failures=failures)


def split_of(item_id: str) -> Literal["dev", "heldout"]:
    """A fixed split, decided by the item's id alone before anyone looks at an answer: half of
    any suite is development data (looked at), the other half is held out (only its figures
    are read). The same id is in the same half in every suite and every release."""
    return "dev" if int(hashlib.sha256(item_id.encode("utf-8")).hexdigest()[:8], 16) % 2 == 0 else "heldout"


def write_suite(items: list[SuiteItem], path: str | Path) -> None:
    lines = [item.model_dump_json(exclude_defaults=True) for item in items]
    Path(path).write_text("\n".join(lines) + "\n", "utf-8")


# -- importers --------------------------------------------------------------------------------


def _squad(path: Path) -> list[SuiteItem]:
    """SQuAD v1/v2 JSON (``data[].paragraphs[].qas[]``): answerable questions with their answers."""
    data = json.loads(path.read_text("utf-8"))
    items = []
    for article in data.get("data", []):
        for paragraph in article.get("paragraphs", []):
            for qa in paragraph.get("qas", []):
                answers = list(dict.fromkeys(a["text"] for a in qa.get("answers", []) if a.get("text")))
                if qa.get("is_impossible") or not answers:
                    continue
                items.append(SuiteItem(id=str(qa["id"]), question=qa["question"], answers=answers))
    return items


def _gold_facts(path: Path) -> list[SuiteItem]:
    """A private-document corpus (``question.txt`` + ``gold.json`` in one folder): one item whose
    facts are the gold list and whose stale figures must not be stated as current."""
    folder = path.parent if path.is_file() else path
    gold = json.loads((folder / "gold.json").read_text("utf-8"))
    facts = [Fact(id=f.get("id"), fact=f["fact"], patterns=f["patterns"]) for f in gold.get("facts", [])]
    stale = [Fact(id=s.get("id"), fact=s["figure"], patterns=[s["pattern"]]) for s in gold.get("stale", [])]
    question = (folder / "question.txt").read_text("utf-8").strip()
    return [SuiteItem(id=folder.name, question=question, facts=facts, stale=stale, corpus=str(folder.resolve()))]


def _drb(path: Path) -> list[SuiteItem]:
    """DeepResearch Bench ``query.jsonl`` (``id``, ``prompt``, ``topic``, ``language``)."""
    items = []
    for line in path.read_text("utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            items.append(SuiteItem(id=str(row["id"]), question=row["prompt"], dataset="deepresearch_bench"))
    return items


def _multihop(path: Path) -> list[SuiteItem]:
    """The multi-hop format already is a suite; importing checks it and adds the corpus."""
    suite = load_suite(path)
    corpus = path.parent / "corpus"
    return [i.model_copy(update={"corpus": str(corpus.resolve())}) if corpus.is_dir() else i for i in suite.items]


IMPORTERS = {"multihop": _multihop, "squad": _squad, "gold-facts": _gold_facts, "drb": _drb}
