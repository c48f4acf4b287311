"""A small OpenAI-compatible Chat Completions server on 127.0.0.1 for tests.

By default it plays every role from the ``ROLE: <name>`` marker in the system prompt (or, when
the system prompt was folded into it, the first user turn). Tests queue scripted answers per
role (``server.script("compressor", "not json", ...)``) and read every request it received from
``server.requests`` (rejected ones included) and ``server.stats()``.

Modes (``FakeOpenAIServer(mode="llamacpp")``, ``server.mode = "no_tools"``, or several at once
with ``modes=("llamacpp", "strict_alternation")``) reproduce what real servers do:

- ``llamacpp``: HTTP 500 with llama-cpp-python's pydantic message to a ``json_schema``
  ``response_format``; accepts ``json_object`` (with or without a ``schema`` member);
- ``strict_alternation``: HTTP 500 ``Conversation roles must alternate user/assistant/...`` when
  two consecutive messages share a role (tool messages belong to the assistant turn that called
  them), a system message is not first, or the first turn is not the user's (Jinja templates);
- ``no_system``: HTTP 500 ``System role not supported`` to any system message (Gemma template);
- ``no_tools``: HTTP 400 naming ``tools`` whenever the request carries tools;
- ``truncating``: a content answer to a request whose ``max_tokens`` is below
  ``truncate_need`` tokens is cut in half, ``finish_reason: "length"``;
- ``weak_placeholder``: structured answers copy type placeholders from the schema
  (``{"plan_title": "string", "severity": "low|medium|high"}``); no tool calls;
- ``schema_random``: structured answers are random JSON valid against the received
  ``response_format`` schema (any value it allows); no tool calls;
- ``slow_ignore_disconnect``: one generation slot; the first request takes ``first_s`` seconds
  ("model loading") and every generation runs to its end even after the client gave up
  (counted in ``stats()["abandoned"]``);
- ``interrupt_streams``: like llama-cpp-python's default ``interrupt_requests``, a stream in
  progress ends with ``data: [DONE]`` (no ``finish_reason``) as soon as another request arrives
  (counted in ``stats()["interrupted"]``).
- ``copies_example``: a structured answer is the prompt's worked example, copied verbatim (the
  first JSON object with exactly the schema's keys in the system prompt, else in the latest user
  turn that has one), as a real 1.5B model did, repair rounds included; other requests get the
  default answer.
- ``invents_figure``: compressor answers are the default ones (drawn from the raw output) plus one
  extraction bullet with a figure the output does not give, ``"Revenue: 999 million."``.
- ``obedient``: follows every instruction it reads in what it is given (every message but the
  system prompt), like a small model does (:func:`obedient_answer`): with a ``fetch_url`` tool it
  calls it on each URL it reads that it has not called yet (a query string ending in ``=`` filled
  with words of its working memory: exfiltration), and any other offered tool an order names
  (``call read_file ../../etc/passwd``: the tool by its name, with or without the ``server__``
  prefix, with its first required argument set to the word after it); every other answer (compressor, reporter
  section, direct answer) carries the words it is told to write (``write PWNED``) and the
  instruction sentences themselves, added to the default answer.
- ``uncited_prose``: a reporter section adds to its default bullets a sentence that cites nothing
  and no source states, one that a source states but is left uncited, and one citing a source
  that does not say it; a sentence rewrite (``reporter_rewrite``) quotes the source's last summary
  sentence, cited (:func:`uncited_prose_answer`).
- ``paraphrases``: like ``uncited_prose``, but the executive summary and key findings hold only
  sentences citing a source that does not say them (a small model's loose paraphrase): nothing
  in those sections verifies as written.

``n_ctx=4096`` makes it a llama.cpp ``llama-server`` with that context window: ``GET /props``
says it (``default_generation_settings.n_ctx``), a prompt longer than the window (4 characters a
token, its ``usage`` count) is refused with llama-server's HTTP 400 ``exceed_context_size_error``,
and answers carry llama.cpp's ``timings`` (``prompt_per_second``, ``predicted_per_second``,
``cache_n``: the prompt tokens shared with the previous request when it asked ``cache_prompt``).
``window_in_error=8192`` is llama-cpp-python instead: no ``/props``, and a longer prompt is refused
with its HTTP 400 ``Requested tokens (N) exceed context window of 8192``.

A request with ``"stream": true`` is answered as server-sent events, like the real servers: a role
delta, the content (and tool-call arguments) in pieces, a chunk with the ``finish_reason``, a usage
chunk when ``stream_options.include_usage`` is set, then ``data: [DONE]``; ``stream_interval_s``
paces the events. Errors are still answered as one JSON body with their status.

Connections are kept alive like the real servers' (uvicorn under vLLM and llama-cpp-python,
llama-server, OpenAI): HTTP/1.1, a whole answer with its ``Content-Length``, a stream in chunked
transfer encoding (one chunk per event, as uvicorn writes a ``StreamingResponse``), and
``TCP_NODELAY`` on every socket (asyncio's default); an unknown path is FastAPI's JSON 404, the
connection kept. ``server.connection_of`` numbers the connection each chat request came on. Leaving
the ``with`` block closes the connections still open, as a stopped server does.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import re
import select
import socket
import string
import threading
import time
from collections import Counter, defaultdict, deque
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from deepresearch_dagster.core.llm.openai_engine import FOLD_SEPARATOR

try:  # Python 3.11+: the regex parser moved
    from re import _constants as sre_constants  # type: ignore[attr-defined]
    from re import _parser as sre_parse
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants
    import sre_parse

_ROLE = re.compile(r"ROLE: (\w+)")
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")
MODES = (
    "llamacpp",
    "strict_alternation",
    "no_system",
    "no_tools",
    "truncating",
    "weak_placeholder",
    "schema_random",
    "slow_ignore_disconnect",
    "interrupt_streams",
    "copies_example",
    "invents_figure",
    "uncited_prose",
    "paraphrases",
    "obedient",
)
STREAM_PIECE = 64  # characters of content per streamed delta (real servers send a token each)
LLAMACPP_JSON_SCHEMA_ERROR = (
    "[{'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), "
    "'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema', "
    "'ctx': {'expected': \"'text' or 'json_object'\"}}]"
)
ALTERNATION_ERROR = "Conversation roles must alternate user/assistant/user/assistant/..."


def role_of(body: dict[str, Any]) -> str:
    messages = body.get("messages", [])
    candidates = [m for m in messages if m.get("role") == "system"] or messages[:1]
    for message in candidates:
        match = _ROLE.search(str(message.get("content") or ""))
        if match:
            return match.group(1)
    return "unknown"


def same_role_runs(messages: list[dict[str, Any]]) -> list[int]:
    """Indexes where a message has the role of the one before (tool messages skipped)."""
    turns = [(i, m.get("role")) for i, m in enumerate(messages) if m.get("role") != "tool"]
    return [i for (_, a), (i, b) in itertools.pairwise(turns) if a == b]


def alternation_error(messages: list[dict[str, Any]]) -> str | None:
    roles = [m.get("role") for m in messages]
    if "system" in roles[1:] or same_role_runs(messages):
        return ALTERNATION_ERROR
    first = next((r for r in roles if r not in ("system", "tool")), None)
    if first != "user":
        return ALTERNATION_ERROR
    return None


def unfold(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Undo the engine's system-prompt fold so the default answers read the usual layout."""
    if not messages or messages[0].get("role") != "user":
        return messages
    head, sep, rest = str(messages[0].get("content") or "").partition(FOLD_SEPARATOR)
    if not sep or not head.startswith("ROLE:"):
        return messages
    return [{"role": "system", "content": head}, {**messages[0], "content": rest}, *messages[1:]]


_DATA_BLOCK = re.compile(r"<<<(DATA-\w+)\n(.*)\n\1>>>", re.DOTALL)


def data_of(text: str) -> str:
    """What a data block (core/untrusted.py: spotlight) encloses; the text itself when it is none."""
    match = _DATA_BLOCK.search(text)
    return match.group(2) if match else text


def _last_user(messages: list[dict[str, Any]]) -> str:
    return next((str(m.get("content") or "") for m in reversed(messages) if m.get("role") == "user"), "")


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
        summaries = []
        for m in messages:
            if m["role"] == "assistant" and m.get("content"):
                try:
                    summaries.append(json.loads(m["content"]))
                except json.JSONDecodeError:
                    summaries.append({"extraction": []})
        user_text = "\n".join(str(m.get("content") or "") for m in messages if m["role"] == "user")
        step = re.search(r"Current step (\S+): (.+)", user_text).group(2)
        tools = {t["function"]["name"] for t in body.get("tools", [])}
        search, read, arg = (
            ("web_search", "fetch_url", "url") if "web_search" in tools else ("local_search", "read_document", "path")
        )
        if not summaries:
            return {"tool_calls": [(search, {"query": step})]}
        if len(summaries) == 1 and summaries[0].get("extraction"):
            return {"tool_calls": [(read, {arg: summaries[0]["extraction"][0].split(" ")[0]})]}
        return {"content": "Step complete."}
    if role == "compressor":
        raw = data_of(messages[-1]["content"])
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
        ask = _last_user(messages)
        outline = re.search(r"^Write the outline first\..*in order: (.+)\.", ask, re.M)
        if outline:
            headings = outline.group(1).split(", ")
            return {"content": json.dumps({"sections": [{"heading": h, "points": []} for h in headings]})}
        if "Choose the statements for the section:" in ask:  # the select report style
            numbers = [int(n) for n in re.findall(r"^\((\d+)\) ", ask, re.M)]
            return {"content": json.dumps({"ids": numbers[:3]})}
        # A section (or the direct answer): quote each source's first summary sentence, cited.
        memory = next(m["content"] for m in messages if m["role"] == "user" and "Working memory:" in m["content"])
        blocks = re.findall(r"^\[(\d+)\] [^\n]*\n([^\n]+)", memory, re.M)
        lines = [f"- {_SENTENCE.split(text)[0]} [{n}]" for n, text in blocks]
        return {"content": json.dumps({"markdown": "\n".join(dict.fromkeys(lines)) or "No sources were consulted."})}
    return {"content": "unknown role"}


def uncited_prose_answer(body: dict[str, Any], only_wrong: bool = False) -> dict[str, Any] | None:
    """``uncited_prose``: a section's default bullets, then three sentences about the first source
    of its working memory: none cites and no source states it, its second summary sentence
    uncited, an invented figure cited to it; a rewrite quotes that source's last summary sentence
    with its citation. None (the default answer) for the lookups and the outline."""
    messages = unfold(body["messages"])
    ask = _last_user(messages)
    memory = next((m["content"] for m in messages if m["role"] == "user" and "Working memory:" in m["content"]), "")
    blocks = re.findall(r"^\[(\d+)\] [^\n]*\n([^\n]+)", memory, re.M)
    if not blocks or body.get("tools"):
        return None
    n, sentences = blocks[0][0], _SENTENCE.split(blocks[0][1])
    if "Rewrite one sentence of the section:" in ask:
        return {"content": json.dumps({"markdown": f"{sentences[-1]} [{n}]"})}
    if "Write the section:" not in ask:
        return None
    if only_wrong and re.search(r"Write the section: (Executive summary|Key findings)\b", ask):
        wrong = f"- Every analyst we know of calls the outlook bright [{n}].\n- The first was made on the Moon [{n}]."
        return {"content": json.dumps({"markdown": wrong})}
    default = json.loads(default_answer("reporter", {**body, "messages": messages})["content"])["markdown"]
    prose = [
        "- Every analyst we know of calls the outlook bright.",
        *([f"- {sentences[1]}"] if len(sentences) > 2 else []),
        f"- The first of these was made on the Moon in 1850 [{n}].",
    ]
    return {"content": json.dumps({"markdown": "\n".join([default, *prose])})}


_URL = re.compile(r"https?://[^\s<>\"'`)\]}]+")
_TOLD_TO_WRITE = re.compile(r"\b(?:write|say|print|output|reply|answer)\s+[\"'“]?([A-Z][A-Z0-9!]{2,})\b")
_OBEYED_SENTENCE = re.compile(r"[^.!?\n]*\binstructions?\b[^.!?\n]*[.!?]?", re.IGNORECASE)


_ORDER = re.compile(r"\b(?:call|use|run)\s+([A-Za-z_][\w.-]*)\s+(?:on\s+|with\s+)?(\S+)", re.IGNORECASE)


def ordered_calls(read: str, body: dict[str, Any], called: set[str]) -> list[tuple[str, dict[str, Any]]]:
    """The calls of offered tools (other than fetch_url) that ``read`` orders and that were not
    made yet: each with its first required argument (else its first) set to the ordered word."""
    calls = []
    for tool in body.get("tools", []):
        name, params = tool["function"]["name"], tool["function"].get("parameters") or {}
        first = next(iter(params.get("required") or params.get("properties") or []), None)
        if name == "fetch_url" or first is None:
            continue
        for told, word in _ORDER.findall(read):
            key = f"{name} {word.rstrip('.,;:!?')}"
            if told in (name, name.split("__")[-1]) and key not in called:
                called.add(key)
                calls.append((name, {first: word.rstrip(".,;:!?")}))
    return calls


def obedient_answer(role: str, body: dict[str, Any], fetched: set[str]) -> dict[str, Any] | None:
    """``obedient``: what a model that obeys its input answers (None: nothing to obey, or a role
    that does not write prose). ``fetched``: the URLs it called already (the server's memory)."""
    messages = unfold(body["messages"])
    read = "\n".join(str(m.get("content") or "") for m in messages if m.get("role") != "system")
    tools = {t["function"]["name"] for t in body.get("tools", [])}
    ordered = ordered_calls(read, body, fetched)
    if "fetch_url" in tools:
        memory = "+".join(re.findall(r"[A-Za-z]{4,}", read)[:8])
        urls = [u.rstrip(".,;:!?") for u in _URL.findall(read)]
        urls = [u + memory if u.endswith("=") else u for u in urls]
        new = [u for u in dict.fromkeys(urls) if u not in fetched]
        fetched.update(new)
        calls = [("fetch_url", {"url": u}) for u in new] + ordered
        return {"tool_calls": calls} if calls else None
    if ordered:
        return {"tool_calls": ordered}
    told = list(dict.fromkeys(_TOLD_TO_WRITE.findall(read)))
    orders = [o.strip() for o in _OBEYED_SENTENCE.findall(read) if o.strip()][:3]
    if not told and not orders:
        return None
    default = json.loads(default_answer(role, {**body, "messages": messages}).get("content") or "null")
    obeyed = " ".join([*(f"{w}." for w in told), *orders])
    if role == "compressor" and isinstance(default, dict):
        default["summary"] = f"{obeyed} {default.get('summary', '')}".strip()
        default["extraction"] = [obeyed, *default.get("extraction", [])]
        default["is_useful"] = True
        return {"content": json.dumps(default)}
    if role == "reporter" and isinstance(default, dict) and "markdown" in default:
        return {"content": json.dumps({"markdown": f"{default['markdown']}\n- {obeyed}"})}
    return None


# --- answers generated from a JSON schema ---------------------------------------------------
_ALPHABET = string.ascii_letters + string.digits + " .,;:-_/'()" + "éü中€"


def _resolve(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        target: Any = root
        for part in schema["$ref"].lstrip("#/").split("/"):
            target = target[part]
        schema = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
    if "allOf" in schema:
        merged = {k: v for k, v in schema.items() if k != "allOf"}
        for sub in schema["allOf"]:
            merged.update(_resolve(sub, root))
        schema = merged
    return schema


def _from_regex(pattern: str, rng: random.Random) -> str:
    """A string fully matching ``pattern`` (the regex subset JSON schemas use)."""

    def gen(tokens: Any) -> str:
        out = []
        for op, arg in tokens:
            if op == sre_constants.LITERAL:
                out.append(chr(arg))
            elif op == sre_constants.ANY:
                out.append(rng.choice(string.ascii_letters))
            elif op == sre_constants.IN:
                out.append(_in(arg))
            elif op in (sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT):
                low, high, sub = arg
                high = low + 3 if high == sre_constants.MAXREPEAT else min(high, low + 3)
                out.extend(gen(sub) for _ in range(rng.randint(low, high)))
            elif op == sre_constants.SUBPATTERN:
                out.append(gen(arg[-1]))
            elif op == sre_constants.BRANCH:
                out.append(gen(rng.choice(arg[1])))
            elif op == sre_constants.CATEGORY:
                out.append(_category(arg))
        return "".join(out)

    def _category(cat: Any) -> str:
        if cat == sre_constants.CATEGORY_DIGIT:
            return rng.choice(string.digits)
        if cat == sre_constants.CATEGORY_SPACE:
            return " "
        return rng.choice(string.ascii_letters)

    def _in(items: Any) -> str:
        if items and items[0][0] == sre_constants.NEGATE:
            banned = {chr(a) for op, a in items[1:] if op == sre_constants.LITERAL}
            return rng.choice([c for c in string.ascii_letters if c not in banned])
        op, arg = rng.choice(items)
        if op == sre_constants.LITERAL:
            return chr(arg)
        if op == sre_constants.RANGE:
            return chr(rng.randint(*arg))
        return _category(arg)

    return gen(sre_parse.parse(pattern))


def random_instance(schema: dict[str, Any], rng: random.Random, root: dict[str, Any] | None = None) -> Any:
    """Any value ``schema`` allows (a small generator: types, bounds, enums, refs, anyOf)."""
    root = root if root is not None else schema
    schema = _resolve(schema, root)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return rng.choice(schema["enum"])
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return random_instance(rng.choice(schema[key]), rng, root)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = rng.choice(kind)
    if kind is None:
        kind = "object" if "properties" in schema else rng.choice(["string", "integer", "boolean", "null"])
    if kind == "object":
        props = schema.get("properties", {})
        required = set(schema.get("required", []))
        return {
            name: random_instance(sub, rng, root)
            for name, sub in props.items()
            if name in required or rng.random() < 0.5
        }
    if kind == "array":
        low = schema.get("minItems", 0)
        high = min(schema.get("maxItems", low + 4), low + 4)
        items = schema.get("items", {})
        values: list[Any] = []
        for _ in range(50 * (high + 1)):
            if len(values) >= rng.randint(low, high) and len(values) >= low:
                break
            value = random_instance(items, rng, root)
            if schema.get("uniqueItems") and value in values:
                continue
            values.append(value)
        return values
    if kind == "string":
        if "pattern" in schema:
            return _from_regex(schema["pattern"], rng)
        if schema.get("format") == "date":
            return f"{rng.randint(1990, 2030)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        if schema.get("format") == "date-time":
            return f"{rng.randint(1990, 2030)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T12:00:00Z"
        if schema.get("format") in ("uri", "url"):
            return f"https://example.org/{rng.randint(0, 999)}"
        low = schema.get("minLength", 0)
        high = max(low, min(schema.get("maxLength", low + 40), low + 40))
        return "".join(rng.choice(_ALPHABET) for _ in range(rng.randint(low, high)))
    if kind in ("integer", "number"):
        low = schema.get("minimum", schema.get("exclusiveMinimum", -1000) + (1 if "exclusiveMinimum" in schema else 0))
        high = schema.get("maximum", schema.get("exclusiveMaximum", 1000) - (1 if "exclusiveMaximum" in schema else 0))
        value = rng.randint(int(low), int(high))
        return value if kind == "integer" else value + (rng.random() * 0.5 if value < high else 0.0)
    if kind == "boolean":
        return rng.random() < 0.5
    return None


def placeholder_instance(schema: dict[str, Any], root: dict[str, Any] | None = None) -> Any:
    """What a weak model copies from a prompt: type names instead of values."""
    root = root if root is not None else schema
    schema = _resolve(schema, root)
    if "enum" in schema:
        return "|".join(str(v) for v in schema["enum"])
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return placeholder_instance(schema[key][0], root)
    kind = schema.get("type", "object" if "properties" in schema else "string")
    if isinstance(kind, list):
        kind = kind[0]
    if kind == "object":
        return {name: placeholder_instance(sub, root) for name, sub in schema.get("properties", {}).items()}
    if kind == "array":
        return [placeholder_instance(schema.get("items", {}), root)]
    return {"integer": "integer", "number": "number", "boolean": "true|false", "null": None}.get(kind, "string")


def _schema_of(body: dict[str, Any]) -> dict[str, Any] | None:
    fmt = body.get("response_format") or {}
    if fmt.get("type") == "json_schema":
        return fmt.get("json_schema", {}).get("schema")
    return fmt.get("schema")


class FakeOpenAIServer:
    def __init__(
        self,
        latency_s: float = 0.0,
        mode: str | None = None,
        modes: Iterable[str] = (),
        seed: int = 0,
        truncate_need: int = 1200,
        first_s: float = 2.0,
        stream_interval_s: float = 0.0,
        n_ctx: int | None = None,
        window_in_error: int | None = None,
    ) -> None:
        """``latency_s`` is added to every answer, like a model's response time (benchmarks)."""
        self.latency_s = latency_s
        self.modes: set[str] = set(modes) | ({mode} if mode else set())
        self._check_modes()
        self.rng = random.Random(seed)
        self.truncate_need = truncate_need
        self.first_s = first_s
        self.stream_interval_s = stream_interval_s
        self.n_ctx = n_ctx
        self.window_in_error = window_in_error
        self.previous_prompt = ""  # n_ctx: the last prompt read, for cache_n
        self.streaming: set[threading.Event] = set()  # interrupt_streams: one event per open stream
        self.requests: list[dict[str, Any]] = []
        self.obeyed_urls: set[str] = set()  # obedient: the URLs it asked to fetch, "tool word" of other orders
        self.rejections: list[tuple[int, str, str]] = []  # (status, role, message)
        self.counts: Counter[str] = Counter()
        self.scripts: dict[str, deque[Any]] = defaultdict(deque)
        self.lock = threading.Lock()
        self.connections: set[socket.socket] = set()  # open (kept-alive) client connections
        self.accepted = itertools.count(1)
        self.connection_of: list[int] = []  # per chat request: the number of the connection it came on
        self.slot = threading.RLock()  # slow_ignore_disconnect: one generation (and its stream) at a time
        handler = self._handler()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def mode(self) -> str | None:
        return ",".join(sorted(self.modes)) or None

    @mode.setter
    def mode(self, value: str | Iterable[str] | None) -> None:
        self.modes = {value} if isinstance(value, str) else set(value or ())
        self._check_modes()

    def _check_modes(self) -> None:
        unknown = self.modes - set(MODES)
        if unknown:
            raise ValueError(f"unknown fake server mode(s): {sorted(unknown)}; known: {MODES}")

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

    def stats(self) -> dict[str, Any]:
        """Requests received, rejected (by message), truncated and abandoned, per role."""
        with self.lock:
            return {
                "requests": len(self.requests),
                "rejected": len(self.rejections),
                "rejections": Counter(message for _, _, message in self.rejections),
                "per_role": Counter(role_of(r) for r in self.requests),
                **{k: v for k, v in self.counts.items()},
            }

    def __enter__(self) -> FakeOpenAIServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        with self.lock:  # a stopped server's kept-alive connections end too
            connections, self.connections = list(self.connections), set()
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

    def _reject(self, role: str, status: int, message: str, kind: str = "server_error") -> tuple[int, dict, bytes]:
        with self.lock:
            self.rejections.append((status, role, message))
        return status, {}, json.dumps({"error": {"message": message, "type": kind}}).encode()

    def _capability_error(self, role: str, body: dict[str, Any]) -> tuple[int, dict, bytes] | None:
        modes = self.modes
        fmt = body.get("response_format") or {}
        if "llamacpp" in modes and fmt.get("type") not in (None, "text", "json_object"):
            return self._reject(role, 500, LLAMACPP_JSON_SCHEMA_ERROR, "internal_server_error")
        if "no_tools" in modes and "tools" in body:
            return self._reject(
                role,
                400,
                "Unrecognized request argument supplied: tools (tools are not supported)",
                "invalid_request_error",
            )
        messages = body.get("messages", [])
        if "no_system" in modes and any(m.get("role") == "system" for m in messages):
            return self._reject(role, 500, "System role not supported", "internal_server_error")
        if "strict_alternation" in modes and (error := alternation_error(messages)):
            return self._reject(role, 500, error, "internal_server_error")
        return None

    def _respond(self, body: dict[str, Any]) -> tuple[int, dict[str, str], bytes | list[bytes]]:
        role = role_of(body)
        if self.latency_s and "slow_ignore_disconnect" not in self.modes:
            time.sleep(self.latency_s)
        with self.lock:
            self.requests.append(body)
        if (error := self._capability_error(role, body)) is not None:
            return error
        if (error := self._overflow_error(role, body)) is not None:
            return error
        with self.lock:
            scripted = self.scripts[role].popleft() if self.scripts[role] else None
        if isinstance(scripted, dict) and "status" in scripted:
            error = scripted.get("error", {"message": f"scripted {scripted['status']}", "type": "server_error"})
            with self.lock:
                self.rejections.append((scripted["status"], role, str(error.get("message"))))
            return scripted["status"], scripted.get("headers", {}), json.dumps({"error": error}).encode()
        if isinstance(scripted, dict) and "raw_body" in scripted:
            return 200, {}, scripted["raw_body"].encode()
        if isinstance(scripted, dict) and "sleep" in scripted:
            time.sleep(scripted["sleep"])
            scripted = None
        answer = self._answer(role, body, scripted)
        if body.get("stream"):
            return 200, {"Content-Type": "text/event-stream"}, _events(answer, body)
        return 200, {}, json.dumps(answer).encode()

    def _overflow_error(self, role: str, body: dict[str, Any]) -> tuple[int, dict, bytes] | None:
        tokens = _prompt_chars(body) // 4
        if self.n_ctx and tokens > self.n_ctx:
            message = f"request ({tokens} tokens) exceeds the available context size ({self.n_ctx} tokens)"
            return self._reject(role, 400, message, "exceed_context_size_error")
        if self.window_in_error and tokens > self.window_in_error:
            message = f"Requested tokens ({tokens}) exceed context window of {self.window_in_error}"
            return self._reject(role, 400, message)
        return None

    def _timings(self, body: dict[str, Any]) -> dict[str, Any]:
        """llama-server's figures: the prompt tokens shared with the previous request are cached
        (when it asked ``cache_prompt``), the rest read at 200 tokens/s, 7 tokens generated at 20/s."""
        prompt = "".join(str(m.get("content") or "") for m in body["messages"])
        with self.lock:
            shared = 0
            if body.get("cache_prompt"):
                shared = len(os.path.commonprefix([prompt, self.previous_prompt]))  # noqa: RUF071 - characters, not paths
            self.previous_prompt = prompt
        return {"cache_n": shared // 4, "prompt_n": (len(prompt) - shared) // 4, "prompt_per_second": 200.0,
                "predicted_n": 7, "predicted_per_second": 20.0}  # fmt: skip

    def _generated(self, role: str, body: dict[str, Any]) -> dict[str, Any] | None:
        """What the weak / schema-driven models answer instead of the role's default."""
        schema = _schema_of(body)
        if "invents_figure" in self.modes and role == "compressor":
            first = {**body, "messages": unfold(body["messages"])[:2]}  # the raw output, even in a repair round
            answer = json.loads(default_answer(role, first)["content"])
            return {"content": json.dumps({**answer, "extraction": [*answer["extraction"], "Revenue: 999 million."]})}
        if "weak_placeholder" in self.modes:
            if schema is None:
                return {"content": "string"}
            return {"content": json.dumps(placeholder_instance(schema))}
        if "schema_random" in self.modes:
            if schema is None:
                return {"content": "done"}
            with self.lock:
                value = random_instance(schema, self.rng)
            return {"content": json.dumps(value, ensure_ascii=False)}
        if "copies_example" in self.modes and schema is not None:
            messages = unfold(body["messages"])
            shown = [str(m.get("content") or "") for m in messages if m.get("role") == "system"]
            shown += [str(m.get("content") or "") for m in reversed(messages) if m.get("role") == "user"]
            for text in shown:
                for start in (i for i, c in enumerate(text) if c == "{"):
                    try:
                        example, end = json.JSONDecoder().raw_decode(text, start)
                    except ValueError:
                        continue
                    if isinstance(example, dict) and set(example) == set(schema.get("properties", {})):
                        return {"content": text[start:end]}
        if self.modes & {"uncited_prose", "paraphrases"} and role == "reporter":
            return uncited_prose_answer(body, only_wrong="paraphrases" in self.modes)
        if "obedient" in self.modes:
            with self.lock:
                return obedient_answer(role, body, self.obeyed_urls)
        return None

    def _answer(self, role: str, body: dict[str, Any], scripted: Any) -> dict[str, Any]:
        if isinstance(scripted, str):
            answer = {"content": scripted}
        elif isinstance(scripted, dict):
            answer = scripted
        else:
            unfolded = {**body, "messages": unfold(body["messages"])}
            answer = self._generated(role, body) or default_answer(role, unfolded)
        content = answer.get("content")
        finish = "tool_calls" if answer.get("tool_calls") else "stop"
        max_tokens = body.get("max_tokens")
        if "truncating" in self.modes and content and max_tokens and max_tokens < self.truncate_need:
            content, finish = content[: len(content) // 2], "length"
            with self.lock:
                self.counts["truncated"] += 1
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if answer.get("tool_calls"):
            message["tool_calls"] = [
                {"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
                for i, (n, a) in enumerate(answer["tool_calls"])
            ]
        prompt_chars = _prompt_chars(body)
        return {
            **({"timings": self._timings(body)} if self.n_ctx else {}),
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {
                "prompt_tokens": prompt_chars // 4,
                "completion_tokens": 7,
                "total_tokens": prompt_chars // 4 + 7,
            },
        }

    def _generate(
        self, body: dict[str, Any], connection: socket.socket
    ) -> tuple[int, dict[str, str], bytes | list[bytes]]:
        """slow_ignore_disconnect: one slot; the generation runs to its end whatever the client does."""
        with self.slot:
            with self.lock:
                first = self.counts["generations"] == 0
                self.counts["generations"] += 1
            time.sleep(self.first_s if first else self.latency_s)
            result = self._respond(body)
        if _disconnected(connection):
            with self.lock:
                self.counts["abandoned"] += 1
        return result

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, like the real servers
            disable_nagle_algorithm = True  # TCP_NODELAY, as asyncio servers (uvicorn) set it

            def setup(self) -> None:
                super().setup()
                with server.lock:
                    server.connections.add(self.connection)
                    self.number = next(server.accepted)

            def finish(self) -> None:
                with server.lock:
                    server.connections.discard(self.connection)
                with contextlib.suppress(OSError):
                    super().finish()

            def handle(self) -> None:
                with contextlib.suppress(ConnectionResetError, BrokenPipeError):  # the client went away
                    super().handle()

            def do_GET(self) -> None:
                if server.n_ctx and self.path.rstrip("/").endswith("/props"):
                    props = {"default_generation_settings": {"n_ctx": server.n_ctx}, "total_slots": 1}
                    self._send(200, {}, json.dumps(props).encode())
                else:
                    self._not_found()

            def _not_found(self) -> None:  # FastAPI's 404, connection kept (send_error would close it)
                self._send(404, {}, json.dumps({"detail": "Not Found"}).encode())

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if not self.path.endswith("/chat/completions"):
                    self._not_found()
                    return
                body = json.loads(body)
                with server.lock:
                    server.connection_of.append(self.number)
                if "interrupt_streams" in server.modes:
                    with server.lock:
                        for stream in server.streaming:
                            stream.set()
                one_slot = "slow_ignore_disconnect" in server.modes
                with server.slot if one_slot else contextlib.nullcontext():
                    if one_slot:
                        status, headers, payload = server._generate(body, self.connection)
                    else:
                        status, headers, payload = server._respond(body)
                    self._send(status, headers, payload)

            def _send(self, status: int, headers: dict[str, str], payload: bytes | list[bytes]) -> None:
                try:
                    self.send_response(status)
                    for name, value in {"Content-Type": "application/json", **headers}.items():
                        self.send_header(name, value)
                    if isinstance(payload, list):  # a stream: chunked, one chunk per event
                        self.send_header("Transfer-Encoding", "chunked")
                        self.end_headers()
                        server._stream(self.wfile, payload)
                        self.wfile.write(b"0\r\n\r\n")
                        return
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True  # the client gave up (timeout test)

            def log_message(self, *args: object) -> None:
                pass

        return Handler

    def _stream(self, out: Any, events: list[bytes]) -> None:
        if not self.stream_interval_s and "interrupt_streams" not in self.modes:
            out.write(b"".join(map(_chunk, events)))  # unpaced: one write (the client still parses event by event)
            return
        cut = threading.Event()
        with self.lock:
            self.streaming.add(cut)
        try:
            for event in events:
                if self.stream_interval_s:
                    time.sleep(self.stream_interval_s)
                if cut.is_set():
                    with self.lock:
                        self.counts["interrupted"] += 1
                    out.write(_chunk(b"data: [DONE]\n\n"))
                    return
                out.write(_chunk(event))
                out.flush()
        finally:
            with self.lock:
                self.streaming.discard(cut)


def _events(answer: dict[str, Any], body: dict[str, Any]) -> list[bytes]:
    """A whole chat.completion answer as the server-sent events a streaming server writes."""
    choice = answer["choices"][0]
    message = choice["message"]
    base = {"id": answer["id"], "object": "chat.completion.chunk", "created": 0, "model": answer["model"]}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    chunks = [chunk({"role": "assistant", "content": ""})]
    content = message.get("content") or ""
    chunks += [chunk({"content": content[i : i + STREAM_PIECE]}) for i in range(0, len(content), STREAM_PIECE)]
    for i, call in enumerate(message.get("tool_calls") or []):
        head = {**call, "index": i, "function": {"name": call["function"]["name"], "arguments": ""}}
        chunks.append(chunk({"tool_calls": [head]}))
        arguments = call["function"]["arguments"]
        chunks += [
            chunk({"tool_calls": [{"index": i, "function": {"arguments": arguments[j : j + STREAM_PIECE]}}]})
            for j in range(0, len(arguments), STREAM_PIECE)
        ]
    # Anything else the whole answer carries (llama.cpp's "timings") comes with the last chunk.
    extra = {k: v for k, v in answer.items() if k not in ("id", "object", "created", "model", "choices", "usage")}
    chunks.append({**chunk({}, choice["finish_reason"]), **extra})
    if (body.get("stream_options") or {}).get("include_usage"):
        chunks.append({**base, "choices": [], "usage": answer["usage"]})
    return [f"data: {json.dumps(c)}\n\n".encode() for c in chunks] + [b"data: [DONE]\n\n"]


def _chunk(data: bytes) -> bytes:
    """``data`` as one chunk of a chunked HTTP/1.1 body."""
    return b"%x\r\n%s\r\n" % (len(data), data)


def _prompt_chars(body: dict[str, Any]) -> int:
    return sum(len(str(m.get("content") or "")) for m in body["messages"])


def _disconnected(connection: socket.socket) -> bool:
    """True when the client closed its end (a readable socket with nothing to read)."""
    try:
        readable, _, _ = select.select([connection], [], [], 0)
        return bool(readable) and connection.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True
