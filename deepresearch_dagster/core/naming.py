"""Deterministic, traversal-proof names for partitions, folders and raw artifact files.

Rules (seed 000 §5.3): lowercase snake_case ASCII, no spaces, never derived from model
summaries. Unicode is folded to ASCII (NFKD), anything else becomes ``_``; an empty result
becomes ``untitled``; an over-long part is cut and suffixed with a short hash of the full
text so two long titles that share a prefix stay distinct. No name can contain ``/``,
``\\`` or ``..`` and every file name stays well under 255 bytes.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from typing import Any

MAX_PLAN_PART = 60
MAX_STEP_PART = 60
MAX_TOOL_PART = 40
MAX_STEP_ID_PART = 16
MAX_PARTITION_SLUG = 48

_NON_ALNUM = re.compile(r"[^a-z0-9]+")


def short_hash(text: str, length: int = 8) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:length]


def slugify(text: str, max_len: int = 60, sep: str = "_", hash_on_cut: bool = True) -> str:
    folded = unicodedata.normalize("NFKD", str(text)).encode("ascii", "ignore").decode("ascii")
    slug = _NON_ALNUM.sub(sep, folded.lower()).strip(sep)
    if not slug:
        return "untitled"
    if len(slug) > max_len and not hash_on_cut:
        return slug[:max_len].rstrip(sep)
    if len(slug) > max_len:
        digest = short_hash(str(text), 6)
        slug = slug[: max_len - len(digest) - 1].rstrip(sep) + sep + digest
    return slug


def partition_key_for(question: str) -> str:
    """Slug of the question plus a short hash of its exact (trimmed) text."""
    question = question.strip()
    return f"{slugify(question, MAX_PARTITION_SLUG, sep='-', hash_on_cut=False)}-{short_hash(question)}"


# Folders a partition keeps next to the raw folder (conversations/step_<id>.json,
# invalid_answers/<role>_<n>.txt, ...). The raw folder is the artifact tools' whole world, so it
# must never be one of them, whatever the plan title: a title that slugs to a reserved name gets
# a hash suffix. A new metadata folder must be listed here (a red-team test checks every run).
METADATA_FOLDERS = frozenset(
    {
        "conversations",
        "invalid_answers",
        "llm_cache",
        "llm_responses",
        "cache",
        "requests",
        "tmp",
        "logs",
        # The report's critiques, revisions and drafts (core/roles/revision.py, drafts.py).
        "report_critique",
        "report_revision",
        "report_drafts",
    }
)


def plan_folder(plan_title: str) -> str:
    folder = slugify(plan_title, MAX_PLAN_PART)
    if folder in METADATA_FOLDERS:
        folder = f"{folder}_{short_hash(str(plan_title), 6)}"
    return folder


def artifact_filename(
    plan_title: str, step_id: str | int, step_title: str, tool_name: str, ext: str, ordinal: int = 1
) -> str:
    """``{plan}__step{id}_{step}__{tool}[__{n}].{ext}``.

    ``ordinal`` counts calls of the same tool within the same step, from 1; the first call
    has no suffix and the n-th (n >= 2) gets ``__n``, so a repeated call never overwrites.
    """
    if ext not in ("json", "txt"):
        raise ValueError(f"unsupported artifact extension: {ext!r}")
    if ordinal < 1:
        raise ValueError("ordinal counts from 1")
    name = (
        f"{plan_folder(plan_title)}__step{slugify(str(step_id), MAX_STEP_ID_PART)}"
        f"_{slugify(step_title, MAX_STEP_PART)}__{slugify(tool_name, MAX_TOOL_PART)}"
    )
    if ordinal > 1:
        name += f"__{ordinal}"
    return f"{name}.{ext}"


def short_artifact_name(artifact_file: str, limit: int = 48) -> str:
    """For display only (reports, UI tables, CLI lines): the artifact's file name without its
    plan-title prefix (shared by every artifact of a research), cut in the middle to ``limit``
    characters. The full name stays in report.json, DuckDB and the audit."""
    name = artifact_file.rsplit("/", 1)[-1]
    _, sep, rest = name.partition("__")
    if sep and rest.startswith("step"):
        name = rest
    if len(name) > limit:
        head = (limit - 1) // 2
        name = name[:head] + "…" + name[len(name) - (limit - 1 - head) :]
    return name


# -- names shown to people ------------------------------------------------------------------
# A corpus file may be named anything a file system allows: "a\nb.md", "`id`;rm -rf ~.md",
# "[click](http://x).md". Wherever such a name (or a title or heading taken from a document) is
# printed, it is escaped for where it goes: one visible line on a terminal, a code span or plain
# text in Markdown. The exact name stays in report.json, DuckDB and `audit --json`.

# C0/C1 controls, DEL, line/paragraph separators, zero-width and bidirectional format characters.
_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")
_SHORT_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# Characters with a meaning inside a line of Markdown (emphasis, code, links, HTML, strikethrough)
# and an ``&`` that starts an entity; CommonMark lets any ASCII punctuation be backslash-escaped.
_MARKDOWN_INLINE = re.compile(r"([\\`*_\[\]<>~]|&(?=#?\w+;))")


def _escape_char(match: re.Match[str]) -> str:
    char = match.group()
    return _SHORT_ESCAPES.get(char) or (f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}")


def printable_name(name: object) -> str:
    """``name`` as one visible line: control characters, line separators and invisible format
    characters (zero-width, bidirectional overrides) shown as escapes (``\\n``, ``\\x1b``,
    ``\\u202e``). For terminal output and every other place a name is shown."""
    return _UNPRINTABLE.sub(_escape_char, str(name))


def markdown_code(name: object) -> str:
    """``name`` as a Markdown code span that shows it literally: escaped to one line, fenced by
    more backticks than it holds in a row (padded when it starts or ends with one), so nothing in
    it is read as Markdown or HTML."""
    text = printable_name(name)
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    edge = text[:1] in ("`", " ") or text[-1:] in ("`", " ")
    pad = " " if text and edge else ""
    return f"{fence}{pad}{text}{pad}{fence}" if text else "` `"


def markdown_text(text: object) -> str:
    """Plain text (a document title, a section heading) for inline Markdown: one line, and every
    character Markdown gives a meaning to (emphasis, links, code, HTML, tables) backslash-escaped."""
    return _MARKDOWN_INLINE.sub(r"\\\1", printable_name(text))


def markdown_source(source: str) -> str:
    """A report reference's source: a web URL as an autolink ``<url>`` when it is one clean URL,
    anything else (a corpus path, an odd URL) as a code span."""
    clean = source.startswith(("http://", "https://")) and not re.search(r"[\s<>`]", source)
    return f"<{source}>" if clean and not _UNPRINTABLE.search(source) else markdown_code(source)


def reference_line(citation: Any) -> str:
    """One item of a report's References list (``- [n] Title — `source`, location (artifact:
    `file`)``) with every part escaped for Markdown; ``citation`` is a :class:`~.models.Citation`.
    A passage read is titled "Document — Section": the precise place is its location then."""
    n = citation.n
    source_title = citation.source_title or ""
    location = citation.location
    shown = source_title.split(" — ")[0] if location else source_title
    title = f"{markdown_text(shown)} — " if shown else ""
    where = f", {markdown_text(location)}" if location else ""
    artifact = markdown_code(short_artifact_name(citation.artifact_file))
    return f"- [{n}] {title}{markdown_source(citation.source)}{where} (artifact: {artifact})"
