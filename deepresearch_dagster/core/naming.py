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
    {"conversations", "invalid_answers", "llm_cache", "llm_responses", "cache", "requests", "tmp", "logs"}
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
