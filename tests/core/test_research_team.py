import json

from deepresearch_dagster.core.models import ResearchPlan
from deepresearch_dagster.core.pipeline import plan_stage, research_stage
from deepresearch_dagster.core.untrusted import data_marker, spotlight

INJECTED_KEYS = {"summary_title", "summary", "extraction", "artifact_file"}


def _plan() -> ResearchPlan:
    return ResearchPlan.model_validate(
        {
            "plan_title": "Sodium batteries",
            "steps": [
                {
                    "step_id": 1,
                    "title": "Sodium-ion energy density",
                    "description": "Find sodium-ion energy density figures in Wh/kg.",
                },
                {
                    "step_id": 2,
                    "title": "Pruning roses in winter",
                    "description": "Find when garden roses are pruned and how canes are cut.",
                },
                {
                    "step_id": 3,
                    "title": "Lattice QCD gluon simulations",
                    "description": "Find lattice quantum chromodynamics gluon results.",
                },
            ],
        }
    )


def test_every_call_is_offloaded_and_only_useful_summaries_are_injected(make_context):
    ctx = make_context()
    plan = _plan()
    outputs = research_stage(ctx, plan)
    assert outputs.calls, "the research team made no tool calls"
    raw_dir = ctx.store.raw_dir(plan.plan_title)
    assert sorted(p.name for p in raw_dir.iterdir()) == sorted(c.artifact_file for c in outputs.calls)
    for step_id, messages in outputs.conversations.items():
        injected = [m for m in messages if m["role"] == "assistant"]
        step_summaries = [s for s in outputs.summaries if s.step_id == step_id]
        assert len(injected) == sum(s.result.is_useful for s in step_summaries)
        for message in injected:
            content = json.loads(message["content"])
            assert set(content) == INJECTED_KEYS
            assert content["artifact_file"] in {c.artifact_file for c in outputs.calls}
            serialized = message["content"]
            assert plan.plan_title not in serialized
            raw = (raw_dir / content["artifact_file"]).read_text()
            assert raw not in serialized
    not_useful = [s for s in outputs.summaries if not s.result.is_useful]
    assert not_useful, "the off-topic document should have been judged not useful"
    for s in not_useful:
        assert (raw_dir / s.artifact_file).exists()
        assert all(s.artifact_file not in m["content"] for msgs in outputs.conversations.values() for m in msgs)


def test_conversations_are_persisted_on_disk_and_in_duckdb(make_context):
    ctx = make_context()
    outputs = research_stage(ctx, _plan())
    for step_id, messages in outputs.conversations.items():
        assert json.loads(ctx.store.read_text(f"conversations/step_{step_id}.json")) == messages
        rows = ctx.lineage.query(
            "SELECT content FROM context_messages WHERE partition_key = ? AND step_id = ? ORDER BY position",
            [ctx.partition_key, step_id],
        )
        assert [r["content"] for r in rows] == [m["content"] for m in messages]


def test_duckdb_rows_match_files_by_sha256(make_context):
    ctx = make_context()
    outputs = research_stage(ctx, _plan())
    rows = ctx.lineage.query(
        "SELECT artifact_path, sha256, is_useful FROM tool_calls WHERE partition_key = ?", [ctx.partition_key]
    )
    assert len(rows) == len(outputs.calls)
    from deepresearch_dagster.core.store.artifacts import sha256_bytes

    for row in rows:
        assert sha256_bytes(ctx.store.resolve_relpath(row["artifact_path"]).read_bytes()) == row["sha256"]
        assert row["is_useful"] is not None


def test_tool_call_cap_per_step_is_respected(make_context):
    ctx = make_context(max_tool_calls_per_step=1, depth=0)
    outputs = research_stage(ctx, _plan())
    assert [(c.step_id, c.tool) for c in outputs.calls] == [(s, "local_search") for s in ("1", "2", "3")]


def test_tool_errors_are_recorded_as_raw_output_not_raised(fake_openai, make_context):
    ctx = make_context(engine="openai", depth=0)
    # The scripted researcher asks for a document that does not exist.
    bad_call = {"tool_calls": [("read_document", {"path": "../../etc/passwd"})]}
    done = {"content": "Nothing more to do."}
    # A refused call leaves the conversation as it was: asking again would get the same answer
    # (replayed from the answer cache), so the step ends instead of repeating it to the cap.
    fake_openai.script("researcher", bad_call, bad_call, {"tool_calls": [("no_such_tool", {})]}, done)
    outputs = research_stage(ctx, _plan())
    errors = [c for c in outputs.calls if c.status == "error"]
    assert [(c.step_id, c.tool) for c in errors] == [
        ("1", "read_document"),
        ("2", "read_document"),
        ("3", "no_such_tool"),
    ]
    for call in errors:
        raw = json.loads(ctx.store.resolve_relpath(call.artifact_path).read_text())
        assert "no document" in raw["error"] or "unknown tool" in raw["error"]


def test_offline_plan_is_valid_and_bounded(make_context):
    ctx = make_context(max_steps=3)
    plan = plan_stage(ctx)
    assert 1 <= len(plan.steps) <= 3
    assert [s.step_id for s in plan.steps] == [str(i) for i in range(1, len(plan.steps) + 1)]


def test_raw_context_mode_injects_whole_outputs_without_compressing(make_context):
    ctx = make_context(context_mode="raw")
    outputs = research_stage(ctx, _plan())
    assert all(s.raw_context for s in outputs.summaries)
    assert ctx.lineage.query("SELECT count(*) AS n FROM llm_calls WHERE role = 'compressor'")[0]["n"] == 0
    raw_dir = ctx.store.raw_dir(_plan().plan_title)
    injected = [m["content"] for msgs in outputs.conversations.values() for m in msgs if m["role"] == "assistant"]
    marker = data_marker(ctx.partition_key)  # each inside the research's data block
    assert injected == [spotlight((raw_dir / c.artifact_file).read_text(), marker) for c in outputs.calls]


def test_a_passage_read_in_an_earlier_step_is_not_read_again_but_the_rest_of_its_document_is():
    from deepresearch_dagster.core.roles.researcher import _passage_reads
    from deepresearch_dagster.core.roles.retrieval import rank_results

    listing = json.dumps(
        {
            "query": "risks",
            "results": [
                {"path": "legal/risks.docx", "passage": 4, "passages": 9, "score": 6.0, "title": "Risk register"},
                {"path": "ops/kpis.xlsx", "passage": 1, "passages": 2, "score": 2.0, "title": "KPIs"},
            ],
        }
    )
    ranked = rank_results([listing], "risks litigation")
    reads = _passage_reads([listing], ranked, set(), 2)
    assert [r.arguments for r in reads] == [
        {"path": "legal/risks.docx", "start": 4, "end": 5},
        {"path": "ops/kpis.xlsx", "start": 1, "end": 2},
    ]
    again = _passage_reads([listing], ranked, set(), 2, done={("legal/risks.docx", 4, 5)})
    assert [r.arguments["path"] for r in again] == ["ops/kpis.xlsx"]


def test_a_long_document_read_whole_earlier_is_read_again_at_most_one_passage_per_step():
    from deepresearch_dagster.core.roles.researcher import _passage_reads
    from deepresearch_dagster.core.roles.retrieval import rank_results

    results = [
        {"path": "finance/annual_report.pdf", "passage": 6, "passages": 9, "score": 7.0, "title": "Annual report"},
        {"path": "finance/board_pack.pdf", "passage": 2, "passages": 5, "score": 6.0, "title": "Board pack"},
        {"path": "ops/kpis.xlsx", "passage": 1, "passages": 2, "score": 2.0, "title": "KPIs"},
    ]
    listing = json.dumps({"query": "members churn", "results": results})
    ranked = rank_results([listing], "members churn")
    again = {"finance/annual_report.pdf", "finance/board_pack.pdf"}
    reads = _passage_reads([listing], ranked, set(), 3, again=again)
    assert [r.arguments["path"] for r in reads] == ["finance/annual_report.pdf", "ops/kpis.xlsx"]
