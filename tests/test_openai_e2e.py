"""The LLM path end to end: real ``openai`` client → scripted server on 127.0.0.1."""

from __future__ import annotations

import json

from deepresearch_dagster.core.config import ResearchSettings
from deepresearch_dagster.core.store.lineage import LineageStore
from tests.conftest import SECRET_KEY
from tests.fakes.openai_server import data_of
from tests.test_dagster_e2e import materialize_question


def test_research_through_the_openai_client(fake_openai, corpus_dir):
    result, key, settings, _ = materialize_question(
        "How do sodium-ion batteries work and what do they cost?",
        {"engine": "openai", "corpus_dir": str(corpus_dir)},
    )
    assert result.success
    roles = {r: len(fake_openai.requests_for(r)) for r in ("planner", "researcher", "compressor", "reporter")}
    # Reporter: artifact lookups, the outline, then one call per section the model writes (4: the
    # suggested next steps are the critic's gaps); every sentence cites, so no rewrite call; then
    # one revision call per section the report's critique names (the fake repeats the summary's
    # sentences in Key findings and states no price, so the summary leaves "what do they cost" open).
    partition = ResearchSettings.from_env().artifacts_path / key
    critique = json.loads((partition / "report_critique" / "draft1_round0.json").read_text())
    named = {issue["section"] for issue in critique["issues"]}
    assert named == {"Key findings", "Executive summary"}
    assert roles["planner"] == 1 and roles["reporter"] == 6 + len(named)
    assert roles["researcher"] >= 2 and roles["compressor"] >= 2

    # The researcher chose tools via OpenAI tool calling, from the pydantic argument models.
    tools = {t["function"]["name"] for t in fake_openai.requests_for("researcher")[0]["tools"]}
    assert {"local_search", "read_document", "grep_artifacts", "read_artifact"} <= tools

    # Researcher requests carry only summaries: never a raw tool output.
    plan = json.loads((partition / "plan.json").read_text())
    assert plan["plan_title"] == "Fake plan: sodium batteries"
    raw_files = list((partition / "fake_plan_sodium_batteries").iterdir())
    assert len(raw_files) == roles["compressor"]
    for request in fake_openai.requests_for("researcher"):
        for message in request["messages"]:
            if message["role"] == "assistant":
                assert set(json.loads(message["content"])) == {
                    "summary_title",
                    "summary",
                    "extraction",
                    "artifact_file",
                }
            for raw in raw_files:
                assert raw.read_text() not in (message["content"] or "")

    lineage = LineageStore.at(settings.duckdb_file)
    rows = lineage.query("SELECT role, model, prompt_tokens FROM llm_calls WHERE partition_key = ?", [key])
    assert {r["role"] for r in rows} == {"planner", "researcher", "compressor", "critic", "reporter"}
    assert all(r["prompt_tokens"] > 0 for r in rows)  # provider-reported usage
    report = (partition / "report.md").read_text()
    assert "[1]" in report and "## References" in report


def test_api_key_never_reaches_artifacts_or_duckdb(fake_openai, corpus_dir, isolated_env):
    result, *_ = materialize_question(
        "What do sodium-ion cells cost?", {"engine": "openai", "corpus_dir": str(corpus_dir)}
    )
    assert result.success
    for path in isolated_env.rglob("*"):
        if path.is_file():
            assert SECRET_KEY.encode() not in path.read_bytes(), f"API key leaked into {path}"


def test_planner_gets_one_repair_then_falls_back_to_the_heuristic_planner(fake_openai, corpus_dir):
    # Issue 10 item 4: the planner has a fallback like every role (it used to fail the research).
    fake_openai.script("planner", '{"plan_title": "x"}', '{"steps": []}')
    result, key, settings, _ = materialize_question(
        "Plan this please?", {"engine": "openai", "corpus_dir": str(corpus_dir)}
    )
    assert result.success
    lineage = LineageStore.at(settings.duckdb_file)
    rows = lineage.query(
        "SELECT status, error, artifact FROM llm_calls WHERE partition_key = ? AND role = 'planner' ORDER BY id",
        [key],
    )
    assert [r["status"] for r in rows] == ["invalid", "invalid", "fallback"]  # one repair, no retry
    assert rows[-1]["error"].startswith("invalid: planner returned invalid output twice")
    partition = settings.artifacts_path / key
    # Every invalid answer is kept verbatim and linked from its llm_calls row.
    assert [r["artifact"] for r in rows[:2]] == ["invalid_answers/planner_1.txt", "invalid_answers/planner_2.txt"]
    assert (partition / "invalid_answers/planner_1.txt").read_text() == '{"plan_title": "x"}'
    assert (partition / "invalid_answers/planner_2.txt").read_text() == '{"steps": []}'
    report = json.loads((partition / "report.json").read_text())
    assert report["fallbacks"] == {"planner": 1}
    assert "fell back to deterministic heuristics instead of the model (planner 1×)" in report["markdown"]


def test_reporter_can_look_up_artifacts_confined_to_the_research(fake_openai, corpus_dir):
    fake_openai.script(
        "reporter",
        {"tool_calls": [("grep_artifacts", {"pattern": "hard carbon"}), ("read_artifact", {"file": "../../x"})]},
    )
    result, *_ = materialize_question(
        "How do sodium-ion cells work?", {"engine": "openai", "corpus_dir": str(corpus_dir)}
    )
    assert result.success

    def section(heading: str) -> list[dict]:
        return next(
            r["messages"]
            for r in fake_openai.requests_for("reporter")
            if f"Write the section: {heading}\n" in r["messages"][-1]["content"]
        )

    # The looked-up text reaches the sections that must cite, not those written from the index.
    assert not [m for m in section("Limitations") if m["role"] == "tool"]
    tool_messages = [json.loads(data_of(m["content"])) for m in section("Analysis") if m["role"] == "tool"]
    assert tool_messages[0]["matches"] and all(
        m["file"].endswith((".txt", ".json")) for m in tool_messages[0]["matches"]
    )
    assert "no artifact named" in tool_messages[1]["error"]


def test_new_compressor_model_recompresses_from_disk_with_zero_tool_calls(fake_openai, corpus_dir, monkeypatch):
    from dagster import AssetKey, DagsterInstance

    from deepresearch_dagster.definitions import build_definitions

    result, key, settings, _ = materialize_question(
        "How do sodium-ion cells work?", {"engine": "openai", "corpus_dir": str(corpus_dir)}
    )
    assert result.success
    lineage = LineageStore.at(settings.duckdb_file)
    tool_rows = lineage.query("SELECT call_id, sha256, created_at FROM tool_calls ORDER BY call_id")
    researcher_before = len(fake_openai.requests_for("researcher"))
    compressor_before = len(fake_openai.requests_for("compressor"))

    monkeypatch.setenv("DEEPRESEARCH_MODEL_COMPRESSOR", "another-compressor")
    again = (
        build_definitions()
        .resolve_job_def("research_job")
        .execute_in_process(
            partition_key=key, instance=DagsterInstance.get(), asset_selection=[AssetKey("compressed_summaries")]
        )
    )
    assert again.success
    assert lineage.query("SELECT call_id, sha256, created_at FROM tool_calls ORDER BY call_id") == tool_rows
    assert len(fake_openai.requests_for("researcher")) == researcher_before
    new_requests = fake_openai.requests_for("compressor")[compressor_before:]
    assert len(new_requests) == len(tool_rows)
    assert {r["model"] for r in new_requests} == {"another-compressor"}
    bundle = json.loads((settings.artifacts_path / key / "compressed_summaries.json").read_text())
    assert bundle["compressor_model"] == "another-compressor"
    versions = lineage.query("SELECT DISTINCT compressor_model FROM summaries ORDER BY 1")
    assert [v["compressor_model"] for v in versions] == ["another-compressor", "gpt-4o-mini"]


def test_a_second_run_of_the_partition_asks_the_model_nothing_and_writes_the_same_report(fake_openai, corpus_dir):
    # Issue 15: a resumed (or re-materialized) research replays the model answers it already has.
    question = "How do sodium-ion batteries work and what do they cost?"
    options = {"engine": "openai", "corpus_dir": str(corpus_dir)}
    result, key, settings, _ = materialize_question(question, options)
    assert result.success
    first = len(fake_openai.requests)
    partition = settings.artifacts_path / key
    report = (partition / "report.md").read_bytes()
    assert first > 0 and any((partition / "llm_cache").glob("*.json"))

    (partition / "report.md").unlink()  # as after a kill between the report's two files
    result, *_ = materialize_question(question, options)
    assert result.success
    assert len(fake_openai.requests) == first, "a second run must not ask the model again"
    assert (partition / "report.md").read_bytes() == report
    lineage = LineageStore.at(settings.duckdb_file)
    replayed = lineage.query(
        "SELECT count(*) AS n FROM llm_calls WHERE partition_key = ? AND status = 'cached'", [key]
    )[0]["n"]
    assert replayed > 0
