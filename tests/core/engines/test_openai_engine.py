"""Retries, backoff, auth errors, context overflow and output formats against the fake server."""

from __future__ import annotations

import json
import time

import pytest

from deepresearch_dagster.core.config import DEFAULT_MODELS
from deepresearch_dagster.core.context import make_engine
from deepresearch_dagster.core.llm.engine import EngineError
from deepresearch_dagster.core.llm.openai_engine import OpenAIEngine, RetryPolicy

SYSTEM = {"role": "system", "content": "ROLE: planner\nPlan it."}
SCHEMA = {"title": "ResearchPlan", "type": "object"}


def engine(server, **kw) -> OpenAIEngine:
    return OpenAIEngine(
        models=dict(DEFAULT_MODELS),
        base_url=server.base_url,
        api_key="k",
        timeout=kw.pop("timeout", 5.0),
        retry=RetryPolicy(max_attempts=kw.pop("max_attempts", 4), base_s=0.01, max_s=2.0),
        **kw,
    )


def ask(eng: OpenAIEngine, content: str = "question"):
    return eng.complete("planner", [SYSTEM, {"role": "user", "content": content}], {}, json_schema=SCHEMA)


def test_429_honours_retry_after_then_succeeds(fake_openai):
    fake_openai.script("planner", {"status": 429, "headers": {"Retry-After": "0.2"}})
    completion = ask(engine(fake_openai))
    assert json.loads(completion.text)["plan_title"]
    assert [(a.status, a.wait_s) for a in completion.attempts] == [("retry", 0.2)]
    assert len(fake_openai.requests) == 2


def test_an_engine_keeps_one_connection_for_its_calls(fake_openai):
    # Real servers keep connections alive (so does the fake): an engine's calls, streamed or not,
    # and a retry after an error answer, reuse one connection instead of opening one each.
    fake_openai.script("planner", {"status": 500})
    streamed, whole = engine(fake_openai), engine(fake_openai, stream=False)
    for eng in (streamed, streamed, whole, whole):
        assert json.loads(ask(eng).text)["plan_title"]
    assert len(fake_openai.requests) == 5
    first, second = fake_openai.connection_of[0], fake_openai.connection_of[-1]
    assert fake_openai.connection_of == [first] * 3 + [second] * 2 and first != second


def test_5xx_and_invalid_body_are_retried_with_backoff(fake_openai):
    fake_openai.script("planner", {"status": 500}, {"status": 503}, {"raw_body": "<html>oops"})
    completion = ask(engine(fake_openai))
    assert [a.status for a in completion.attempts] == ["retry", "retry", "retry"]
    assert all(0 <= a.wait_s <= 2.0 for a in completion.attempts)
    assert completion.text


def test_timeout_is_retried(fake_openai):
    fake_openai.script("planner", {"sleep": 1.5})
    completion = ask(engine(fake_openai, timeout=0.5))
    assert [a.status for a in completion.attempts] == ["retry"]
    assert "gave no answer within 0.5 s" in completion.attempts[0].error


def test_gives_up_after_max_attempts_with_every_attempt_reported(fake_openai):
    fake_openai.script("planner", *[{"status": 500}] * 3)
    with pytest.raises(EngineError) as info:
        ask(engine(fake_openai, max_attempts=3))
    assert [a.status for a in info.value.attempts] == ["retry", "retry", "error"]
    assert "after 3 attempts" in str(info.value)


def test_auth_error_is_not_retried_and_names_the_variable(fake_openai):
    fake_openai.script("planner", {"status": 401, "error": {"message": "Incorrect API key provided: k***"}})
    with pytest.raises(EngineError) as info:
        ask(engine(fake_openai))
    assert "OPENAI_API_KEY" in str(info.value)
    assert "Incorrect API key" not in str(info.value)
    assert len(fake_openai.requests) == 1


def test_context_overflow_shrinks_the_input_and_retries(fake_openai):
    overflow = {
        "status": 400,
        "error": {"message": "maximum context length exceeded", "code": "context_length_exceeded"},
    }
    fake_openai.script("planner", overflow)
    completion = ask(engine(fake_openai), "x" * 10_000)
    first, second = (r["messages"][-1]["content"] for r in fake_openai.requests)
    assert len(second) < len(first) / 2 + 100
    assert [a.status for a in completion.attempts] == ["shrink"]


def test_json_schema_format_falls_back_to_json_mode(fake_openai):
    unsupported = {"status": 400, "error": {"message": "response_format json_schema is not supported"}}
    fake_openai.script("planner", unsupported)
    eng = engine(fake_openai)
    ask(eng)
    formats = [r["response_format"]["type"] for r in fake_openai.requests]
    assert formats == ["json_schema", "json_object"]
    ask(eng)
    assert fake_openai.requests[-1]["response_format"]["type"] == "json_object"


def test_role_parameters_are_sent(fake_openai):
    eng = engine(fake_openai, temperature={"planner": 0.3, "reporter": 0.7}, max_tokens={"planner": 321})
    ask(eng)
    request = fake_openai.requests[0]
    assert request["model"] == DEFAULT_MODELS["planner"]
    assert request["temperature"] == 0.3 and request["max_tokens"] == 321
    assert request["response_format"]["json_schema"]["schema"] == SCHEMA


def test_settings_give_each_role_its_temperature(monkeypatch):
    from deepresearch_dagster.core.config import ResearchSettings

    monkeypatch.setenv("DEEPRESEARCH_TEMPERATURE", "0.2")
    monkeypatch.setenv("DEEPRESEARCH_TEMPERATURE_REPORTER", "0.6")
    eng = make_engine(ResearchSettings.from_env(engine="openai"))
    assert eng.temperature == {"planner": 0.2, "researcher": 0.2, "compressor": 0.2, "critic": 0.2, "reporter": 0.6}


# --- capability negotiation, wire format, truncation, timeouts (issue 10) ---------------------
from tests.fakes.openai_server import FakeOpenAIServer, alternation_error, role_of  # noqa: E402

RESEARCHER = [
    {"role": "system", "content": "ROLE: researcher\nDo the step."},
    {"role": "user", "content": "Current step 1: Basics\nFind the basics."},
    {"role": "assistant", "content": '{"summary_title": "a"}'},
    {"role": "assistant", "content": '{"summary_title": "b"}'},
]
TOOLS = [{"type": "function", "function": {"name": "local_search", "parameters": {"type": "object"}}}]


def test_llamacpp_500_on_json_schema_steps_down_once_per_process():
    with FakeOpenAIServer(mode="llamacpp") as server:
        eng = engine(server)
        completion = ask(eng)
        assert json.loads(completion.text)["plan_title"]
        assert [r["response_format"]["type"] for r in server.requests] == ["json_schema", "json_object"]
        assert server.requests[1]["response_format"]["schema"] == SCHEMA  # llama.cpp's grammar form
        [fallback] = completion.attempts
        assert fallback.status == "format_fallback" and "Input should be 'text' or 'json_object'" in fallback.error
        # Learned for the process: a new engine on the same server and model does not probe again.
        ask(engine(server))
        assert len(server.requests) == 3 and server.stats()["rejected"] == 1
        assert eng.capabilities[DEFAULT_MODELS["planner"]]["response_format"] == "json_object_schema"


def test_format_ladder_ends_in_a_non_retryable_error():
    rejected = {"status": 500, "error": {"message": "response_format is not supported"}}
    with FakeOpenAIServer() as server:
        server.script("planner", *[rejected] * 3)
        with pytest.raises(EngineError) as info:
            ask(engine(server, response_format="json_object"))
        formats = [r.get("response_format", {}).get("type") for r in server.requests]
        assert formats == ["json_object", None]  # json_object, then plain text, then give up
        assert info.value.retryable is False
        assert "response_format is not supported" in str(info.value)


def test_deterministic_errors_are_never_retried():
    for error in (
        {"status": 400, "error": {"message": "model 'x' does not exist"}},
        {"status": 422, "error": {"message": "1 validation error: temperature"}},
        {"status": 500, "error": {"message": "Jinja template error: unknown filter"}},
    ):
        with FakeOpenAIServer() as server:
            server.script("researcher", error)
            with pytest.raises(EngineError) as info:
                engine(server).complete("researcher", RESEARCHER[:2], {}, tools=TOOLS)
            assert len(server.requests) == 1 and info.value.retryable is False
            assert error["error"]["message"] in str(info.value)


def test_transient_errors_raise_retryable():
    with FakeOpenAIServer() as server:
        server.script("planner", {"status": 503}, {"status": 503})
        with pytest.raises(EngineError) as info:
            ask(engine(server, max_attempts=2))
        assert info.value.retryable is True and len(server.requests) == 2


def test_messages_alternate_for_strict_templates():
    with FakeOpenAIServer(mode="strict_alternation") as server:
        eng = engine(server)
        completion = eng.complete("researcher", RESEARCHER, {}, tools=TOOLS)
        assert completion.text == "Step complete." and len(server.requests) == 1
        sent = server.requests[0]["messages"]
        assert [m["role"] for m in sent] == ["system", "user", "assistant", "user", "assistant", "user"]
        # One assistant message per injected summary, verbatim (seed 000 §6).
        assert [m["content"] for m in sent if m["role"] == "assistant"] == [m["content"] for m in RESEARCHER[2:]]
        reporter = [
            {"role": "system", "content": "ROLE: reporter\nWrite."},
            {"role": "user", "content": "Working memory: ..."},
            {"role": "user", "content": "Write the section: Summary"},
        ]
        eng.complete("reporter", reporter, {}, json_schema=SCHEMA)
        assert [m["role"] for m in server.requests[1]["messages"]] == ["system", "user"]
        assert server.stats()["rejected"] == 0


def test_system_prompt_is_folded_when_the_template_has_no_system_role():
    with FakeOpenAIServer(mode="no_system") as server:
        eng = engine(server)
        ask(eng)
        ask(eng)
        first, folded, again = server.requests
        assert first["messages"][0]["role"] == "system"
        assert [m["role"] for m in folded["messages"]] == ["user"]
        assert role_of(folded) == "planner"  # the ROLE marker survives the fold
        assert folded["messages"][0]["content"].startswith(SYSTEM["content"])
        assert [m["role"] for m in again["messages"]] == ["user"]


def test_alternation_error_with_a_system_message_folds_then_gives_up():
    alternate = {"status": 500, "error": {"message": "Conversation roles must alternate user/assistant/user/..."}}
    with FakeOpenAIServer() as server:
        server.script("planner", alternate, alternate)
        with pytest.raises(EngineError) as info:
            ask(engine(server))
        assert len(server.requests) == 2 and info.value.retryable is False
        assert "chat template" in str(info.value)
        assert [a.status for a in info.value.attempts] == ["format_fallback", "error"]


def test_rejected_tools_skip_tools_only_calls():
    with FakeOpenAIServer(mode="no_tools") as server:
        eng = engine(server)
        first = eng.complete("researcher", RESEARCHER, {}, tools=TOOLS)
        assert first.skipped and not first.tool_calls and first.text == ""
        assert [a.status for a in first.attempts] == ["format_fallback"]
        second = eng.complete("researcher", RESEARCHER, {}, tools=TOOLS)
        assert second.skipped and second.attempts == []
        assert len(server.requests) == 1  # learned once, never asked again
        assert eng.capabilities[DEFAULT_MODELS["researcher"]]["tools"] is False
        ask(eng)  # structured calls are unaffected
        assert len(server.requests) == 2


def test_truncated_structured_answer_is_retried_once_with_more_tokens():
    with FakeOpenAIServer(mode="truncating", truncate_need=1000) as server:
        completion = ask(engine(server, max_tokens={"planner": 600}))
        assert not completion.truncated and json.loads(completion.text)
        assert [r["max_tokens"] for r in server.requests] == [600, 1200]
        assert [a.status for a in completion.attempts] == ["truncated"]
        assert completion.completion_tokens == 14  # both answers are paid for
    with FakeOpenAIServer(mode="truncating", truncate_need=5000) as server:
        completion = ask(engine(server, max_tokens={"planner": 600}))
        assert completion.truncated and completion.finish_reason == "length"
        assert len(server.requests) == 2


def test_a_shrink_is_carried_into_later_requests():
    overflow = {"status": 400, "error": {"message": "maximum context length exceeded"}}
    with FakeOpenAIServer() as server:
        server.script("planner", overflow)
        eng = engine(server)
        big = "x" * 10_000
        ask(eng, big)
        # A repair round: the same prompt plus the answer and a correction.
        repair = [SYSTEM, {"role": "user", "content": big}, {"role": "assistant", "content": "{}"}]
        eng.complete("planner", [*repair, {"role": "user", "content": "fix it"}], {}, json_schema=SCHEMA)
        assert len(server.requests) == 3
        assert len(server.requests[2]["messages"][1]["content"]) < 5_100


def test_timeout_scales_with_max_tokens_and_doubles_after_a_timeout():
    with FakeOpenAIServer(mode="slow_ignore_disconnect", first_s=1.2) as server:
        eng = engine(server, timeout=0.8, tokens_per_s=1000.0, max_tokens={"planner": 100})
        assert eng.timeout_for(100) == pytest.approx(0.9)
        assert eng.timeout_for(None) == 0.8
        completion = ask(eng)
        assert [a.status for a in completion.attempts] == ["retry"]
        assert len(server.requests) == 2  # the retry waited behind the abandoned generation
        assert server.stats()["abandoned"] == 1
    assert OpenAIEngine(models={}, timeout=10, tokens_per_s=20).timeout_for(4000) == 210


def test_normalized_conversations_never_repeat_a_role():
    import random

    from deepresearch_dagster.core.llm.openai_engine import normalize_messages

    rng = random.Random(7)
    for _ in range(500):
        messages = [
            {"role": rng.choice(["system", "user", "assistant"]), "content": f"m{i}"} for i in range(rng.randint(1, 8))
        ]
        for fold in (False, True):
            sent = normalize_messages(messages, fold_system=fold)
            assert alternation_error(sent) is None, (messages, sent)
            assert sent[-1]["role"] == "user"
            assert not fold or all(m["role"] != "system" for m in sent)
            text = "\n".join(m["content"] for m in sent)
            assert all(m["content"] in text for m in messages)  # nothing lost


def test_schemas_sent_leave_out_string_limits_llama_cpp_cannot_compile():
    from deepresearch_dagster.core.llm.openai_engine import MAX_SENT_LENGTH, grammar_safe_schema

    schema = {
        "type": "object",
        "properties": {
            "summary": {"type": "string", "maxLength": 3000, "minLength": 10},
            "title": {"type": "string", "maxLength": 120},
            "items": {"type": "array", "items": {"type": "string", "maxLength": 20000}, "maxItems": 10},
        },
    }
    sent = grammar_safe_schema(schema)
    assert "maxLength" not in sent["properties"]["summary"] and sent["properties"]["summary"]["minLength"] == 10
    assert sent["properties"]["title"]["maxLength"] == 120 <= MAX_SENT_LENGTH
    assert "maxLength" not in sent["properties"]["items"]["items"] and sent["properties"]["items"]["maxItems"] == 10
    assert schema["properties"]["summary"]["maxLength"] == 3000  # the contract's own schema is untouched


def test_a_generation_loop_is_recognised():
    from deepresearch_dagster.core.llm.openai_engine import repeats_itself

    loop = "Heat islands form in cities. " + "The United States is a hot country because of the heat. " * 12
    assert repeats_itself(loop)
    prose = " ".join(f"Sentence {i} says something different about urban heat." for i in range(12))
    assert not repeats_itself(prose) and not repeats_itself("Short. Short. Short.")
    # A JSON answer looping on one string value, with no sentence break between the copies.
    json_loop = '{"section": "Findings", "paragraphs": [' + '"Solid-state cells are safer [1]", ' * 30
    assert repeats_itself(json_loop)
    varied = '{"paragraphs": [' + ", ".join(f'"Finding {i} about cells and costs [{i}]"' for i in range(30))
    assert not repeats_itself(varied)


# --- streamed answers (issue 15: a silent server is known within the idle window) -------------
def test_answers_are_streamed_and_put_back_together():
    arguments = {"query": "sodium-ion batteries " * 5, "top_k": 3}
    with FakeOpenAIServer() as server:
        server.script("researcher", {"tool_calls": [("local_search", arguments), ("read_document", {"doc": 2})]})
        eng = engine(server)
        completion = eng.complete("researcher", RESEARCHER[:2], {}, tools=TOOLS)
        planned = ask(eng)
    request = server.requests[0]
    assert request["stream"] is True and request["stream_options"] == {"include_usage": True}
    # Arguments arrive in pieces of STREAM_PIECE characters; the engine joins them per call.
    assert [(c.name, c.arguments) for c in completion.tool_calls] == [
        ("local_search", arguments),
        ("read_document", {"doc": 2}),
    ]
    assert json.loads(planned.text)["plan_title"] and planned.finish_reason == "stop"
    prompt_chars = sum(len(str(m["content"])) for m in server.requests[1]["messages"])
    assert planned.prompt_tokens == prompt_chars // 4 and planned.completion_tokens == 7  # the usage chunk


def test_a_server_refusing_stream_options_then_streaming_is_asked_whole():
    with FakeOpenAIServer() as server:
        server.script(
            "planner",
            {"status": 400, "error": {"message": "stream_options: Extra inputs are not permitted"}},
            {"status": 500, "error": {"message": "Streaming is not supported for this model"}},
        )
        eng = engine(server)
        completion = ask(eng)
        ask(eng)
    sent = [(r.get("stream"), "stream_options" in r) for r in server.requests]
    assert sent == [(True, True), (True, False), (None, False), (None, False)]
    assert [a.status for a in completion.attempts] == ["format_fallback", "format_fallback"]
    assert json.loads(completion.text)["plan_title"] and completion.prompt_tokens > 0


def test_progress_events_are_asked_of_local_servers_only_until_refused():
    from deepresearch_dagster.core.llm.openai_engine import on_local_network

    assert on_local_network("http://127.0.0.1:8080/v1") and on_local_network("http://ollama:11434/v1")
    assert on_local_network("http://10.1.2.3/v1") and on_local_network("http://[::1]:8000/v1")
    assert not on_local_network("https://api.openai.com/v1") and not on_local_network("https://8.8.8.8/v1")
    refused = {"status": 400, "error": {"message": "Unrecognized request argument supplied: return_progress"}}
    with FakeOpenAIServer() as server:
        server.script("planner", refused)
        eng = engine(server)
        completion = ask(eng)
        ask(eng)
    assert [r.get("return_progress") for r in server.requests] == [True, None, None]
    assert [a.status for a in completion.attempts] == ["format_fallback"]


def test_an_empty_stream_is_asked_again_whole():
    # A real llama-cpp-python answers 200 and then fails inside the stream when the prompt is over
    # its context window; only the whole answer carries the error that the engine can act on.
    overflow = {"status": 400, "error": {"message": "Requested tokens (8304) exceed context window of 8192"}}
    with FakeOpenAIServer() as server:
        server.script("planner", {"raw_body": "<html>proxy error</html>"}, overflow)
        eng = engine(server)
        completion = ask(eng, "x" * 10_000)
        ask(eng)
    assert [a.status for a in completion.attempts] == ["retry", "shrink"]
    assert "no answer" in completion.attempts[0].error
    assert [r.get("stream") for r in server.requests] == [True, None, None, True]  # only that call


def test_a_stream_cut_by_another_request_is_asked_again_whole():
    from concurrent.futures import ThreadPoolExecutor

    # llama-cpp-python (interrupt_requests, its default) ends a stream when another request comes.
    with FakeOpenAIServer(mode="interrupt_streams", stream_interval_s=0.05) as server:
        eng = engine(server)
        with ThreadPoolExecutor(2) as pool:
            first = pool.submit(ask, eng)
            time.sleep(0.3)
            second = pool.submit(ask, eng)
            answers = [first.result(), second.result()]
        assert server.stats()["interrupted"] >= 1
        assert all(json.loads(a.text)["plan_title"] for a in answers)
        assert any("stream cut" in a.error for c in answers for a in c.attempts)
        assert eng.capabilities[DEFAULT_MODELS["planner"]]["stream"] is False
        ask(eng)
        assert "stream" not in server.requests[-1]


def test_a_request_queued_behind_a_streaming_one_is_not_cut_as_silent():
    from concurrent.futures import ThreadPoolExecutor

    # One generation slot: the second request hears nothing until the first answer has streamed
    # (about 1.5 s), three times its 0.5 s silence window, and must still not be cut.
    with FakeOpenAIServer(mode="slow_ignore_disconnect", first_s=0, stream_interval_s=0.05) as server:
        eng = engine(server, idle_timeout=0.5)
        with ThreadPoolExecutor(2) as pool:
            answers = list(pool.map(lambda _: ask(eng), range(2)))
    assert all(json.loads(a.text)["plan_title"] for a in answers)
    assert [a.attempts for a in answers] == [[], []] and len(server.requests) == 2


def test_server_sent_events_are_read_like_the_spec_says():
    from deepresearch_dagster.core.llm.openai_engine import _sse_data

    lines = [": ping - 2026-11-23", "", "event: message", 'data: {"a":', "data: 1}", "", "data:[DONE]", ""]
    assert list(_sse_data(iter(lines))) == ['{"a":\n1}', "[DONE]"]


def test_an_error_event_inside_a_stream_is_retried():
    with FakeOpenAIServer() as server:
        server.script("planner", {"raw_body": 'data: {"error": {"message": "slot crashed"}}\n\n'})
        completion = ask(engine(server))
    assert [a.status for a in completion.attempts] == ["retry"] and "slot crashed" in completion.attempts[0].error
    assert json.loads(completion.text)["plan_title"]


def test_a_streamed_generation_loop_is_cut_early_and_not_asked_again():
    looping = '{"plan_title": "' + "The model says the same thing again. " * 300 + '"}'
    with FakeOpenAIServer() as server:
        server.script("planner", looping)
        completion = engine(server, max_tokens={"planner": 4000}).complete(
            "planner", [SYSTEM, {"role": "user", "content": "q"}], {}, json_schema=SCHEMA
        )
    assert completion.truncated and completion.finish_reason == "length"
    assert 1000 <= len(completion.text) < len(looping) / 4  # read until the loop showed, not to the end
    assert len(server.requests) == 1  # a loop is not asked again with more tokens


def test_an_answer_echoing_the_prompt_is_cut_early_and_not_asked_again():
    from deepresearch_dagster.core.llm.openai_engine import degenerate

    memory = " ".join(f"Source {i} says the city centre was {i % 7} degrees warmer on day {i}." for i in range(240))
    with FakeOpenAIServer() as server:
        server.script("reporter", "[INST] " + memory)  # a small model writing its prompt back
        completion = engine(server, max_tokens={"reporter": 4000}).complete(
            "reporter",
            [{"role": "system", "content": "ROLE: reporter\nWrite."}, {"role": "user", "content": memory}],
            {},
            json_schema=SCHEMA,
        )
    assert completion.truncated and len(completion.text) < len(memory) / 2 and len(server.requests) == 1
    # A JSON answer quoting long stretches of the prompt is not an echo: its own syntax breaks them.
    quoting = json.dumps({"summary": memory[:900], "extraction": [memory[900:1800], memory[1800:2700]]})
    assert not degenerate(quoting, memory)


def test_a_cut_answer_that_is_not_json_is_not_asked_again_with_more_tokens():
    from deepresearch_dagster.core.llm.openai_engine import json_so_far

    assert json_so_far('```json\n{"plan_title": "Heat') and json_so_far('Here is the plan: {"plan')
    assert not json_so_far(" <<SYS>>\nROLE: reporter\nYou are the Reporter. " * 10 + '{"a": 1}')
    with FakeOpenAIServer(mode="truncating", truncate_need=5000) as server:
        server.script("planner", "The plan starts with the causes of urban heat, then goes on. " * 8)
        completion = ask(engine(server, max_tokens={"planner": 600}))
    assert completion.truncated and len(server.requests) == 1


def test_a_stream_that_hangs_after_done_is_answered_at_once():
    # The body's end after `data: [DONE]` is read for the connection's sake only: a server that
    # never ends the body costs at most DRAIN_S, and the answer is whole.
    import socket
    import threading

    from deepresearch_dagster.core.llm.openai_engine import DRAIN_S

    event = {"choices": [{"index": 0, "delta": {"content": "Step complete."}, "finish_reason": "stop"}]}
    body = f"data: {json.dumps(event)}\n\ndata: [DONE]\n\n".encode()
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    stop = threading.Event()
    with socket.create_server(("127.0.0.1", 0)) as listener:

        def serve() -> None:
            while not stop.is_set():
                conn, _ = listener.accept()
                with conn:
                    if b"/chat/completions" not in conn.recv(65536).split(b"\r\n", 1)[0]:  # /props, /api/show
                        conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                        continue
                    conn.sendall(head + b"%x\r\n%s\r\n" % (len(body), body))
                    stop.wait(10)  # the last chunk never comes

        threading.Thread(target=serve, daemon=True).start()
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
        eng = OpenAIEngine(dict(DEFAULT_MODELS), url, "k", timeout=5.0, retry=RetryPolicy(1), context_window=32768)
        started = time.perf_counter()
        completion = eng.complete("researcher", [SYSTEM, {"role": "user", "content": "q"}], {})
        stop.set()
    assert completion.text == "Step complete."
    assert time.perf_counter() - started < DRAIN_S + 1.0
