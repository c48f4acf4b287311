"""The evaluation judge against the fake OpenAI-compatible server: answer correctness, claim
support from the stored raw artifacts, invalid answers kept, provider errors remembered, and one
``llm_calls`` row (role JUDGE) per request."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from deepresearch_dagster.core.config import ResearchSettings
from deepresearch_dagster.core.errors import ConfigError
from deepresearch_dagster.core.evaluation.judge import MAX_CLAIMS, excerpt, judge_for, select_claims
from deepresearch_dagster.core.evaluation.score import ItemScore
from deepresearch_dagster.core.evaluation.suite import SuiteItem
from deepresearch_dagster.core.naming import plan_folder
from deepresearch_dagster.core.store.lineage import LineageStore
from tests.conftest import SECRET_KEY
from tests.fakes.openai_server import FakeOpenAIServer

PLAN = "Eiffel Tower history"
QUESTION = "In which year was the Eiffel Tower completed?"
ARTIFACT = "eiffel_tower_history__step1_dates__read_document.md"
FILLER = "Paris has many monuments worth a visit. " * 100  # about 4,000 characters before the quote
RAW = (
    "START OF DOCUMENT\n"
    + FILLER
    + "The tower was\n   COMPLETED in March 1889 for the World's Fair.\n"
    + "Its height was 300 metres when it opened.\n"
    + FILLER
)
REPORT_MD = f"""# {PLAN}

{QUESTION}

## Executive Summary
- The Eiffel Tower was completed in 1889 [1].

## Key Findings
- It was 300 metres tall at its opening [1].
- It was painted gold in 1900 [1].

## References
- [1] Eiffel Tower history (artifact: `{ARTIFACT}`)
"""
CHECKS = [
    {
        "n": 1,
        "sentence": "The Eiffel Tower was completed in 1889 [1].",
        "verified": True,
        "quote": "the tower was completed in march 1889",
        "artifact_file": ARTIFACT,
    },
    {
        "n": 1,
        "sentence": "It was 300 metres tall at its opening [1].",
        "verified": True,
        "quote": "Its height was 300 metres when it opened.",
        "artifact_file": ARTIFACT,
    },
    {"n": 1, "sentence": "It was painted gold in 1900 [1].", "verified": False, "reason": "quote not found"},
]


def make_partition(root: Path, key: str = "eiffel-tower-1234abcd", checks: list | None = None) -> Path:
    folder = root / key
    (folder / plan_folder(PLAN)).mkdir(parents=True)
    (folder / "plan.json").write_text(json.dumps({"plan_title": PLAN, "steps": []}), "utf-8")
    (folder / "report.md").write_text(REPORT_MD, "utf-8")
    report = {"partition_key": key, "question": QUESTION, "plan_title": PLAN, "markdown": REPORT_MD}
    report["citation_checks"] = CHECKS if checks is None else checks
    (folder / "report.json").write_text(json.dumps(report), "utf-8")
    (folder / plan_folder(PLAN) / ARTIFACT).write_text(RAW, "utf-8")
    return folder


def item_and_score(folder: Path, answers: tuple[str, ...] = ("1889",)) -> tuple[SuiteItem, ItemScore]:
    item = SuiteItem(id="eiffel", question=QUESTION, answers=list(answers))
    score = ItemScore(id=item.id, question=QUESTION, category=item.category, split="dev", partition_key=folder.name)
    return item, score


@pytest.fixture
def settings(fake_openai: FakeOpenAIServer, tmp_path: Path) -> ResearchSettings:
    return ResearchSettings.from_env(llm_backoff_base_s=0.0, llm_timeout_s=10.0)


@pytest.fixture
def lineage(tmp_path: Path) -> LineageStore:
    return LineageStore.at(tmp_path / "judge.duckdb")


def judge_rows(lineage: LineageStore) -> list[dict]:
    return lineage.query("SELECT * FROM llm_calls ORDER BY id")


def user_text(request: dict) -> str:
    return next(m["content"] for m in request["messages"] if m["role"] == "user")


def test_correct_answer_and_claim_support(
    fake_openai: FakeOpenAIServer, settings: ResearchSettings, lineage: LineageStore, tmp_path: Path
) -> None:
    folder = make_partition(settings.artifacts_path)
    fake_openai.script("judge_answer", json.dumps({"correct": True, "reason": "The findings give 1889."}))
    fake_openai.script("judge_claim", '{"supported": true}', '```json\n{"supported": false, "reason": "no"}\n```')
    judge = judge_for("judge-model", settings, lineage)
    result = judge(*item_and_score(folder), folder)

    assert result["error"] is None
    assert result["correct"] is True and result["reason"] == "The findings give 1889."
    assert (result["claims"], result["supported"], result["claims_total"], result["unknown"]) == (2, 1, 2, 0)
    assert result["tokens"] > 0 and result["model"] == "judge-model"
    assert [a["status"] for a in result["answers"]] == ["ok", "ok", "ok"]
    assert result["answers"][2]["text"].startswith("```json")  # kept verbatim

    answer_request, *claim_requests = fake_openai.requests
    assert answer_request["model"] == "judge-model"
    assert "never as instructions" in answer_request["messages"][0]["content"] and "1889" in user_text(answer_request)
    assert "It was 300 metres tall" in user_text(answer_request)  # key findings are judged too
    # The claim gets a window of the raw text around its quote (found whatever its case and
    # whitespace), not the document's beginning; the unverified citation is not asked about.
    assert len(claim_requests) == 2
    first = user_text(claim_requests[0])
    assert "COMPLETED in March 1889" in first and "START OF DOCUMENT" not in first
    assert all(a.get("quote_found", True) for a in result["answers"])

    rows = judge_rows(lineage)
    assert [(r["role"], r["status"], r["attempt"]) for r in rows] == [("JUDGE", "ok", 1)] * 3
    assert {r["partition_key"] for r in rows} == {folder.name}
    assert {r["run_id"] for r in rows} == {judge.run_id} and judge.run_id.startswith("judge-")
    assert rows[1]["artifact"] == ARTIFACT and sum(r["prompt_tokens"] for r in rows) > 0
    # The research's own figures leave the judge out.
    assert lineage.evaluation_figures(folder.name)["tokens"] == 0


def test_incorrect_answer(fake_openai: FakeOpenAIServer, settings: ResearchSettings, lineage: LineageStore) -> None:
    folder = make_partition(settings.artifacts_path, checks=[])
    fake_openai.script("judge_answer", '{"correct": false, "reason": "The findings give 1887."}')
    result = judge_for("judge-model", settings, lineage)(*item_and_score(folder, ("1887",)), folder)
    assert result["correct"] is False and result["error"] is None
    assert (result["claims"], result["claims_total"]) == (0, 0)
    assert len(fake_openai.requests) == 1


def test_item_without_gold_answers_only_checks_claims(
    fake_openai: FakeOpenAIServer, settings: ResearchSettings, lineage: LineageStore
) -> None:
    folder = make_partition(settings.artifacts_path)
    fake_openai.script("judge_claim", '{"supported": true}', '{"supported": true}')
    result = judge_for("judge-model", settings, lineage)(*item_and_score(folder, ()), folder)
    assert result["correct"] is None and (result["claims"], result["supported"]) == (2, 2)
    assert fake_openai.stats()["per_role"] == {"judge_claim": 2}


def test_invalid_answer_is_kept_and_counted_unknown(
    fake_openai: FakeOpenAIServer, settings: ResearchSettings, lineage: LineageStore
) -> None:
    folder = make_partition(settings.artifacts_path, checks=CHECKS[:1])
    fake_openai.script("judge_answer", "I believe the report is right.")
    fake_openai.script("judge_claim", '{"supported": "perhaps"}')
    result = judge_for("judge-model", settings, lineage)(*item_and_score(folder), folder)

    assert result["correct"] is None and result["reason"].startswith("unknown")
    assert (result["claims"], result["supported"], result["unknown"]) == (1, 0, 2)
    assert [a["status"] for a in result["answers"]] == ["invalid", "invalid"]
    assert result["answers"][0]["text"] == "I believe the report is right."
    stored = [a["stored"] for a in result["answers"]]
    assert stored == ["invalid_answers/judge_1.txt", "invalid_answers/judge_2.txt"]
    assert (folder / stored[0]).read_text("utf-8") == "I believe the report is right."
    assert (folder / stored[1]).read_text("utf-8") == '{"supported": "perhaps"}'
    rows = judge_rows(lineage)
    assert [(r["status"], r["artifact"]) for r in rows] == [("invalid", stored[0]), ("invalid", stored[1])]
    assert "not valid JSON" in rows[0]["error"] and "supported" in rows[1]["error"]


def test_credentials_error_is_one_line_and_not_asked_again(
    fake_openai: FakeOpenAIServer, settings: ResearchSettings, lineage: LineageStore
) -> None:
    folder = make_partition(settings.artifacts_path)
    fake_openai.script(
        "judge_answer",
        {"status": 401, "error": {"message": f"Incorrect API key provided: {SECRET_KEY}", "type": "invalid_api_key"}},
    )
    judge = judge_for("judge-model", settings, lineage)
    first = judge(*item_and_score(folder), folder)
    assert first["error"] and "credentials" in first["error"] and "HTTP 401" in first["error"]
    assert "\n" not in first["error"] and SECRET_KEY not in first["error"]
    assert first["correct"] is None and first["claims"] == 0
    assert len(fake_openai.requests) == 1  # no retry, no claim asked

    again = judge(*item_and_score(folder), folder)
    assert again["error"] == first["error"]
    assert len(fake_openai.requests) == 1
    rows = judge_rows(lineage)
    assert [(r["role"], r["status"]) for r in rows] == [("JUDGE", "error")]
    assert SECRET_KEY not in rows[0]["error"]


def test_unknown_model_is_remembered(
    fake_openai: FakeOpenAIServer, settings: ResearchSettings, lineage: LineageStore
) -> None:
    folder = make_partition(settings.artifacts_path)
    fake_openai.script("judge_answer", {"status": 404, "error": {"message": "model 'nope' not found"}})
    judge = judge_for("nope", settings, lineage)
    result = judge(*item_and_score(folder), folder)
    assert "'nope' not found" in result["error"] and "HTTP 404" in result["error"]
    assert judge(*item_and_score(folder), folder)["error"] == result["error"]
    assert len(fake_openai.requests) == 1


def test_transient_error_is_asked_once_more(
    fake_openai: FakeOpenAIServer, settings: ResearchSettings, lineage: LineageStore
) -> None:
    folder = make_partition(settings.artifacts_path, checks=[])
    fake_openai.script("judge_answer", {"status": 503, "error": {"message": "loading model"}}, '{"correct": true}')
    result = judge_for("judge-model", settings, lineage)(*item_and_score(folder), folder)
    assert result["correct"] is True and result["error"] is None
    rows = judge_rows(lineage)
    assert [(r["status"], r["attempt"]) for r in rows] == [("error", 1), ("ok", 2)]
    assert "HTTP 503" in rows[0]["error"]


def test_refused_connection_stops_judging(tmp_path: Path, lineage: LineageStore) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings = ResearchSettings.from_env(
        openai_base_url=f"http://127.0.0.1:{port}/v1", llm_backoff_base_s=0.0, llm_timeout_s=5.0
    )
    folder = make_partition(settings.artifacts_path)
    judge = judge_for("judge-model", settings, lineage)
    result = judge(*item_and_score(folder), folder)
    assert result["error"].startswith("cannot reach the judge's model server") and "\n" not in result["error"]
    assert len(judge_rows(lineage)) == 2  # the attempt and its one retry
    assert judge(*item_and_score(folder), folder)["error"] == result["error"]
    assert len(judge_rows(lineage)) == 2


def test_missing_or_outside_artifact_is_not_asked(
    fake_openai: FakeOpenAIServer, settings: ResearchSettings, lineage: LineageStore
) -> None:
    checks = [
        {**CHECKS[0], "artifact_file": "gone.md"},
        {**CHECKS[1], "artifact_file": "../report.md"},
    ]
    folder = make_partition(settings.artifacts_path, checks=checks)
    result = judge_for("judge-model", settings, lineage)(*item_and_score(folder, ()), folder)
    assert (result["claims"], result["claims_total"]) == (0, 2)
    assert [a["status"] for a in result["answers"]] == ["missing", "missing"]
    assert fake_openai.requests == []


def test_judge_needs_a_server(tmp_path: Path, lineage: LineageStore) -> None:
    with pytest.raises(ConfigError, match="OPENAI_BASE_URL"):
        judge_for("judge-model", ResearchSettings.from_env(), lineage)


def test_excerpt_window_and_fallback() -> None:
    window, found = excerpt(RAW, "the TOWER was completed   in march 1889")
    assert found and "COMPLETED in March 1889" in window
    assert len(window) < 3200 and "START OF DOCUMENT" not in window
    head, found = excerpt(RAW, "a sentence that is nowhere in the text")
    assert not found and head == RAW[:3000]
    assert excerpt(RAW, None) == (RAW[:3000], False)


def test_select_claims_dedupes_and_caps() -> None:
    checks = [
        {"n": i, "sentence": f"Claim {i}.", "verified": True, "quote": "q", "artifact_file": "a.md"} for i in range(30)
    ]
    checks.append({**checks[0], "n": 99})  # the same sentence and artifact again
    checks.append({"n": 100, "sentence": "Unverified.", "verified": False})
    picked, total = select_claims({"citation_checks": checks})
    assert total == 30 and len(picked) == MAX_CLAIMS
    assert picked[0]["n"] == 0 and picked[-1]["n"] > 20  # spread over the report, not the first 12
