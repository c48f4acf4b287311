"""Extraction with a deadline: a file whose reader blocks or loops is skipped, never waited for.

A Python thread cannot be stopped, so the slow formats (PDF and the Office formats, whose readers
parse whole files in pure Python) are read in one long-lived worker process: the call waits at most
``deadline_s`` and, past it, the worker is killed (``Pool.terminate``) and the next file starts a
new one. Small text formats are read in-process: no process round trip for a Markdown note.

The worker is started with ``spawn`` (no copy of a multi-threaded parent: a Dagster code server
holds locks that a forked child could inherit held). Its start-up (imports) is waited for apart
from the deadline, which measures the extraction alone.
"""

from __future__ import annotations

import importlib
import multiprocessing
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from .model import ExtractedDocument, SkipFile

# Formats whose readers can take long on a strange file (the rest are read in-process).
SLOW_SUFFIXES = frozenset({".pdf", ".docx", ".pptx", ".xlsx", ".xlsm"})
STARTUP_S = 120.0  # a worker that cannot even start (a broken install) is an error, not a slow file


class ExtractionTimeout(SkipFile):
    """A file skipped for the time its reader took (tried again next time: the machine may be busy)."""


_lock = threading.Lock()
_worker: tuple[BaseProcess, Connection] | None = None


def _serve(conn: Connection) -> None:
    """The worker's loop: (function or module name, arguments) in, ("ok" | "error", value) out."""
    while True:
        try:
            task, args = conn.recv()
        except EOFError:
            return
        try:
            value = importlib.import_module(task) if isinstance(task, str) else task(*args)
            conn.send(("ok", None if isinstance(task, str) else value))
        except Exception as exc:  # raised again in the caller, as the reader raised it
            try:
                conn.send(("error", exc))
            except Exception:  # an exception that does not pickle travels as its text
                conn.send(("error", RuntimeError(f"{type(exc).__name__}: {exc}")))


def _call(task: Any, args: tuple[Any, ...], timeout: float) -> Any:
    """``task(*args)`` in the worker (a module name: imported there); the worker is killed and
    :class:`multiprocessing.TimeoutError` raised past ``timeout``, or when it dies mid-call."""
    global _worker
    if _worker is None:
        parent, child = multiprocessing.get_context("spawn").Pipe()
        process = multiprocessing.get_context("spawn").Process(target=_serve, args=(child,), daemon=True)
        process.start()
        child.close()
        _worker = (process, parent)
    process, conn = _worker
    conn.send((task, args))
    try:
        ready = conn.poll(timeout)
        status, value = conn.recv() if ready else (None, None)
    except (EOFError, OSError):  # the worker died (a crash in a reader)
        status = None
    if status is None:
        _kill()
        raise multiprocessing.TimeoutError
    if status == "error":
        raise value
    return value


def _kill() -> None:
    global _worker
    if _worker is not None:
        process, conn = _worker
        _worker = None
        process.kill()
        process.join()
        conn.close()


def stop() -> None:
    """Kill the worker (a new one starts with the next slow file)."""
    with _lock:
        _kill()


def extract_with_deadline(
    extractor: Callable[[bytes, str], ExtractedDocument], data: bytes, name: str, deadline_s: float
) -> ExtractedDocument:
    """``extractor(data, name)`` in the worker process; :class:`SkipFile` past ``deadline_s``.

    ``extractor`` travels by reference (a module-level function), so the worker runs exactly the
    function the caller chose; its exceptions come back as raised. A worker that dies mid-file (a
    crash in a reader) is replaced, and the file is skipped. The worker's start-up and the
    reader's imports are waited for apart (``STARTUP_S``), outside the file's deadline."""
    with _lock:  # one file at a time: the worker is one process
        try:
            _call(extractor.__module__, (), STARTUP_S)
        except multiprocessing.TimeoutError:
            raise ExtractionTimeout(f"the extraction process did not start in {STARTUP_S:g} s") from None
        try:
            return _call(extractor, (data, name), deadline_s)
        except multiprocessing.TimeoutError:
            raise ExtractionTimeout(f"extraction took longer than {deadline_s:g} s") from None
