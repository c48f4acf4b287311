"""One local HTTP server on 127.0.0.1 that plays Tavily, Brave, SearXNG and SerpAPI.

Routes are matched on the path suffix, so a provider can also be mounted under a prefix
(``SEARXNG_URL=<base_url>/searx``)::

    POST .../search               Tavily   (JSON body, Authorization: Bearer <key>)
    GET  .../res/v1/web/search    Brave    (X-Subscription-Token: <key>)
    GET  .../search               SearXNG  (?format=json, no key)
    GET  .../search.json          SerpAPI  (?api_key=<key>)

Tests choose per provider how it answers (``server.set_mode("tavily", "rate_limit")``) and read
what it received from ``server.requests`` / ``server.requests_for("brave")``. The canned results
contain URLs that differ only by tracking parameters, fragment, case or default port.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal
from urllib.parse import parse_qs, urlsplit

Provider = Literal["tavily", "brave", "searxng", "serpapi"]
Mode = Literal["ok", "rate_limit", "server_error", "bad_json", "unauthorized", "empty", "slow", "custom"]
PROVIDERS: tuple[Provider, ...] = ("tavily", "brave", "searxng", "serpapi")

# (url, title, snippet, published). Pairs 0/1, 2/3 and 4/5 are the same page after normalization.
CANNED: list[tuple[str, str, str, str]] = [
    (
        "https://Example.com/solid-state?utm_source=newsletter&b=2&a=1#intro",
        "Solid-state batteries explained",
        "Solid electrolytes replace the liquid in lithium-ion cells.",
        "2025-03-01",
    ),
    (
        "https://example.com:443/solid-state?a=1&b=2",
        "Solid-state batteries explained (again)",
        "Duplicate of the first result.",
        "2025-03-01",
    ),
    (
        "https://news.example.org/article?id=7&fbclid=abc123",
        "Sulfide electrolytes reach pilot lines",
        "Pilot production of sulfide electrolytes began in 2024.",
        "2024-11-20",
    ),
    (
        "https://news.example.org/article?id=7#comments",
        "Sulfide electrolytes reach pilot lines (comments)",
        "Duplicate of the third result.",
        "2024-11-20",
    ),
    (
        "http://docs.example.net:80/guide",
        "Manufacturing guide",
        "Stack pressure and interface resistance in production.",
        "2023-06-15",
    ),
    (
        "HTTP://DOCS.example.net/guide?gclid=xyz",
        "Manufacturing guide (mirror)",
        "Duplicate of the fifth result.",
        "2023-06-15",
    ),
    (
        "https://bücher.example/akkus",
        "Festkörperakkus",
        "Ein Überblick über Festkörperbatterien.",
        "2022-01-10",
    ),
]


def tavily_payload(rows: list[tuple[str, str, str, str]]) -> dict[str, Any]:
    results = [
        {"url": u, "title": t, "content": s, "score": round(0.95 - i * 0.05, 2), "published_date": p}
        for i, (u, t, s, p) in enumerate(rows)
    ]
    return {"query": "q", "response_time": 0.1, "results": results}


def brave_payload(rows: list[tuple[str, str, str, str]]) -> dict[str, Any]:
    results = []
    for i, (u, t, s, p) in enumerate(rows):
        # Brave highlights matches with <strong> and gives a relative "age" next to the ISO "page_age".
        row: dict[str, Any] = {"url": u, "title": t, "description": f"<strong>{s}</strong>", "age": f"{i + 1} days ago"}
        if i % 2 == 0:
            row["page_age"] = f"{p}T00:00:00"
        results.append(row)
    return {"type": "search", "query": {"original": "q"}, "web": {"type": "search", "results": results}}


def searxng_payload(rows: list[tuple[str, str, str, str]]) -> dict[str, Any]:
    results = [
        {"url": u, "title": t, "content": s, "score": 3.0 - i * 0.25, "publishedDate": p if i % 2 else None}
        for i, (u, t, s, p) in enumerate(rows)
    ]
    return {"query": "q", "number_of_results": len(results), "results": results}


def serpapi_payload(rows: list[tuple[str, str, str, str]]) -> dict[str, Any]:
    results = [
        {"position": i + 1, "link": u, "title": t, "snippet": s, "date": p} for i, (u, t, s, p) in enumerate(rows)
    ]
    return {"search_metadata": {"status": "Success"}, "organic_results": results}


PAYLOADS = {"tavily": tavily_payload, "brave": brave_payload, "searxng": searxng_payload, "serpapi": serpapi_payload}
EMPTY = {
    "tavily": {"results": []},
    "brave": {"type": "search", "query": {"original": "q"}},
    "searxng": {"results": []},
    "serpapi": {"error": "Google hasn't returned any results for this query."},
}


@dataclass
class RecordedRequest:
    provider: str
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]  # lower-cased names
    body: Any = None


@dataclass
class ProviderBehaviour:
    mode: Mode = "ok"
    retry_after: str | None = "7"
    delay_s: float = 0.5
    custom: tuple[int, str] = (200, "{}")  # status and raw body for mode "custom"
    rows: list[tuple[str, str, str, str]] = field(default_factory=lambda: list(CANNED))


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that timed out on a "slow" answer has hung up; that is the point of the test.
        pass


class FakeSearchServer:
    def __init__(self, latency_s: float = 0.0) -> None:
        """``latency_s`` is added to every request, like a provider's response time (benchmarks)."""
        self.latency_s = latency_s
        self.behaviour: dict[str, ProviderBehaviour] = {p: ProviderBehaviour() for p in PROVIDERS}
        self.requests: list[RecordedRequest] = []
        self.lock = threading.Lock()
        self.httpd = _QuietServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def set_mode(self, provider: Provider, mode: Mode, **options: Any) -> None:
        """``options`` set other ProviderBehaviour fields, e.g. ``retry_after="3"`` or ``custom=(200, "...")``."""
        behaviour = self.behaviour[provider]
        behaviour.mode = mode
        for name, value in options.items():
            setattr(behaviour, name, value)

    def requests_for(self, provider: Provider) -> list[RecordedRequest]:
        return [r for r in self.requests if r.provider == provider]

    def __enter__(self) -> FakeSearchServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    @staticmethod
    def route(method: str, path: str) -> str | None:
        if path.endswith("/search.json"):
            return "serpapi"
        if path.endswith("/res/v1/web/search"):
            return "brave"
        if path.endswith("/search"):
            return "tavily" if method == "POST" else "searxng"
        return None

    def _answer(self, provider: str) -> tuple[int, dict[str, str], bytes]:
        behaviour = self.behaviour[provider]
        json_type = {"Content-Type": "application/json"}
        if behaviour.mode == "rate_limit":
            headers = {**json_type, **({"Retry-After": behaviour.retry_after} if behaviour.retry_after else {})}
            return 429, headers, b'{"error": "Too many requests"}'
        if behaviour.mode == "server_error":
            return 500, json_type, b'{"error": "internal"}'
        if behaviour.mode == "unauthorized":
            return 401, json_type, b'{"error": "Invalid API key"}'
        if behaviour.mode == "bad_json":
            return 200, json_type, b"<html>not json</html>"
        if behaviour.mode == "custom":
            status, body = behaviour.custom
            return status, json_type, body.encode()
        if behaviour.mode == "empty":
            return 200, json_type, json.dumps(EMPTY[provider]).encode()
        if behaviour.mode == "slow":
            time.sleep(behaviour.delay_s)
        return 200, json_type, json.dumps(PAYLOADS[provider](behaviour.rows)).encode()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                parts = urlsplit(self.path)
                provider = server.route(self.command, parts.path)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                if provider is None:
                    self.send_error(404)
                    return
                if server.latency_s:
                    time.sleep(server.latency_s)
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw.decode(errors="replace")
                with server.lock:
                    server.requests.append(
                        RecordedRequest(
                            provider=provider,
                            method=self.command,
                            path=parts.path,
                            query={k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()},
                            headers={k.lower(): v for k, v in self.headers.items()},
                            body=body,
                        )
                    )
                status, headers, payload = server._answer(provider)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = _serve
            do_POST = _serve

            def log_message(self, *args: object) -> None:
                pass

        return Handler
