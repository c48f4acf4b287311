"""Wall-clock deadlines for HTTP calls: connect + total, never per chunk.

httpx's timeouts apply to each socket operation, so a server that answers and then trickles one
byte every few seconds never trips them. Clients built with :func:`deadline_transport` run every
connect, read and write under the deadline of the enclosing :func:`deadline` block: each socket
operation's timeout is capped by the time left, and once the deadline has passed the next
operation fails at once with a timeout. The deadline lives in a context variable, so a client
shared between threads (concurrent searches) gives each call its own deadline.

An :func:`idle` block adds a silence limit to the reads: a streamed model answer whose server sends
nothing at all for ``window_s`` seconds is cut long before its total deadline. Silence counts
from the later of this call's last byte and the last byte any call got from the same server
(:class:`Progress`, shared per server): a request queued behind another one of this process is
not silent while the server streams the other answer.
"""

from __future__ import annotations

import math
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from types import ModuleType
from typing import Any

import httpcore
import httpx

_DEADLINE: ContextVar[float | None] = ContextVar("deepresearch_http_deadline", default=None)


class Progress:
    """When a server last sent any byte to any call of this process (``time.monotonic()``)."""

    def __init__(self) -> None:
        self.last = 0.0

    def touch(self) -> None:
        self.last = time.monotonic()


class IdleWatch:
    """One call's silence limit (see :func:`idle`); ``tripped`` says the limit cut the call."""

    def __init__(self, window_s: float, progress: Progress) -> None:
        self.window_s = window_s
        self.progress = progress
        self.last = time.monotonic()
        self.tripped = False

    def left(self) -> float:
        return self.window_s - (time.monotonic() - max(self.last, self.progress.last))

    def touch(self) -> None:
        self.last = time.monotonic()
        self.progress.last = self.last


_IDLE: ContextVar[IdleWatch | None] = ContextVar("deepresearch_http_idle", default=None)


@contextmanager
def idle(watch: IdleWatch | None) -> Iterator[IdleWatch | None]:
    """Cut the block's reads once ``watch`` has seen ``window_s`` seconds of silence (None: no limit)."""
    token = _IDLE.set(watch)
    try:
        yield watch
    finally:
        _IDLE.reset(token)


@contextmanager
def deadline(seconds: float | None) -> Iterator[float | None]:
    """Run the block's HTTP calls under a deadline ``seconds`` from now (None: no new deadline).
    Nested deadlines keep the earliest one. Yields the deadline on ``time.monotonic()``'s clock."""
    current = _DEADLINE.get()
    end = current
    if seconds is not None and math.isfinite(seconds):
        mine = time.monotonic() + max(0.0, float(seconds))
        end = mine if current is None else min(current, mine)
    token = _DEADLINE.set(end)
    try:
        yield end
    finally:
        _DEADLINE.reset(token)


def remaining() -> float | None:
    """Seconds left before the current deadline (None when there is none; may be negative)."""
    end = _DEADLINE.get()
    return None if end is None else end - time.monotonic()


def expired() -> bool:
    left = remaining()
    return left is not None and left <= 0


def _cap(timeout: float | None, error: type[Exception]) -> float | None:
    left = remaining()
    if left is None:
        return timeout
    if left <= 0:
        raise error("the call's total deadline has passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream:
    """A network stream whose every operation is capped by the deadline. Duck-typed so it wraps
    both httpcore's streams (httpx: web tools) and httpcore2's (httpx2: the openai client)."""

    def __init__(self, stream: Any, core: ModuleType) -> None:
        self._stream = stream
        self._core = core

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        watch = _IDLE.get()
        if watch is None:
            return self._stream.read(max_bytes, _cap(timeout, self._core.ReadTimeout))
        started = time.monotonic()
        while True:
            # Wake at the end of the silence window: another call may have heard from the server
            # meanwhile (then this one keeps waiting). A plain socket survives a read timeout.
            left = watch.left()
            if left <= 0:
                watch.tripped = True
                raise self._core.ReadTimeout(f"the server sent nothing for {watch.window_s:.3g} s")
            per_read = None if timeout is None else timeout - (time.monotonic() - started)
            if per_read is not None and per_read <= 0:
                raise self._core.ReadTimeout("read timed out")
            wait = _cap(left if per_read is None else min(left, per_read), self._core.ReadTimeout)
            try:
                data = self._stream.read(max_bytes, wait)
            except self._core.ReadTimeout:
                continue
            watch.touch()
            return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _cap(timeout, self._core.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None) -> Any:
        inner = self._stream.start_tls(ssl_context, server_hostname, _cap(timeout, self._core.ConnectTimeout))
        return _DeadlineStream(inner, self._core)

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class DeadlineBackend:
    """A sync network backend with every socket operation capped by the current deadline."""

    def __init__(self, backend: Any = None, core: ModuleType = httpcore) -> None:
        self._backend = backend or core.SyncBackend()
        self._core = core

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> Any:
        stream = self._backend.connect_tcp(
            host, port, _cap(timeout, self._core.ConnectTimeout), local_address, socket_options
        )
        return _DeadlineStream(stream, self._core)

    def connect_unix_socket(self, path: str, timeout: float | None = None, socket_options: Any = None) -> Any:
        stream = self._backend.connect_unix_socket(path, _cap(timeout, self._core.ConnectTimeout), socket_options)
        return _DeadlineStream(stream, self._core)

    def sleep(self, seconds: float) -> None:
        left = remaining()
        self._backend.sleep(seconds if left is None else max(0.0, min(seconds, left)))


def _with_deadlines(transport: Any, core: ModuleType) -> Any:
    pool = getattr(transport, "_pool", None)
    if pool is not None and hasattr(pool, "_network_backend"):
        pool._network_backend = DeadlineBackend(pool._network_backend, core)
    return transport


_SSL_CONTEXTS: dict[tuple[str, bool], ssl.SSLContext] = {}
_SSL_LOCK = threading.Lock()


def _shared_ssl(http: ModuleType, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Default certificate checks share one SSL context per process and HTTP stack: building one
    reads the whole CA bundle (30-40 ms), and every page fetch opens its own client."""
    if kwargs.get("verify", True) is not True or kwargs.get("cert") is not None:
        return kwargs
    key = (http.__name__, bool(kwargs.get("trust_env", True)))
    with _SSL_LOCK:
        context = _SSL_CONTEXTS.get(key)
        if context is None:
            context = _SSL_CONTEXTS[key] = http.create_ssl_context(trust_env=key[1])
    return {**kwargs, "verify": context}


def deadline_transport(**kwargs: Any) -> httpx.HTTPTransport:
    """An ``httpx.HTTPTransport`` (same arguments) whose socket operations honour :func:`deadline`."""
    return _with_deadlines(httpx.HTTPTransport(**_shared_ssl(httpx, kwargs)), httpcore)


def deadline_transport2(**kwargs: Any) -> Any:
    """The same for ``httpx2`` (the openai SDK's HTTP stack since openai 3)."""
    import httpcore2
    import httpx2

    return _with_deadlines(httpx2.HTTPTransport(**_shared_ssl(httpx2, kwargs)), httpcore2)


def deadline_client(**kwargs: Any) -> httpx.Client:
    """An ``httpx.Client`` whose calls honour :func:`deadline` (``trust_env`` is passed to both)."""
    transport_args = {k: kwargs[k] for k in ("verify", "trust_env") if k in kwargs}
    return httpx.Client(transport=deadline_transport(**transport_args), **kwargs)
