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
    # The first call with given arguments goes to the network; an identical later one is a cache hit.
    with duckdb.connect(out["duckdb"], read_only=True) as conn:
        ordered = conn.execute("SELECT tool, arguments, cached FROM tool_calls ORDER BY step_id, seq").fetchall()
    seen: set[tuple[str, str]] = set()
    for tool, arguments, cached in ordered:
        assert cached == ((tool, arguments) in seen)
        seen.add((tool, arguments))
    assert any(c for *_, c in ordered)
    fetched_sources = {r[4] for r in rows if r[1] == "fetch_url"}
    assert fetched_sources == {site.url("/article"), site.url("/plain")}  # the top 2 ranked results
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
    # Step 1 runs normally; in step 2 the searches and reads succeed, then the researcher model
    # hits bad credentials and the run fails.
    fake_openai.script("researcher", None, {"status": 401})
    failed = run_cli("run", QUESTION, "--engine", "openai")
    assert failed.returncode == 1
    assert "OPENAI_API_KEY" in failed.stderr and "Traceback" not in failed.stderr
    db = str(isolated_env / "artifacts" / "lineage.duckdb")
    with duckdb.connect(db, read_only=True) as conn:
        succeeded = set(conn.execute("SELECT tool, arguments FROM tool_calls WHERE status = 'ok'").fetchall())
    assert {tool for tool, _ in succeeded} == {"web_search", "fetch_url"}

    again = run_cli("run", QUESTION, "--engine", "openai", "--json")
    assert again.returncode == 0, again.stderr
    with duckdb.connect(db, read_only=True) as conn:
        rows = conn.execute("SELECT tool, arguments, cached FROM tool_calls").fetchall()
    resumed = [(tool, args) for tool, args, cached in rows if cached]
    assert set(resumed) == succeeded  # every call that had succeeded was re-used, none repeated


def test_fetch_refuses_private_redirects_inside_a_research(web, fake_openai, isolated_env):
    _, site = web
    fake_openai.script(
        "researcher", {"tool_calls": [("fetch_url", {"url": site.url("/redirect/metadata")})]}, {"content": "done"}
    )
    # The URL is in the question (it has provenance): the SSRF guard is what refuses its redirect.
    question = f"What does the metadata endpoint at {site.url('/redirect/metadata')} say?"
    proc = run_cli("run", question, "--engine", "openai", "--json")
    assert proc.returncode == 0, proc.stderr
    raw_dir = Path(json.loads(proc.stdout)["artifacts_dir"])
    refused = json.loads(next(raw_dir.glob("*step1*fetch_url*.json")).read_text())
    assert "169.254.169.254" in refused["error"]


def test_solid_state_depth_one_web_research_has_five_verified_citations(fake_openai, monkeypatch, isolated_env):
    """Offline engine, fake search provider, the bundled solid-state documents served on 127.0.0.1."""
    import functools
    import http.server
    import threading

    from deepresearch_dagster.core.config import ResearchSettings
    from deepresearch_dagster.core.pipeline import run_research
    from deepresearch_dagster.core.tools.local_search import DEFAULT_CORPUS

    folder = DEFAULT_CORPUS / "solid_state_batteries"
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    handler.log_message = lambda *a: None  # type: ignore[attr-defined]
    site = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=site.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{site.server_address[1]}"
    try:
        with FakeSearchServer() as search:
            rows = [
                (f"{base}/{p.name}", p.stem.replace("_", " "), p.read_text()[:200], "2025-06-01")
                for p in sorted(folder.iterdir())
            ]
            search.set_mode("tavily", "ok", rows=rows)
            monkeypatch.setenv("TAVILY_API_KEY", "tvly-test")
            monkeypatch.setenv("TAVILY_BASE_URL", search.base_url)
            monkeypatch.setenv("DEEPRESEARCH_SEARCH_PROVIDERS", "tavily")
            monkeypatch.setenv("DEEPRESEARCH_FETCH_ALLOW_LOOPBACK", "1")
            settings = ResearchSettings.from_env(engine="offline", depth=1)
            ctx, report = run_research("What limits solid-state batteries, and how are makers responding?", settings)
    finally:
        site.shutdown()
        site.server_close()
    tools = {r["tool"] for r in ctx.lineage.query("SELECT DISTINCT tool FROM tool_calls")}
    assert tools == {"web_search", "fetch_url"}
    assert len(report.citations) >= 5 and all(c.verified and c.source.startswith(base) for c in report.citations)
    assert report.unverified_citations == 0
