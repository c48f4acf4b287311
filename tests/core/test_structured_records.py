"""Structured records — log entries, ``Key: value`` blocks — are units of a tool output (issue 29):
one unit each, read like a table row with its header, relevant when their field names are what the
step asks about, and verified when a finding quotes one."""

from __future__ import annotations

import re
import string

from hypothesis import given
from hypothesis import strategies as st

from deepresearch_dagster.core.heuristics.compression import compress_extractively, extract_units
from deepresearch_dagster.core.roles.citations import normalize, record_support, verify_citations
from deepresearch_dagster.core.text import key_value_records

# The shape `git log` takes in the reference MCP git server (and most log or listing tools).
LOG = """Commit history:
Commit: 2bd41f4fecdc924b603e060e7233abac232533ab
Author: Dev
Date: 2026-11-26 06:58:40+00:00
Message: Renew TLS certificates automatically after the billing outage in incident 17


Commit: 47345f53d9d86d808ce20da21f1d9f94cd2eb93d
Author: Dev
Date: 2026-11-26 06:57:10+00:00
Message: Retry failed ingestion jobs on transient database errors


Commit: 45d8224dcc063913a523de91b32137c72743e99a
Author: Dev
Date: 2026-11-26 06:55:02+00:00
Message: Move the ingestion queue to Postgres because Redis lost jobs on restart
"""

STEP = {"step_title": "What changed in the last commits of this repository", "plan_title": "Repository changes"}

MEMO = """To: Board
From: Finance
Date: 2026-01-10

The quarterly revenue of Tidewater Robotics rose to 42 million dollars on strong actuator sales.
Operating costs fell by 8 percent after the move to a single supplier for motors.
The board approved a second production line in Gdansk for the next financial year.
"""


def test_a_log_is_records_that_answer_a_step_asking_about_them():
    units = extract_units(LOG)
    assert [u.kind for u in units] == ["record"] * 3
    assert units[0].text.startswith("Commit: 2bd41f4fecdc924b603e060e7233abac232533ab; Author: Dev; Date: ")
    assert "commit" in units[0].keys and "commit" not in units[0].terms  # what it is, not what it says
    out = compress_extractively({"raw": LOG, "kind": "text", "tool_name": "git.git_log", **STEP})
    assert out["is_useful"]
    # The log's order is its ranking: its first entries lead the summary, newest first.
    assert [m[:7] for m in re.findall(r"Commit: (\w+)", out["summary"])] == ["2bd41f4", "47345f5", "45d8224"]
    for message in ("Renew TLS", "Retry failed", "Move the ingestion"):
        assert message in out["summary"]
    # The same records say nothing to a step about something else.
    other = compress_extractively({"raw": LOG, "kind": "text", "step_title": "Sodium battery costs", "plan_title": "x"})
    assert not other["is_useful"]


def test_a_memo_header_above_prose_stays_prose():
    assert key_value_records(MEMO.splitlines()) == []
    assert all(u.kind != "record" for u in extract_units(MEMO))


def test_a_finding_quoting_a_record_is_verified_and_a_changed_one_is_not():
    record = extract_units(LOG)[1].text
    entry = {"artifact_file": "log.txt", "summary": record + ".", "extraction": []}
    _, checks = verify_citations(f"- {record}. [1]\n", {1: [entry]}, {"log.txt": LOG})
    assert [c.verified for c in checks] == [True] and "47345f5" in checks[0].quote
    forged = record.split("Message: ")[0] + "Message: Drop the billing tables to save disk space"
    _, checks = verify_citations(f"- {forged}. [1]\n", {1: [entry]}, {"log.txt": LOG})
    assert [c.verified for c in checks] == [False]


_WORD = st.text(string.ascii_lowercase, min_size=2, max_size=8)
_VALUE = st.lists(_WORD, min_size=1, max_size=6).map(" ".join)


@given(st.lists(st.tuples(_VALUE, _VALUE, _VALUE), min_size=2, max_size=6))
def test_every_record_of_a_listing_is_found_and_supports_its_own_quote(entries):
    raw = "\n\n".join(f"Name: {a}\nOwner: {b}\nStatus: {c}" for a, b, c in entries)
    records = key_value_records(raw.splitlines())
    assert len(records) == len(entries)
    for record, (a, b, c) in zip(records, entries, strict=True):
        assert record.text == f"Name: {a}; Owner: {b}; Status: {c}"
        assert record_support(normalize(record.text), raw) is not None


# `git show` in the reference server: a header, the message, then a unified diff.
SHOW = """commit 47345f53d9d86d808ce20da21f1d9f94cd2eb93d
Author: Dev <dev@example.org>
Date:   2026-11-26 06:57:10 +0000

    Retry failed ingestion jobs on transient database errors

--- a/worker.toml
+++ b/worker.toml
@@ -1,3 +1,3 @@
 queue = "postgres"
-retries = 0
+retries = 3
 timeout_s = 30
"""


def test_a_diff_is_changes_that_answer_a_step_about_what_changed():
    units = extract_units(SHOW)
    (change,) = [u for u in units if u.kind == "record"]
    assert change.text == "Changed file: worker.toml; removed: retries = 0; added: retries = 3"
    assert "queue" not in change.text  # context lines did not change
    out = compress_extractively({"raw": SHOW, "kind": "text", "tool_name": "git.git_show", **STEP})
    assert out["is_useful"] and "added: retries = 3" in " ".join([out["summary"], *out["extraction"]])
    entry = {"artifact_file": "show.txt", "summary": change.text + ".", "extraction": []}
    _, checks = verify_citations(f"- {change.text}. [1]\n", {1: [entry]}, {"show.txt": SHOW})
    assert [c.verified for c in checks] == [True]
    forged = "- Changed file: worker.toml; added: retries = 5. [1]\n"
    _, checks = verify_citations(forged, {1: [entry]}, {"show.txt": SHOW})
    assert [c.verified for c in checks] == [False]
