"""The "What changed since" comparison of two dated partitions of a recurring topic."""

from __future__ import annotations

from datetime import date

from deepresearch_dagster.core.models import CompressionResult, Report, SummaryBundle, SummaryRecord
from deepresearch_dagster.core.roles.changes import (
    compare,
    find_previous,
    normalize_finding,
    normalize_source,
    render_markdown,
    with_changes,
)
from deepresearch_dagster.core.store.artifacts import ArtifactStore
from deepresearch_dagster.core.store.lineage import LineageStore

SUMMARY = "First sentence about cells. Second sentence about costs. Third sentence about supply."


def _summary(call_id: str, source: str | None, extraction: list[str], useful: bool = True, summary: str = SUMMARY):
    return SummaryRecord(
        call_id=call_id,
        step_id="1",
        artifact_file=f"{call_id}.txt",
        source=source,
        source_title=f"Title {source}" if source else None,
        result=CompressionResult(
            summary_title="A summary title with enough words",
            summary=summary,
            extraction=extraction,
            is_useful=useful,
        ),
        injected_tokens=10,
        cache_key="k",
        compressor_model="m",
        prompt_version="v",
    )


def _bundle(key: str, *summaries: SummaryRecord) -> SummaryBundle:
    return SummaryBundle(partition_key=key, compressor_model="m", prompt_version="v", summaries=list(summaries))


def test_normalization():
    assert normalize_source("HTTPS://Example.org:443/a?utm_source=x&b=1#frag") == "https://example.org/a?b=1"
    assert normalize_source("./docs\\a.md") == "docs/a.md"
    assert normalize_finding("Sodium cells cost  LESS [3].") == normalize_finding("sodium cells cost less")


def test_compare_reports_sources_and_findings_both_ways():
    previous = _bundle(
        "t--2026-11-21",
        _summary("1.1", None, ["listing: a.md Title"]),  # search listings are not findings
        _summary("1.2", "https://example.org/a?utm_source=feed", ["Sodium cells cost less than lithium cells."]),
        _summary("1.3", "docs/old.md", ["Old claim that is now gone."]),
        _summary("1.4", "docs/useless.md", ["Ignored because not useful."], useful=False),
    )
    current = _bundle(
        "t--2026-11-22",
        _summary("1.1", None, ["listing: b.md Title"]),
        _summary("1.2", "https://EXAMPLE.org/a", ["sodium cells cost LESS than lithium cells [2]"]),
        _summary("1.3", "docs/new.md", ["A brand new finding appeared."]),
    )
    changes = compare(previous, current, "t--2026-11-21", date(2026, 11, 21))
    assert [s.source for s in changes.new_sources] == ["docs/new.md"]
    assert [s.source for s in changes.dropped_sources] == ["docs/old.md"]
    assert changes.findings_added == ["A brand new finding appeared."]
    assert changes.findings_no_longer_supported == ["Old claim that is now gone."]
    # Same URL modulo normalization; same finding modulo case, punctuation and citation marks.
    assert changes.unchanged_sources == 1
    assert changes.unchanged_findings == 4  # the shared bullet + the three shared summary sentences

    md = render_markdown(changes)
    assert md.startswith("## What changed since 2026-11-21")
    assert "**New sources (1)**" in md and "`docs/new.md`" in md
    assert "**Findings no longer supported (1)**" in md and "- Old claim that is now gone." in md
    assert "ignored because" not in md.lower()

    report = Report(
        partition_key="t--2026-11-22", question="q", plan_title="p", markdown="# R\n", citations=[], reporter_model="m"
    )
    updated = with_changes(report, changes)
    assert updated.markdown.startswith("# R\n\n## What changed since 2026-11-21")
    assert Report.model_validate_json(updated.model_dump_json()).what_changed == changes


def test_find_previous_picks_latest_earlier_partition_with_a_report(tmp_path):
    lineage = LineageStore.at(tmp_path / "lineage.duckdb")
    root = tmp_path / "artifacts"
    for key in ("t--2026-11-18", "t--2026-11-20", "t--2026-11-21", "t--2026-11-23", "tt--2026-11-21"):
        lineage.register_request(key, "q", {})
    for key, with_report in (
        ("t--2026-11-18", True),
        ("t--2026-11-20", True),
        ("t--2026-11-21", False),
        ("t--2026-11-23", True),
        ("tt--2026-11-21", True),
    ):
        store = ArtifactStore(root, key)
        store.write_text("compressed_summaries.json", _bundle(key).model_dump_json())
        if with_report:
            store.write_text("report.json", "{}")
    previous = find_previous(lineage, root, "t--2026-11-22")
    # 11-21 has no report (failed run), 11-23 is later, tt-- is another topic.
    assert previous is not None and previous.partition_key == "t--2026-11-20" and previous.day == date(2026, 11, 20)
    assert find_previous(lineage, root, "t--2026-11-18") is None
    assert find_previous(lineage, root, "one-off-question-1a2b3c4d") is None
