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
from multiprocessing.pool import Pool
from typing import Any

from .model import ExtractedDocument, SkipFile

# Formats whose readers can take long on a strange file (the rest are read in-process).
SLOW_SUFFIXES = frozenset({".pdf", ".docx", ".pptx", ".xlsx", ".xlsm"})
STARTUP_S = 120.0  # a worker that cannot even start (a broken install) is an error, not a slow file


class ExtractionTimeout(SkipFile):
    """A file skipped for the time its reader took (tried again next time: the machine may be busy)."""


_lock = threading.Lock()
_pool: Pool | None = None


def _load(module: str) -> None:
    importlib.import_module(module)


def _started(module: str) -> Pool:
    """The worker, with the reader's ``module`` imported (pypdf, python-docx…): start-up and imports
    are waited for here, outside any file's deadline."""
    global _pool
    pool = _pool or multiprocessing.get_context("spawn").Pool(1)
    try:
        pool.apply_async(_load, (module,)).get(STARTUP_S)
    except multiprocessing.TimeoutError:
        pool.terminate()
        _pool = None
        raise ExtractionTimeout(f"the extraction process did not start in {STARTUP_S:g} s") from None
    _pool = pool
    return pool


def stop() -> None:
    """Kill the worker (a new one starts with the next slow file)."""
    global _pool
    with _lock:
        if _pool is not None:
            _pool.terminate()
            _pool = None


def extract_with_deadline(
    extractor: Callable[[bytes, str], ExtractedDocument], data: bytes, name: str, deadline_s: float
) -> ExtractedDocument:
    """``extractor(data, name)`` in the worker process; :class:`SkipFile` past ``deadline_s``.

    ``extractor`` travels by reference (a module-level function), so the worker runs exactly the
    function the caller chose; its exceptions come back as raised. A worker that dies mid-file (a
    crash in a reader) is replaced by the pool, and the file is skipped at the deadline."""
    global _pool
    with _lock:  # one file at a time: the worker is one process
        pool = _started(extractor.__module__)
        pending: Any = pool.apply_async(extractor, (data, name))
        try:
            return pending.get(deadline_s)
        except multiprocessing.TimeoutError:
            pool.terminate()  # the stuck reader dies with its process
            _pool = None
            raise ExtractionTimeout(f"extraction took longer than {deadline_s:g} s") from None
