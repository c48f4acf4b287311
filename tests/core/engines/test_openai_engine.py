"""Retries, backoff, auth errors, context overflow and output formats against the fake server."""

from __future__ import annotations

import json

import pytest

from deepresearch_dagster.core.config import DEFAULT_MODELS
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
    assert "Timeout" in completion.attempts[0].error


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
    eng = ResearchSettings.from_env(engine="openai").make_engine()
    assert eng.temperature == {"planner": 0.2, "researcher": 0.2, "compressor": 0.2, "critic": 0.2, "reporter": 0.6}
