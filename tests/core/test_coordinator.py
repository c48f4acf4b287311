import pytest

from deepresearch_dagster.core.roles.coordinator import InvalidQuestion, route, validate_question


@pytest.mark.parametrize("bad", ["", "   \n\t ", "x" * 10_001, "bell\x07char", "nul\x00"])
def test_bad_questions_are_refused_with_a_message(bad):
    with pytest.raises(InvalidQuestion) as info:
        validate_question(bad)
    assert str(info.value)


def test_question_is_trimmed_and_keeps_newlines_and_tabs():
    assert validate_question("  line one\n\tline two  ") == "line one\n\tline two"


def test_route_returns_partition_key():
    question, key = route(" What is sodium? ")
    assert question == "What is sodium?"
    assert key.startswith("what-is-sodium-")
