"""One run per partition: a second process is refused with who holds it; a killed holder frees it."""

from __future__ import annotations

import math
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deepresearch_dagster.core.store.partition_lock import LOCK_NAME, PartitionBusy, partition_lock

pytestmark = pytest.mark.skipif(os.name != "posix", reason="advisory locks are POSIX")

HOLDER = """
import sys, time
from pathlib import Path
from deepresearch_dagster.core.store.partition_lock import partition_lock
with partition_lock(Path(sys.argv[1]), "p", "run-other"):
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def _hold(folder: Path, seconds: float) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(folder), str(seconds)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_process_is_refused_naming_the_holder(tmp_path: Path):
    proc = _hold(tmp_path, 30)
    try:
        busy = rf"already running \(pid {proc.pid} on host {re.escape(socket.gethostname())}, run run-other\)"
        with pytest.raises(PartitionBusy, match=busy), partition_lock(tmp_path, "p", "run-me"):
            pass
    finally:
        proc.kill()
        proc.wait()


def test_a_killed_holder_leaves_no_stale_lock(tmp_path: Path):
    proc = _hold(tmp_path, 30)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    with partition_lock(tmp_path, "p", "run-me"):
        assert "run-me" in (tmp_path / LOCK_NAME).read_text()


def test_waiting_takes_the_lock_once_the_holder_finishes(tmp_path: Path):
    proc = _hold(tmp_path, 0.5)
    started = time.monotonic()
    told = []
    with partition_lock(tmp_path, "p", "run-me", wait_s=math.inf, on_wait=told.append):
        assert time.monotonic() - started < 15
    proc.wait()
    assert len(told) == 1 and f"pid {proc.pid} on host" in told[0]


def test_the_lock_is_reentrant_within_a_process(tmp_path: Path):
    with partition_lock(tmp_path, "p", "run-me"), partition_lock(tmp_path, "p", "run-me"):
        pass
    with partition_lock(tmp_path, "p", "run-again"):  # fully released after the outer block
        pass


def test_a_run_refused_before_the_holder_named_itself_still_names_it(tmp_path: Path):
    """Four runs of one question start at once: the holder takes the lock and then writes its name, so
    a run refused in between read an empty file and named nobody. It reads again until the name is there."""
    import fcntl
    import threading

    fd = os.open(tmp_path / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # taken, not yet named
    named = threading.Timer(0.3, lambda: os.pwrite(fd, b"pid 1 on host h, run run-first", 0))
    named.start()
    try:
        busy = r"already running \(pid 1 on host h, run run-first\)"
        with pytest.raises(PartitionBusy, match=busy), partition_lock(tmp_path, "p", "run-me"):
            pass
    finally:
        named.join()
        os.close(fd)
