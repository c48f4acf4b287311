"""Currency of a document: its date and whether it is superseded (says so, or lives in an archive)."""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Any

from ..text import MONTH

MONTHS = {
    m: i
    for i, names in enumerate(
        [
            ("jan", "january"),
            ("feb", "february"),
            ("mar", "march"),
            ("apr", "april"),
            ("may",),
            ("jun", "june"),
            ("jul", "july"),
            ("aug", "august"),
            ("sep", "sept", "september"),
            ("oct", "october"),
            ("nov", "november"),
            ("dec", "december"),
        ],
        1,
    )
    for m in names
}
ARCHIVE_FOLDERS = {
    "archive",
    "archives",
    "archived",
    "old",
    "superseded",
    "obsolete",
    "deprecated",
    "previous",
    "outdated",
}
# A draft's figures "will change after the close": the final document's win (drafts folder, a
# "draft" token in the file name, or a head line that says DRAFT / "Status: draft").
DRAFT_FOLDERS = {"draft", "drafts", "wip", "work in progress"}
DRAFT_NAME = re.compile(r"(?:^|[\W_])draft(?:$|[\W_\d])", re.IGNORECASE)
DRAFT_LINE = re.compile(r"^\W*(?:DRAFT\b|(?i:status|version)\s*:\s*(?i:draft)\b)")
DATE_KEYWORDS = re.compile(
    r"\b(date|dated|updated|last updated|revised|as of|as at|effective|published|issued|version|prepared)\b", re.I
)
_MONTH = f"({MONTH})"
DATE_PATTERNS = [
    (re.compile(r"\b(20\d\d|19\d\d)-(\d{1,2})-(\d{1,2})\b"), ("y", "m", "d")),
    (re.compile(rf"\b(\d{{1,2}})\s+{_MONTH}\.?,?\s+(20\d\d|19\d\d)\b", re.I), ("d", "M", "y")),
    (re.compile(rf"\b{_MONTH}\.?\s+(\d{{1,2}}),?\s+(20\d\d|19\d\d)\b", re.I), ("M", "d", "y")),
    (re.compile(rf"\b{_MONTH}\.?\s+(20\d\d|19\d\d)\b", re.I), ("M", "y")),
    (re.compile(r"\bQ([1-4])\s+(20\d\d)\b", re.I), ("q", "y")),
    (re.compile(r"\b(20\d\d)-(\d{2})\b"), ("y", "m")),
]
SUPERSEDED = re.compile(
    r"\b(?:superseded|withdrawn|obsolete|no longer (?:current|valid|in effect|maintained)|out of date|"
    # "DO NOT USE" of the whole document, not "do not use this list for new-build plots".
    r"do not use(?=(?:\s+this\s+(?:document|version|file|copy))?\s*(?:[.;:!—–(-]|$))|archived copy|replaced by)\b",
    re.I,
)
SUPERSEDED_BY = re.compile(
    r"(?:superseded|replaced) by\s+(?:[^\"“`'\n.;]{0,40}?[\"“`']([^\"”`'\n]{3,120})[\"”`']"
    r"|(?:the\s+)?([^\"”`'\n.;—]{3,80}))",
    re.I,
)
NOT_SUPERSEDED = re.compile(r"\b(?:supersedes|replaces)\b", re.I)


def _iso(parts: dict[str, str]) -> str | None:
    try:
        year = int(parts["y"])
        if "q" in parts:
            month = int(parts["q"]) * 3
        elif "M" in parts:
            month = MONTHS[parts["M"].lower().rstrip(".")[:3] if parts["M"].lower()[:3] != "sep" else "sep"]
        else:
            month = int(parts.get("m", 0))
        day = int(parts.get("d", 0))
    except (KeyError, ValueError):
        return None
    if not 1 <= month <= 12 or day > 31:
        return None
    return f"{year:04d}-{month:02d}" + (f"-{day:02d}" if day else "")


def find_date(text: str) -> str | None:
    for pattern, names in DATE_PATTERNS:
        match = pattern.search(text)
        if match:
            iso = _iso(dict(zip(names, match.groups(), strict=True)))
            if iso:
                return iso
    return None


def document_date(text: str, rel_path: str) -> str | None:
    """The date a document speaks for: a dated header line, else one in the first lines, else the file name."""
    # Only the head matters, and a "line" may be a whole 20 MB one-line file: bound both.
    lines = [line[:500] for line in text[:10_000].splitlines() if line.strip()][:25]
    for line in lines:
        if DATE_KEYWORDS.search(line):
            found = find_date(line)
            if found:
                return found
    found = find_date("\n".join(line for line in lines[:4] if not line.lstrip().startswith("|")))
    if found:
        return found
    stem = PurePosixPath(rel_path).stem.replace("_", " ")
    return find_date(stem) or _year_only(stem)


def _year_only(text: str) -> str | None:
    match = re.search(r"(?<!\d)(20\d\d)(?!\d)", text)
    return match.group(1) if match else None


def in_archive(rel_path: str) -> bool:
    return any(part.lower() in ARCHIVE_FOLDERS for part in PurePosixPath(rel_path).parts[:-1])


def is_draft(text: str, rel_path: str) -> str | None:
    """Why a document is a draft (its folder, its name or a head line that says so), or None."""
    path = PurePosixPath(rel_path)
    if any(part.lower() in DRAFT_FOLDERS for part in path.parts[:-1]):
        return "it lives in a drafts folder"
    if DRAFT_NAME.search(path.stem):
        return "its file name marks it as a draft"
    for line in [line for line in text[:2500].splitlines() if line.strip()][:8]:
        if DRAFT_LINE.match(line.strip().lstrip("#").strip()):
            return f"it is marked as a draft: {line.strip()[:120]}"
    return None


# Where a notice about the document itself stands: opening a sentence or a label ("Status:
# superseded", "SUPERSEDED — …"), or after "this <document> has been / was". Mid-sentence, "replaced
# by" or "withdrawn" speaks of something else ("the liquid filling is replaced by a solid film").
_NOTICE_LEAD = re.compile(r"(?:^|[.:;!?—–-]|\bthis\s+(?:\w+\s+){1,2}(?:has\s+been|had\s+been|was|is))\s*$", re.I)


def _notice(line: str) -> bool:
    plain = re.sub(r"[*_>#`]", "", line).strip()
    return any(_NOTICE_LEAD.search(plain[: m.start()]) for m in SUPERSEDED.finditer(plain))


def currency(text: str, rel_path: str) -> dict[str, Any]:
    """``{"date", "superseded", "superseded_reason", "superseded_by"}`` for a document."""
    head = text[:2500]
    says = None
    for line in head.splitlines():
        if _notice(line) and not NOT_SUPERSEDED.search(line):
            says = line.strip()
            break
    by = SUPERSEDED_BY.search(says) if says else None
    reason = None
    if says:
        reason = f"the document says so: {says[:160]}"
    elif in_archive(rel_path):
        reason = "it lives in an archive folder"
    else:
        reason = is_draft(text, rel_path)
    return {
        "date": document_date(text, rel_path),
        "superseded": reason is not None,
        "superseded_reason": reason,
        "superseded_by": (by.group(1) or by.group(2)).strip() if by else None,
    }
