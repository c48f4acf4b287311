"""A whole Celery worker lost (SIGKILL of its parent and its pool process, as a host that is
gone): the task it held goes to another worker by itself; a worker that is alive keeps its task
however long it runs (celery_app.give_lost_steps_to_another_worker). Real Redis, real workers
(tests/celery_probe.py); skipped, with the reason, where redis-server cannot be installed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from deepresearch_dagster import local_servers as servers

REPO = Path(__file__).resolve().parents[1]
LOST_S = 2.0


@pytest.fixture
def workers(tmp_path):
    reason = servers.unavailable_redis()
    if reason:
        pytest.skip(reason)
    with servers.redis() as url:
        started = {}
        for name in ("a", "b"):
            env = {**os.environ, "PROBE_BROKER": url, "PROBE_LOST_S": str(LOST_S), "PROBE_WORKER": name}
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
            (tmp_path / name).mkdir()
            argv = [str(Path(sys.executable).parent / "celery"), "-A", "tests.celery_probe", "worker", "-c", "1"]
            argv += ["-n", f"{name}@%h", "--without-heartbeat", "--without-mingle", "--without-gossip", "-l", "INFO"]
            with (tmp_path / name / "worker.log").open("w") as log:
                started[name] = subprocess.Popen(argv, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            for name, proc in started.items():
                servers.wait_ready(proc, tmp_path / name)
            yield url, started
        finally:
            for proc in started.values():
                servers.stop_worker(proc)


def _runs(url: str, token: str) -> list[str]:
    import redis

    return [r.decode() for r in redis.Redis.from_url(url).lrange(f"runs:{token}", 0, -1)]


def test_a_lost_worker_s_task_goes_to_another_and_a_live_one_keeps_its_own(workers):
    from tests.celery_probe import app

    url, procs = workers
    app.conf.broker_url = app.conf.result_backend = url

    # Alive: a task running 2.5 × the visibility timeout is never handed to the other worker.
    token = uuid.uuid4().hex
    ran_on = app.send_task("probe.slow", (2.5 * LOST_S, token)).get(timeout=60)
    assert _runs(url, token) == [ran_on]

    # Lost: the worker holding the task is SIGKILLed whole; nobody reports it, and the other
    # worker runs the task within about the timeout.
    token = uuid.uuid4().hex
    result = app.send_task("probe.slow", (600, token))
    deadline = time.monotonic() + 30
    while not _runs(url, token) and time.monotonic() < deadline:
        time.sleep(0.05)
    (first,) = _runs(url, token)
    lost = procs[first]
    for pid in [lost.pid, *servers.children(lost.pid)]:  # the parent first: it reports nothing
        os.kill(pid, signal.SIGKILL)
    killed_at = time.monotonic()
    other = result.get(timeout=60)
    assert other != first and _runs(url, token) == [first, other]
    assert time.monotonic() - killed_at < 4 * LOST_S + 10
