"""What a model server says about itself: which kind it is and how long a context it runs.

Asked once per (base URL, model) and process, and only of servers on this machine or a private
network (a hosted API has no such endpoints, and its windows are larger than any prompt here):

- llama.cpp's ``llama-server``: ``GET /props`` → ``default_generation_settings.n_ctx`` (older
  builds: top-level ``n_ctx``); the kind ``llama.cpp`` also turns on its prompt cache
  (``cache_prompt``) in the engine;
- Ollama: ``POST /api/show {"model": …}`` → ``num_ctx`` of the model's parameters when its
  Modelfile sets one, else Ollama's own default (:data:`OLLAMA_DEFAULT_CTX`), never more than
  the model's ``<arch>.context_length``.

A server that says nothing (llama-cpp-python, LM Studio, vLLM) still names its window when a
prompt overflows it (``Requested tokens (9210) exceed context window of 8192``, ``maximum context
length is 32768 tokens``): :func:`window_from_error` reads it so every later prompt is fitted
before it is sent. vLLM's ``GET /v1/models`` (``max_model_len``) is not asked: on llama-cpp-python
that request ends any answer being streamed to another client (``interrupt_requests``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..web.deadline import deadline, deadline_client

# Ollama runs a model with num_ctx tokens unless its Modelfile or the request sets another
# (4096 since Ollama 0.6; the model's own context_length is only the upper limit).
OLLAMA_DEFAULT_CTX = 4096
# A local server answers these at once, even while it generates (its HTTP thread does).
PROBE_TIMEOUT_S = 1.0
_WINDOW_IN_ERROR = re.compile(
    r"(?:context (?:window|size|length)|n_ctx)\D{0,24}?(\d{3,7})(?:\s*tokens)?", re.IGNORECASE
)


@dataclass(frozen=True)
class ServerInfo:
    kind: str = "unknown"  # llama.cpp | ollama | unknown
    context_window: int | None = None


def _root(base_url: str) -> str:
    """The server's root: the base URL without its trailing ``/v1``."""
    root = base_url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def llamacpp_window(props: Any) -> int | None:
    if not isinstance(props, dict):
        return None
    settings = props.get("default_generation_settings")
    return _positive(settings.get("n_ctx") if isinstance(settings, dict) else None) or _positive(props.get("n_ctx"))


def ollama_window(show: Any) -> int | None:
    if not isinstance(show, dict):
        return None
    info = show.get("model_info") if isinstance(show.get("model_info"), dict) else {}
    limit = next((_positive(v) for k, v in info.items() if k.endswith(".context_length")), None)
    match = re.search(r"^\s*num_ctx\s+(\d+)", str(show.get("parameters") or ""), re.MULTILINE)
    window = int(match.group(1)) if match else OLLAMA_DEFAULT_CTX
    return min(window, limit) if limit else window


def probe(
    base_url: str, model: str, headers: dict[str, str] | None = None, timeout: float = PROBE_TIMEOUT_S
) -> ServerInfo:
    """Ask the server, within ``timeout`` seconds in all (a trickling server included). An error
    status (404, 501) or a body that is not JSON means that endpoint is not there; a server that
    does not answer (hung, refused, too slow) is not asked the next question."""
    import httpx

    root = _root(base_url)

    class Silent(Exception):
        pass

    def ask(client: httpx.Client, method: str, url: str, body: dict[str, Any] | None = None) -> Any:
        try:
            response = client.request(method, url, json=body, headers=headers)
        except (httpx.HTTPError, OSError) as exc:
            raise Silent from exc
        if response.status_code != 200:
            return None
        try:
            return response.json()
        except ValueError:
            return None

    try:
        with deadline(timeout), deadline_client(timeout=timeout) as client:
            if (window := llamacpp_window(ask(client, "GET", f"{root}/props"))) is not None:
                return ServerInfo("llama.cpp", window)
            if (window := ollama_window(ask(client, "POST", f"{root}/api/show", {"model": model}))) is not None:
                return ServerInfo("ollama", window)
    except Silent:
        pass
    return ServerInfo()


def window_from_error(message: str) -> int | None:
    """The context window a server names in its overflow error, if it names one."""
    match = _WINDOW_IN_ERROR.search(message)
    return int(match.group(1)) if match else None
