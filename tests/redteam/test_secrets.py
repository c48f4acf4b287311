"""Secrets: whatever a server echoes (request headers, the URL with its query, a JSON body), no API
key reaches an error text, DuckDB, a file on disk, a Dagster failure or a log line."""

from __future__ import annotations

import logging
from pathlib import Path

import duckdb
import pytest

from deepresearch_dagster.core.config import ResearchSettings
from deepresearch_dagster.core.errors import EngineError, SearchError, StructuredOutputError, redact, register_secret
from deepresearch_dagster.core.pipeline import run_research
from deepresearch_dagster.core.store.lineage import LineageStore
from deepresearch_dagster.defs.assets import _failure
from tests.conftest import SECRET_KEY

ECHOES = [
    ("Bearer header", f"HTTP 500: upstream said {{'authorization': 'Bearer {SECRET_KEY}'}}"),
    ("Authorization line", f"Authorization: Bearer {SECRET_KEY}\nContent-Type: application/json"),
    ("api_key query", f"GET https://serpapi.com/search.json?q=x&api_key={SECRET_KEY}&num=5 -> 500"),
    ("JSON body", f'{{"api_key": "{SECRET_KEY}", "query": "batteries"}}'),
    ("env assignment", f"OPENAI_API_KEY={SECRET_KEY} python run.py"),
    ("Brave header", "X-Subscription-Token: BSA4f9a8b7c6d5e4f3a2b1c0d"),
    ("URL credentials", "connect to https://admin:hunter2hunter2@searx.internal/search failed"),
    ("Tavily key", "invalid key tvly-AbCdEf0123456789xyz"),
    ("Basic auth", "authorization: Basic YWRtaW46aHVudGVyMg=="),
]
LEAKS = [SECRET_KEY, "BSA4f9a8b7c6d5e4f3a2b1c0d", "hunter2hunter2", "tvly-AbCdEf0123456789xyz", "YWRtaW46aHVudGVyMg=="]


@pytest.mark.parametrize(("case", "text"), ECHOES)
def test_redact_removes_echoed_credentials(case: str, text: str, record) -> None:
    out = redact(text)
    leaked = [s for s in LEAKS if s in out]
    ok = not leaked and "***" in out
    record(f"redact: {case}", "no secret, *** in place", out[:60].replace("\n", " "), ok)
    assert ok


def test_redact_keeps_ordinary_messages() -> None:
    for text in (
        "authentication failed (HTTP 401): check OPENAI_API_KEY.",
        "SearXNG: no API key; set TAVILY_API_KEY.",
        "planner returned invalid output twice: steps: at most 7 items",
        "refusing to fetch from private address 10.0.0.1",
    ):
        assert redact(text) == text


def test_registered_secret_of_any_shape_is_redacted() -> None:
    register_secret("plainpassword-without-shape-42")
    assert "plainpassword" not in redact("server echoed plainpassword-without-shape-42 back")


def test_a_urls_password_is_redacted_and_its_user_name_is_not(tmp_path: Path) -> None:
    from deepresearch_dagster.core.config import load_settings

    url = "postgresql://postgres:pw-4f9c2e71d0@127.0.0.1:5432/team"
    load_settings({"postgres_url": url, "artifacts_dir": str(tmp_path)})
    text = redact("lineage on Postgres needs DuckDB's postgres extension; server said pw-4f9c2e71d0")
    assert "DuckDB's postgres extension" in text and "pw-4f9c2e71d0" not in text, text


def test_every_research_error_is_redacted_at_construction(record) -> None:
    errors = [
        EngineError(f"HTTP 400 from server: Bearer {SECRET_KEY}"),
        SearchError(f"SerpAPI: request failed: https://x/?api_key={SECRET_KEY}"),
        StructuredOutputError("planner", f"echo: {SECRET_KEY}"),
    ]
    texts = [str(e) for e in errors] + [errors[2].error]
    ok = all(SECRET_KEY not in t for t in texts)
    record("ResearchError messages (engine, search, invalid output)", "redacted", texts[0][:60], ok)
    assert ok


def test_lineage_and_dagster_failure_are_redacted(tmp_path: Path, record) -> None:
    lineage = LineageStore.at(tmp_path / "lineage.duckdb")
    lineage.register_request("k", "How do sodium-ion batteries work?", {})
    raw_error = f"Error code: 500 - {{'headers': {{'Authorization': 'Bearer {SECRET_KEY}'}}}}"
    lineage.record_llm_call("k", "run", "planner", "m", 1, "error", 10, 0, 1.0, None, error=raw_error)
    lineage.run_started("run", "k", "research_plan")
    lineage.run_finished("run", "research_plan", raw_error)
    failure = _failure("research_plan", RuntimeError(raw_error))
    with duckdb.connect(str(tmp_path / "lineage.duckdb"), read_only=True) as conn:
        stored = [r[0] for r in conn.execute("SELECT error FROM llm_calls UNION ALL SELECT error FROM runs").fetchall()]
    texts = [*stored, failure.description or "", str(failure.metadata)]
    ok = all(SECRET_KEY not in t for t in texts) and len(stored) == 2
    record(
        "echoed Bearer key -> llm_calls.error, runs.error, Dagster Failure",
        "0 secrets",
        f"{sum(SECRET_KEY in t for t in texts)} leaks",
        ok,
    )
    assert ok


def test_echoing_model_server_leaks_nothing(
    fake_openai, corpus_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog, record
) -> None:
    """A model server whose errors echo the request headers, end to end through a research."""
    monkeypatch.setenv("DEEPRESEARCH_LLM_MAX_ATTEMPTS", "1")
    echo = {
        "status": 400,
        "error": {
            "message": f"bad request; headers: Authorization: Bearer {SECRET_KEY}",
            "type": "invalid_request_error",
        },
    }
    for role in ("planner", "researcher", "compressor", "critic", "reporter"):
        fake_openai.script(role, echo, echo, echo)
    settings = ResearchSettings.from_env(engine="openai", corpus_dir=str(corpus_dir), max_steps=2, depth=0)
    caplog.set_level(logging.DEBUG)
    _ctx, _report = run_research("How do sodium-ion batteries work?", settings, log=lambda m: None)
    root = settings.artifacts_path
    leaked = [str(p) for p in root.rglob("*") if p.is_file() and SECRET_KEY.encode() in p.read_bytes()]
    with duckdb.connect(str(settings.duckdb_file), read_only=True) as conn:
        errors = [r[0] for r in conn.execute("SELECT error FROM llm_calls WHERE error IS NOT NULL").fetchall()]
    leaked += [e for e in errors if SECRET_KEY in e]
    leaked += [r.getMessage() for r in caplog.records if SECRET_KEY in r.getMessage()]
    ok = not leaked and any("***" in e for e in errors)
    record(
        "model server echoing 'Bearer sk-…' (openai engine, e2e)",
        "0 secrets in files/DuckDB/logs",
        f"{len(errors)} errors recorded, {len(leaked)} leaks",
        ok,
    )
    assert ok, leaked


def test_dagster_failure_scrubs_the_whole_exception_chain(record) -> None:
    """Dagster logs the causes of a Failure too: the client error behind an EngineError is redacted."""
    try:
        try:
            raise RuntimeError(f"Error code: 400 - {{'echo': 'Authorization: Bearer {SECRET_KEY}'}}")
        except RuntimeError as cause:
            raise EngineError("the model server rejected the request") from cause
    except EngineError as exc:
        failure = _failure("research_plan", exc)
        chain = [str(exc), str(exc.__cause__), failure.description or ""]
    ok = all(SECRET_KEY not in text for text in chain)
    record(
        "Dagster Failure cause chain (client error quoting headers)",
        "0 secrets",
        f"{sum(SECRET_KEY in t for t in chain)} leaks",
        ok,
    )
    assert ok
