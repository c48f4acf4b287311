"""Request files, the request queue folder and recurring topics."""

from __future__ import annotations

import json
from datetime import date

import pytest

from deepresearch_dagster.core.config import load_settings
from deepresearch_dagster.core.requests import (
    RecurringConfig,
    RequestError,
    RequestQueue,
    load_recurring,
    parse_recurring_key,
    parse_request_file,
    parse_requests,
    recurring_key,
)


def test_request_forms_and_options(tmp_path, corpus_dir):
    (one,) = parse_requests("  What is sodium?  ")
    assert one.question == "What is sodium?" and one.options == {}
    (two,) = parse_requests({"question": "Q one?", "engine": "offline", "options": {"max_steps": 3}})
    assert two.options == {"engine": "offline", "max_steps": 3}
    many = parse_requests(["A?", {"question": "B?", "corpus_dir": str(corpus_dir)}])
    assert [r.question for r in many] == ["A?", "B?"] and many[1].options["corpus_dir"] == str(corpus_dir)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"question": "   "}, "question is empty"),
        ({"question": "ok?", "temperature": 1}, "unknown option(s) temperature"),
        ({"question": "ok?", "max_steps": 99}, "max_steps"),
        ({"question": "ok?", "engine": "gpt9"}, "engine"),
        ({"question": "ok?", "corpus_dir": "/no/such/folder"}, "corpus_dir is not a folder"),
        ({"question": "bad\x01char"}, "control characters"),
        ([], "no request"),
        ([1], "expected a question"),
        (["A?", {"question": ""}], "request 2:"),
    ],
)
def test_invalid_requests_are_rejected_with_a_reason(value, message):
    with pytest.raises(RequestError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_requests(value)


def test_request_files_by_type(tmp_path):
    (tmp_path / "a.txt").write_text("What is a heat island?\n")
    (tmp_path / "b.yaml").write_text("- question: First?\n  max_steps: 2\n- Second?\n")
    (tmp_path / "c.json").write_text(json.dumps({"question": "Third?"}))
    (tmp_path / "d.csv").write_text("q")
    (tmp_path / "e.json").write_text("{not json")
    assert parse_request_file(tmp_path / "a.txt")[0].question == "What is a heat island?"
    assert [r.options for r in parse_request_file(tmp_path / "b.yaml")] == [{"max_steps": 2}, {}]
    assert parse_request_file(tmp_path / "c.json")[0].question == "Third?"
    with pytest.raises(RequestError, match="unsupported request file type"):
        parse_request_file(tmp_path / "d.csv")
    with pytest.raises(RequestError, match="cannot parse"):
        parse_request_file(tmp_path / "e.json")


def test_queue_enqueue_pending_accept_reject(tmp_path):
    queue = RequestQueue(tmp_path / "requests")
    assert queue.pending() == []
    path = queue.enqueue("What is sodium?", {"engine": "offline"})
    (queue.inbox / ".partial.json.tmp").write_text("{")  # a write in progress is not picked up
    assert queue.pending() == [path]
    assert json.loads(path.read_text()) == {"question": "What is sodium?", "options": {"engine": "offline"}}
    with pytest.raises(RequestError):
        queue.enqueue("   ")
    accepted = queue.accept(path)
    assert accepted.parent == queue.accepted and not path.exists()
    bad = queue.inbox / "bad.txt"
    bad.write_text("")
    rejected = queue.reject(bad, "the question is empty")
    assert rejected.parent == queue.rejected
    assert (queue.rejected / "bad.txt.error.txt").read_text() == "the question is empty\n"
    # A second file with the same name does not overwrite the first.
    bad.write_text("")
    assert queue.reject(bad, "again").name == "bad__2.txt"


def test_recurring_keys_round_trip_and_never_match_one_off_keys():
    key = recurring_key("solid-state-batteries", date(2026, 11, 22))
    assert key == "solid-state-batteries--2026-11-22"
    assert parse_recurring_key(key) == ("solid-state-batteries", date(2026, 11, 22))
    assert parse_recurring_key("what-is-sodium-1a2b3c4d") is None
    assert parse_recurring_key("x--2026-13-40") is None


def test_recurring_file(tmp_path, monkeypatch):
    path = tmp_path / "recurring.yaml"
    monkeypatch.setenv("DEEPRESEARCH_RECURRING", str(path))
    assert load_recurring(load_settings().recurring_path).topics == []  # no file, no topics
    path.write_text(
        "topics:\n"
        "  - question: What changed in solid-state batteries this week?\n"
        "    cron: '0 7 * * 1'\n"
        "    options: {engine: offline}\n"
        "  - question: Urban heat news\n"
        "    key: Heat Islands!\n"
        "    timezone: Europe/Berlin\n"
        "    status: stopped\n"
    )
    topics = load_recurring(load_settings().recurring_path).topics
    assert [t.slug for t in topics] == ["what-changed-in-solid-state-batteries-this-week", "heat-islands"]
    assert topics[0].partition_key(date(2026, 1, 5)) == "what-changed-in-solid-state-batteries-this-week--2026-01-05"
    assert topics[1].status == "stopped" and topics[0].options == {"engine": "offline"}

    path.write_text("topics:\n  - question: A?\n    key: same\n  - question: B?\n    key: same\n")
    with pytest.raises(RequestError, match="share the partition slug same"):
        load_recurring(load_settings().recurring_path)
    path.write_text("topics:\n  - question: A?\n    timezone: Mars/Olympus\n")
    with pytest.raises(RequestError, match="unknown time zone"):
        load_recurring(load_settings().recurring_path)
    path.write_text("topics:\n  - question: A?\n    surprise: 1\n")
    with pytest.raises(RequestError, match="surprise"):
        load_recurring(load_settings().recurring_path)
    assert RecurringConfig().topics == []

    (tmp_path / "docs").mkdir()
    path.write_text("topics:\n  - question: A?\n    options: {corpus_dir: docs}\n")
    topics = load_recurring(load_settings().recurring_path).topics
    assert topics[0].options["corpus_dir"] == str((tmp_path / "docs").resolve())
