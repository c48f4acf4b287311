"""A small OpenAI-compatible Chat Completions server on 127.0.0.1 for tests.

By default it plays every role from the ``ROLE: <name>`` marker in the system prompt. Tests
queue scripted answers per role (``server.script("compressor", "not json", ...)``) and read
every request it received from ``server.requests``.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import defaultdict, deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_ROLE = re.compile(r"ROLE: (\w+)")
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")


def role_of(body: dict[str, Any]) -> str:
    for message in body.get("messages", []):
        if message.get("role") == "system":
            match = _ROLE.search(message.get("content") or "")
            if match:
                return match.group(1)
    return "unknown"


def default_answer(role: str, body: dict[str, Any]) -> dict[str, Any]:
    """A plausible answer per role, derived only from what the request contains."""
    messages = body["messages"]
    if role == "planner":
        return {
            "content": json.dumps(
                {
                    "plan_title": "Fake plan: sodium batteries",
                    "steps": [
                        {
                            "step_id": 1,
                            "title": "Sodium-ion basics",
                            "description": "Search for sodium-ion cell chemistry and read the best document.",
                        },
                        {
                            "step_id": 2,
                            "title": "Sodium-ion costs",
                            "description": "Search for sodium-ion cost figures and read the best document.",
                        },
                    ],
                }
            )
        }
    if role == "researcher":
        summaries = [json.loads(m["content"]) for m in messages if m["role"] == "assistant"]
        step = re.search(r"Current step (\S+): (.+)", messages[1]["content"]).group(2)
        tools = {t["function"]["name"] for t in body.get("tools", [])}
        search, read, arg = (
            ("web_search", "fetch_url", "url") if "web_search" in tools else ("local_search", "read_document", "path")
        )
        if not summaries:
            return {"tool_calls": [(search, {"query": step})]}
        if len(summaries) == 1 and summaries[0]["extraction"]:
            return {"tool_calls": [(read, {arg: summaries[0]["extraction"][0].split(" ")[0]})]}
        return {"content": "Step complete."}
    if role == "compressor":
        raw = messages[-1]["content"]
        try:
            data = json.loads(raw)
        except json.JSONDecodeError:
            data = None
        if isinstance(data, dict) and "results" in data:
            extraction = [f"{r.get('path') or r.get('url')} {r['title']}" for r in data["results"]]
            summary = "The search returned documents. The first is the most relevant. All are listed below."
        else:
            sentences = [s for s in _SENTENCE.split(" ".join(raw.split())) if s.endswith(".")]
            extraction = sentences[3:5]
            summary = " ".join(sentences[:3])
        return {
            "content": json.dumps(
                {
                    "summary_title": "Compressed findings from the fake compression model",
                    "summary": summary,
                    "extraction": extraction,
                    "is_useful": bool(extraction) or len(summary) > 0,
                }
            )
        }
    if role == "critic":
        return {"content": json.dumps({"sufficiency": 8, "gaps": [], "contradictions": [], "recommendation": "ok"})}
    if role == "reporter":
        ask = messages[-1]["content"] or ""
        if ask.startswith("Write the outline"):
            headings = re.search(r"in order: (.+)\.", ask).group(1).split(", ")
            return {"content": json.dumps({"sections": [{"heading": h, "points": []} for h in headings]})}
        # A section (or the direct answer): quote each source's first summary sentence, cited.
        memory = next(m["content"] for m in messages if m["role"] == "user" and "Working memory:" in m["content"])
        blocks = re.findall(r"^\[(\d+)\] [^\n]*\n([^\n]+)", memory, re.M)
        lines = [f"- {_SENTENCE.split(text)[0]} [{n}]" for n, text in blocks]
        return {"content": json.dumps({"markdown": "\n".join(dict.fromkeys(lines)) or "No sources were consulted."})}
    return {"content": "unknown role"}


class FakeOpenAIServer:
    def __init__(self, latency_s: float = 0.0) -> None:
        """``latency_s`` is added to every answer, like a model's response time (benchmarks)."""
        self.latency_s = latency_s
        self.requests: list[dict[str, Any]] = []
        self.scripts: dict[str, deque[Any]] = defaultdict(deque)
        self.lock = threading.Lock()
        handler = self._handler()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def script(self, role: str, *answers: Any) -> None:
        """Queue answers for a role: a string is returned as message content verbatim, a dict
        as ``{"content": ...}`` or ``{"tool_calls": [(name, arguments), ...]}``. HTTP faults:
        ``{"status": 429, "headers": {...}, "error": {...}}``, ``{"sleep": seconds}`` (then the
        default answer), ``{"raw_body": "not json"}``."""
        self.scripts[role].extend(answers)

    def requests_for(self, role: str) -> list[dict[str, Any]]:
        return [r for r in self.requests if role_of(r) == role]

    def __enter__(self) -> FakeOpenAIServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def _respond(self, body: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        role = role_of(body)
        if self.latency_s:
            time.sleep(self.latency_s)
        with self.lock:
            self.requests.append(body)
            scripted = self.scripts[role].popleft() if self.scripts[role] else None
        if isinstance(scripted, dict) and "status" in scripted:
            error = scripted.get("error", {"message": f"scripted {scripted['status']}", "type": "server_error"})
            return scripted["status"], scripted.get("headers", {}), json.dumps({"error": error}).encode()
        if isinstance(scripted, dict) and "raw_body" in scripted:
            return 200, {}, scripted["raw_body"].encode()
        if isinstance(scripted, dict) and "sleep" in scripted:
            time.sleep(scripted["sleep"])
            scripted = None
        return 200, {}, json.dumps(self._answer(role, body, scripted)).encode()

    def _answer(self, role: str, body: dict[str, Any], scripted: Any) -> dict[str, Any]:
        if isinstance(scripted, str):
            answer = {"content": scripted}
        elif isinstance(scripted, dict):
            answer = scripted
        else:
            answer = default_answer(role, body)
        message: dict[str, Any] = {"role": "assistant", "content": answer.get("content")}
        if answer.get("tool_calls"):
            message["tool_calls"] = [
                {"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
                for i, (n, a) in enumerate(answer["tool_calls"])
            ]
        prompt_chars = sum(len(m.get("content") or "") for m in body["messages"])
        return {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [
                {"index": 0, "message": message, "finish_reason": "tool_calls" if answer.get("tool_calls") else "stop"}
            ],
            "usage": {
                "prompt_tokens": prompt_chars // 4,
                "completion_tokens": 7,
                "total_tokens": prompt_chars // 4 + 7,
            },
        }

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                if not self.path.endswith("/chat/completions"):
                    self.send_error(404)
                    return
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                status, headers, payload = server._respond(body)
                try:
                    self.send_response(status)
                    for name, value in {"Content-Type": "application/json", **headers}.items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test)

            def log_message(self, *args: object) -> None:
                pass

        return Handler
