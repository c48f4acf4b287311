"""Research requests from outside a run: the request queue (a folder of request files that a
Dagster sensor turns into partitions and runs) and recurring topics (``recurring.yaml``, one
Dagster schedule each, one partition ``<slug>--YYYY-MM-DD`` per day) and recurring evaluations
(one schedule per suite, re-run into its ``evaluations`` partition).

Validation reuses the coordinator (questions) and ``ResearchSettings.with_options`` (option
values), so a request rejected here would have failed the same way in ``deepresearch run``.
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from datetime import date
from pathlib import Path
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .config import REQUEST_OPTIONS, RequestOptions, ResearchSettings
from .config import describe_validation_error as _describe
from .errors import ArtifactAccessError, RequestError
from .naming import MAX_PARTITION_SLUG, slugify
from .roles.coordinator import InvalidQuestion, validate_question
from .store.artifacts import atomic_write_bytes, read_regular_file, sha256_bytes

REQUEST_SUFFIXES = (".json", ".yaml", ".yml", ".txt", ".md")
MAX_REQUEST_FILE_BYTES = 1_000_000
MAX_REQUESTS_PER_FILE = 50


def validate_options(options: dict[str, Any]) -> dict[str, Any]:
    """Only the keys a request may set (``RequestOptions``), with values the settings accept."""
    unknown = sorted(set(options) - set(REQUEST_OPTIONS))
    if unknown:
        raise RequestError(f"unknown option(s) {', '.join(unknown)}; a request may set {', '.join(REQUEST_OPTIONS)}")
    picked = {k: v for k, v in options.items() if v not in (None, "")}
    try:
        ResearchSettings().with_options(RequestOptions.model_validate(picked))
    except ValidationError as exc:
        raise RequestError(f"invalid option value: {_describe(exc)}") from exc
    corpus = picked.get("corpus_dir")
    if corpus is not None and not Path(str(corpus)).is_dir():
        raise RequestError(f"corpus_dir is not a folder: {corpus}")
    return picked


class _ValidatedQuestion(BaseModel):
    """A question checked by the coordinator plus per-request options checked like `run`'s."""

    model_config = ConfigDict(extra="forbid")

    question: str
    options: dict[str, Any] = Field(default_factory=dict)

    @field_validator("question")
    @classmethod
    def _question(cls, value: str) -> str:
        try:
            return validate_question(value)
        except InvalidQuestion as exc:
            raise ValueError(str(exc)) from exc

    @field_validator("options")
    @classmethod
    def _options(cls, value: dict[str, Any]) -> dict[str, Any]:
        try:
            return validate_options(value)
        except RequestError as exc:
            raise ValueError(str(exc)) from exc


class ResearchRequest(_ValidatedQuestion):
    """``{"question": ..., <option>: ...}``; options may also be nested under ``options``."""

    @model_validator(mode="before")
    @classmethod
    def _collect_options(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        nested = data.pop("options", None) or {}
        if not isinstance(nested, dict):
            raise ValueError("'options' must be a mapping")
        top = {k: data.pop(k) for k in list(data) if k != "question"}
        return {**data, "options": {**top, **nested}}


def parse_requests(value: Any) -> list[ResearchRequest]:
    """A question string, one request object, or a list of either."""
    items = value if isinstance(value, list) else [value]
    if not items:
        raise RequestError("the file holds no request")
    if len(items) > MAX_REQUESTS_PER_FILE:
        raise RequestError(f"{len(items)} requests in one file; the limit is {MAX_REQUESTS_PER_FILE}")
    requests = []
    for i, item in enumerate(items):
        where = f"request {i + 1}: " if len(items) > 1 else ""
        if isinstance(item, str):
            item = {"question": item}
        if not isinstance(item, dict):
            raise RequestError(f"{where}expected a question or an object with a 'question', got {type(item).__name__}")
        try:
            requests.append(ResearchRequest.model_validate(item))
        except ValidationError as exc:
            raise RequestError(where + _describe(exc)) from exc
    return requests


def parse_request_file(path: Path) -> list[ResearchRequest]:
    suffix = path.suffix.lower()
    if suffix not in REQUEST_SUFFIXES:
        raise RequestError(f"unsupported request file type {suffix or '(none)'}; use {', '.join(REQUEST_SUFFIXES)}")
    try:  # a regular file only: a symlink in the inbox (to /etc/shadow, say) is rejected, never read
        data = read_regular_file(path, MAX_REQUEST_FILE_BYTES + 1)
    except ArtifactAccessError as exc:
        raise RequestError(f"request file {path.name} is not a regular file (symlinks are refused)") from exc
    if len(data) > MAX_REQUEST_FILE_BYTES:
        raise RequestError(f"request file is {len(data)} bytes; the limit is {MAX_REQUEST_FILE_BYTES}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RequestError("request file is not UTF-8 text") from exc
    if suffix in (".txt", ".md"):
        return parse_requests(text)
    try:
        value = json.loads(text) if suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise RequestError(f"cannot parse {path.name}: {exc}") from exc
    return parse_requests(value)


# -- the request queue (a folder) ------------------------------------------------------------
class RequestQueue:
    """``inbox/`` receives request files; the sensor moves each to ``accepted/`` or to
    ``rejected/`` (with ``<name>.error.txt`` saying why), so the folder is its own audit trail."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).resolve()
        self.inbox, self.accepted, self.rejected = (self.root / n for n in ("inbox", "accepted", "rejected"))

    @classmethod
    def for_settings(cls, settings: ResearchSettings) -> RequestQueue:
        return cls(settings.requests_path)

    def pending(self, limit: int = 20) -> list[Path]:
        """Oldest first; dot files are writes in progress (see ``enqueue``)."""
        if not self.inbox.is_dir():
            return []
        # Symlinks are listed (not followed) so that parse_request_file rejects them into rejected/.
        files = [p for p in self.inbox.iterdir() if not p.name.startswith(".") and (p.is_symlink() or p.is_file())]
        return sorted(files, key=lambda p: (p.lstat().st_mtime_ns, p.name))[:limit]

    def enqueue(self, question: str, options: dict[str, Any] | None = None) -> Path:
        """Validate and write one request file atomically (what ``deepresearch submit`` does)."""
        (request,) = parse_requests({"question": question, "options": options or {}})
        body = json.dumps(request.model_dump(), ensure_ascii=False, indent=2, sort_keys=True) + "\n"
        # Time-ordered and unique: two identical submissions are two requests.
        name = f"{time.strftime('%Y%m%dT%H%M%S')}-{sha256_bytes(body.encode())[:8]}-{uuid.uuid4().hex[:6]}.json"
        path = self.inbox / name
        atomic_write_bytes(path, body.encode("utf-8"))
        return path

    def _move(self, path: Path, folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / path.name
        n = 1
        while target.exists():
            n += 1
            target = folder / f"{path.stem}__{n}{path.suffix}"
        os.replace(path, target)
        return target

    def accept(self, path: Path) -> Path:
        return self._move(path, self.accepted)

    def reject(self, path: Path, reason: str) -> Path:
        target = self._move(path, self.rejected)
        atomic_write_bytes(target.with_name(target.name + ".error.txt"), (reason.strip() + "\n").encode("utf-8"))
        return target


# -- recurring topics --------------------------------------------------------------------------
RECURRING_KEY = re.compile(r"^(?P<slug>[a-z0-9][a-z0-9-]*?)--(?P<date>\d{4}-\d{2}-\d{2})$")


def _check_timezone(value: str) -> str:
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"unknown time zone {value!r}") from exc
    return value


class RecurringTopic(_ValidatedQuestion):
    """One topic researched on a cron schedule; each run is a new dated partition."""

    key: str | None = Field(default=None, description="slug for partition keys; default: slug of the question")
    cron: str = "0 6 * * *"
    timezone: str = "UTC"
    status: Literal["running", "stopped"] = "running"

    @field_validator("timezone")
    @classmethod
    def _timezone(cls, value: str) -> str:
        return _check_timezone(value)

    @property
    def slug(self) -> str:
        # No hash suffix: the date makes each partition unique and keeps keys readable.
        return slugify(self.key or self.question, MAX_PARTITION_SLUG, sep="-", hash_on_cut=False)

    def partition_key(self, day: date) -> str:
        return recurring_key(self.slug, day)


class RecurringEvaluation(BaseModel):
    """One evaluation suite re-run on a cron schedule (every item researched again), so a
    regression shows in the figures of its ``evaluations`` partition."""

    model_config = ConfigDict(extra="forbid")

    suite: str = Field(min_length=1, description="suite file (JSONL), relative to recurring.yaml")
    name: str | None = Field(default=None, description="schedule name slug; default: the suite file's name")
    cron: str = "0 6 * * *"
    timezone: str = "UTC"
    status: Literal["running", "stopped"] = "stopped"
    engine: Literal["auto", "offline", "openai"] | None = None
    corpus: str | None = Field(default=None, description="one folder of documents for every item")
    limit: int | None = Field(default=None, ge=1)
    options: dict[str, Any] = Field(default_factory=dict, description="research size knobs (max_steps, ...)")

    @field_validator("timezone")
    @classmethod
    def _timezone(cls, value: str) -> str:
        return _check_timezone(value)

    @field_validator("options")
    @classmethod
    def _options(cls, value: dict[str, Any]) -> dict[str, Any]:
        misplaced = sorted({"engine", "corpus_dir"} & set(value))
        if misplaced:
            raise ValueError(f"{', '.join(misplaced)}: use the entry's own engine / corpus fields, not options")
        try:
            return validate_options(value)
        except RequestError as exc:
            raise ValueError(str(exc)) from exc

    @property
    def slug(self) -> str:
        return slugify(self.name or Path(self.suite).stem, MAX_PARTITION_SLUG, sep="-", hash_on_cut=False)


class RecurringConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    topics: list[RecurringTopic] = Field(default_factory=list)
    evaluations: list[RecurringEvaluation] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique(self) -> RecurringConfig:
        kinds = (
            (self.topics, "topics share the partition slug", "key"),
            (self.evaluations, "evaluations share the schedule name", "name"),
        )
        for entries, what, field in kinds:
            slugs = [e.slug for e in entries]
            duplicates = sorted({s for s in slugs if slugs.count(s) > 1})
            if duplicates:
                raise ValueError(f"two {what} {', '.join(duplicates)}; give one a '{field}'")
        return self


def recurring_key(slug: str, day: date) -> str:
    return f"{slug}--{day.isoformat()}"


def parse_recurring_key(partition_key: str) -> tuple[str, date] | None:
    """``(slug, date)`` for a recurring partition; None for a one-off research (whose keys
    never contain ``--``: slugify collapses separator runs)."""
    match = RECURRING_KEY.match(partition_key)
    if not match:
        return None
    try:
        return match["slug"], date.fromisoformat(match["date"])
    except ValueError:
        return None


def load_recurring(path: Path) -> RecurringConfig:
    """The topics in ``recurring.yaml`` (settings.recurring_path); none when it is absent."""
    if not path.is_file():
        return RecurringConfig()
    try:
        raw = yaml.safe_load(path.read_text("utf-8")) or {}
        # A relative path (corpus folder, suite file) means relative to recurring.yaml, not to
        # whoever loads it.
        for topic in raw.get("topics") or [] if isinstance(raw, dict) else []:
            options = topic.get("options") if isinstance(topic, dict) else None
            if isinstance(options, dict) and isinstance(options.get("corpus_dir"), str):
                options["corpus_dir"] = str((path.parent / options["corpus_dir"]).resolve())
        for evaluation in raw.get("evaluations") or [] if isinstance(raw, dict) else []:
            for name in ("suite", "corpus") if isinstance(evaluation, dict) else ():
                if isinstance(evaluation.get(name), str) and evaluation[name].strip():
                    evaluation[name] = str((path.parent / evaluation[name].strip()).resolve())
        return RecurringConfig.model_validate(raw)
    except yaml.YAMLError as exc:
        raise RequestError(f"{path}: cannot parse YAML: {exc}") from exc
    except ValidationError as exc:
        raise RequestError(f"{path}: {_describe(exc)}") from exc
