"""Model calls are bounded in wall time (issue 15, issue 28): a trickling or hung model server is
cut at the call's total deadline, retried once with twice the time, and counted as unresponsive
once failures repeat across requests (never after one reset or cut body); a server that refuses
connections is latched the same way; every call ends within 3 × DEEPRESEARCH_LLM_TIMEOUT, streaming
or not; the research's wall budget interrupts a call in flight, and the research still ends with
a report written from what exists."""

from __future__ import annotations

import random
import time

import pytest

from deepresearch_dagster.core.config import ResearchSettings
from deepresearch_dagster.core.errors import EngineError
from deepresearch_dagster.core.llm.openai_engine import OpenAIEngine, RetryPolicy
from deepresearch_dagster.core.pipeline import run_research

from .servers import TricklingServer

MODELS = dict.fromkeys(("planner", "researcher", "compressor", "critic", "reporter"), "m")
ASK = [{"role": "user", "content": "Plan a research on urban heat islands."}]


@pytest.mark.parametrize("mode", ["body", "hang"])
def test_a_trickling_or_hung_model_server_is_cut_and_then_not_asked_again(mode, record):
    # Latched only once failures repeat across requests: the first call is cut twice (1 s, then
    # 2 s), the second once more (1 s, now 3 failures over 2 requests: latched), the third is not sent.
    with TricklingServer(mode, interval=0.2, content_type="application/json") as server:
        # No backoff: what is measured is the deadlines, not the jitter between attempts (a
        # backoff longer than the time left is refused a retry, tested below).
        fast = RetryPolicy(base_s=0.01, max_s=0.01)
        engine = OpenAIEngine(MODELS, base_url=server.base_url + "/v1", timeout=1.0, retry=fast)
        started = time.monotonic()
        with pytest.raises(EngineError) as first:
            engine.complete("planner", ASK, {})
        cut = time.monotonic() - started
        with pytest.raises(EngineError) as second:
            engine.complete("researcher", ASK, {})
        started = time.monotonic()
        with pytest.raises(EngineError) as third:
            engine.complete("critic", ASK, {})
        again = time.monotonic() - started
    # The second cut comes at 2 s, or at the call's limit (3 × 1 s) when the backoff ate into it.
    ok = cut < 4 and "gave no answer within" in str(first.value) and "(2 time(s))" in str(first.value)
    ok = ok and again < 0.5
    ok = ok and "stopped answering (3 failed attempts over 2 requests)" in str(second.value)
    ok = ok and "stopped answering" in str(third.value) and not first.value.retryable
    record(
        f"model server {mode} (1 s timeout)",
        "cut at 1 s, at 2 s; next call cut once, latched; third not sent",
        f"{cut:.1f} s: {str(first.value)[:60]}; third {again:.2f} s",
        ok,
    )
    assert ok, (cut, again, str(first.value), str(second.value), str(third.value))


class _LongestWait(random.Random):
    def uniform(self, a: float, b: float) -> float:
        return b


def test_a_cut_call_whose_backoff_outlasts_its_limit_is_not_retried_and_says_why():
    # The call's limit is 3 × 1 s; cut at 1 s, a 10 s backoff cannot fit: one line saying both.
    slow = RetryPolicy(base_s=10.0, max_s=10.0, rng=_LongestWait())
    with TricklingServer("hang") as server:
        engine = OpenAIEngine(MODELS, base_url=server.base_url + "/v1", timeout=1.0, retry=slow)
        started = time.monotonic()
        with pytest.raises(EngineError) as cut:
            engine.complete("planner", ASK, {})
        took = time.monotonic() - started
    message = str(cut.value)
    assert took < 5, took  # not the 10 s backoff
    assert "gave no answer within 1 s" in message and "leaves no time to retry" in message, message


def test_the_wall_budget_interrupts_a_model_call_in_flight(isolated_env, record):
    with TricklingServer("hang") as server:
        settings = ResearchSettings(
            engine="openai",
            openai_base_url=server.base_url + "/v1",
            llm_timeout_s=300.0,
            budget_wall_s=4.0,
            artifacts_dir=str(isolated_env / "artifacts"),
            semantic_search=False,  # the model call's deadline, not the first embedding of the corpus
        )
        started = time.monotonic()
        _, report = run_research("How do urban heat islands form?", settings)
        took = time.monotonic() - started
    ok = took < 30 and report.markdown.strip() and not report.complete
    record(
        "hung model server, --budget-seconds 4, 300 s call timeout",
        "research ends soon after 4 s with a report",
        f"{took:.1f} s, stop: {report.stop_reason}",
        ok,
    )
    assert ok, (took, report.stop_reason)


def test_a_dead_model_server_is_latched_after_its_retries(record):
    import socket

    with socket.socket() as probe:  # a port nobody listens on: connection refused
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    fast = RetryPolicy(base_s=0.01, max_s=0.01)
    engine = OpenAIEngine(MODELS, base_url=f"http://127.0.0.1:{port}/v1", timeout=1.0, retry=fast)
    with pytest.raises(EngineError):
        engine.complete("planner", ASK, {})
    started = time.monotonic()
    with pytest.raises(EngineError, match="stopped answering"):
        engine.complete("reporter", ASK, {})
    again = time.monotonic() - started
    record("model server refusing connections", "latched after its retries", f"next call {again:.2f} s", again < 0.5)
    assert again < 0.5


def test_a_silent_model_server_is_known_within_the_idle_window_not_the_answer_deadline(record):
    # Answers are streamed: a server that sends nothing is cut when its silence window ends (twice,
    # then latched), long before the 300 s whole-answer deadline.
    with TricklingServer("hang") as server:
        engine = OpenAIEngine(MODELS, base_url=server.base_url + "/v1", timeout=300.0, idle_timeout=1.0)
        started = time.monotonic()
        with pytest.raises(EngineError) as first:
            engine.complete("planner", ASK, {})
        cut = time.monotonic() - started
    long_prompt = "word " * 2000  # about 2,000 tokens
    window = OpenAIEngine(MODELS, base_url=server.base_url + "/v1").idle_window(long_prompt)
    message = str(first.value)
    ok = cut < 8 and "sent nothing for" in message and "DEEPRESEARCH_LLM_IDLE_TIMEOUT" in message
    record(
        "hung model server, 300 s answer deadline, 1 s idle timeout",
        "cut after two silent windows, then latched",
        f"{cut:.1f} s (defaults, 2,000-token prompt: 2 × {window:.0f} s)",
        ok,
    )
    assert ok, (cut, message)
    assert 40 <= window <= 60  # the default silence window stays "a minute or two" for two tries
