"""Hostile HTTP servers on 127.0.0.1: they answer, then trickle (slow-loris) or hang."""

from __future__ import annotations

import socket
import threading
from types import TracebackType


class TricklingServer:
    """``mode``: ``body`` (headers at once, then one body byte every ``interval`` s), ``headers`` (the
    status line, then one header byte every ``interval`` s) or ``hang`` (accepts, never answers)."""

    def __init__(self, mode: str = "body", interval: float = 15.0, content_type: str = "text/html") -> None:
        self.mode, self.interval, self.content_type = mode, interval, content_type
        self._stop = threading.Event()
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self.connections = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> TricklingServer:
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
