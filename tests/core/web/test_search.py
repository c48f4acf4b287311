from __future__ import annotations

import json
import logging
import socket
from collections.abc import Iterator
from email.utils import formatdate

import httpx
import pytest

from deepresearch_dagster.core.config import load_settings
from deepresearch_dagster.core.errors import ConfigError
from deepresearch_dagster.core.web.search import (
    BraveSearch,
    FallbackSearch,
    RateLimitedError,
    SearchError,
    SearchProvider,
    SearchResult,
    SearXNGSearch,
    SerpAPISearch,
    TavilySearch,
    parse_retry_after,
    providers_from_settings,
)
from tests.fakes.search_servers import CANNED, FakeSearchServer, Provider

KEYS = {
    "tavily": "tvly-SECRET-tavily-0001",
    "brave": "BSA-SECRET-brave-0002",
    "serpapi": "serp-SECRET-serpapi-0003",
}
ENV_VARS = {"tavily": "TAVILY_API_KEY", "brave": "BRAVE_API_KEY", "serpapi": "SERPAPI_API_KEY"}


@pytest.fixture(scope="module")
def server() -> Iterator[FakeSearchServer]:
    with FakeSearchServer() as srv:
        yield srv


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    # One shared client: building one per provider (SSL context and all) would dominate the runtime.
    with httpx.Client(trust_env=False) as shared:
        yield shared


@pytest.fixture(autouse=True)
def reset_server(server: FakeSearchServer) -> None:
    for provider in server.behaviour:
        server.set_mode(provider, "ok", retry_after="7", rows=list(CANNED))  # type: ignore[arg-type]
    server.requests.clear()


_CLIENT: list[httpx.Client] = []


@pytest.fixture(autouse=True)
def use_shared_client(client: httpx.Client) -> Iterator[None]:
    _CLIENT.append(client)
    yield
    _CLIENT.clear()


def make(provider: Provider, base_url: str, timeout: float = 5.0) -> SearchProvider:
    client = _CLIENT[0] if _CLIENT else None
    if provider == "tavily":
        return TavilySearch(KEYS["tavily"], base_url=base_url, timeout=timeout, client=client)
    if provider == "brave":
        return BraveSearch(KEYS["brave"], base_url=base_url, timeout=timeout, client=client)
    if provider == "searxng":
        return SearXNGSearch(base_url, timeout=timeout, client=client)
    return SerpAPISearch(KEYS["serpapi"], base_url=base_url, timeout=timeout, client=client)


ALL: list[Provider] = ["tavily", "brave", "searxng", "serpapi"]


# --- each provider's request and response shape -----------------------------------------------


def test_tavily_request_and_parsing(server: FakeSearchServer) -> None:
    results = make("tavily", server.base_url).search("solid state batteries", max_results=3)

    assert [r.provider for r in results] == ["tavily"] * 3
    first = results[0]
    assert first == SearchResult(
        url=CANNED[0][0],
        title="Solid-state batteries explained",
        snippet="Solid electrolytes replace the liquid in lithium-ion cells.",
        published="2025-03-01",
        score=0.95,
        provider="tavily",
    )
    (req,) = server.requests_for("tavily")
    assert (req.method, req.path) == ("POST", "/search")
    assert req.headers["authorization"] == f"Bearer {KEYS['tavily']}"
    assert req.body == {"query": "solid state batteries", "max_results": 3, "search_depth": "basic"}


def test_brave_request_and_parsing(server: FakeSearchServer) -> None:
    results = make("brave", server.base_url).search("solid state", max_results=4)

    assert len(results) == 4
    assert {r.provider for r in results} == {"brave"}
    # <strong> highlighting stripped; ISO page_age preferred, relative age as fallback; Brave has no score
    assert results[0].snippet == "Solid electrolytes replace the liquid in lithium-ion cells."
    assert results[0].published == "2025-03-01T00:00:00"
    assert results[1].published == "2 days ago"
    assert results[0].score is None
    (req,) = server.requests_for("brave")
    assert (req.method, req.path) == ("GET", "/res/v1/web/search")
    assert req.query == {"q": "solid state", "count": "4"}
    assert req.headers["x-subscription-token"] == KEYS["brave"]
    assert req.headers["accept"] == "application/json"


def test_searxng_request_and_parsing_under_a_path_prefix(server: FakeSearchServer) -> None:
    results = make("searxng", f"{server.base_url}/searx/").search("solid state", max_results=2)

    assert [(r.url, r.score, r.published, r.provider) for r in results] == [
        (CANNED[0][0], 3.0, None, "searxng"),
        (CANNED[1][0], 2.75, "2025-03-01", "searxng"),
    ]
    (req,) = server.requests_for("searxng")
    assert (req.method, req.path) == ("GET", "/searx/search")
    assert req.query == {"q": "solid state", "format": "json"}
    assert "authorization" not in req.headers


def test_serpapi_request_and_parsing(server: FakeSearchServer) -> None:
    results = make("serpapi", server.base_url).search("solid state", max_results=5)

    assert len(results) == 5
    assert results[0].url == CANNED[0][0]
    assert [r.score for r in results[:3]] == [1.0, 0.5, pytest.approx(1 / 3)]
    assert results[2].snippet == CANNED[2][2]
    assert results[2].published == CANNED[2][3]
    assert {r.provider for r in results} == {"serpapi"}
    (req,) = server.requests_for("serpapi")
    assert req.path == "/search.json"
    assert req.query == {"engine": "google", "q": "solid state", "num": "5", "api_key": KEYS["serpapi"]}


@pytest.mark.parametrize("provider", ALL)
def test_results_are_truncated_and_max_results_capped(server: FakeSearchServer, provider: Provider) -> None:
    assert len(make(provider, server.base_url).search("q", max_results=2)) == 2
    assert len(make(provider, server.base_url).search("q", max_results=50)) == len(CANNED)


@pytest.mark.parametrize("provider", ALL)
def test_empty_answers_are_empty_lists(server: FakeSearchServer, provider: Provider) -> None:
    server.set_mode(provider, "empty")
    assert make(provider, server.base_url).search("nothing matches") == []


def test_unusable_rows_are_skipped(server: FakeSearchServer) -> None:
    rows = [
        {"url": "javascript:alert(1)", "title": "x", "content": "x"},
        {"title": "no url"},
        "not an object",
        {"url": "https://ok.example/", "title": "", "content": None, "score": "high", "published_date": 5},
    ]
    server.set_mode("tavily", "custom", custom=(200, json.dumps({"results": rows})))
    (result,) = make("tavily", server.base_url).search("q")
    # a missing title falls back to the URL; junk score/date become None
    assert result == SearchResult(url="https://ok.example/", title="https://ok.example/", snippet="", provider="tavily")


# --- error mapping -----------------------------------------------------------------------------


@pytest.mark.parametrize("provider", ALL)
def test_429_is_rate_limited_with_retry_after(server: FakeSearchServer, provider: Provider) -> None:
    server.set_mode(provider, "rate_limit", retry_after="7")
    with pytest.raises(RateLimitedError) as info:
        make(provider, server.base_url).search("q")
    assert info.value.retry_after == 7.0
    assert "429" in str(info.value)


def test_429_without_retry_after(server: FakeSearchServer) -> None:
    server.set_mode("brave", "rate_limit", retry_after=None)
    with pytest.raises(RateLimitedError) as info:
        make("brave", server.base_url).search("q")
    assert info.value.retry_after is None


@pytest.mark.parametrize("provider", ["tavily", "brave", "serpapi"])
def test_401_names_the_env_var_and_hides_the_key(server: FakeSearchServer, provider: Provider) -> None:
    server.set_mode(provider, "unauthorized")
    with pytest.raises(SearchError) as info:
        make(provider, server.base_url).search("q")
    message = str(info.value)
    assert ENV_VARS[provider] in message
    assert KEYS[provider] not in message
    assert not isinstance(info.value, RateLimitedError)


def test_searxng_403_explains_the_json_format(server: FakeSearchServer) -> None:
    server.set_mode("searxng", "custom", custom=(403, "Forbidden"))
    with pytest.raises(SearchError, match="JSON format"):
        make("searxng", server.base_url).search("q")


def test_searxng_credentials_in_url_stay_out_of_messages(server: FakeSearchServer) -> None:
    base = server.base_url.replace("http://", "http://alice:s3cret-pw@")
    provider = make("searxng", base)
    server.set_mode("searxng", "unauthorized")
    with pytest.raises(SearchError, match="credentials in SEARXNG_URL") as info:
        provider.search("q")
    assert "s3cret-pw" not in str(info.value) and "s3cret-pw" not in repr(provider)
    assert server.requests_for("searxng")[0].headers["authorization"].startswith("Basic ")
    server.set_mode("searxng", "server_error")
    with pytest.raises(SearchError, match="HTTP 500") as info:
        provider.search("q")
    assert "s3cret-pw" not in str(info.value)


def test_redirect_is_search_error(server: FakeSearchServer) -> None:
    server.set_mode("brave", "custom", custom=(301, "{}"))
    with pytest.raises(SearchError, match=r"redirect.*BRAVE_BASE_URL"):
        make("brave", server.base_url).search("q")


@pytest.mark.parametrize(
    ("mode", "custom", "expected"),
    [
        ("server_error", None, "HTTP 500"),
        ("custom", (404, "{}"), "HTTP 404"),
        ("bad_json", None, "not valid JSON"),
        ("custom", (200, '{"unexpected": true}'), "unexpected response shape"),
        ("custom", (200, "[1, 2]"), "unexpected response shape"),
    ],
)
@pytest.mark.parametrize("provider", ALL)
def test_failures_map_to_search_error(
    server: FakeSearchServer, provider: Provider, mode: str, custom: tuple[int, str] | None, expected: str
) -> None:
    server.set_mode(provider, mode, **({"custom": custom} if custom else {}))  # type: ignore[arg-type]
    with pytest.raises(SearchError, match=expected) as info:
        make(provider, server.base_url).search("q")
    assert not any(key in str(info.value) for key in KEYS.values())


def test_serpapi_error_field_is_reported_without_the_key(server: FakeSearchServer) -> None:
    body = '{"error": "Your account has run out of searches (key serp-SECRET-serpapi-0003)."}'
    server.set_mode("serpapi", "custom", custom=(200, body))
    with pytest.raises(SearchError, match="run out of searches") as info:
        make("serpapi", server.base_url).search("q")
    assert KEYS["serpapi"] not in str(info.value)


def test_timeout_is_search_error(server: FakeSearchServer) -> None:
    server.set_mode("serpapi", "slow", delay_s=0.5)
    with pytest.raises(SearchError, match="timed out") as info:
        make("serpapi", server.base_url, timeout=0.1).search("q")
    assert KEYS["serpapi"] not in str(info.value)
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_connection_refused_is_search_error() -> None:
    with socket.socket() as sock:  # a port that was free a moment ago and has nobody listening now
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(SearchError, match="failed") as info:
        make("serpapi", f"http://127.0.0.1:{port}", timeout=2).search("q")
    assert KEYS["serpapi"] not in str(info.value)


def test_constructor_and_query_validation(server: FakeSearchServer) -> None:
    with pytest.raises(SearchError, match="TAVILY_API_KEY"):
        TavilySearch("  ")
    with pytest.raises(SearchError, match="SEARXNG_URL"):
        SearXNGSearch("searx.local:8080")
    provider = make("tavily", server.base_url)
    with pytest.raises(SearchError, match="empty"):
        provider.search("   ")
    with pytest.raises(SearchError, match="max_results"):
        provider.search("q", max_results=0)
    assert server.requests == []


def test_keys_stay_out_of_repr_and_logs(server: FakeSearchServer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    providers = [make(p, server.base_url) for p in ALL]
    for provider in providers:
        provider.search("q")
        assert not any(key in repr(provider) for key in KEYS.values())
    server.set_mode("serpapi", "unauthorized")
    server.set_mode("tavily", "unauthorized")
    with pytest.raises(SearchError):
        FallbackSearch([providers[0], providers[3]]).search("q")

    # httpx logs each request URL at INFO; SerpAPI's key is in that URL and must come out redacted.
    assert any("search.json" in r.getMessage() for r in caplog.records if r.name == "httpx")
    assert not any(key in caplog.text for key in KEYS.values())


def test_parse_retry_after() -> None:
    assert parse_retry_after("12") == 12.0
    assert parse_retry_after(" 1.5 ") == 1.5
    assert parse_retry_after("-3") == 0.0
    assert parse_retry_after(None) is None
    assert parse_retry_after("soon") is None
    now = 1_700_000_000.0
    assert parse_retry_after(formatdate(now + 30, usegmt=True), now=now) == pytest.approx(30.0)


def test_providers_satisfy_the_protocol(server: FakeSearchServer) -> None:
    for provider in ALL:
        assert isinstance(make(provider, server.base_url), SearchProvider)
    assert isinstance(FallbackSearch([make("tavily", server.base_url)]), SearchProvider)


# --- fallback ----------------------------------------------------------------------------------


def test_fallback_skips_rate_limited_and_broken_providers(server: FakeSearchServer) -> None:
    server.set_mode("tavily", "rate_limit", retry_after="3")
    server.set_mode("brave", "server_error")
    search = FallbackSearch([make(p, server.base_url) for p in ALL])

    outcome = search.search("solid state", max_results=3)
    results = outcome.results

    assert outcome.provider == "searxng"
    assert {r.provider for r in results} == {"searxng"}
    assert len(outcome.failures) == 2
    assert outcome.failures[0].startswith("tavily: ") and "retry after 3s" in outcome.failures[0]
    assert outcome.failures[1].startswith("brave: ") and "HTTP 500" in outcome.failures[1]
    # SerpAPI was never asked, the others once each, in order
    assert [r.provider for r in server.requests] == ["tavily", "brave", "searxng"]


def test_fallback_normalizes_dedupes_and_truncates(server: FakeSearchServer) -> None:
    search = FallbackSearch([make("serpapi", server.base_url)])

    outcome = search.search("solid state", max_results=10)
    results = outcome.results
    assert [r.url for r in results] == [
        "https://example.com/solid-state?a=1&b=2",
        "https://news.example.org/article?id=7",
        "http://docs.example.net/guide",
        "https://xn--bcher-kva.example/akkus",
    ]
    # the first occurrence wins, with its own title and score
    assert results[0].title == "Solid-state batteries explained"
    assert results[0].score == 1.0
    assert outcome.failures == []

    assert [r.url for r in search.search("solid state", max_results=2).results] == [
        "https://example.com/solid-state?a=1&b=2",
        "https://news.example.org/article?id=7",
    ]


def test_fallback_all_fail(server: FakeSearchServer) -> None:
    for provider, mode in zip(ALL, ["rate_limit", "server_error", "bad_json", "unauthorized"], strict=True):
        server.set_mode(provider, mode)  # type: ignore[arg-type]
    search = FallbackSearch([make(p, server.base_url) for p in ALL])

    with pytest.raises(SearchError) as info:
        search.search("q")

    message = str(info.value)
    assert message.startswith("All search providers failed")
    for name in ("tavily:", "brave:", "searxng:", "serpapi:", "SERPAPI_API_KEY"):
        assert name in message
    assert not any(key in message for key in KEYS.values())
    assert message.count("; ") >= 3  # one line per provider


def test_fallback_state_resets_between_calls(server: FakeSearchServer) -> None:
    server.set_mode("tavily", "server_error")
    search = FallbackSearch([make("tavily", server.base_url), make("brave", server.base_url)])
    outcome = search.search("q")
    assert (outcome.provider, len(outcome.failures)) == ("brave", 1)

    server.set_mode("tavily", "ok")
    outcome = search.search("q")
    assert (outcome.provider, outcome.failures) == ("tavily", [])


def test_concurrent_searches_each_report_their_own_provider() -> None:
    """One FallbackSearch shared by concurrent breadth searches: each web_search output (what
    becomes the raw artifact) names the provider that answered *that* call and its failures."""
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    from deepresearch_dagster.core.tools.web_tools import WebSearchArgs, search_tool

    class Scripted:
        def __init__(self, name: str, fails_on_odd: bool) -> None:
            self.name, self.fails_on_odd, self.lock = name, fails_on_odd, threading.Lock()

        def search(self, query: str, max_results: int = 5) -> list[SearchResult]:
            time.sleep(0.01)  # overlap the calls
            if self.fails_on_odd and int(query.removeprefix("q")) % 2:
                raise SearchError(f"{self.name}: HTTP 500 for {query}")
            return [
                SearchResult(url=f"https://{self.name}.example/{query}", title=query, snippet="", provider=self.name)
            ]

    tool = search_tool(FallbackSearch([Scripted("tavily", True), Scripted("brave", False)]))
    with ThreadPoolExecutor(8) as pool:
        outputs = list(pool.map(lambda i: tool.run(WebSearchArgs(query=f"q{i}")).content, range(32)))
    for i, content in enumerate(outputs):
        expected = "brave" if i % 2 else "tavily"
        assert content["provider"] == expected, (i, content)
        assert [r["provider"] for r in content["results"]] == [expected]
        assert content["provider_failures"] == ([f"tavily: tavily: HTTP 500 for q{i}"] if i % 2 else [])


def test_fallback_needs_a_provider() -> None:
    with pytest.raises(SearchError, match="TAVILY_API_KEY"):
        FallbackSearch([])


def providers_from_env(env: dict[str, str]) -> list[SearchProvider]:
    """The configuration module reads the variables; the search module builds providers."""
    return providers_from_settings(load_settings(env=env).search)


# --- configuration from the environment --------------------------------------------------------


def test_providers_from_env_default_order_and_only_configured(server: FakeSearchServer) -> None:
    env = {
        "SERPAPI_API_KEY": KEYS["serpapi"],
        "TAVILY_API_KEY": KEYS["tavily"],
        "BRAVE_API_KEY": "   ",  # blank counts as not configured
        "SEARXNG_URL": f"{server.base_url}/searx",
    }
    providers = providers_from_env(env)
    assert [p.name for p in providers] == ["tavily", "searxng", "serpapi"]
    assert providers[0].base_url == "https://api.tavily.com"  # type: ignore[attr-defined]
    assert providers[2].base_url == "https://serpapi.com"  # type: ignore[attr-defined]
    assert providers_from_env({}) == []


def test_providers_from_env_custom_order_and_base_url_overrides(
    server: FakeSearchServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)  # these providers build their own (env-trusting) client
    env = {
        "DEEPRESEARCH_SEARCH_PROVIDERS": " Brave, serpapi,,brave ,searxng",
        "TAVILY_API_KEY": KEYS["tavily"],
        "BRAVE_API_KEY": KEYS["brave"],
        "SERPAPI_API_KEY": KEYS["serpapi"],
        "BRAVE_BASE_URL": server.base_url,
        "SERPAPI_BASE_URL": server.base_url + "/",
        "TAVILY_BASE_URL": server.base_url,
    }
    providers = providers_from_env(env)
    assert [p.name for p in providers] == ["brave", "serpapi"]  # tavily not listed, searxng not configured

    server.set_mode("brave", "rate_limit")
    search = FallbackSearch(providers)
    outcome = search.search("q", max_results=3)
    assert outcome.provider == "serpapi"
    assert len(outcome.results) == 3
    assert [r.provider for r in server.requests] == ["brave", "serpapi"]
    assert server.requests[1].path == "/search.json"
    search.close()


def test_providers_from_env_rejects_unknown_names() -> None:
    with pytest.raises(ConfigError, match=r"bing.*DEEPRESEARCH_SEARCH_PROVIDERS|DEEPRESEARCH_SEARCH_PROVIDERS.*bing"):
        providers_from_env({"DEEPRESEARCH_SEARCH_PROVIDERS": "tavily,bing", "TAVILY_API_KEY": "k"})
