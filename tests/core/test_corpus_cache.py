"""open_corpus: one index per folder and process, rebuilt whenever the folder changes (never stale);
corpus calls served from the tool-call cache only while the corpus is the same."""

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deepresearch_dagster.core.models import ResearchPlan
from deepresearch_dagster.core.pipeline import research_stage
from deepresearch_dagster.core.tools import local_search
from deepresearch_dagster.core.tools.local_search import cache_scope, corpus_cache_info, folder_state, open_corpus


@pytest.fixture(autouse=True)
def _fresh() -> None:
    local_search.clear_corpus_cache()


def _top(corpus: local_search.LocalCorpus, query: str) -> str:
    hits = corpus.search(query, k=1)
    return hits[0][0].path if hits else ""


def test_a_second_research_reuses_the_index_whatever_its_artifacts_folder(corpus_dir: Path, tmp_path: Path) -> None:
    first = open_corpus(str(corpus_dir), str(tmp_path / "run1" / "corpus_cache"))
    second = open_corpus(str(corpus_dir), str(tmp_path / "run2" / "corpus_cache"))

    assert second is first
    assert corpus_cache_info()["builds"] == 1 and corpus_cache_info()["hits"] == 1


def test_a_changed_file_is_indexed_again(corpus_dir: Path, tmp_path: Path) -> None:
    cache = str(tmp_path / "cache")
    before = open_corpus(str(corpus_dir), cache)
    assert "zeppelin" not in before.get("garden_roses.html").text.lower()

    page = corpus_dir / "garden_roses.html"
    page.write_text(page.read_text("utf-8").replace("late winter", "late winter, when the zeppelin moors"), "utf-8")
    after = open_corpus(str(corpus_dir), cache)

    assert after is not before
    assert "zeppelin" in after.get("garden_roses.html").text.lower()
    assert _top(after, "zeppelin moors") == "garden_roses.html"


def test_same_size_rewrite_with_a_new_mtime_is_indexed_again(corpus_dir: Path, tmp_path: Path) -> None:
    doc = corpus_dir / "sodium_ion_costs.txt"
    text = doc.read_text("utf-8")
    before = open_corpus(str(corpus_dir), str(tmp_path / "cache"))
    stat = doc.stat()

    swapped = text.replace("sodium", "SODIUM", 1)  # same size, different bytes
    assert len(swapped.encode()) == len(text.encode()) and swapped != text
    doc.write_text(swapped, "utf-8")
    os.utime(doc, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    after = open_corpus(str(corpus_dir), str(tmp_path / "cache"))

    assert after is not before and "SODIUM" in after.get("sodium_ion_costs.txt").text


def test_added_and_removed_files_are_seen(corpus_dir: Path, tmp_path: Path) -> None:
    cache = str(tmp_path / "cache")
    open_corpus(str(corpus_dir), cache)
    (corpus_dir / "quokka_census.md").write_text("# Quokka census\n\nRottnest Island counted 12,000 quokkas.\n")
    added = open_corpus(str(corpus_dir), cache)
    assert _top(added, "quokka census rottnest") == "quokka_census.md"

    (corpus_dir / "quokka_census.md").unlink()
    removed = open_corpus(str(corpus_dir), cache)
    assert all(d.path != "quokka_census.md" for d in removed.documents)
    with pytest.raises(local_search.ToolError):
        removed.get("quokka_census.md")


def test_folder_state_ignores_files_the_corpus_does_not_index(corpus_dir: Path) -> None:
    state = folder_state(corpus_dir)
    (corpus_dir / ".hidden.md").write_text("not indexed")
    (corpus_dir / "notes.unknownext").write_text("not indexed")
    assert folder_state(corpus_dir) == state
    (corpus_dir / "new.md").write_text("# New\n\nIndexed.\n")
    assert folder_state(corpus_dir) != state


# -- corpus calls in the tool-call cache ------------------------------------------------------------
def _sodium_plan() -> ResearchPlan:
    step = {"step_id": 1, "title": "Sodium-ion costs", "description": "Find sodium-ion cell costs per kWh."}
    return ResearchPlan.model_validate({"plan_title": "Sodium batteries", "steps": [step]})


def test_corpus_calls_are_served_from_the_tool_cache_until_the_corpus_changes(make_context, corpus_dir: Path) -> None:
    first = research_stage(make_context(partition_key="first"), _sodium_plan()).calls
    assert {c.tool for c in first} >= {"local_search", "read_document"} and not any(c.cached for c in first)

    # Another research (or the same one re-executed on another worker) searches nothing again.
    again = research_stage(make_context(partition_key="again"), _sodium_plan()).calls
    assert all(c.cached for c in again)
    assert [(c.tool, c.arguments, c.sha256) for c in again] == [(c.tool, c.arguments, c.sha256) for c in first]

    # One changed document: every corpus call is a miss, and the read sees the new text.
    doc = corpus_dir / "sodium_ion_costs.txt"
    doc.write_text(doc.read_text("utf-8") + "\nA zeppelin survey priced sodium-ion packs again.\n", "utf-8")
    changed = research_stage(make_context(partition_key="changed"), _sodium_plan())
    assert changed.calls and not any(c.cached for c in changed.calls)
    reads = [c for c in changed.calls if c.tool == "read_document" and c.source == "sodium_ion_costs.txt"]
    assert reads, [c.arguments for c in changed.calls]
    raw = (Path(make_context().settings.artifacts_path) / reads[0].artifact_path).read_text("utf-8")
    assert "zeppelin survey" in raw


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    texts=st.lists(st.text(st.sampled_from("abcde fgh\n"), min_size=1, max_size=40), min_size=1, max_size=3),
    edit=st.integers(min_value=0),
)
def test_the_cache_scope_is_the_corpus_content(tmp_path: Path, texts: list[str], edit: int) -> None:
    """The same documents in another folder share a scope; any changed byte gets another one."""
    folders = [Path(tempfile.mkdtemp(dir=tmp_path)) for _ in range(3)]
    for folder in folders:
        for i, text in enumerate(texts):
            (folder / f"doc{i}.md").write_text(f"# Doc {i}\n\nkiwi {text}\n", "utf-8")
    changed = folders[2] / f"doc{edit % len(texts)}.md"
    changed.write_text(changed.read_text("utf-8") + "x", "utf-8")
    first, copy, other = (cache_scope(local_search.LocalCorpus(folder)) for folder in folders)
    assert first == copy != other


def test_a_call_killed_right_after_it_is_recorded_is_in_the_tool_cache(make_context) -> None:
    """The cache entry is written before the ``tool_calls`` row: a step killed between the two
    (a worker lost) leaves no recorded call that its next attempt would make again."""
    from deepresearch_dagster.core.store.lineage import LineageStore

    def killed(*_args: object) -> None:
        raise SystemExit("killed as the call is recorded")

    with pytest.MonkeyPatch.context() as patch, pytest.raises(SystemExit):
        patch.setattr(LineageStore, "record_tool_call", killed)
        research_stage(make_context(partition_key="killed"), _sodium_plan())
    again = research_stage(make_context(partition_key="killed"), _sodium_plan()).calls
    assert again[0].cached
