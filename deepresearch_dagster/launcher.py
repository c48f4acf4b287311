"""First use of a DAGSTER_HOME by several processes at once.

Dagster's SQLite instance storage creates its databases and stamps their alembic revision on
first open. Eight ``deepresearch run`` processes starting together on a fresh home can race
there ("Version table 'alembic_version' has more than one head present"). The first process
creates the storage under an exclusive file lock; the others wait, then find it ready.
"""

from __future__ import annotations

from pathlib import Path

STORAGE_READY = ".deepresearch_storage_ready"


def init_instance_storage(home: Path) -> None:
    marker = home / STORAGE_READY
    if marker.exists():
        return
    try:
        import fcntl
    except ImportError:  # no POSIX locks (Windows): keep Dagster's own behaviour
        return
    from dagster import DagsterInstance

    with (home / ".deepresearch_storage.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not marker.exists():
                # Opening the instance creates and migrates its storage; nothing else is needed.
                DagsterInstance.from_config(str(home)).dispose()
                marker.touch()
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
