"""One run per research partition at a time (issue 15: the same question started twice must not
interleave its rows or rewrite the raw files the other run is verifying).

An advisory ``flock`` on ``<partition>/.run.lock``, held for the whole run: the kernel releases it
when the process dies, so a killed run never leaves a stale lock behind. The file names its
holder (pid and run id) for the message the second run shows. The lock is re-entrant within a
process (the CLI holds it around the run, the run's stages take it again). Queued Dagster runs
of one partition are serialized before they start by the run queue's per-partition tag limit
(``dagster_home/dagster.yaml``); this lock also covers runs started in-process by the CLI.
A ``flock`` holds only on one host: a team deployment (a Postgres URL configured) takes a Postgres
advisory lock instead (``postgres.advisory_partition_lock``), released too when its holder dies.

A busy partition is not a transient fault: :class:`PartitionBusy` is never retried (Dagster's
retry policy would only repeat the refusal), and ``deepresearch run`` takes the lock before it
loads Dagster, so a second run of the same question is refused in well under a second (or, with
``--wait``, waits for the holder and then resumes from what it stored).
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
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
    """Another process is running this research partition (never retryable)."""


def holder_of(partition_dir: Path) -> str:
    """Who holds (or last held) the partition's lock: ``pid 123 on host h, run abc`` ("" if unknown)."""
    with contextlib.suppress(OSError):
        return " ".join((partition_dir / LOCK_NAME).read_text("utf-8").split())[:200]
    return ""


def _named_holder(partition_dir: Path, wait_s: float = 1.0) -> str:
    """:func:`holder_of`, read again for up to ``wait_s`` while the file is empty: a holder names itself
    just after it takes the lock, and a run refused in between would otherwise name nobody."""
    deadline = time.monotonic() + wait_s
    while not (holder := holder_of(partition_dir)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return holder


def _busy(partition_key: str, holder: str) -> PartitionBusy:
    named = f" ({holder})" if holder else ""
    return PartitionBusy(
        f"research {partition_key} is already running{named}: wait for it to finish "
        "(deepresearch run --wait waits for it), then run again to resume"
    )


@contextlib.contextmanager
def partition_lock(
    partition_dir: Path,
    partition_key: str,
    run_id: str,
    wait_s: float = 0.0,
    on_wait: Callable[[str], None] | None = None,
    postgres_url: str | None = None,
) -> Iterator[None]:
    """Hold the partition's run lock; wait up to ``wait_s`` (``math.inf``: until it is free) for
    another holder, then raise :class:`PartitionBusy` naming it. ``on_wait`` is told once, with
    the holder, when the lock is taken and the call is going to wait. With ``postgres_url`` (a team
    deployment) the lock is a Postgres advisory lock, which holds across hosts
    (``postgres.advisory_partition_lock``); else a ``flock`` on the partition's ``.run.lock``."""
    key = f"postgres:{partition_key}" if postgres_url else str(partition_dir / LOCK_NAME)
    with _guard:
        reentered = key in _held
        if reentered:
            fd, depth = _held[key]
            _held[key] = (fd, depth + 1)
    if reentered:
        try:
            yield
        finally:
            with _guard:
                fd, depth = _held[key]
                _held[key] = (fd, depth - 1)
        return
    if postgres_url:
        from .postgres import advisory_partition_lock

        lock = advisory_partition_lock(
            postgres_url, partition_key, run_id, lambda holder: _busy(partition_key, holder), wait_s, on_wait
        )
        with lock:
            with _guard:
                _held[key] = (-1, 1)
            try:
                yield
            finally:
                with _guard:
                    del _held[key]
        return
    if fcntl is None:
        yield
        return
    partition_dir.mkdir(parents=True, exist_ok=True)
    path = partition_dir / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
    deadline = time.monotonic() + wait_s if math.isfinite(wait_s) else math.inf
    told = False
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if holder_of(partition_dir).endswith(f", run {run_id}"):
                    # The run's own launcher (or another of its steps' processes) holds it.
                    yield
                    return
                if time.monotonic() >= deadline:
                    raise _busy(partition_key, _named_holder(partition_dir)) from None
                if on_wait is not None and not told:
                    told = True
                    on_wait(_named_holder(partition_dir))
                time.sleep(0.2)
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()} on host {socket.gethostname()}, run {run_id}".encode(), 0)
        except OSError as exc:  # a full disk: name the file (errors.storage_failure says "disk full writing …")
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
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
