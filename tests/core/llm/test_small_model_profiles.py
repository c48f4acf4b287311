"""Small-model profiles (issue 24 item 4): the context window read from the server (llama.cpp
``/props``, Ollama ``/api/show``, or named by an overflow error), every prompt
fitted to it, llama.cpp's prompt cache asked for, each answer's prompt-processing and generation
speed in lineage, and the expected remaining time in the progress lines."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from deepresearch_dagster.core.config import DEFAULT_MODELS, ResearchSettings
from deepresearch_dagster.core.eta import Eta, rough_duration
from deepresearch_dagster.core.heuristics import OFFLINE_MODEL
from deepresearch_dagster.core.llm.openai_engine import (
    FIT_CHARS_PER_TOKEN,
    FIT_FRAMING_TOKENS,
    FIT_MIN_CHARS,
    OpenAIEngine,
    RetryPolicy,
    fit_messages,
)
from deepresearch_dagster.core.llm.server_info import (
    OLLAMA_DEFAULT_CTX,
    llamacpp_window,
    ollama_window,
    window_from_error,
)
from deepresearch_dagster.core.pipeline import run_research
from tests.fakes.openai_server import FakeOpenAIServer

SYSTEM = {"role": "system", "content": "ROLE: compressor\nCompress the next message. " * 5}
SCHEMA = {"title": "Compression", "type": "object"}


def _engine(server: FakeOpenAIServer, **kw) -> OpenAIEngine:
    return OpenAIEngine(
        models=dict(DEFAULT_MODELS), base_url=server.base_url, retry=RetryPolicy(base_s=0.01, max_s=0.05), **kw
    )


def _size(messages) -> int:
    return sum(len(str(m.get("content") or "")) for m in messages)


# -- what servers say ---------------------------------------------------------------------------


def test_each_servers_answer_gives_its_window():
    assert llamacpp_window({"default_generation_settings": {"n_ctx": 8192}}) == 8192
    assert llamacpp_window({"n_ctx": 4096}) == 4096  # older llama-server builds
    assert llamacpp_window({"detail": "Not Found"}) is None
    show = {"model_info": {"qwen2.context_length": 32768}, "parameters": "stop <|im_end|>\nnum_ctx 16384"}
    assert ollama_window(show) == 16384
    assert ollama_window({"model_info": {"qwen2.context_length": 32768}}) == OLLAMA_DEFAULT_CTX
    assert ollama_window({"model_info": {"gemma3.context_length": 2048}}) == 2048  # never above the model's


def test_overflow_errors_name_the_window():
    assert window_from_error("Requested tokens (9210) exceed context window of 8192") == 8192  # llama-cpp-python
    assert (
        window_from_error("request (5000 tokens) exceeds the available context size (4096 tokens), try increasing it")
        == 4096
    )  # llama-server
    assert window_from_error("This model's maximum context length is 128000 tokens. However, ...") == 128000
    assert window_from_error("the server is busy") is None


# -- fitting --------------------------------------------------------------------------------------

texts = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=6000)


@given(
    system=texts,
    users=st.lists(texts, min_size=1, max_size=4),
    window=st.integers(min_value=512, max_value=4096),
    max_tokens=st.integers(min_value=0, max_value=3000),
)
def test_fitted_messages_fit_keep_heads_and_cut_instructions_last(system, users, window, max_tokens):
    messages = [{"role": "system", "content": system}, *({"role": "user", "content": u} for u in users)]
    fitted = fit_messages(messages, window, max_tokens)
    assert [m["role"] for m in fitted] == [m["role"] for m in messages]
    budget = (window - min(max_tokens, window // 2) - FIT_FRAMING_TOKENS * (len(messages) + 1)) * FIT_CHARS_PER_TOKEN
    if _size(messages) <= budget:
        assert fitted == messages  # nothing cut when it fits
        return
    floor = sum(min(len(m["content"]), FIT_MIN_CHARS + 100) for m in messages)
    assert _size(fitted) <= max(budget, floor)
    for before, after in zip(messages, fitted, strict=True):
        if after != before:  # a cut message keeps its head and says it was cut
            head, _, note = after["content"].rpartition("\n[... ")
            assert before["content"].startswith(head) and "cut to fit the model's context window" in note
    if fitted[0] != messages[0]:  # the instructions were cut only when the rest could not give more
        assert all(len(f["content"]) <= FIT_MIN_CHARS + 100 for f in fitted[1:])


def test_a_llama_server_says_its_window_and_every_prompt_is_fitted_with_the_cache_asked(fake_openai):
    with FakeOpenAIServer(n_ctx=2048) as server:
        engine = _engine(server)
        raw = "Urban surfaces store heat during the day. " * 1000  # about 10,000 tokens
        completion = engine.complete("compressor", [SYSTEM, {"role": "user", "content": raw}], {}, json_schema=SCHEMA)
        again = engine.complete("compressor", [SYSTEM, {"role": "user", "content": "short"}], {}, json_schema=SCHEMA)
    assert engine.caps(DEFAULT_MODELS["compressor"]).server_kind == "llama.cpp"
    assert engine.context_window(DEFAULT_MODELS["compressor"]) == 2048
    assert server.stats()["rejected"] == 0  # fitted before it was sent: never refused
    first, second = server.requests
    assert first["messages"][0]["content"] == SYSTEM["content"]  # the instructions whole
    assert "cut to fit the model's context window of 2048 tokens" in first["messages"][1]["content"]
    assert first["cache_prompt"] is True and second["cache_prompt"] is True
    # The server's own timings: prompt read at 200 tokens/s, answer written at 20 tokens/s.
    assert (completion.prompt_tps, completion.gen_tps) == (200.0, 20.0)
    assert again.cached_tokens > 0  # the instructions, shared with the previous request


def test_a_server_that_names_its_window_only_in_an_overflow_error_is_fitted_from_then_on(fake_openai):
    with FakeOpenAIServer(window_in_error=2048) as server:
        engine = _engine(server)
        long = [SYSTEM, {"role": "user", "content": "Asphalt absorbs sunlight. " * 2000}]
        first = engine.complete("compressor", long, {}, json_schema=SCHEMA)
        engine.complete("compressor", [SYSTEM, {"role": "user", "content": "Roofs. " * 5000}], {}, json_schema=SCHEMA)
    assert [a.status for a in first.attempts] == ["shrink"] and "fitted to 2048 tokens" in first.attempts[0].error
    assert server.stats()["rejected"] == 1  # the second long prompt was fitted before it was sent
    assert "cache_prompt" not in server.requests[-1]  # not a llama-server: no llama.cpp fields
    assert first.gen_tps is not None and first.prompt_tps is not None  # measured on the stream


def test_tool_definitions_take_their_share_of_the_window():
    messages = [{"role": "user", "content": "x" * 8000}]
    tools = [{"type": "function", "function": {"name": "read", "description": "d" * 2000}}]
    plain, with_tools = _size(fit_messages(messages, 2048, 256)), _size(fit_messages(messages, 2048, 256, tools))
    assert plain - with_tools >= len(json.dumps(tools)) - 100


def test_a_configured_window_wins_and_no_server_question_is_needed(fake_openai):
    engine = _engine(fake_openai, context_window=1024)
    engine.complete("compressor", [SYSTEM, {"role": "user", "content": "Parks cool. " * 3000}], {}, json_schema=SCHEMA)
    assert _size(fake_openai.requests[0]["messages"]) <= 1024 * FIT_CHARS_PER_TOKEN


# -- lineage and progress -------------------------------------------------------------------------


def test_speeds_reach_lineage_and_progress_lines_say_the_time_left(corpus_dir, monkeypatch):
    with FakeOpenAIServer(n_ctx=32768) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        settings = ResearchSettings.from_env(engine="openai", corpus_dir=str(corpus_dir), depth=0, max_steps=2)
        lines: list[str] = []
        ctx, report = run_research("How do sodium-ion batteries work?", settings, log=lines.append)
    rows = ctx.lineage.query(
        "SELECT role, prompt_tps, gen_tps FROM llm_calls WHERE partition_key = ? AND status = 'ok'", [ctx.partition_key]
    )
    assert rows and all(r["prompt_tps"] == 200.0 and r["gen_tps"] == 20.0 for r in rows)
    speed = ctx.lineage.model_speed(ctx.partition_key, OFFLINE_MODEL)
    assert {k: speed[k] for k in ("prompt_tps", "gen_tps", "answers")} == {
        "prompt_tps": 200.0,
        "gen_tps": 20.0,
        "answers": len(rows),
    }
    assert speed["overall_tps"] > 0
    steps = [line for line in lines if line.startswith("step ")]
    assert len(steps) == 2 and "left)" not in steps[0] and steps[1].endswith("left)")
    assert report.markdown


def test_the_estimate_extrapolates_the_parts_done():
    now = [100.0]
    eta = Eta(total=4, started=100.0, clock=lambda: now[0])
    assert eta.note() == ""  # nothing measured yet
    now[0], eta.done = 160.0, 1
    assert eta.note() == " (about 3 min left)"
    now[0], eta.done = 190.0, 3
    assert eta.note() == " (about 30 s left)"
    assert rough_duration(5400) == "1 h 30 min" and rough_duration(1) == "5 s"
    assert json.dumps(eta.left_s())


def test_the_closing_figures_give_the_answers_accepted_and_the_model_speed(capsys):
    from deepresearch_dagster.cli.research import _print_figures

    summary = {
        **dict.fromkeys(("tool_calls", "useful", "llm_calls", "raw_tokens", "injected_tokens"), 1),
        "context_reduction": 90.0,
        "sufficiency_scores": [],
        "verified_citations": 3,
        "unverified_citations": 0,
        "fallbacks": {},
        "critique": {},
        "drafts": {},
        "skipped_documents": [],
        "budget": {"wall_s": {"spent": 936.0, "cap": 3600.0}},
        "model_answers": {"asked": 17, "accepted": 16},
        "model_speed": {"prompt_tps": 41.26, "gen_tps": 2.94, "answers": 16, "overall_tps": 1.923},
        **dict.fromkeys(("report_md", "artifacts_dir", "duckdb"), "x"),
    }
    _print_figures(summary)
    out = " ".join(capsys.readouterr().out.split())
    assert "model answers accepted │ 16 of 17" in out
    assert "prompt 41.3 tokens/s, answer 2.9 tokens/s" in out and "936.0 s of 3,600.0 s" in out
    assert "answer tokens per model second │ 1.92 tokens/s" in out


def test_a_server_slower_than_assumed_gets_longer_windows_and_deadlines_never_shorter(fake_openai):
    engine = _engine(fake_openai, timeout=5.0)
    caps, long_prompt = engine.caps(DEFAULT_MODELS["compressor"]), "word " * 2000
    before = engine.idle_window(long_prompt, caps), engine.timeout_for(100, caps)
    fake_openai.stream_interval_s = 0.1  # a slow writer...
    fake_openai.script("compressor", {"sleep": 1.0})  # ...and a slow reader
    slow = engine.complete("compressor", [SYSTEM, {"role": "user", "content": "Parks cool."}], {}, json_schema=SCHEMA)
    assert slow.prompt_tps < 100 and slow.gen_tps < 20  # slower than the assumed 100 and 20 tokens/s
    after = engine.idle_window(long_prompt, caps), engine.timeout_for(100, caps)
    assert after[0] > before[0] and after[1] > before[1]
    fake_openai.stream_interval_s = 0.0
    engine.complete("compressor", [SYSTEM, {"role": "user", "content": "Roofs."}], {}, json_schema=SCHEMA)
    assert (engine.idle_window(long_prompt, caps), engine.timeout_for(100, caps)) == after


def test_a_stream_without_a_usage_count_still_gets_its_speeds(fake_openai):
    # llama-cpp-python ignores stream_options.include_usage: the tokens are estimated from the text.
    engine = _engine(fake_openai)
    engine.caps(DEFAULT_MODELS["compressor"]).stream_usage = False
    fake_openai.stream_interval_s = 0.02
    completion = engine.complete("compressor", [SYSTEM, {"role": "user", "content": "Parks."}], {}, json_schema=SCHEMA)
    assert completion.completion_tokens > 7  # estimated, not the fake's usage figure
    assert completion.prompt_tps and completion.gen_tps
