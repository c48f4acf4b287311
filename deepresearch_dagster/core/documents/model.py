"""What ingestion produces: a document as titled sections (heading path, page) plus metadata."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


class SkipFile(Exception):
    """A file that cannot be ingested (encrypted, corrupt, oversized…): skipped with this reason."""


@dataclass(frozen=True)
class Section:
    heading: tuple[str, ...]  # heading path, outermost first ("Funding", "Series B")
    text: str  # Markdown: paragraphs, "- " bullets and "| a | b |" tables
    page: int | None = None  # PDF page or PPTX slide number, 1-based


@dataclass
class ExtractedDocument:
    title: str
    sections: list[Section]
    format: str
    meta: dict[str, Any] = field(default_factory=dict)  # date, superseded, pages…

    @property
    def text(self) -> str:
        return render_sections(self.sections)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["sections"] = [[list(s.heading), s.text, s.page] for s in self.sections]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ExtractedDocument:
        sections = [Section(tuple(h), t, p) for h, t, p in data["sections"]]
        return cls(data["title"], sections, data["format"], dict(data.get("meta") or {}))


def render_sections(sections: list[Section]) -> str:
    """Markdown with each section's heading (and page) on its own line."""
    out: list[str] = []
    last: tuple[tuple[str, ...], int | None] | None = None
    for s in sections:
        if (s.heading, s.page) != last and (s.heading or s.page):
            label = " › ".join(s.heading) if s.heading else ""
            page = f"(page {s.page})" if s.page else ""
            out.append("#" * min(6, max(2, len(s.heading) + 1)) + " " + " ".join(p for p in (label, page) if p))
        last = (s.heading, s.page)
        out.append(s.text.strip())
    return "\n\n".join(p for p in out if p)


def markdown_table(rows: list[list[str]]) -> str:
    """Rows (first = header) → a Markdown table; cells flattened to one line, pipes escaped."""
    clean = [[" ".join(str(c if c is not None else "").split()).replace("|", "/") for c in r] for r in rows]
    clean = [r for r in clean if any(r)]
    if not clean:
        return ""
    width = max(len(r) for r in clean)
    clean = [r + [""] * (width - len(r)) for r in clean]
    # Trailing columns that are empty everywhere are spreadsheet noise.
    while width > 1 and not any(r[width - 1] for r in clean):
        width -= 1
    clean = [r[:width] for r in clean]
    lines = ["| " + " | ".join(clean[0]) + " |", "| " + " | ".join("---" for _ in range(width)) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in clean[1:]]
    return "\n".join(lines)
