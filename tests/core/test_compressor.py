import json

from deepresearch_dagster.core.models import CompressionResult, ToolCallRecord
from deepresearch_dagster.core.roles.compressor import StepContext, compress
from deepresearch_dagster.core.text import estimate_tokens
from deepresearch_dagster.core.untrusted import data_marker, spotlight

STEP = StepContext(
    "Sodium plan", "Sodium-ion basics", "Find how sodium-ion cells work and their energy density.", "read_document"
)
RAW = (
    "Sodium-ion batteries use hard carbon anodes. Sodium is abundant and cheap. "
    "Commercial cells reached about 160 Wh/kg in 2023. CATL announced a cell in 2021. "
    "They keep 90 percent capacity at minus 20 degrees.\n"
)
VALID = json.dumps(
    {
        "summary_title": "Sodium-ion cells and their energy density figures",
        "summary": "Sodium-ion cells use hard carbon anodes. Sodium is abundant. Cells reached 160 Wh/kg.",
        "extraction": ["CATL announced a cell in 2021."],
        "is_useful": True,
    }
)


def _record(ctx, raw=RAW):
    stored = ctx.store.write_raw(STEP.plan_title, "raw.txt", raw)
    return ToolCallRecord(
        call_id="1.1",
        step_id="1",
        step_title=STEP.step_title,
        step_description=STEP.step_description,
        seq=1,
        tool="read_document",
        arguments={},
        artifact_file="raw.txt",
        artifact_path=stored.relpath,
        bytes=stored.bytes,
        sha256=stored.sha256,
        raw_tokens=estimate_tokens(raw),
        latency_ms=0.0,
    )


def _llm_rows(ctx):
    return ctx.lineage.query("SELECT role, attempt, status, error FROM llm_calls ORDER BY id")


def test_valid_model_answer_is_used(fake_openai, make_context):
    ctx = make_context(engine="openai")
    fake_openai.script("compressor", VALID)
    summary = compress(ctx, STEP, _record(ctx), RAW, "text")
    assert summary.result == CompressionResult.model_validate_json(VALID)
    assert not summary.fallback
    assert [r["status"] for r in _llm_rows(ctx)] == ["ok"]


def test_invalid_answer_is_repaired_once_quoting_the_error(fake_openai, make_context):
    ctx = make_context(engine="openai")
    too_short = json.loads(VALID) | {"summary": "Only one sentence."}
    fake_openai.script("compressor", json.dumps(too_short), VALID)
    summary = compress(ctx, STEP, _record(ctx), RAW, "text")
    assert not summary.fallback
    repair_request = fake_openai.requests_for("compressor")[1]
    assert "summary must have 3-10 sentences" in repair_request["messages"][-1]["content"]
    assert [r["status"] for r in _llm_rows(ctx)] == ["invalid", "ok"]


def test_twice_invalid_answer_falls_back_deterministically(fake_openai, make_context):
    ctx = make_context(engine="openai")
    fake_openai.script("compressor", "not json at all", '{"summary_title": "x"}')
    record = _record(ctx)
    summary = compress(ctx, STEP, record, RAW, "text")
    assert summary.fallback
    CompressionResult.model_validate(summary.result.model_dump())
    assert [r["status"] for r in _llm_rows(ctx)] == ["invalid", "invalid", "fallback"]
    # The raw output is untouched on disk whatever happened to its compression.
    assert ctx.store.resolve_relpath(record.artifact_path).read_text() == RAW


def test_second_compression_is_a_cache_hit_with_no_model_call(fake_openai, make_context):
    ctx = make_context(engine="openai")
    fake_openai.script("compressor", VALID)
    record = _record(ctx)
    first = compress(ctx, STEP, record, RAW, "text")
    second = compress(ctx, STEP, record, RAW, "text")
    assert first.cache_key == second.cache_key and first.result == second.result
    assert len(fake_openai.requests_for("compressor")) == 1


def test_compressor_gets_context_out_of_band_and_raw_as_the_user_message(fake_openai, make_context):
    ctx = make_context(engine="openai")
    fake_openai.script("compressor", VALID)
    compress(ctx, STEP, _record(ctx), RAW, "text")
    system, user = fake_openai.requests_for("compressor")[0]["messages"]
    for part in (STEP.plan_title, STEP.step_title, STEP.step_description, STEP.tool_name):
        assert part in system["content"]
    # The raw output, inside the research's data block (core/untrusted.py), as the system prompt says.
    marker = data_marker(ctx.partition_key)
    assert user["content"] == spotlight(RAW, marker) and f"<<<{marker}" in system["content"]


def test_offline_compression_is_valid_and_marks_noise_not_useful(make_context):
    ctx = make_context()
    useful = compress(ctx, STEP, _record(ctx), RAW, "text")
    assert useful.result.is_useful and useful.injected_tokens > 0
    noise = "Roses are pruned in late winter before new growth. Cut each cane above a bud at an angle.\n"
    rec = _record(ctx, noise)
    not_useful = compress(ctx, STEP, rec, noise, "text")
    assert not not_useful.result.is_useful
    assert not_useful.injected is None and not_useful.injected_tokens == 0


def test_unreachable_model_falls_back_and_is_recorded(make_context, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")  # discard port: refused at once
    ctx = make_context(engine="openai", llm_timeout_s=2.0, llm_max_attempts=2, llm_backoff_base_s=0.01)
    summary = compress(ctx, STEP, _record(ctx), RAW, "text")
    assert summary.fallback
    statuses = [r["status"] for r in _llm_rows(ctx)]
    assert statuses == ["retry", "error", "fallback"]  # one retry on a connection error, then give up


def test_every_attempt_is_a_duckdb_row(fake_openai, make_context):
    ctx = make_context(engine="openai", llm_backoff_base_s=0.01)
    fake_openai.script("compressor", {"status": 429, "headers": {"Retry-After": "0.1"}}, {"status": 502}, VALID)
    compress(ctx, STEP, _record(ctx), RAW, "text")
    rows = ctx.lineage.query("SELECT status, wait_s FROM llm_calls ORDER BY id")
    assert [r["status"] for r in rows] == ["retry", "retry", "ok"]
    assert rows[0]["wait_s"] == 0.1


TRICKY = [
    "“Sodium cells are cheap,” says Ada. “They work in the cold.” Sodium-ion cells use hard carbon anodes here.",
    "Sodium-ion cells reached 160 Wh/kg. group of sodium researchers said so. energy density matters for sodium.",
    "Sodium-ion energy density is rising quickly in 2024.",
    "Sodium ion cell energy density is 160 Wh/kg!!! Really? Yes. Sodium energy density keeps rising in every cell.",
]


def test_extractive_compression_is_always_schema_valid():
    from deepresearch_dagster.core.heuristics.compression import compress_extractively
    from tests.conftest import FIXTURES

    pages = [p.read_text() for p in sorted((FIXTURES / "web_pages").glob("*/source.html"))]
    for raw in [*TRICKY, *pages]:
        payload = {
            "plan_title": "P",
            "step_title": STEP.step_title,
            "step_description": STEP.step_description,
            "tool_name": "fetch_url",
            "raw": raw,
            "kind": "text",
        }
        CompressionResult.model_validate(compress_extractively(payload))
