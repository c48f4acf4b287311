"""Web search behind one interface: Tavily, Brave, SearXNG and SerpAPI, plus an ordered fallback.

Every provider maps its own failure modes (rate limits, bad keys, outages, timeouts, odd JSON) onto
``SearchError`` so callers handle one exception type. API keys never appear in exception messages,
log lines or results: messages name the environment variable instead, and the ``httpx`` request log
line is redacted for SerpAPI, whose key travels in the query string.
"""

from __future__ import annotations

import email.utils
import html
import logging
import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import httpx
from pydantic import BaseModel, Field, SecretStr

from ..config import SearchSettings
from ..errors import RateLimitedError, SearchError
from .deadline import deadline, deadline_client
from .urls import dedupe_by_url, normalize_url

logger = logging.getLogger("deepresearch.web.search")

USER_AGENT = "deepresearch-dagster/0.1 (+search)"
# Providers cap results per request; asking for more is an error on some of them.
MAX_RESULTS_CAP = 20
# Public endpoints and timeout: the defaults of the configuration (core/config.py SearchSettings).
_DEFAULTS = SearchSettings()
TAVILY_URL = _DEFAULTS.tavily_base_url
BRAVE_URL = _DEFAULTS.brave_base_url
SERPAPI_URL = _DEFAULTS.serpapi_base_url
DEFAULT_TIMEOUT_S = _DEFAULTS.timeout_s


class SearchResult(BaseModel):
    url: str
    title: str
    snippet: str
    published: str | None = None
    score: float | None = None
    provider: str


class SearchOutcome(BaseModel):
    """One fallback search: the results, the provider that answered, and who failed before it."""

    results: list[SearchResult]
    provider: str
    failures: list[str] = Field(default_factory=list)


@runtime_checkable
class SearchProvider(Protocol):
    name: str

    def search(self, query: str, max_results: int = 5) -> list[SearchResult]: ...


# --- helpers -----------------------------------------------------------------------------------

_INLINE_TAGS = re.compile(r"</?(?:strong|b|em|i|span|mark)\b[^>]*>", re.I)


def _clean(value: Any) -> str:
    """Plain text from a provider field (Brave wraps matches in <strong>, some escape entities)."""
    if not isinstance(value, str):
        return ""
    return " ".join(html.unescape(_INLINE_TAGS.sub("", value)).split())


def _optional_str(value: Any) -> str | None:
    return (value.strip() or None) if isinstance(value, str) else None


def _optional_float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _is_web_url(value: Any) -> bool:
    return isinstance(value, str) and value.strip().lower().startswith(("http://", "https://"))


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    return max(0.0, seconds) if math.isfinite(seconds) else None


def _check_request(query: str, max_results: int) -> tuple[str, int]:
    query = query.strip() if isinstance(query, str) else ""
    if not query:
        raise SearchError("Search query is empty.")
    if max_results < 1:
        raise SearchError(f"max_results must be at least 1 (got {max_results}).")
    return query, max_results


class _HTTPProvider:
    """Shared request/response handling; subclasses build the request and parse the body."""

    name: str = ""
    label: str = ""
    key_env: str | None = None  # the variable a user sets to fix a 401/403
    base_url_env: str = ""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        client: httpx.Client | None = None,
    ) -> None:
        base_url = (base_url or "").strip()
        if not base_url.lower().startswith(("http://", "https://")):
            hint = f"check {self.base_url_env}"
            raise SearchError(f"{self.label}: base URL must start with http:// or https:// ({hint}).")
        self.base_url = base_url.rstrip("/")
        # For messages: a self-hosted endpoint may carry basic-auth credentials in its URL.
        self._shown_base = str(httpx.URL(self.base_url).copy_with(username=None, password=None)).rstrip("/")
        if self.key_env and not (api_key or "").strip():
            raise SearchError(f"{self.label}: no API key; set {self.key_env}.")
        self._api_key = (api_key or "").strip() or None
        self.timeout = timeout
        self._owns_client = client is None
        # The deadline client bounds each call's total time, not just each socket read (slow trickles).
        self._client = client or deadline_client(timeout=timeout, headers={"User-Agent": USER_AGENT})

    def __repr__(self) -> str:  # the default repr would be fine today; this keeps keys out of it for good
        return f"{type(self).__name__}(base_url={self._shown_base!r})"

    def close(self) -> None:
        if self._owns_client:
            self._client.close()

    def __enter__(self) -> _HTTPProvider:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _redact(self, text: str) -> str:
        return text.replace(self._api_key, "***") if self._api_key else text

    def _request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> Any:
        url = f"{self._shown_base}{path}"
        try:
            with deadline(self.timeout):  # connect + whole response within `timeout`, however it trickles
                response = self._client.request(
                    method, f"{self.base_url}{path}", params=params, json=json, headers=headers, timeout=self.timeout
                )
        except httpx.TimeoutException:
            raise SearchError(f"{self.label}: request timed out after {self.timeout:g}s ({url}).") from None
        except httpx.HTTPError as exc:
            # `from None`: the cause's repr may carry the request URL, which for SerpAPI holds the key.
            detail = self._redact(str(exc)) or type(exc).__name__
            raise SearchError(f"{self.label}: request to {url} failed: {detail}") from None
        self._raise_for_status(response, url)
        try:
            return response.json()
        except ValueError:
            raise SearchError(f"{self.label}: response from {url} is not valid JSON.") from None

    def _raise_for_status(self, response: httpx.Response, url: str) -> None:
        status = response.status_code
        if status < 300:
            return
        if status < 400:  # redirects are not followed: an API endpoint that redirects is a wrong base URL
            raise SearchError(
                f"{self.label}: unexpected redirect (HTTP {status}) from {url}; check {self.base_url_env}."
            )
        if status == 429:
            retry_after = parse_retry_after(response.headers.get("Retry-After"))
            wait = f"; retry after {retry_after:g}s" if retry_after is not None else ""
            raise RateLimitedError(f"{self.label}: rate limited (HTTP 429){wait}.", retry_after)
        if status in (401, 403):
            raise SearchError(self._auth_message(status))
        raise SearchError(f"{self.label}: HTTP {status} from {url}.")

    def _auth_message(self, status: int) -> str:
        return f"{self.label}: authentication failed (HTTP {status}); check that {self.key_env} is set to a valid key."

    @staticmethod
    def _list_at(data: Any, *path: str) -> list[Any] | None:
        """``data[path[0]][path[1]]...`` if that is a list, else None."""
        for key in path:
            if not isinstance(data, dict):
                return None
            data = data.get(key)
        return data if isinstance(data, list) else None

    def _bad_shape(self, what: str) -> SearchError:
        return SearchError(f"{self.label}: unexpected response shape ({what}).")

    def _result(
        self, url: Any, title: Any, snippet: Any, published: Any = None, score: Any = None
    ) -> SearchResult | None:
        if not _is_web_url(url):  # skip javascript:, relative and missing links instead of failing the search
            return None
        return SearchResult(
            url=url.strip(),
            title=_clean(title) or url.strip(),
            snippet=_clean(snippet),
            published=_optional_str(published),
            score=_optional_float(score),
            provider=self.name,
        )

    def _collect(
        self, rows: list[Any], build: Callable[[dict[str, Any]], SearchResult | None], max_results: int
    ) -> list[SearchResult]:
        results = [r for r in (build(row) for row in rows if isinstance(row, dict)) if r is not None]
        logger.debug("%s: %d results", self.name, len(results))
        return results[:max_results]


# --- providers ---------------------------------------------------------------------------------


class TavilySearch(_HTTPProvider):
    name = "tavily"
    label = "Tavily"
    key_env = "TAVILY_API_KEY"
    base_url_env = "TAVILY_BASE_URL"

    def __init__(
        self,
        api_key: str,
        *,
        base_url: str = TAVILY_URL,
        timeout: float = DEFAULT_TIMEOUT_S,
        client: httpx.Client | None = None,
    ) -> None:
        super().__init__(base_url, api_key, timeout, client)

    def search(self, query: str, max_results: int = 5) -> list[SearchResult]:
        query, max_results = _check_request(query, max_results)
        body = {"query": query, "max_results": min(max_results, MAX_RESULTS_CAP), "search_depth": "basic"}
        data = self._request("POST", "/search", json=body, headers={"Authorization": f"Bearer {self._api_key}"})
        rows = self._list_at(data, "results")
        if rows is None:
            raise self._bad_shape("no 'results' list")
        return self._collect(rows, self._row, max_results)

    def _row(self, r: dict[str, Any]) -> SearchResult | None:
        return self._result(r.get("url"), r.get("title"), r.get("content"), r.get("published_date"), r.get("score"))


class BraveSearch(_HTTPProvider):
    name = "brave"
    label = "Brave Search"
    key_env = "BRAVE_API_KEY"
    base_url_env = "BRAVE_BASE_URL"

    def __init__(
        self,
        api_key: str,
        *,
        base_url: str = BRAVE_URL,
        timeout: float = DEFAULT_TIMEOUT_S,
        client: httpx.Client | None = None,
    ) -> None:
        super().__init__(base_url, api_key, timeout, client)

    def search(self, query: str, max_results: int = 5) -> list[SearchResult]:
        query, max_results = _check_request(query, max_results)
        headers = {"X-Subscription-Token": self._api_key or "", "Accept": "application/json"}
        params = {"q": query, "count": min(max_results, MAX_RESULTS_CAP)}
        data = self._request("GET", "/res/v1/web/search", params=params, headers=headers)
        rows = self._list_at(data, "web", "results")
        if rows is None:
            # Brave omits the "web" section when nothing matched; anything else is not a search response.
            if isinstance(data, dict) and data.get("type") == "search" and "web" not in data:
                return []
            raise self._bad_shape("no 'web.results' list")
        return self._collect(rows, self._row, max_results)

    def _row(self, r: dict[str, Any]) -> SearchResult | None:
        # page_age is ISO 8601; age is often relative ("3 days ago"), so it is only the fallback.
        published = r.get("page_age") or r.get("age")
        return self._result(r.get("url"), r.get("title"), r.get("description"), published)


class SearXNGSearch(_HTTPProvider):
    name = "searxng"
    label = "SearXNG"
    key_env = None
    base_url_env = "SEARXNG_URL"

    def __init__(
        self, base_url: str, *, timeout: float = DEFAULT_TIMEOUT_S, client: httpx.Client | None = None
    ) -> None:
        super().__init__(base_url, None, timeout, client)

    def _auth_message(self, status: int) -> str:
        if status == 401:  # no key of its own: a 401 comes from an auth proxy in front of it
            return f"{self.label}: HTTP 401 from {self._shown_base}; check the credentials in SEARXNG_URL."
        # A stock SearXNG answers 403 to format=json until "json" is listed under search.formats.
        return (
            f"{self.label}: HTTP 403 from {self._shown_base}; enable the JSON format (search.formats: [html, json] "
            "in settings.yml) or check SEARXNG_URL."
        )

    def search(self, query: str, max_results: int = 5) -> list[SearchResult]:
        query, max_results = _check_request(query, max_results)
        params = {"q": query, "format": "json"}
        data = self._request("GET", "/search", params=params, headers={"Accept": "application/json"})
        rows = self._list_at(data, "results")
        if rows is None:
            raise self._bad_shape("no 'results' list")
        return self._collect(rows, self._row, max_results)

    def _row(self, r: dict[str, Any]) -> SearchResult | None:
        return self._result(r.get("url"), r.get("title"), r.get("content"), r.get("publishedDate"), r.get("score"))


class SerpAPISearch(_HTTPProvider):
    name = "serpapi"
    label = "SerpAPI"
    key_env = "SERPAPI_API_KEY"
    base_url_env = "SERPAPI_BASE_URL"
    _NO_RESULTS = "hasn't returned any results"

    def __init__(
        self,
        api_key: str,
        *,
        base_url: str = SERPAPI_URL,
        timeout: float = DEFAULT_TIMEOUT_S,
        client: httpx.Client | None = None,
    ) -> None:
        super().__init__(base_url, api_key, timeout, client)
        _install_httpx_log_redaction()

    def search(self, query: str, max_results: int = 5) -> list[SearchResult]:
        query, max_results = _check_request(query, max_results)
        params = {"engine": "google", "q": query, "num": min(max_results, MAX_RESULTS_CAP), "api_key": self._api_key}
        data = self._request("GET", "/search.json", params=params)
        rows = self._list_at(data, "organic_results")
        if rows is None:
            error = data.get("error") if isinstance(data, dict) else None
            # SerpAPI answers 200 with an "error" field both for empty result pages and for real problems.
            if isinstance(error, str) and self._NO_RESULTS in error:
                return []
            if isinstance(error, str):
                raise SearchError(f"{self.label}: {self._redact(error)[:200]}")
            raise self._bad_shape("no 'organic_results' list")
        return self._collect(rows, self._row, max_results)

    def _row(self, r: dict[str, Any]) -> SearchResult | None:
        position = r.get("position")
        valid = isinstance(position, int) and not isinstance(position, bool) and position > 0
        score = 1.0 / position if valid else None
        return self._result(r.get("link"), r.get("title"), r.get("snippet"), r.get("date"), score)


# --- key redaction in httpx's own log line -----------------------------------------------------

_SECRET_PARAMS = ("api_key",)


class _RedactSecretParams(logging.Filter):
    """httpx logs every request URL at INFO; SerpAPI's key is a query parameter of that URL."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(_redact_url(arg) for arg in record.args)
        return True


def _redact_url(arg: Any) -> Any:
    if isinstance(arg, httpx.URL):
        for param in _SECRET_PARAMS:
            if param in arg.params:
                arg = arg.copy_set_param(param, "***")
    return arg


def _install_httpx_log_redaction() -> None:
    httpx_logger = logging.getLogger("httpx")
    if not any(isinstance(f, _RedactSecretParams) for f in httpx_logger.filters):
        httpx_logger.addFilter(_RedactSecretParams())


# --- fallback ----------------------------------------------------------------------------------


class FallbackSearch:
    """Tries providers in order and returns the first success, normalized and deduplicated.

    ``search`` returns a :class:`SearchOutcome` naming the provider that answered and one safe
    line per provider that failed before it. Nothing is kept on the instance, so concurrent
    breadth searches can share one ``FallbackSearch``.
    """

    name = "fallback"

    def __init__(self, providers: Sequence[SearchProvider]) -> None:
        if not providers:
            raise SearchError(f"No web search provider is configured. {CONFIGURE_HINT}")
        self.providers = list(providers)

    def search(self, query: str, max_results: int = 5) -> SearchOutcome:
        query, max_results = _check_request(query, max_results)
        failures: list[str] = []
        # Ask for more than needed: duplicates removed below would otherwise leave the caller short.
        # The providers bill per request, not per result, so the extra rows cost nothing.
        fetch = max(max_results, min(2 * max_results, MAX_RESULTS_CAP))
        for provider in self.providers:
            try:
                results = provider.search(query, fetch)
            except (SearchError, httpx.HTTPError) as exc:  # HTTPError: third-party providers that don't map errors
                failures.append(f"{provider.name}: {exc}")
                logger.info("search provider %s failed: %s", provider.name, exc)
                continue
            normalized = [r.model_copy(update={"url": normalize_url(r.url)}) for r in results]
            return SearchOutcome(
                results=dedupe_by_url(normalized)[:max_results], provider=provider.name, failures=failures
            )
        raise SearchError("All search providers failed: " + "; ".join(failures))

    def close(self) -> None:
        for provider in self.providers:
            close = getattr(provider, "close", None)
            if callable(close):
                close()


# --- configuration ----------------------------------------------------------------------------

CONFIGURE_HINT = "Set TAVILY_API_KEY, BRAVE_API_KEY, SERPAPI_API_KEY or SEARXNG_URL."


def providers_from_settings(search: SearchSettings) -> list[SearchProvider]:
    """Configured providers in ``search.providers`` order; unconfigured ones are skipped."""

    def secret(value: SecretStr | None) -> str | None:
        return (value.get_secret_value().strip() or None) if value is not None else None

    timeout = search.timeout_s
    providers: list[SearchProvider] = []
    for name in search.providers:
        if name == "tavily" and (key := secret(search.tavily_api_key)):
            providers.append(TavilySearch(key, base_url=search.tavily_base_url, timeout=timeout))
        elif name == "brave" and (key := secret(search.brave_api_key)):
            providers.append(BraveSearch(key, base_url=search.brave_base_url, timeout=timeout))
        elif name == "searxng" and (url := secret(search.searxng_url)):
            providers.append(SearXNGSearch(url, timeout=timeout))
        elif name == "serpapi" and (key := secret(search.serpapi_api_key)):
            providers.append(SerpAPISearch(key, base_url=search.serpapi_base_url, timeout=timeout))
    return providers
