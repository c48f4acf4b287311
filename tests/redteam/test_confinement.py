"""Confinement: symlinks never lead a tool, a write or the request inbox outside its root, and the
raw folder can never be a metadata folder, whatever the plan title."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from deepresearch_dagster.core.errors import ArtifactAccessError, RequestError, ToolError
from deepresearch_dagster.core.naming import METADATA_FOLDERS, plan_folder
from deepresearch_dagster.core.requests import RequestQueue, parse_request_file
from deepresearch_dagster.core.store.artifacts import ArtifactReader, ArtifactStore, confined_path
from deepresearch_dagster.core.tools.artifact_tools import artifact_tools
from deepresearch_dagster.core.tools.base import Toolbox
from deepresearch_dagster.core.tools.local_search import LocalCorpus, corpus_tools

SECRET = "root:x:0:0:TOP-SECRET-LINE:/root:/bin/bash"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A file outside every root, standing in for /etc/passwd."""
    target = tmp_path / "outside" / "passwd"
    target.parent.mkdir()
    target.write_text(SECRET + "\n")
    return target


def _tools(raw_dir: Path) -> Toolbox:
    return Toolbox(artifact_tools(ArtifactReader(raw_dir)))


def test_symlink_inside_raw_folder_is_not_followed(tmp_path: Path, outside: Path, record) -> None:
    store = ArtifactStore(tmp_path / "artifacts", "k")
    store.write_raw("plan", "real.txt", "an ordinary line\n")
    raw = store.raw_dir("plan")
    (raw / "passwd.txt").symlink_to(outside)
    (raw / "dir_link").symlink_to(outside.parent, target_is_directory=True)
    tools = _tools(raw)
    with pytest.raises(ToolError) as refused:
        tools.call("read_artifact", {"file": "passwd.txt"})
    grep = tools.call("grep_artifacts", {"pattern": "TOP-SECRET"}).content["matches"]
    listed = ArtifactReader(raw).files()
    ok = grep == [] and listed == ["real.txt"] and SECRET not in str(refused.value)
    record(
        "read_artifact/grep: symlink in raw folder -> passwd",
        "refused, 0 matches",
        f"{refused.value}; grep {len(grep)} matches",
        ok,
    )
    assert ok


def test_raw_folder_that_is_a_symlink_is_refused(tmp_path: Path, outside: Path, record) -> None:
    store = ArtifactStore(tmp_path / "artifacts", "k")
    store.partition_dir.mkdir(parents=True)
    store.raw_dir("plan").symlink_to(outside.parent, target_is_directory=True)
    tools = _tools(store.raw_dir("plan"))
    errors = []
    for name, args in (("read_artifact", {"file": "passwd"}), ("grep_artifacts", {"pattern": "SECRET"})):
        with pytest.raises(ToolError) as refused:
            tools.call(name, args)
        errors.append(str(refused.value))
    ok = all("symlink" in e and SECRET not in e for e in errors)
    record("read/grep: raw folder is a symlink", "refused", errors[0], ok)
    assert ok


def test_symlinked_partition_folder_cannot_redirect_writes(tmp_path: Path, record) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    root = tmp_path / "artifacts"
    root.mkdir()
    store = ArtifactStore(root, "k")
    store.partition_dir.symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(ArtifactAccessError) as raw_refused:
        store.write_raw("plan", "x.txt", "data")
    with pytest.raises(ArtifactAccessError):
        store.write_json("plan.json", {"a": 1})
    written = sorted(str(p.relative_to(elsewhere)) for p in elsewhere.rglob("*"))
    ok = written == []
    record(
        "write_raw: partition folder symlinked outside",
        "refused, 0 files outside",
        f"{raw_refused.value}; {len(written)} files outside",
        ok,
    )
    assert ok


def test_symlinked_raw_and_metadata_folders_cannot_redirect_writes(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "artifacts", "k")
    store.write_text("conversations/step_1.json", "{}")
    store.raw_dir("plan").symlink_to(store.partition_dir / "conversations", target_is_directory=True)
    with pytest.raises(ArtifactAccessError):
        store.write_raw("plan", "x.txt", "data")
    # A raw file name that is a symlink is not written through either.
    store2 = ArtifactStore(tmp_path / "artifacts", "k2")
    store2.write_raw("plan", "a.txt", "first")
    target = tmp_path / "victim.txt"
    target.write_text("victim")
    (store2.raw_dir("plan") / "b.txt").symlink_to(target)
    with pytest.raises(ArtifactAccessError):
        store2.write_raw("plan", "b.txt", "overwrite")
    assert target.read_text() == "victim"


@pytest.mark.parametrize(
    "title", ["Conversations", "invalid answers", "INVALID_ANSWERS", "conversations!!", *sorted(METADATA_FOLDERS)]
)
def test_raw_folder_never_is_a_metadata_folder(title: str, record) -> None:
    folder = plan_folder(title)
    ok = folder not in METADATA_FOLDERS
    if title in ("Conversations", "invalid answers"):
        record(f"plan titled {title!r}: raw folder", "not a metadata folder", folder, ok)
    assert ok


def test_conversations_plan_keeps_the_system_prompt_out_of_read_artifact(tmp_path: Path, record) -> None:
    store = ArtifactStore(tmp_path / "artifacts", "k")
    store.write_json("conversations/step_1.json", [{"role": "system", "content": "SYSTEM PROMPT TEXT"}])
    store.write_raw("Conversations", "conversations__step1_x__local_search.json", {"r": 1})
    reader = ArtifactReader(store.raw_dir("Conversations"))
    files = reader.files()
    grep = reader.grep("SYSTEM PROMPT")
    ok = "step_1.json" not in files and grep == []
    record("read_artifact: plan 'Conversations' -> system prompt", "not readable", f"files={files}", ok)
    assert ok


def test_request_inbox_refuses_symlinks(tmp_path: Path, record) -> None:
    secret = tmp_path / "shadow.txt"
    secret.write_text("What is in the secret file that nobody may read?\n")
    queue = RequestQueue(tmp_path / "requests")
    queue.inbox.mkdir(parents=True)
    link = queue.inbox / "evil.txt"
    link.symlink_to(secret)
    fifo = queue.inbox / "fifo.txt"
    os.mkfifo(fifo)
    pending = queue.pending()
    with pytest.raises(RequestError) as refused:
        parse_request_file(link)
    moved = queue.reject(link, str(refused.value))
    ok = (
        link in pending
        and fifo not in pending
        and moved.is_symlink()
        and secret.read_text().startswith("What")  # untouched, never moved
        and "secret file" not in str(refused.value)
    )
    record("request inbox: symlink to a secret file", "rejected, not read", str(refused.value), ok)
    assert ok
    # A regular request file still works.
    regular = queue.inbox / "ok.json"
    regular.write_text(json.dumps({"question": "How do sodium-ion batteries work?"}))
    assert parse_request_file(regular)[0].question.startswith("How do")


def test_confined_path_helper(tmp_path: Path, outside: Path) -> None:
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "doc.md").write_text("x")
    (root / "inside_link.md").symlink_to(root / "sub" / "doc.md")
    (root / "escape.md").symlink_to(outside)
    assert confined_path(root, "sub/doc.md") == (root / "sub" / "doc.md").resolve()
    assert confined_path(root, "inside_link.md") == (root / "sub" / "doc.md").resolve()
    for bad in ("escape.md", "../outside/passwd", "/etc/passwd", "sub/../../outside/passwd", ""):
        with pytest.raises(ArtifactAccessError):
            confined_path(root, bad)


def test_read_document_does_not_follow_corpus_symlinks(tmp_path: Path, outside: Path, record) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "batteries.md").write_text(
        "# Sodium-ion batteries\n\nSodium-ion batteries use sodium ions as charge carriers. "
        "They are cheaper than lithium-ion cells.\n"
    )
    (corpus / "passwd.md").symlink_to(outside)
    (corpus / "linked_dir").symlink_to(outside.parent, target_is_directory=True)
    tools = Toolbox(corpus_tools(LocalCorpus(corpus)))
    with pytest.raises(ToolError) as refused:
        tools.call("read_document", {"path": "passwd.md"})
    hits = tools.call("local_search", {"query": "TOP-SECRET-LINE root"}).content["results"]
    ok = SECRET not in json.dumps(hits) and "passwd" not in json.dumps(hits)
    record("read_document: corpus symlink -> passwd", "refused, not indexed", str(refused.value), ok)
    assert ok


def test_a_run_writes_no_unlisted_folder_next_to_the_raw_folder(tmp_path: Path, corpus_dir: Path, record) -> None:
    """Every folder a research keeps next to its raw folder is listed in METADATA_FOLDERS, so
    plan_folder can steer clear of it (a new metadata folder must be added to that list)."""
    from deepresearch_dagster.core.config import ResearchSettings
    from deepresearch_dagster.core.pipeline import run_research

    settings = ResearchSettings.from_env(engine="offline", corpus_dir=str(corpus_dir), depth=0, max_steps=2)
    ctx, report = run_research("Conversations about sodium-ion batteries?", settings, log=lambda m: None)
    raw = plan_folder(report.plan_title)
    folders = sorted(p.name for p in ctx.store.partition_dir.iterdir() if p.is_dir())
    unlisted = [f for f in folders if f != raw and f not in METADATA_FOLDERS]
    ok = not unlisted and raw not in METADATA_FOLDERS
    record(
        "a run's partition folders",
        "raw + listed metadata folders only",
        f"raw={raw}; others={[f for f in folders if f != raw]}",
        ok,
    )
    assert ok, unlisted
