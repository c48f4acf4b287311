"""Coordinator: validates the question and routes it to the planner. No tools, no reasoning."""

from __future__ import annotations

from ..errors import InvalidQuestion
from ..naming import partition_key_for
from ..text import has_forbidden_control_chars

MAX_QUESTION_CHARS = 10_000


def validate_question(question: str) -> str:
    if not isinstance(question, str):
        raise InvalidQuestion("the question must be text")
    try:
        question.encode("utf-8")
    except UnicodeEncodeError:  # undecodable bytes in argv arrive as lone surrogates
        raise InvalidQuestion("the question is not valid UTF-8 text") from None
    cleaned = question.strip()
    if not cleaned:
        raise InvalidQuestion("the question is empty")
    if len(cleaned) > MAX_QUESTION_CHARS:
        raise InvalidQuestion(f"the question has {len(cleaned)} characters; the limit is {MAX_QUESTION_CHARS}")
    if has_forbidden_control_chars(cleaned):
        raise InvalidQuestion("the question contains control characters (only newlines and tabs are allowed)")
    return cleaned


def route(question: str) -> tuple[str, str]:
    """Return ``(question, partition_key)`` for the planner."""
    cleaned = validate_question(question)
    return cleaned, partition_key_for(cleaned)
