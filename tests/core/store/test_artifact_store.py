import json

import pytest

from deepresearch_dagster.core.errors import ArtifactIntegrityError
from deepresearch_dagster.core.store.artifacts import (
    ArtifactAccessError,
    ArtifactReader,
    ArtifactStore,
    partition_folder,
    sha256_bytes,
)


def test_raw_write_is_atomic_and_leaves_no_temp_files(tmp_path):
    store = ArtifactStore(tmp_path, "key-1")
    stored = store.write_raw("My Plan", "a.txt", "hello\n")
    folder = store.raw_dir("My Plan")
    assert [p.name for p in folder.iterdir()] == ["a.txt"]
    assert stored.sha256 == sha256_bytes(b"hello\n") and stored.bytes == 6
    assert stored.relpath == "key-1/my_plan/a.txt"


def test_json_content_is_canonical(tmp_path):
    store = ArtifactStore(tmp_path, "k")
    one = store.write_raw("p", "x.json", {"b": 1, "a": [1, 2]})
    two = store.write_raw("p", "y.json", {"a": [1, 2], "b": 1})
    assert one.sha256 == two.sha256
    assert json.loads(one.text) == {"a": [1, 2], "b": 1}


@pytest.mark.parametrize("name", ["../x.txt", "a/b.txt", "..", "", "a\\b", "/etc/passwd"])
def test_raw_names_cannot_escape(tmp_path, name):
    with pytest.raises(ArtifactAccessError):
        ArtifactStore(tmp_path, "k").write_raw("p", name, "x")


def test_unsafe_partition_keys_map_to_safe_folders():
    assert partition_folder("ok-key_1") == "ok-key_1"
    folder = partition_folder("../../Evil Key")
    assert "/" not in folder and ".." not in folder


def test_grep_and_read_are_confined_to_the_research_folder(tmp_path):
    store = ArtifactStore(tmp_path, "k")
    store.write_raw("p", "one.txt", "alpha line\nbeta line\n")
    store.write_text("report.md", "alpha outside the raw folder\n")
    (tmp_path / "secret.txt").write_text("alpha secret")
    reader = ArtifactReader(store.raw_dir("p"))
    assert reader.grep("alpha") == [{"file": "one.txt", "line": 1, "text": "alpha line"}]
    assert reader.read("one.txt", offset=6, limit=4)["content"] == "line"
    for bad in ("../report.md", "../../secret.txt", "report.md"):
        with pytest.raises(ArtifactAccessError):
            reader.read(bad)


def test_grep_treats_invalid_regex_as_literal(tmp_path):
    store = ArtifactStore(tmp_path, "k")
    store.write_raw("p", "one.txt", "cost [usd\n")
    assert ArtifactReader(store.raw_dir("p")).grep("[usd")[0]["line"] == 1


def test_read_verified_returns_the_bytes_or_raises_on_a_missing_or_changed_file(tmp_path):
    store = ArtifactStore(tmp_path, "k")
    stored = store.write_raw("p", "a.txt", "hello\n")
    assert store.read_verified(stored.relpath, stored.sha256) == b"hello\n"
    assert store.verify(stored.relpath, stored.sha256) is True

    (tmp_path / stored.relpath).write_text("tampered")
    with pytest.raises(ArtifactIntegrityError, match="changed"):
        store.read_verified(stored.relpath, stored.sha256)
    assert store.verify(stored.relpath, stored.sha256) is False

    (tmp_path / stored.relpath).unlink()
    with pytest.raises(ArtifactIntegrityError, match="missing"):
        store.read_verified(stored.relpath, stored.sha256)
    assert store.verify(stored.relpath, stored.sha256) is None


def test_read_verified_is_confined_to_the_research(tmp_path):
    other = ArtifactStore(tmp_path, "other").write_raw("p", "a.txt", "x")
    with pytest.raises(ArtifactAccessError):
        ArtifactStore(tmp_path, "k").read_verified(other.relpath, other.sha256)
    assert ArtifactStore(tmp_path, "k").verify(other.relpath, other.sha256) is None


def test_stale_temp_files_of_a_killed_writer_are_removed_fresh_ones_kept(tmp_path):
    import os
    import time

    from deepresearch_dagster.core.store.artifacts import ArtifactStore

    store = ArtifactStore(tmp_path, "p-1")
    raw = store.raw_dir("Plan")
    raw.mkdir(parents=True)
    old = raw / ".step1_x.json.abc123.tmp"
    fresh = store.partition_dir / ".report.md.def456.tmp"
    keep = raw / "step1_x.json"
    for path in (old, fresh, keep):
        path.write_text("partial")
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    os.utime(keep, (time.time() - 3600, time.time() - 3600))
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / ".victim.tmp").write_text("x")
    os.utime(outside / ".victim.tmp", (0, 0))
    (store.partition_dir / "link").symlink_to(outside)
    assert store.remove_stale_temps() == [old.relative_to(store.partition_dir).as_posix()]
    assert not old.exists() and fresh.exists() and keep.exists() and (outside / ".victim.tmp").exists()


def test_raw_output_is_fsynced_before_it_is_used_a_cached_answer_right_after(tmp_path, monkeypatch):
    """A tool's raw output is on disk (fsync'd) when write_raw returns; a model answer in the
    response cache is complete and visible at once, its fsync done by the background thread."""
    import os
    import threading

    from deepresearch_dagster.core.store import artifacts
    from deepresearch_dagster.core.store.response_cache import ResponseCache

    synced: list[str] = []
    real_fsync = os.fsync

    def recording(fd):
        synced.append(threading.current_thread().name)
        real_fsync(fd)

    monkeypatch.setattr(artifacts.os, "fsync", recording)
    store = ArtifactStore(tmp_path, "k")
    store.write_raw("Plan", "a.txt", "raw")
    assert synced == ["MainThread"]
    cache = ResponseCache(store)
    cache.put("key", {"content": "answer"})
    assert cache.get("key") == {"format": 1, "content": "answer"}  # visible before its fsync
    artifacts._SYNCERS[os.getpid()].submit(lambda: None).result()  # the pending fsync is done
    assert synced[0] == "MainThread" and synced[1].startswith("fsync") and len(synced) == 2
