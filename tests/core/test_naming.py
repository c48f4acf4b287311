import pytest

from deepresearch_dagster.core.naming import artifact_filename, partition_key_for, plan_folder, slugify


def test_filename_follows_the_convention():
    name = artifact_filename("Solid-State Batteries", 1, "Find Background", "local_search", "json")
    assert name == "solid_state_batteries__step1_find_background__local_search.json"


def test_filename_is_deterministic_and_never_uses_summary_text():
    a = artifact_filename("Plan", "2", "Step Two", "read_document", "txt")
    b = artifact_filename("Plan", 2, "Step Two", "read_document", "txt")
    assert a == b == "plan__step2_step_two__read_document.txt"


def test_repeated_tool_call_in_a_step_gets_an_ordinal_suffix():
    first = artifact_filename("P", 1, "S", "read_document", "txt", ordinal=1)
    second = artifact_filename("P", 1, "S", "read_document", "txt", ordinal=2)
    assert first != second
    assert second == "p__step1_s__read_document__2.txt"


@pytest.mark.parametrize("hostile", ["../../etc/passwd", "..\\..\\windows", "/abs/path", "a/../b", "..", "\x00x"])
def test_traversal_is_impossible(hostile):
    name = artifact_filename(hostile, hostile, hostile, hostile, "txt")
    assert "/" not in name and "\\" not in name and ".." not in name.replace("__", "")
    assert not name.startswith(".")


def test_unicode_is_folded_to_ascii_and_empty_becomes_untitled():
    assert slugify("Énergie Über Café") == "energie_uber_cafe"
    assert slugify("日本語") == "untitled"
    assert slugify("   ") == "untitled"
    assert artifact_filename("", "", "", "", "txt") == "untitled__stepuntitled_untitled__untitled.txt"


def test_long_names_stay_under_255_bytes_and_distinct():
    long_a = "word " * 200 + "alpha"
    long_b = "word " * 200 + "beta"
    a = artifact_filename(long_a, "9" * 50, long_a, "t" * 300, "json", ordinal=99)
    b = artifact_filename(long_b, "9" * 50, long_b, "t" * 300, "json", ordinal=99)
    assert len(a.encode()) < 255 and len(b.encode()) < 255
    assert a != b
    assert len(plan_folder(long_a)) <= 60


def test_partition_key_is_safe_and_hash_distinguishes_questions():
    k1 = partition_key_for("What is X?")
    k2 = partition_key_for("What is X!")
    assert k1.startswith("what-is-x-") and k1 != k2
    assert partition_key_for("  What is X?  ") == k1
    assert all(c.isalnum() or c == "-" for c in k1)


def test_unsupported_extension_is_refused():
    with pytest.raises(ValueError):
        artifact_filename("p", 1, "s", "t", "exe")
