"""OpenAI-compatible Chat Completions engine (OpenAI, Ollama, vLLM, llama.cpp, LM Studio...).

**Capability negotiation.** What a server accepts is learned from its answers, not assumed.
Any 4xx *or* 5xx whose message names ``response_format``, ``json_schema``, ``json_object``,
``tools`` or ``tool_choice`` is a capability answer, never a transient error (llama-cpp-python
answers HTTP 500 ``Input should be 'text' or 'json_object'`` to a JSON-schema request):

- structured output steps down ``json_schema`` → ``json_object_schema`` (llama.cpp's
  ``{"type": "json_object", "schema": {...}}``, still grammar-constrained) → ``json_object`` →
  ``none`` (plain text; the prompt asks for JSON and the answer is validated anyway);
- a rejected ``tools`` field marks the model tool-less: that call and every later tools-only call
  (the researcher's optional calls, the reporter's artifact lookups) is answered locally with an
  empty ``Completion(skipped=True)``, so the caller simply moves on;
- an error naming "system" or "roles must alternate" while a system message is present folds
  the system prompt into the first user turn (system prompt, a ``---`` line, the user turn).

What was learned is kept per (base URL, model) for the rest of the process (module registry
shared by every engine instance), exposed as :attr:`OpenAIEngine.capabilities`, and each step
down is an ``Attempt(status="format_fallback")`` quoting the server's own message, i.e. one
``llm_calls`` row in DuckDB. So a capability is probed at most once per process and model.

**Messages every chat template accepts.** Strict templates (Gemma, Mistral, Llama on llama.cpp
``--jinja`` / vLLM) require: optional system first, then user/assistant alternating, starting
and ending with user. The roles keep building conversations the seed's way (seed 000 §6: one
assistant message per useful tool result, stored verbatim in ``conversations/`` and
``context_messages``); only the *wire* copy is normalized by :func:`normalize_messages`:

- every system message is merged into one, sent first (or folded into the first user turn);
- consecutive user messages are merged into one, separated by a blank line;
- an assistant message following an assistant (the next injected summary) gets a short user
  turn ``(next result)`` in between, so each summary stays its own assistant message, verbatim;
- a conversation that ends on an assistant message gets a final user turn ``Continue.``;
- assistant messages carrying ``tool_calls`` and the ``tool`` messages answering them are sent
  as they are (a server that accepts ``tools`` has a template for them).

**Errors.** 429, 5xx that are not capability/template/validation answers, connection errors,
timeouts and unparseable bodies are retried with exponential backoff and full jitter (honouring
``Retry-After``). Everything deterministic (auth 401/403, other 4xx, template and validation
errors, a capability ladder that ran out) raises ``EngineError(retryable=False)`` at once, so
neither this engine nor Dagster's ``RetryPolicy`` repeats it.

**Faults sized to their cause.** A transport failure (refused or reset connection, cut or
unreadable body, timeout) is retried; the server is latched unresponsive (calls fail at once,
roles use their fallbacks) only after :data:`LATCH_FAILURES` consecutive transport failures over
at least two requests, one of which failed after all its retries. Any answer from the server
clears the count, so one reset never takes every role sharing the server down.

**Context, truncation, timeouts.** Every request is fitted to the model's context window before
it is sent (:func:`fit_messages`; the window is configured, read from the server once, or named by
its first overflow error: ``core/llm/server_info.py``), and a llama.cpp ``llama-server`` is asked
to keep its prompt cache (``cache_prompt``). An overflow that names no new window halves the
longest message; the shrink is remembered (by the message's original content) and applied to
every later request carrying that message, so a repair round or the next report section does not
re-send the un-shrunk prompt.
``finish_reason == "length"`` on a structured call is retried once with twice the
``max_tokens``; if it is still cut, the ``Completion`` says ``truncated=True``. The client timeout
is ``base + max_tokens / tokens_per_s`` (capped); after a timeout the next attempt waits twice as
long, because most local servers keep generating the abandoned answer and queue the retry
behind it. Every call, its attempts, retries and waits included, ends within
:data:`CALL_TIMEOUTS` × the user's timeout (``DEEPRESEARCH_LLM_TIMEOUT``), streaming or not.

**Streaming.** Answers are streamed and read as plain server-sent events, so a server that sends
nothing for the idle window (``idle_timeout`` + the prompt's reading time) is cut long before the
whole answer's deadline; silence is counted per server (:class:`~..web.deadline.Progress`), and
local servers are asked for llama-server's ``return_progress`` events. A server that rejects
``stream`` or ``stream_options``, or cuts a stream before its ``finish_reason`` (llama-cpp-python
does when another request arrives), is asked for whole answers from then on; an empty stream is
asked again whole (llama-cpp-python fails a context overflow inside a 200 stream); a streamed
generation loop is cut as soon as it shows.
"""

from __future__ import annotations

import email.utils
import hashlib
import itertools
import json
import random
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from types import SimpleNamespace
from typing import Any, Literal

import openai

from ..errors import CredentialsError
from ..text import estimate_tokens
from ..web.deadline import (
    IdleWatch,
    Progress,
    deadline,
    deadline_transport,
    deadline_transport2,
    idle,
    remaining,
)
from .engine import Attempt, Completion, EngineError, ToolCallRequest
from .server_info import PROBE_TIMEOUT_S, ServerInfo, probe, window_from_error

_OVERFLOW_MARKERS = (
    "context_length_exceeded",
    "maximum context length",
    "context window",
    "context size",
    "too many tokens",
    "exceed context",
    "exceeds the context",
)
_CAPABILITY_MARKERS = ("response_format", "json_schema", "json_object", "tools", "tool_choice")
# vLLM without --enable-auto-tool-choice: '"auto" tool choice requires --enable-auto-tool-choice'.
_TOOL_MARKERS = ("tools", "tool_choice", "tool choice", "tool_calls", "tool call", "tool-call", "function calling")
_TEMPLATE_MARKERS = (
    "roles must alternate",
    "conversation roles",
    "chat template",
    "chat_template",
    "jinja",
    "template",
    "system role",
    "system message",
)
# A template error naming these, while a system message is present, means "no system role".
_FOLD_MARKERS = ("system", "roles must alternate", "alternate user/assistant")
_VALIDATION_MARKERS = ("validation error", "input should be", "invalid request", "unprocessable")
FORMAT_LADDER = ("json_schema", "json_object_schema", "json_object", "none")
BETWEEN_RESULTS = "(next result)"
CONTINUE = "Continue."
FOLD_SEPARATOR = "\n\n---\n\n"  # between a folded system prompt and the first user turn
DEFAULT_TOKENS_PER_S = 20.0
MAX_EXTRA_TIMEOUT_S = 600.0
MAX_TIMEOUTS = 2  # per call: a call is cut at most twice, then it fails (the role falls back)
# Every call, all its attempts, retries and backoff waits included, ends within this many times
# DEEPRESEARCH_LLM_TIMEOUT, streaming or not (room for one retry with twice the first attempt's
# time; the research's wall budget, when shorter, still wins).
CALL_TIMEOUTS = 3.0
# A server is latched unresponsive (calls fail at once for UNRESPONSIVE_FOR_S, the roles use
# their fallbacks) only after LATCH_FAILURES consecutive transport failures (refused or reset
# connections, cut bodies, timeouts) spanning at least two requests, one of which failed after
# all its retries; any answer from the server (an error status included) clears the count. One
# reset or one cut body is retried, never latched.
LATCH_FAILURES = 3
UNRESPONSIVE_FOR_S = 600.0
# A streamed answer's silence limit grows with the prompt the server must read before its first
# token: DEEPRESEARCH_LLM_IDLE_TIMEOUT + prompt tokens at this rate (a CPU llama.cpp reads a few
# hundred per second; a slower setup raises the variable).
PROMPT_TOKENS_PER_S = 100.0
# A streamed answer is checked for a generation loop every LOOP_CHECK_EVERY events once it holds
# LOOP_MIN_CHARS characters (about 250 tokens): a looping 270M model otherwise runs to max_tokens.
LOOP_CHECK_EVERY = 32
LOOP_MIN_CHARS = 1000
# After a stream's `data: [DONE]` the rest of its body (the chunked encoding's last chunk) is read
# for at most this long: a response read to its end gives its connection back to the pool, one
# left unread closes it, and the next call would pay a new connection (a TLS handshake remotely).
DRAIN_S = 0.5
_STREAM_WORD = re.compile(r"\bstream(?:ing)?\b")


@dataclass
class RetryPolicy:
    max_attempts: int = 4
    base_s: float = 1.0
    max_s: float = 30.0
    rng: random.Random = field(default_factory=random.Random)

    def backoff(self, attempt: int) -> float:
        return self.rng.uniform(0, min(self.max_s, self.base_s * 2 ** (attempt - 1)))


@dataclass
class Capabilities:
    """What one server accepts for one model, learned from its answers."""

    response_format: str = "json_schema"  # a rung of FORMAT_LADDER
    tools: bool = True
    system_role: bool = True
    learned: list[str] = field(default_factory=list)  # "what: server message", in order
    # time.monotonic() until which the server counts as hung (it let a request time out twice or
    # refused every connection): calls fail at once so roles use their fallbacks instead of waiting.
    unresponsive_until: float = 0.0
    stream: bool = True  # answers are streamed (a silent server is known within the idle window)
    stream_usage: bool = True  # stream_options.include_usage is accepted
    # llama-server's "return_progress": progress events while it reads a long prompt (sent to
    # servers on this machine or network only; a server that names it in a rejection never again)
    progress_events: bool = True
    # Consecutive transport failures since the server last answered (see LATCH_FAILURES): how
    # many, by how many calls, and how many of those calls failed after all their retries.
    failures: int = 0
    failed_calls: set[int] = field(default_factory=set, repr=False)
    exhausted_calls: int = 0
    # What the server says about itself (core/llm/server_info.py), asked once; its context window
    # may also be learned from an overflow error that names it.
    server_kind: str | None = None  # None: not asked yet
    context_window: int | None = None
    # The slowest prompt-processing and generation speeds (tokens/s) measured on this server's
    # answers: a server slower than assumed gets longer silence windows and answer deadlines from
    # then on (never shorter ones), so a busy CPU is not mistaken for a hung server twice.
    slowest_prompt_tps: float | None = None
    slowest_gen_tps: float | None = None


_CALLS = itertools.count(1)  # a process-wide id for each complete() call (failures by request)
_REGISTRY: dict[tuple[str, str, str], Capabilities] = {}
_REGISTRY_LOCK = threading.Lock()
_PROGRESS: dict[str, Progress] = {}  # base URL → when it last sent a byte to any call


def on_local_network(base_url: str) -> bool:
    """A server on this machine or a private network (loopback, private or link-local address,
    ``localhost``, a one-label host name such as a compose service): where local servers run."""
    import ipaddress
    from urllib.parse import urlsplit

    host = (urlsplit(base_url).hostname or "").lower()
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host == "localhost" or host.endswith((".localhost", ".local")) or "." not in host
    return address.is_loopback or address.is_private or address.is_link_local


def progress_of(base_url: str) -> Progress:
    with _REGISTRY_LOCK:
        return _PROGRESS.setdefault(base_url, Progress())


# llama.cpp turns a schema into a grammar with one rule per allowed character of a bounded string:
# a `maxLength` in the thousands makes llama-cpp-python 0.3.36 segfault and llama-server spend
# 10-20 s per request building it (benchmarks/real_llamacpp.py). Longer limits are left out of the
# schema sent; the contracts' normalizers trim to them before validation, so nothing is lost.
MAX_SENT_LENGTH = 1000


def grammar_safe_schema(schema: Any) -> Any:
    """A copy of ``schema`` without any ``maxLength`` above :data:`MAX_SENT_LENGTH`."""
    if isinstance(schema, dict):
        return {
            k: grammar_safe_schema(v)
            for k, v in schema.items()
            if not (k == "maxLength" and isinstance(v, int) and v > MAX_SENT_LENGTH)
        }
    if isinstance(schema, list):
        return [grammar_safe_schema(v) for v in schema]
    return schema


def repeats_itself(text: str, min_repeats: int = 4) -> bool:
    """A generation loop (a small model repeating one sentence until ``max_tokens``): asking again
    with more tokens only buys a longer loop."""
    units = [u.strip() for u in re.split(r"(?<=[.!?\n])\s+", text) if len(u.strip()) >= 10]
    # In JSON the loop is one string value written again and again ("…", "…", "…") with no
    # sentence break between the copies.
    values = re.findall(r'"((?:[^"\\]|\\.){10,})"', text) if json_so_far(text) else []
    return any(
        len(found) >= min_repeats
        and (top := max(found.count(u) for u in set(found))) >= min_repeats
        and top * 2 >= len(found)
        for found in (units, values)
    )


def json_so_far(text: str) -> bool:
    """A cut answer that was writing JSON (its first ``{`` within a short preamble): more tokens
    may finish it. Prose, or the prompt written back, will not become JSON with more tokens."""
    start = text.find("{")
    return 0 <= start <= JSON_PREAMBLE_CHARS


JSON_PREAMBLE_CHARS = 200  # "Here is the JSON you asked for:" and a code fence fit in it
# Longer than any verbatim quote a role plausibly writes (extraction items are at most 600 characters).
ECHO_CHARS = 2000


def degenerate(text: str, prompt: str) -> bool:
    """A small model's useless answer that more tokens only make longer: a generation loop, or the
    prompt echoed back (its last :data:`ECHO_CHARS` characters are one verbatim stretch of the
    prompt; seen from a real 270M model writing 18,000 characters of its own system prompt).
    A JSON answer quoting the prompt is never one verbatim stretch that long: its own keys and
    escapes break it."""
    if repeats_itself(text):
        return True
    tail = text[-ECHO_CHARS:]
    return len(tail) == ECHO_CHARS and tail in prompt


def sdk_deadline_transport() -> Any:
    """The deadline transport for the HTTP stack this openai SDK is built on (httpx before
    openai 3, httpx2 since)."""
    import httpx

    return deadline_transport() if issubclass(openai.DefaultHttpxClient, httpx.Client) else deadline_transport2()


def capabilities_for(base_url: str, model: str, start_format: str) -> Capabilities:
    """The process-wide record for one server and model (created at the configured format)."""
    with _REGISTRY_LOCK:
        return _REGISTRY.setdefault((base_url, model, start_format), Capabilities(response_format=start_format))


def retry_after_seconds(exc: Exception, cap: float) -> float | None:
    response = getattr(exc, "response", None)
    if response is None:
        return None
    headers = response.headers
    if headers.get("retry-after-ms"):
        try:
            return min(cap, float(headers["retry-after-ms"]) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return min(cap, max(0.0, float(value)))
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(value)
        return min(cap, max(0.0, parsed.timestamp() - time.time())) if parsed else None


def server_message(exc: Exception) -> str:
    """The server's own words: ``error.message`` of an OpenAI-style body, else the whole text."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
        if isinstance(body.get("detail"), list | str):
            return json.dumps(body["detail"])[:500]
    return str(getattr(exc, "message", None) or exc)


def _names(exc: Exception, markers: tuple[str, ...]) -> bool:
    text = f"{getattr(exc, 'code', '') or ''} {server_message(exc)} {exc}".lower()
    return any(marker in text for marker in markers)


def is_context_overflow(exc: Exception) -> bool:
    return _names(exc, _OVERFLOW_MARKERS)


def shrink_messages(messages: list[dict[str, Any]], index: int) -> list[dict[str, Any]]:
    """Halve message ``index`` (keeping its head): raw data is on disk, prompts can lose it."""
    return [*messages[:index], _halved(messages[index]), *messages[index + 1 :]]


def _longest(messages: list[dict[str, Any]]) -> int:
    return max(range(len(messages)), key=lambda i: len(_text(messages[i].get("content"))))


def _halved(message: dict[str, Any]) -> dict[str, Any]:
    content = _text(message.get("content"))
    return {**message, "content": content[: len(content) // 2] + "\n[... truncated to fit the model's context window]"}


# Fitting a prompt to the server's context window (read from the server, core/llm/server_info.py):
# prompt tokens are estimated at FIT_CHARS_PER_TOKEN characters each (BPE tokenizers average about
# 4 on English prose, fewer on figures and markup: the estimate errs towards a shorter prompt), with
# FIT_FRAMING_TOKENS per message for the chat template, and the answer keeps its max_tokens (at most
# half the window).
FIT_CHARS_PER_TOKEN = 3.0
FIT_FRAMING_TOKENS = 16
FIT_MIN_CHARS = 400  # a message is never cut below this many characters
FIT_NOTE = "\n[... {n} characters cut to fit the model's context window of {window} tokens]"


def fit_messages(
    messages: list[dict[str, Any]], window: int, max_tokens: int | None, tools: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """``messages`` cut to fit a context window of ``window`` tokens with room for the answer and
    the tool definitions (the chat template writes them into the prompt): the longest message
    loses its tail first (its head is kept, and the cut is named), the instructions (system
    messages) only when nothing else is left to cut. Deterministic, and unchanged when the
    messages already fit."""
    answer = min(max_tokens or 0, window // 2)
    budget = int((window - answer - FIT_FRAMING_TOKENS * (len(messages) + 1)) * FIT_CHARS_PER_TOKEN)
    budget -= len(json.dumps(tools)) if tools else 0
    sizes = [len(_text(m.get("content"))) for m in messages]
    excess = sum(sizes) - budget
    if excess <= 0:
        return messages
    out = list(messages)
    for system in (False, True):
        cuttable = [i for i, m in enumerate(out) if (m.get("role") == "system") == system]
        order = sorted((i for i in cuttable if isinstance(out[i].get("content"), str)), key=lambda i: -sizes[i])
        for i in order:
            if excess <= 0:
                return out
            note = FIT_NOTE.format(n=0, window=window)
            cut = min(excess + len(note) + 8, sizes[i] - FIT_MIN_CHARS)
            if cut <= len(note):
                continue
            content = _text(out[i]["content"])
            out[i] = {**out[i], "content": content[: len(content) - cut] + FIT_NOTE.format(n=cut, window=window)}
            excess -= cut - len(FIT_NOTE.format(n=cut, window=window))
    return out


def _text(content: Any) -> str:
    if content is None:
        return ""
    return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)


def _prompt_text(messages: list[dict[str, Any]]) -> str:
    """A request's messages as one text: for token estimates and the echo check."""
    return "\n".join(_text(m.get("content")) for m in messages)


def _plain(message: dict[str, Any], role: str) -> bool:
    return message.get("role") == role and not message.get("tool_calls")


def normalize_messages(messages: list[dict[str, Any]], fold_system: bool = False) -> list[dict[str, Any]]:
    """The wire copy of a conversation that strict chat templates accept (see the module doc)."""
    system = "\n\n".join(_text(m.get("content")) for m in messages if m.get("role") == "system")
    out: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        if role == "system":
            continue
        if not out and role != "user":
            out.append({"role": "user", "content": CONTINUE})
        previous = out[-1] if out else None
        if previous is not None and _plain(previous, "user") and _plain(message, "user"):
            out[-1] = {**previous, "content": f"{_text(previous['content'])}\n\n{_text(message.get('content'))}"}
            continue
        if previous is not None and _plain(previous, "assistant") and _plain(message, "assistant"):
            out.append({"role": "user", "content": BETWEEN_RESULTS})
        out.append(dict(message))
    if not out or _plain(out[-1], "assistant"):
        out.append({"role": "user", "content": CONTINUE})
    if system:
        if fold_system:
            if out and _plain(out[0], "user"):
                out[0] = {**out[0], "content": f"{system}{FOLD_SEPARATOR}{_text(out[0]['content'])}"}
            else:
                out.insert(0, {"role": "user", "content": system})
        else:
            out.insert(0, {"role": "system", "content": system})
    return out


def _key(content: Any) -> str:
    return hashlib.sha1(_text(content).encode("utf-8", "surrogatepass")).hexdigest()


class OpenAIEngine:
    name = "openai"

    def __init__(
        self,
        models: dict[str, str],
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 120.0,
        temperature: float | dict[str, float] = 0.0,
        max_tokens: dict[str, int] | None = None,
        retry: RetryPolicy | None = None,
        response_format: Literal["json_schema", "json_object_schema", "json_object", "none"] = "json_schema",
        tokens_per_s: float | None = None,
        stream: bool = True,
        idle_timeout: float | None = 30.0,
        context_window: int | None = None,
    ) -> None:
        self.models = models
        # Local servers accept any key; the SDK insists on one being set.
        # Every request runs under a wall-clock deadline (connect + whole answer, core/web/deadline.py):
        # httpx's own timeouts are per socket read, which a trickling server never trips.
        self.client = openai.OpenAI(
            base_url=base_url or None,
            api_key=api_key or "not-needed",
            timeout=timeout,
            max_retries=0,
            http_client=openai.DefaultHttpxClient(transport=sdk_deadline_transport()),
        )
        self.base_url = str(self.client.base_url)
        self.timeout = timeout
        self.tokens_per_s = DEFAULT_TOKENS_PER_S if tokens_per_s is None else tokens_per_s
        self.stream = stream
        self.local = on_local_network(self.base_url)
        self.idle_timeout = idle_timeout
        self.configured_window = context_window  # wins over what the server says
        self.temperature = temperature if isinstance(temperature, dict) else dict.fromkeys(models, temperature)
        self.max_tokens = max_tokens or {}
        self.retry = retry or RetryPolicy()
        self.response_format = response_format if response_format in FORMAT_LADDER else "json_schema"
        self._shrunk: OrderedDict[str, str] = OrderedDict()  # original content hash → shrunk content
        self._lock = threading.Lock()

    def model_for(self, role: str) -> str:
        return self.models[role]

    def caps(self, model: str) -> Capabilities:
        return capabilities_for(self.base_url, model, self.response_format)

    def context_window(self, model: str) -> int | None:
        """The model's context window: configured (``DEEPRESEARCH_CONTEXT_WINDOW``), else what its
        server says (asked once per process, servers on this machine or network only), else what
        an overflow error named; None when unknown (prompts are then sent as they are)."""
        caps = self.caps(model)
        if caps.server_kind is None:
            info = ServerInfo()
            if self.local:
                left = remaining()  # asked within the call's time: a hung server costs its limit once
                timeout = PROBE_TIMEOUT_S if left is None else max(0.05, min(PROBE_TIMEOUT_S, left))
                auth = {"Authorization": f"Bearer {self.client.api_key}"} if self.client.api_key else {}
                info = probe(self.base_url, model, auth, timeout)
            with _REGISTRY_LOCK:
                if caps.server_kind is None:
                    caps.server_kind, caps.context_window = info.kind, caps.context_window or info.context_window
        return self.configured_window or caps.context_window

    @property
    def capabilities(self) -> dict[str, dict[str, Any]]:
        """What each configured model's server accepts, as learned so far (for the audit)."""
        return {model: asdict(self.caps(model)) for model in dict.fromkeys(self.models.values())}

    def timeout_for(self, max_tokens: int | None, caps: Capabilities | None = None) -> float:
        """Base timeout plus the time ``max_tokens`` take at ``tokens_per_s``, or at the server's
        slowest measured generation speed when that is slower (capped)."""
        rate = min(filter(None, (self.tokens_per_s, caps and caps.slowest_gen_tps)), default=0.0)
        if not max_tokens or rate <= 0:
            return self.timeout
        return self.timeout + min(MAX_EXTRA_TIMEOUT_S, max_tokens / rate)

    def idle_window(self, prompt_text: str, caps: Capabilities | None = None) -> float | None:
        """How long a streamed answer may stay silent: the idle timeout plus the time the server
        needs to read the prompt before its first token (at :data:`PROMPT_TOKENS_PER_S`, or at its
        slowest measured prompt speed when that is slower)."""
        if not self.idle_timeout:
            return None
        rate = min(filter(None, (PROMPT_TOKENS_PER_S, caps and caps.slowest_prompt_tps)))
        return self.idle_timeout + estimate_tokens(prompt_text) / rate

    @staticmethod
    def _measured(caps: Capabilities, completion: Completion) -> None:
        with _REGISTRY_LOCK:
            if completion.prompt_tps:
                caps.slowest_prompt_tps = min(filter(None, (caps.slowest_prompt_tps, completion.prompt_tps)))
            if completion.gen_tps:
                caps.slowest_gen_tps = min(filter(None, (caps.slowest_gen_tps, completion.gen_tps)))

    @staticmethod
    def _format(rung: str, json_schema: dict[str, Any] | None) -> dict[str, Any] | None:
        if json_schema is None or rung == "none":
            return None
        json_schema = grammar_safe_schema(json_schema)
        if rung == "json_schema":
            name = str(json_schema.get("title") or "answer")[:64]
            return {"type": "json_schema", "json_schema": {"name": name, "schema": json_schema, "strict": False}}
        if rung == "json_object_schema":
            return {"type": "json_object", "schema": json_schema}
        return {"type": "json_object"}

    # --- shrinks carried across requests -------------------------------------------------
    def _apply_shrinks(self, messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
        keys = [_key(m.get("content")) for m in messages]
        with self._lock:
            out = [
                {**m, "content": self._shrunk[k]} if k in self._shrunk else m
                for m, k in zip(messages, keys, strict=True)
            ]
        return out, keys

    def _remember_shrink(self, original_key: str, content: str) -> None:
        with self._lock:
            self._shrunk[original_key] = content
            self._shrunk.move_to_end(original_key)
            while len(self._shrunk) > 256:
                self._shrunk.popitem(last=False)

    def _learn(self, model: str, attempts: list[Attempt], started: float, what: str, exc: Exception) -> None:
        message = f"{what}: {type(exc).__name__} {getattr(exc, 'status_code', '')}: {server_message(exc)[:300]}"
        caps = self.caps(model)
        with _REGISTRY_LOCK:
            caps.learned.append(message)
        attempts.append(Attempt("format_fallback", message, _ms(started)))

    def complete(
        self,
        role: str,
        messages: list[dict[str, Any]],
        payload: dict[str, Any],
        json_schema: dict[str, Any] | None = None,
        tools: list[dict[str, Any]] | None = None,
    ) -> Completion:
        model = self.model_for(role)
        caps = self.caps(model)
        attempts: list[Attempt] = []
        if tools and not caps.tools and json_schema is None:
            return _skipped(model, attempts)
        self._check_latched(role, caps, attempts)
        budget_left = remaining()  # the research's wall budget, if any (the earlier deadline wins)
        limit = CALL_TIMEOUTS * self.timeout
        now = time.monotonic()
        call = _Call(next(_CALLS), now + limit, None if budget_left is None else now + budget_left)
        try:
            with deadline(limit):
                return self._attempts(role, model, caps, messages, json_schema, tools, attempts, call)
        except EngineError:
            if call.transport:  # its last attempt failed on transport: the call is spent on a sick server
                self._exhausted(caps, call)
            raise

    def _check_latched(self, role: str, caps: Capabilities, attempts: list[Attempt]) -> None:
        if caps.unresponsive_until > time.monotonic():
            attempts.append(Attempt("error", "model server unresponsive earlier in this run; not asked"))
            raise EngineError(
                f"{role}: the model server at {self.base_url} stopped answering earlier in this run", attempts
            )

    # --- server health: latched only after repeated failures across requests -----------------
    def _answered(self, caps: Capabilities) -> None:
        """The server answered (any status): it is alive."""
        if caps.failures:
            with _REGISTRY_LOCK:
                caps.failures, caps.exhausted_calls = 0, 0
                caps.failed_calls.clear()

    def _transport_failure(self, role: str, caps: Capabilities, call: _Call, attempts: list[Attempt]) -> None:
        """One more consecutive transport failure; if that latches the server, the call ends here."""
        call.transport = True
        with _REGISTRY_LOCK:
            caps.failures += 1
            caps.failed_calls.add(call.id)
        if self._latch(caps):
            failures, calls = caps.failures, len(caps.failed_calls)
            attempts.append(Attempt("error", f"latched: {failures} transport failures over {calls} requests"))
            raise EngineError(
                f"{role}: the model server at {self.base_url} stopped answering ({failures} failed attempts over "
                f"{calls} requests); the roles use their fallbacks for the next {UNRESPONSIVE_FOR_S / 60:.0f} minutes",
                attempts,
                retryable=False,
            )

    def _exhausted(self, caps: Capabilities, call: _Call) -> None:
        """A call failed after all its retries on transport failures (it raises its own error)."""
        with _REGISTRY_LOCK:
            if call.id not in caps.failed_calls:
                return
            caps.exhausted_calls += 1
        self._latch(caps)

    @staticmethod
    def _latch(caps: Capabilities) -> bool:
        """Latch the server when its failures repeat across requests (see LATCH_FAILURES)."""
        with _REGISTRY_LOCK:
            latch = caps.failures >= LATCH_FAILURES and len(caps.failed_calls) >= 2 and caps.exhausted_calls >= 1
            if latch and caps.unresponsive_until <= time.monotonic():
                caps.unresponsive_until = time.monotonic() + UNRESPONSIVE_FOR_S
        return latch

    def _attempts(
        self,
        role: str,
        model: str,
        caps: Capabilities,
        messages: list[dict[str, Any]],
        json_schema: dict[str, Any] | None,
        tools: list[dict[str, Any]] | None,
        attempts: list[Attempt],
        call: _Call,
    ) -> Completion:
        messages, origins = self._apply_shrinks(messages)
        max_tokens = self.max_tokens.get(role)
        window = self.context_window(model)
        timeout = self.timeout_for(max_tokens, caps)
        used_prompt = used_completion = used_cached = 0
        shrinks = n = timeouts = 0
        widened = whole = False
        while True:
            n += 1
            if n > 1:
                self._check_latched(role, caps, attempts)  # another call may have latched it meanwhile
            call.transport = False
            send_tools = tools if tools and caps.tools else None
            rung = caps.response_format
            sent = fit_messages(messages, window, max_tokens, send_tools) if window else messages
            kwargs: dict[str, Any] = {
                "model": model,
                "messages": normalize_messages(sent, fold_system=not caps.system_role),
                "temperature": self.temperature.get(role, 0.0),
            }
            if max_tokens:
                kwargs["max_tokens"] = max_tokens
            if send_tools:
                kwargs["tools"] = send_tools
            elif (fmt := self._format(rung, json_schema)) is not None:
                kwargs["response_format"] = fmt
            streamed = self.stream and caps.stream and not whole
            prompt_text = _prompt_text(kwargs["messages"])
            watch = None
            extra: dict[str, Any] = {}
            if caps.server_kind == "llama.cpp":
                # llama-server keeps the prompt's KV cache: the next request re-reads only what
                # follows the prefix it shares (every role's instructions come first).
                extra["cache_prompt"] = True
            if streamed:
                # Streamed, so a server that went silent is known within the idle window instead of
                # at the whole answer's deadline (a slow answer and a hung server look alike until then).
                kwargs["stream"] = True
                if caps.stream_usage:
                    kwargs["stream_options"] = {"include_usage": True}
                if self.local and caps.progress_events:
                    # llama-server is otherwise silent while it reads the prompt (minutes on a CPU).
                    extra["return_progress"] = True
                silence = self.idle_window(prompt_text, caps)
                watch = IdleWatch(silence, progress_of(self.base_url)) if silence else None
            if extra:
                kwargs["extra_body"] = extra
            started = time.perf_counter()
            try:
                # Nested in the research's wall budget: the earlier deadline wins.
                with deadline(timeout), idle(watch):
                    if streamed:
                        create = self.client.chat.completions.with_streaming_response.create
                        with create(**kwargs, timeout=timeout) as raw:
                            response = _collect(raw, prompt_text)
                    else:
                        response = self.client.chat.completions.create(**kwargs, timeout=timeout)
            except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
                attempts.append(Attempt("error", f"{type(exc).__name__}: {exc.status_code}", _ms(started)))
                raise CredentialsError(
                    "the model server rejected the credentials: set OPENAI_API_KEY (or use --engine offline)", attempts
                ) from exc
            except openai.APIStatusError as exc:
                self._answered(caps)
                status = exc.status_code
                if "extra_body" in kwargs and _names(exc, ("return_progress",)):
                    with _REGISTRY_LOCK:
                        caps.progress_events = False
                    self._learn(model, attempts, started, "return_progress unsupported; not sent again", exc)
                    continue
                if "stream_options" in kwargs and _names(exc, ("stream_options", "include_usage")):
                    with _REGISTRY_LOCK:
                        caps.stream_usage = False
                    self._learn(model, attempts, started, "stream_options unsupported; token use estimated", exc)
                    continue
                if streamed and _STREAM_WORD.search(f"{server_message(exc)} {exc}".lower()):
                    with _REGISTRY_LOCK:
                        caps.stream = False
                    self._learn(model, attempts, started, "streaming unsupported; answers read whole", exc)
                    continue
                if is_context_overflow(exc) and shrinks < 3:
                    shrinks += 1
                    named = window_from_error(server_message(exc))
                    if named and not self.configured_window and named != window:
                        # The server named its window: every later prompt is fitted to it.
                        with _REGISTRY_LOCK:
                            caps.context_window = window = named
                        attempts.append(Attempt("shrink", f"context overflow: fitted to {named} tokens", _ms(started)))
                        continue
                    attempts.append(Attempt("shrink", "context overflow: input halved", _ms(started)))
                    i = _longest(messages)
                    messages = shrink_messages(messages, i)
                    self._remember_shrink(origins[i], _text(messages[i]["content"]))
                    continue
                if send_tools and _names(exc, _TOOL_MARKERS):
                    with _REGISTRY_LOCK:
                        caps.tools = False
                    self._learn(model, attempts, started, "tools unsupported; tools-only calls skipped", exc)
                    if json_schema is None:
                        return _skipped(model, attempts)
                    continue
                if "response_format" in kwargs and _names(exc, _CAPABILITY_MARKERS):
                    next_rung = FORMAT_LADDER[FORMAT_LADDER.index(rung) + 1]
                    with _REGISTRY_LOCK:
                        # Another thread may have stepped down already: never step back up.
                        if FORMAT_LADDER.index(caps.response_format) < FORMAT_LADDER.index(next_rung):
                            caps.response_format = next_rung
                    self._learn(model, attempts, started, f"response_format {rung} unsupported; using {next_rung}", exc)
                    continue
                if caps.system_role and any(m.get("role") == "system" for m in messages) and _names(exc, _FOLD_MARKERS):
                    with _REGISTRY_LOCK:
                        caps.system_role = False
                    self._learn(model, attempts, started, "system role rejected; folded into the first user turn", exc)
                    continue
                transient = (status >= 500 or status in (408, 409, 429)) and not _names(
                    exc, _TEMPLATE_MARKERS + _VALIDATION_MARKERS + _CAPABILITY_MARKERS
                )
                if not transient:
                    attempts.append(Attempt("error", _describe(exc), _ms(started)))
                    raise EngineError(_rejected(role, exc), attempts, retryable=False) from exc
                self._retry_or_raise(role, exc, n, started, attempts)
            except openai.APITimeoutError as exc:
                timeouts += 1
                if call.budget_over():  # the research's wall budget ran out: no retry can finish in time
                    attempts.append(Attempt("error", "wall-time budget reached during the call", _ms(started)))
                    raise EngineError(
                        f"{role}: the wall-time budget ran out while the model was answering", attempts
                    ) from exc
                silent = watch is not None and watch.tripped
                if silent:
                    what = f"sent nothing for {watch.window_s:.3g} s"
                elif call.call_over():  # the call's own limit cut it, before the attempt's deadline
                    what = f"gave no answer within the call's limit of {CALL_TIMEOUTS * self.timeout:g} s"
                else:
                    what = f"gave no answer within {timeout:.3g} s"
                self._transport_failure(role, caps, call, attempts)
                if timeouts >= MAX_TIMEOUTS or call.call_over():
                    attempts.append(Attempt("error", what, _ms(started)))
                    variable = (
                        "DEEPRESEARCH_LLM_IDLE_TIMEOUT"
                        if silent and not call.call_over()
                        else "DEEPRESEARCH_LLM_TIMEOUT"
                    )
                    raise EngineError(
                        f"{role}: the model server at {self.base_url} {what} ({timeouts} time(s)); "
                        f"if it is only slow, raise {variable}",
                        attempts,
                        retryable=False,
                    ) from exc
                self._retry_or_raise(role, exc, n, started, attempts, f"the server {what}", call)
                # Alive but slow: it most likely still generates the abandoned answer and the retry
                # queues behind it, so the retry gets twice the time.
                timeout *= 2
            except openai.APIConnectionError as exc:
                # Refused, reset or cut: retried; the server is latched only when failures repeat
                # across requests (_maybe_latch), never on one fault.
                self._transport_failure(role, caps, call, attempts)
                self._retry_or_raise(role, exc, n, started, attempts, None, call)
            except (openai.APIResponseValidationError, json.JSONDecodeError) as exc:
                # An unreadable body (a stream cut inside an event, a proxy's HTML page).
                self._transport_failure(role, caps, call, attempts)
                self._retry_or_raise(role, exc, n, started, attempts, None, call)
            except EmptyStreamError as exc:
                # llama-cpp-python answers 200, then fails inside the stream (a prompt over its
                # context window) and closes it empty; asked whole, it says why with a status the
                # ladder above understands (a context overflow is shrunk, not asked again as is).
                whole = True
                self._retry_or_raise(role, exc, n, started, attempts, f"{exc}; asking for the whole answer")
            except openai.APIError as exc:  # an error event inside a 200 stream: the server's trouble
                self._retry_or_raise(role, exc, n, started, attempts)
            except _CutStreamError as exc:
                # llama-cpp-python ends a stream early (no finish_reason) when another request
                # arrives; asked whole, the answer queues behind the other one instead.
                with _REGISTRY_LOCK:
                    caps.stream = False
                self._learn(model, attempts, started, "stream cut before its end; answers read whole", exc)
            except openai.OpenAIError as exc:
                attempts.append(Attempt("error", _describe(exc), _ms(started)))
                raise EngineError(f"{role} model call failed: {_describe(exc)}", attempts) from exc
            else:
                self._answered(caps)
                completion = self._completion(response, model, prompt_text, started, attempts)
                self._measured(caps, completion)
                used_prompt += completion.prompt_tokens
                used_completion += completion.completion_tokens
                used_cached += completion.cached_tokens
                looping = completion.truncated and degenerate(completion.text, prompt_text)
                if (
                    completion.truncated
                    and json_schema is not None
                    and max_tokens
                    and not widened
                    and not looping
                    and json_so_far(completion.text)
                ):
                    widened = True
                    attempts.append(
                        Attempt(
                            "truncated",
                            f"finish_reason=length at max_tokens={max_tokens}; retrying once with {max_tokens * 2}",
                            completion.latency_ms,
                        )
                    )
                    max_tokens *= 2
                    timeout = max(timeout, self.timeout_for(max_tokens, caps))
                    continue
                completion.prompt_tokens, completion.completion_tokens = used_prompt, used_completion
                completion.cached_tokens = used_cached
                return completion

    def _retry_or_raise(
        self,
        role: str,
        exc: Exception,
        n: int,
        started: float,
        attempts: list[Attempt],
        why: str | None = None,
        call: _Call | None = None,
    ) -> None:
        why = why or _describe(exc)
        wait = retry_after_seconds(exc, self.retry.max_s)
        wait = self.retry.backoff(n) if wait is None else wait
        left = remaining()
        if left is not None and left <= wait:  # the wall budget or the call's limit ends before the retry
            attempts.append(Attempt("error", f"{why}; no time left to retry", _ms(started)))
            if call is not None and not call.budget_binding():
                raise EngineError(
                    f"{role} model call failed ({why}) and its time limit ({CALL_TIMEOUTS:g} × "
                    f"DEEPRESEARCH_LLM_TIMEOUT = {CALL_TIMEOUTS * self.timeout:g} s) leaves no time to retry",
                    attempts,
                ) from exc
            raise EngineError(
                f"{role} model call failed and the wall-time budget leaves no time to retry", attempts
            ) from exc
        if n >= self.retry.max_attempts:
            attempts.append(Attempt("error", why, _ms(started)))
            raise EngineError(f"{role} model call failed after {n} attempts: {why}", attempts, retryable=True) from exc
        attempts.append(Attempt("retry", why, _ms(started), round(wait, 3)))
        time.sleep(wait)

    def _completion(
        self, response: Any, model: str, prompt_text: str, started: float, attempts: list[Attempt]
    ) -> Completion:
        if not getattr(response, "choices", None):
            raise EngineError("the model returned no choices", attempts)
        choice = response.choices[0]
        message = choice.message
        text = message.content or ""
        calls = []
        for tc in message.tool_calls or []:
            try:
                args = json.loads(tc.function.arguments or "{}")
            except json.JSONDecodeError:
                args = {"_invalid_json": tc.function.arguments}
            calls.append(ToolCallRequest(tc.function.name, args if isinstance(args, dict) else {}))
        usage = response.usage
        finish = getattr(choice, "finish_reason", None)
        prompt_tokens = usage.prompt_tokens if usage else estimate_tokens(prompt_text)
        completion_tokens = usage.completion_tokens if usage else estimate_tokens(text)
        return Completion(
            text=text,
            model=response.model or model,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            latency_ms=_ms(started),
            tool_calls=calls,
            attempts=attempts,
            truncated=finish == "length",
            finish_reason=finish,
            cached_tokens=min(cached_prompt_tokens(response), prompt_tokens or 0),
            # Counted by the server, or estimated when it does not say (llama-cpp-python's streams).
            **speeds(response, started, prompt_tokens, completion_tokens),
        )


@dataclass
class _Call:
    """One ``complete()`` call: its id (server failures are counted by request), when it must end
    (``time.monotonic()``: its own limit, and the research's wall budget), and whether its last
    attempt failed on transport (connection, cut body, timeout)."""

    id: int
    call: float
    budget: float | None
    transport: bool = False

    def budget_binding(self) -> bool:
        return self.budget is not None and self.budget <= self.call

    def budget_over(self) -> bool:
        return self.budget is not None and time.monotonic() >= self.budget - 0.01

    def call_over(self) -> bool:
        return time.monotonic() >= self.call - 0.05


class EmptyStreamError(Exception):
    """A 200 stream that carried no answer at all (an HTML page, an empty body): retried."""


class _CutStreamError(Exception):
    """A stream that ended before its finish_reason (the server cut it off)."""


def _http_errors() -> tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]]:
    """(timeouts, transport errors) of the HTTP stack the openai SDK runs on."""
    import httpx

    if issubclass(openai.DefaultHttpxClient, httpx.Client):
        return (httpx.TimeoutException,), (httpx.TransportError,)
    import httpx2

    return (httpx2.TimeoutException,), (httpx2.TransportError,)


def _sse_data(lines: Iterator[str]) -> Iterator[str]:
    """The data of each server-sent event; comments (llama-cpp-python's pings) and other fields
    are skipped."""
    data: list[str] = []
    for line in lines:
        if not line:
            if data:
                yield "\n".join(data)
                data = []
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            if name == "data":
                data.append(value[1:] if value.startswith(" ") else value)
    if data:
        yield "\n".join(data)


def _drain(events: Iterator[str], errors: tuple[type[Exception], ...]) -> None:
    """Read what follows ``[DONE]`` (nothing but the body's end, from a real server) within
    :data:`DRAIN_S`, so the connection can serve the next call; the answer is whole either way."""
    try:
        with deadline(DRAIN_S):
            for _ in events:
                pass
    except errors:
        pass  # the connection is closed with the response instead of reused


def _collect(response: Any, prompt: str = "") -> Any:
    """A streamed answer put back together from its raw events, shaped like a whole response for
    :meth:`_completion`. Read as plain JSON: the SDK's typed chunks cost about 0.2 ms each, and a
    local server sends one per token. Errors met while reading the body are mapped to the SDK's
    own (timeout, connection); an error event raises like the SDK's stream does."""
    timeouts, transport = _http_errors()
    text: list[str] = []
    calls: dict[int, dict[str, str]] = {}
    finish = model = usage = timings = first = None
    chunks = 0
    try:
        events = _sse_data(response.iter_lines())
        for data in events:
            if data.startswith("[DONE]"):
                _drain(events, timeouts + transport)
                break
            if (
                chunks % LOOP_CHECK_EVERY == 0
                and sum(map(len, text)) >= LOOP_MIN_CHARS
                and degenerate("".join(text), prompt)
            ):
                # A small model looping or echoing its prompt until max_tokens: stop reading (the
                # server stops generating when the client goes) and hand back what came, cut.
                finish = "length"
                break
            chunk = json.loads(data)  # an unreadable event is retried like an unreadable body
            if not isinstance(chunk, dict):
                continue
            if chunk.get("error"):
                error = chunk["error"]
                message = error.get("message") if isinstance(error, dict) else None
                raise openai.APIError(
                    str(message or "an error occurred during streaming"), response.http_request, body=error
                )
            chunks += 1
            model = chunk.get("model") or model
            usage = chunk.get("usage") or usage
            timings = chunk.get("timings") or timings
            for choice in chunk.get("choices") or []:
                delta = choice.get("delta") or {}
                if first is None and (delta.get("content") or delta.get("tool_calls")):
                    first = time.perf_counter()  # the prompt is read: the first token is out
                if delta.get("content"):
                    text.append(delta["content"])
                for tc in delta.get("tool_calls") or []:
                    call = calls.setdefault(tc.get("index", len(calls)), {"name": "", "arguments": ""})
                    function = tc.get("function") or {}
                    call["name"] = call["name"] or function.get("name") or ""
                    call["arguments"] += function.get("arguments") or ""
                finish = choice.get("finish_reason") or finish
    except timeouts as exc:
        raise openai.APITimeoutError(request=response.http_request) from exc
    except transport as exc:
        raise openai.APIConnectionError(message=str(exc), request=response.http_request) from exc
    if finish is None:
        if not text and not calls:
            raise EmptyStreamError(f"the stream held no answer ({chunks} event(s))")
        raise _CutStreamError(f"the stream ended after {len(''.join(text))} characters without a finish_reason")
    tool_calls = [
        SimpleNamespace(function=SimpleNamespace(name=c["name"], arguments=c["arguments"]))
        for _, c in sorted(calls.items())
    ]
    counted = isinstance(usage, dict) and all(
        isinstance(usage.get(k), int) for k in ("prompt_tokens", "completion_tokens")
    )
    return SimpleNamespace(
        choices=[
            SimpleNamespace(message=SimpleNamespace(content="".join(text), tool_calls=tool_calls), finish_reason=finish)
        ],
        model=model,
        usage=SimpleNamespace(**usage) if counted else None,
        timings=timings,
        first_token_at=first,
        ended_at=time.perf_counter(),
    )


def _field(obj: Any, name: str) -> Any:
    """A response field, whether the SDK parsed it (attribute) or kept it as an extra (dict)."""
    if obj is None:
        return None
    if isinstance(obj, dict):
        return obj.get(name)
    value = getattr(obj, name, None)
    if value is None:
        value = (getattr(obj, "model_extra", None) or {}).get(name)
    return value


def cached_prompt_tokens(response: Any) -> int:
    """Prompt tokens the server read from its prompt cache: ``usage.prompt_tokens_details.cached_tokens``
    (OpenAI, vLLM, newer llama.cpp), else llama.cpp's ``timings.cache_n``; 0 when not reported."""
    details = _field(_field(response, "usage"), "prompt_tokens_details")
    for value in (_field(details, "cached_tokens"), _field(_field(response, "timings"), "cache_n")):
        if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
            return int(value)
    return 0


def speeds(response: Any, started: float, prompt_tokens: int, completion_tokens: int | None) -> dict[str, float | None]:
    """Prompt-processing and generation speed (tokens/s) of one answer: llama.cpp's own
    ``timings`` (``prompt_per_second``, ``predicted_per_second``) when it sends them, else measured
    on the stream: the prompt tokens not served from the cache over the time to the first token,
    the other generated tokens over the time after it. None where nothing can be measured (a
    whole answer without timings, or too few tokens)."""
    timings = _field(response, "timings")
    reported = [_field(timings, k) for k in ("prompt_per_second", "predicted_per_second")]
    out = [round(float(v), 3) if isinstance(v, int | float) and v > 0 else None for v in reported]
    first, ended = getattr(response, "first_token_at", None), getattr(response, "ended_at", None)
    if first is not None and ended is not None:
        read = prompt_tokens - cached_prompt_tokens(response)
        if out[0] is None and read > 0 and first > started:
            out[0] = round(read / (first - started), 3)
        if out[1] is None and completion_tokens and completion_tokens > 1 and ended > first:
            out[1] = round((completion_tokens - 1) / (ended - first), 3)
    return {"prompt_tps": out[0], "gen_tps": out[1]}


def _skipped(model: str, attempts: list[Attempt]) -> Completion:
    return Completion(
        text="", model=model, prompt_tokens=0, completion_tokens=0, latency_ms=0.0, attempts=attempts, skipped=True
    )


def _rejected(role: str, exc: openai.APIStatusError) -> str:
    """One line: the role, the server's own message, and what to try."""
    message = " ".join(server_message(exc).split())[:300]
    hint = ""
    if _names(exc, _TEMPLATE_MARKERS):
        hint = " (the server's chat template rejected the conversation; try another chat template or model)"
    elif _names(exc, _CAPABILITY_MARKERS):
        hint = " (try DEEPRESEARCH_RESPONSE_FORMAT=none)"
    elif exc.status_code == 404:
        hint = f" (check DEEPRESEARCH_MODEL_{role.upper()} and OPENAI_BASE_URL)"
    return f"{role} model call rejected by the server (HTTP {exc.status_code}): {message}{hint}"


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)


def _describe(exc: Exception) -> str:
    status = getattr(exc, "status_code", None)
    return f"{type(exc).__name__}{f' {status}' if status else ''}: {str(exc)[:300]}"
