"""A Celery app of one slow task, with the project's recovery of a lost worker
(``celery_app.give_lost_steps_to_another_worker``), for tests/test_celery_worker_loss.py: its
workers run as ``celery -A tests.celery_probe worker``. Each execution appends the worker's name
to the Redis list ``runs:<token>``; only the first one sleeps."""

from __future__ import annotations

import os
import time

from celery import Celery

from deepresearch_dagster.celery_app import give_lost_steps_to_another_worker

BROKER = os.environ.get("PROBE_BROKER", "redis://127.0.0.1:1/0")
app = Celery("probe", broker=BROKER, backend=BROKER)
app.conf.worker_prefetch_multiplier = 1
give_lost_steps_to_another_worker(app, float(os.environ.get("PROBE_LOST_S", "2")))


@app.task(name="probe.slow")
def slow(seconds: float, token: str) -> str:
    import redis

    runs = redis.Redis.from_url(BROKER).rpush(f"runs:{token}", os.environ["PROBE_WORKER"])
    if runs == 1:
        time.sleep(seconds)
    return os.environ["PROBE_WORKER"]
