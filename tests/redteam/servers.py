"""Hostile servers on 127.0.0.1: they answer, then trickle (slow-loris) or hang, or stand in front of
a model server and break chosen requests."""

from __future__ import annotations

import socket
import threading
from types import TracebackType
from typing import TypeVar

S = TypeVar("S", bound="_HostileServer")


class _HostileServer:
    """A raw-socket server on 127.0.0.1 (a free port): one thread per connection runs ``_handle``."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self.connections = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self: S) -> S:
        threading.Thread(target=self._serve, daemon=True).start()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._stop.set()
        self._sock.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        raise NotImplementedError


class TricklingServer(_HostileServer):
    """``mode``: ``body`` (headers at once, then one body byte every ``interval`` s), ``headers`` (the
    status line, then one header byte every ``interval`` s) or ``hang`` (accepts, never answers)."""

    def __init__(self, mode: str = "body", interval: float = 15.0, content_type: str = "text/html") -> None:
        super().__init__()
        self.mode, self.interval, self.content_type = mode, interval, content_type

    def _handle(self, conn: socket.socket) -> None:
        try:
            conn.recv(65536)
            if self.mode == "hang":
                self._stop.wait()
                return
            if self.mode == "headers":
                conn.sendall(b"HTTP/1.1 200 OK\r\n")
                payload = b"X-Slow: " + b"a" * 100_000
            else:
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: " + self.content_type.encode()
                    + b"\r\nContent-Length: 100000\r\n\r\n<html><body><p>"
                )  # fmt: skip
                payload = b"x" * 100_000
            for byte in payload:
                if self._stop.wait(self.interval):
                    return
                conn.sendall(bytes([byte]))
        except OSError:
            pass
        finally:
            conn.close()


class FaultyProxy(_HostileServer):
    """A proxy in front of a (fake) model server that breaks chosen requests, in arrival order:
    ``faults`` holds one entry per request, ``"reset"`` (the connection is reset before any
    answer), ``"cut"`` (the answer's bytes stop half-way, then the connection closes), ``"hang"``
    (accepts, never answers) or ``"pass"``; requests past the list pass. Only model calls
    (``/chat/completions``) count: the engine's questions about the server pass. ``faults`` can be
    extended while the proxy runs. Counts what it did in ``done``."""

    def __init__(self, upstream: str, faults: list[str] | None = None) -> None:
        from urllib.parse import urlsplit

        super().__init__()
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.path = parts.path
        self.faults = list(faults or [])
        self.done: list[str] = []
        self._lock = threading.Lock()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.path}"

    def _request(self, conn: socket.socket) -> bytes:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return b""
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        while len(body) < length:
            chunk = conn.recv(65536)
            if not chunk:
                break
            body += chunk
        # One request per connection upstream and back: the client opens a new one next time.
        head = (
            b"\r\n".join(line for line in head.split(b"\r\n") if not line.lower().startswith(b"connection:"))
            + b"\r\nConnection: close"
        )
        return head + b"\r\n\r\n" + body

    def _handle(self, conn: socket.socket) -> None:
        import struct

        try:
            while not self._stop.is_set():
                request = self._request(conn)
                if not request:
                    return
                # Faults are for model calls: the engine's one-time questions about the server
                # (GET /props, POST /api/show) pass through and are not counted.
                fault = "pass"
                if b"/chat/completions" in request.split(b"\r\n", 1)[0]:
                    with self._lock:
                        fault = self.faults[len(self.done)] if len(self.done) < len(self.faults) else "pass"
                        self.done.append(fault)
                if fault == "reset":
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    return
                if fault == "hang":
                    self._stop.wait()
                    return
                with socket.create_connection(self.upstream) as up:
                    up.sendall(request)
                    answer = b""
                    while chunk := up.recv(65536):
                        answer += chunk
                if fault == "cut":
                    head, _, body = answer.partition(b"\r\n\r\n")
                    conn.sendall(head + b"\r\n\r\n" + body[: max(1, len(body) // 2)])
                    return
                conn.sendall(answer)
                if b"connection: close" in answer.lower() or b"HTTP/1.0" in answer[:12]:
                    return
        except OSError:
            pass
        finally:
            conn.close()
