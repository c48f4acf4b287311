"""A small website on 127.0.0.1 for fetch tests: articles, redirects, oversized and binary bodies, robots.txt.

Use it as a context manager (``with FakeWebsite() as site``), build URLs with ``site.url("/article")`` and read
every request it received from ``site.requests`` as (path, headers) pairs.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType

ARTICLE_TITLE = "Sodium-ion batteries reach the grid"
ARTICLE_PARAGRAPHS = [
    "Sodium-ion batteries are moving from laboratory curiosity to grid storage. Several manufacturers announced "
    "production lines this year, citing cheaper raw materials and better safety than lithium-ion cells.",
    "The chemistry trades energy density for cost: sodium is abundant, and the cells can use aluminium current "
    "collectors on both electrodes, which removes copper from the bill of materials.",
    "Analysts expect the first large deployments in stationary storage, where weight matters less than price "
    "per kilowatt-hour and cycle life.",
]
ARTICLE_HTML = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{ARTICLE_TITLE} | Example News</title>
<script>var tracking = "do-not-extract-this-script";</script></head>
<body>
<nav><a href="/">Home</a> <a href="/world">World</a> <a href="/tech">Technology</a> <a href="/login">Sign in</a></nav>
<main><article>
<h1>{ARTICLE_TITLE}</h1>
{"".join(f"<p>{p}</p>" for p in ARTICLE_PARAGRAPHS)}
</article></main>
<footer><p>Copyright Example News. All rights reserved.</p></footer>
</body></html>
"""
PLAIN_TEXT = "Plain notes about sodium: naïve café résumé, all in one Latin-1 text file.\n"
ROBOTS_TXT = "User-agent: *\nDisallow: /private/\n"
PDF_TEXT = "Sodium ion cells for grid storage"
HUGE_BYTES = 2_000_000


def make_pdf(text: str) -> bytes:
    """A minimal one-page PDF whose page shows ``text`` (built by hand with a correct xref table)."""
    stream = f"BT /F1 18 Tf 72 720 Td ({text}) Tj ET".encode("latin-1")
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R"
        b" /Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Title (Fake grid report) >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R /Info 6 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True  # a handler still sleeping in /slow must not block shutdown

    def handle_error(self, request: object, client_address: object) -> None:
        # Clients hang up mid-response on purpose (size cap, timeouts, refused content types).
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)  # type: ignore[arg-type]


class FakeWebsite:
    """Threaded HTTP server on 127.0.0.1:<free port>; use as a context manager."""

    def __init__(
        self, *, robots_txt: str | None = ROBOTS_TXT, slow_seconds: float = 3.0, latency_s: float = 0.0
    ) -> None:
        """``latency_s`` is added to every request, like a remote site's response time (benchmarks)."""
        self.robots_txt = robots_txt
        self.slow_seconds = slow_seconds
        self.latency_s = latency_s
        self.requests: list[tuple[str, dict[str, str]]] = []
        self._stop = threading.Event()
        self._pdf = make_pdf(PDF_TEXT)
        self._huge = (b"sodium " * (HUGE_BYTES // 7 + 1))[:HUGE_BYTES]
        self._server = _QuietServer(("127.0.0.1", 0), self._handler_class())
        self.routes = self._routes()  # needs the bound port for absolute redirect targets
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, path: str) -> str:
        return self.base_url + path

    def paths(self) -> list[str]:
        return [path for path, _ in self.requests]

    def __enter__(self) -> FakeWebsite:
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()  # wakes a handler sleeping in /slow
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def _routes(self) -> dict[str, Callable[[BaseHTTPRequestHandler], None]]:
        def send(status: int, content_type: str | None, body: bytes, **headers: str) -> Callable:
            def handler(h: BaseHTTPRequestHandler) -> None:
                h.send_response(status)
                if content_type:
                    h.send_header("Content-Type", content_type)
                for name, value in headers.items():
                    h.send_header(name.replace("_", "-"), value)
                h.send_header("Content-Length", str(len(body)))
                h.end_headers()
                h.wfile.write(body)

            return handler

        def redirect(status: int, location: str) -> Callable:
            return send(status, "text/html", b"<a href='moved'>moved</a>", Location=location)

        def slow(h: BaseHTTPRequestHandler) -> None:
            self._stop.wait(self.slow_seconds)  # longer than the test's read timeout
            send(200, "text/plain", b"finally")(h)

        def echo_host(h: BaseHTTPRequestHandler) -> None:
            send(200, "text/plain", (h.headers.get("Host") or "").encode())(h)

        html = ARTICLE_HTML.encode()
        routes: dict[str, Callable[[BaseHTTPRequestHandler], None]] = {
            "/article": send(200, "text/html; charset=utf-8", html),
            "/plain": send(200, "text/plain; charset=iso-8859-1", PLAIN_TEXT.encode("latin-1", "replace")),
            "/notes.md": send(200, "text/markdown", b"# Notes\n\nSodium is cheap.\n"),
            "/no-type": send(200, None, html),
            "/redirect/1": redirect(302, "/redirect/2"),
            "/redirect/2": redirect(301, f"{self.base_url}/article#top"),
            "/redirect/loop": redirect(302, "/redirect/loop"),
            "/redirect/metadata": redirect(302, "http://169.254.169.254/latest/meta-data"),
            "/redirect/private": redirect(302, "http://10.0.0.1/"),
            "/redirect/ftp": redirect(302, "ftp://127.0.0.1/file"),
            "/redirect/private-page": redirect(302, "/private/secret"),
            "/huge": send(200, "text/plain; charset=utf-8", self._huge),
            "/binary": send(200, "application/octet-stream", bytes(range(256)) * 64),
            "/doc.pdf": send(200, "application/pdf", self._pdf),
            "/error": send(500, "text/html", b"<h1>Internal Server Error</h1>"),
            "/private/secret": send(200, "text/html", b"<html><body><p>secret page</p></body></html>"),
            "/slow": slow,
            "/echo-host": echo_host,
        }
        if self.robots_txt is not None:
            routes["/robots.txt"] = send(200, "text/plain", self.robots_txt.encode())
        return routes

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        site = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, like real servers (Content-Length is always sent)

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if site.latency_s:
                    time.sleep(site.latency_s)
                site.requests.append((path, dict(self.headers.items())))
                route = site.routes.get(path)
                if route is None:
                    body = b"<h1>Not Found</h1>"
                    self.send_response(404)
                    self.send_header("Content-Type", "text/html")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                route(self)

            def log_message(self, format: str, *args: object) -> None:  # keep test output quiet
                pass

        return Handler
