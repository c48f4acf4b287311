"""The "What changed since <previous date>" section of recurring researches (``<slug>--YYYY-MM-DD``).

The comparison uses what each research stored: the previous partition's
``compressed_summaries.json`` (its working memory) against the current bundle. Sources are
compared by normalized URL or path; findings are the extraction bullets and summary
sentences of summaries that came from a source (search listings are not findings), compared
as normalized text. A finding that is no longer in today's working memory is "no longer
supported": nothing read today states it.
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass
from datetime import date
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from pydantic import ValidationError

from ..models import Report, SourceRef, SummaryBundle, WhatChanged
from ..requests import parse_recurring_key
from ..store.artifacts import ArtifactStore
from ..text import split_sentences
from ..web.urls import normalize_url

if TYPE_CHECKING:
    from ..context import ResearchContext
    from ..store.lineage import LineageStore

# Lists in the Markdown section are cut here; report.json keeps them whole.
MAX_LISTED = 15
_CITATION_MARK = re.compile(r"\[\d+\]")
_NON_WORD = re.compile(r"[^\w]+", re.UNICODE)


def normalize_source(source: str) -> str:
    source = source.strip()
    if source.lower().startswith(("http://", "https://")):
        return normalize_url(source)
    path = PurePosixPath(source.replace("\\", "/"))
    return path.as_posix().removeprefix("./")


def normalize_finding(text: str) -> str:
    """Case, punctuation, whitespace and citation marks do not make a finding new."""
    text = _CITATION_MARK.sub(" ", unicodedata.normalize("NFKC", text)).lower()
    return " ".join(_NON_WORD.sub(" ", text).split())


def sources_of(bundle: SummaryBundle) -> dict[str, SourceRef]:
    found: dict[str, SourceRef] = {}
    for s in bundle.working_memory:
        if s.source:
            found.setdefault(normalize_source(s.source), SourceRef(source=s.source, source_title=s.source_title))
    return found


def findings_of(bundle: SummaryBundle) -> dict[str, str]:
    """Normalized text -> first original wording, in working-memory order."""
    found: dict[str, str] = {}
    for s in bundle.working_memory:
        if not s.source:
            continue
        for text in [*s.result.extraction, *split_sentences(s.result.summary)]:
            clean = " ".join(_CITATION_MARK.sub("", text).split())
            key = normalize_finding(clean)
            # Very short fragments ("Yes.", list labels) are not findings worth reporting.
            if len(key.split()) >= 3:
                found.setdefault(key, clean)
    return found


def compare(previous: SummaryBundle, current: SummaryBundle, previous_key: str, previous_date: date) -> WhatChanged:
    old_sources, new_sources = sources_of(previous), sources_of(current)
    old_findings, new_findings = findings_of(previous), findings_of(current)
    return WhatChanged(
        previous_partition=previous_key,
        previous_date=previous_date.isoformat(),
        new_sources=[ref for k, ref in new_sources.items() if k not in old_sources],
        dropped_sources=[ref for k, ref in old_sources.items() if k not in new_sources],
        findings_added=[t for k, t in new_findings.items() if k not in old_findings],
        findings_no_longer_supported=[t for k, t in old_findings.items() if k not in new_findings],
        unchanged_sources=len(old_sources.keys() & new_sources.keys()),
        unchanged_findings=len(old_findings.keys() & new_findings.keys()),
    )


@dataclass(frozen=True)
class PreviousResearch:
    partition_key: str
    day: date
    bundle: SummaryBundle


def find_previous(lineage: LineageStore, artifacts_root: str | Path, partition_key: str) -> PreviousResearch | None:
    """The latest earlier partition of the same recurring topic that finished with a report."""
    parsed = parse_recurring_key(partition_key)
    if parsed is None:
        return None
    slug, day = parsed
    earlier = []
    for other_key in lineage.partitions_with_prefix(f"{slug}--"):
        other = parse_recurring_key(other_key)
        if other and other[0] == slug and other[1] < day:
            earlier.append((other[1], other_key))
    for other_day, key in sorted(earlier, reverse=True):
        store = ArtifactStore(artifacts_root, key)
        if not (store.exists("report.json") and store.exists("compressed_summaries.json")):
            continue
        try:
            bundle = SummaryBundle.model_validate_json(store.read_text("compressed_summaries.json"))
        except (ValidationError, json.JSONDecodeError, OSError):
            continue
        return PreviousResearch(key, other_day, bundle)
    return None


def _bullets(items: list[str], empty: str) -> list[str]:
    if not items:
        return [f"- {empty}"]
    lines = [f"- {item}" for item in items[:MAX_LISTED]]
    if len(items) > MAX_LISTED:
        lines.append(f"- … and {len(items) - MAX_LISTED} more (see report.json)")
    return lines


def _source_line(ref: SourceRef) -> str:
    return f"{ref.source_title} — `{ref.source}`" if ref.source_title else f"`{ref.source}`"


def render_markdown(changes: WhatChanged) -> str:
    lines = [
        f"## What changed since {changes.previous_date}",
        "",
        f"Compared with the research of {changes.previous_date} (partition `{changes.previous_partition}`): "
        f"{changes.unchanged_sources} source(s) and {changes.unchanged_findings} finding(s) unchanged.",
        "",
        f"**New sources ({len(changes.new_sources)})**",
        "",
        *_bullets([_source_line(r) for r in changes.new_sources], "none"),
        "",
        f"**Sources no longer used ({len(changes.dropped_sources)})**",
        "",
        *_bullets([_source_line(r) for r in changes.dropped_sources], "none"),
        "",
        f"**Findings added ({len(changes.findings_added)})**",
        "",
        *_bullets(changes.findings_added, "none"),
        "",
        f"**Findings no longer supported ({len(changes.findings_no_longer_supported)})**",
        "",
        *_bullets(changes.findings_no_longer_supported, "none"),
    ]
    return "\n".join(lines) + "\n"


def with_changes(report: Report, changes: WhatChanged | None) -> Report:
    if changes is None:
        return report
    markdown = report.markdown.rstrip("\n") + "\n\n" + render_markdown(changes)
    return report.model_copy(update={"markdown": markdown, "what_changed": changes})


def add_what_changed(ctx: ResearchContext, report: Report, bundle: SummaryBundle) -> Report:
    """The research_report asset's hook: a no-op unless this is a recurring partition with an
    earlier dated partition that has a report."""
    previous = find_previous(ctx.lineage, ctx.settings.artifacts_path, ctx.partition_key)
    if previous is None:
        return report
    ctx.log(f"comparing with {previous.partition_key}")
    return with_changes(report, compare(previous.bundle, bundle, previous.partition_key, previous.day))
