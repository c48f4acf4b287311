import json

import pytest

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
