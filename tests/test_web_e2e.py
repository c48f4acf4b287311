"""A full `deepresearch run` against fakes: OpenAI-compatible model, search providers, website."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from tests.conftest import SECRET_KEY
from tests.fakes.search_servers import FakeSearchServer
from tests.fakes.website import FakeWebsite
from tests.test_cli import run_cli

SEARCH_KEYS = {"TAVILY_API_KEY": "tvly-secret-key-123", "BRAVE_API_KEY": "brave-secret-key-456"}
QUESTION = "How are solid-state battery pilot lines progressing?"


@pytest.fixture
def web(fake_openai, monkeypatch) -> Iterator[tuple[FakeSearchServer, FakeWebsite]]:
    with FakeSearchServer() as search, FakeWebsite() as site:
        rows = [
            (site.url("/article"), "Article on the fake site", "An article.", "2025-01-01"),
            (site.url("/plain") + "?utm_source=x", "Plain text page", "Plain.", "2025-01-02"),
        ]
        search.set_mode("tavily", "rate_limit", retry_after="3")
        search.set_mode("brave", "ok", rows=rows)
        for name, value in SEARCH_KEYS.items():
            monkeypatch.setenv(name, value)
        monkeypatch.setenv("TAVILY_BASE_URL", search.base_url)
        monkeypatch.setenv("BRAVE_BASE_URL", search.base_url)
        monkeypatch.setenv("DEEPRESEARCH_SEARCH_PROVIDERS", "tavily,brave")
        monkeypatch.setenv("DEEPRESEARCH_FETCH_ALLOW_LOOPBACK", "1")
        monkeypatch.setenv("DEEPRESEARCH_LLM_BACKOFF_BASE", "0.01")
        yield search, site


def _tool_rows(db: str) -> list[tuple]:
    with duckdb.connect(db, read_only=True) as conn:
        return conn.execute(
            "SELECT step_id, tool, status, cached, source FROM tool_calls ORDER BY step_id, seq"
        ).fetchall()


def test_web_research_end_to_end_with_fallback_and_cache(web, isolated_env):
    search, site = web
    proc = run_cli("run", QUESTION, "--engine", "openai", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    rows = _tool_rows(out["duckdb"])
    assert {r[1] for r in rows} == {"web_search", "fetch_url"}
    assert all(r[2] == "ok" for r in rows)
    # Step 1 is all first-time calls; step 2 fetches the same top URL again, served from the cache.
    assert [r[3] for r in rows if r[0] == "1"] == [False, False]
    assert [r[3] for r in rows if r[0] == "2"] == [False, True]
    fetched_sources = {r[4] for r in rows if r[1] == "fetch_url"}
    assert fetched_sources == {site.url("/article")}
    # Tavily answered 429, Brave served the results: the fallback is recorded in the raw output.
    raw_dir = Path(out["artifacts_dir"])
    search_raw = json.loads(next(raw_dir.glob("*web_search.json")).read_text())
    assert search_raw["provider"] == "brave" and "tavily" in search_raw["provider_failures"][0]
    assert [r["url"] for r in search_raw["results"]][1] == site.url("/plain")  # tracking parameter removed
    page = next(raw_dir.glob("*fetch_url.txt")).read_text()
    assert "URL: " + site.url("/article") in page
    report = json.loads(Path(out["report_json"]).read_text())
    assert any(c["source"] == site.url("/article") for c in report["citations"])

    # Same research again: every network tool call is served from the tool-call cache.
    brave_before = len(search.requests_for("brave"))
    again = run_cli("run", QUESTION, "--engine", "openai", "--json")
    assert again.returncode == 0, again.stderr
    assert len(search.requests_for("brave")) == brave_before
    assert all(r[3] for r in _tool_rows(out["duckdb"]))

    for path in isolated_env.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            for secret in (SECRET_KEY, *SEARCH_KEYS.values()):
                assert secret.encode() not in data, f"secret leaked into {path}"


def test_failed_research_resumes_reusing_successful_tool_calls(web, fake_openai, isolated_env):
    # Step 1 runs normally (search, fetch, done); step 2's first researcher call hits bad credentials.
    fake_openai.script("researcher", None, None, None, {"status": 401})
    failed = run_cli("run", QUESTION, "--engine", "openai")
    assert failed.returncode == 1
    assert "OPENAI_API_KEY" in failed.stderr and "Traceback" not in failed.stderr

    again = run_cli("run", QUESTION, "--engine", "openai", "--json")
    assert again.returncode == 0, again.stderr
    rows = _tool_rows(json.loads(again.stdout)["duckdb"])
    step1 = [r for r in rows if r[0] == "1"]
    assert step1 and all(r[3] for r in step1)  # re-used from the failed run
    step2_search = [r for r in rows if r[0] == "2" and r[1] == "web_search"]
    assert step2_search and not step2_search[0][3]  # never succeeded before: a real call


def test_fetch_refuses_private_redirects_inside_a_research(web, fake_openai, isolated_env):
    _, site = web
    fake_openai.script(
        "researcher", {"tool_calls": [("fetch_url", {"url": site.url("/redirect/metadata")})]}, {"content": "done"}
    )
    proc = run_cli("run", "What does the metadata endpoint say?", "--engine", "openai", "--json")
    assert proc.returncode == 0, proc.stderr
    raw_dir = Path(json.loads(proc.stdout)["artifacts_dir"])
    refused = json.loads(next(raw_dir.glob("*step1*fetch_url.json")).read_text())
    assert "169.254.169.254" in refused["error"]
