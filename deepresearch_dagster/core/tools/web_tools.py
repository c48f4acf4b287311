"""``web_search`` (provider fallback chain) and ``fetch_url`` (SSRF-guarded) as research tools."""

from __future__ import annotations

from pydantic import BaseModel, Field

from ..web.fetch import FetchError, FetchPolicy, fetch_url
from ..web.search import FallbackSearch, SearchError
from ..web.urls import normalize_url
from .base import Tool, ToolError, ToolResult


class WebSearchArgs(BaseModel):
    query: str = Field(min_length=1, max_length=400, description="web search query")
    max_results: int = Field(default=5, ge=1, le=10, description="number of results")


class FetchUrlArgs(BaseModel):
    url: str = Field(min_length=8, max_length=2000, description="http(s) URL to read")


def search_tool(search: FallbackSearch) -> Tool:
    def run(args: WebSearchArgs) -> ToolResult:
        try:
            outcome = search.search(args.query, args.max_results)
        except SearchError as exc:
            raise ToolError(str(exc)) from exc
        content = {
            "query": args.query,
            "provider": outcome.provider,
            "provider_failures": outcome.failures,
            "results": [r.model_dump() for r in outcome.results],
        }
        return ToolResult(content=content, kind="json")

    return Tool("web_search", "Search the web; returns titles, URLs and snippets.", WebSearchArgs, run, cacheable=True)


def fetch_tool(policy: FetchPolicy) -> Tool:
    def run(args: FetchUrlArgs) -> ToolResult:
        try:
            page = fetch_url(args.url, policy)
        except FetchError as exc:
            raise ToolError(str(exc)) from exc
        header = f"Title: {page.title or ''}\nURL: {page.final_url}\n"
        if page.truncated:
            header += f"Note: truncated at {page.bytes} bytes\n"
        return ToolResult(
            content=f"{header}\n{page.text}\n",
            kind="text",
            source=normalize_url(page.final_url),
            source_title=page.title,
            links=page.links,
        )

    return Tool("fetch_url", "Read a web page or PDF (main text only).", FetchUrlArgs, run, cacheable=True)
