"""One run per research partition at a time (issue 15: the same question started twice must not
interleave its rows or rewrite the raw files the other run is verifying).

An advisory ``flock`` on ``<partition>/.run.lock``, held for the whole run: the kernel releases it
when the process dies, so a killed run never leaves a stale lock behind. The file names its
holder (pid and run id) for the message the second run shows. The lock is re-entrant within a
process (the CLI holds it around the run, the run's stages take it again). Queued Dagster runs
of one partition are serialized before they start by the run queue's per-partition tag limit
(``dagster_home/dagster.yaml``); this lock also covers runs started in-process by the CLI.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from ..errors import ResearchError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no advisory locks, runs are not serialized
    fcntl = None  # type: ignore[assignment]

LOCK_NAME = ".run.lock"
_held: dict[str, tuple[int, int]] = {}  # lock path -> (fd, depth) held by this process
_guard = threading.Lock()


class PartitionBusy(ResearchError):
    """Another process is running this research partition."""


def _holder(path: Path) -> str:
    with contextlib.suppress(OSError):
        text = path.read_text("utf-8").strip()
        if text:
            return f" ({text})"
    return ""


@contextlib.contextmanager
def partition_lock(partition_dir: Path, partition_key: str, run_id: str, wait_s: float = 0.0) -> Iterator[None]:
    """Hold the partition's run lock; wait up to ``wait_s`` for another holder, then raise
    :class:`PartitionBusy` naming it."""
    if fcntl is None:
        yield
        return
    partition_dir.mkdir(parents=True, exist_ok=True)
    path = partition_dir / LOCK_NAME
    key = str(path)
    with _guard:
        if key in _held:
            fd, depth = _held[key]
            _held[key] = (fd, depth + 1)
            reentered = True
        else:
            reentered = False
    if reentered:
        try:
            yield
        finally:
            with _guard:
                fd, depth = _held[key]
                _held[key] = (fd, depth - 1)
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
    deadline = time.monotonic() + wait_s
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise PartitionBusy(
                        f"research {partition_key} is already running{_holder(path)}: wait for it to finish "
                        "(deepresearch ls, or the Dagster UI), then run again to resume"
                    ) from None
                time.sleep(0.2)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}, run {run_id}".encode(), 0)
        with _guard:
            _held[key] = (fd, 1)
        try:
            yield
        finally:
            with _guard:
                del _held[key]  # nested holders have left by now (`with` blocks nest)
            os.ftruncate(fd, 0)
    finally:
        os.close(fd)  # closing the descriptor releases the flock
