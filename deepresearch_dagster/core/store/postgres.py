"""A team deployment's Postgres (docs/deployment.md): reachability in one line, and the partition
lock that works across hosts.

Dagster's own storage on Postgres is ``dagster-postgres`` (``launcher.instance_yaml``); this
module holds what the project itself asks of the server. ``psycopg2`` is imported only when a
Postgres URL is configured, so the embedded default never loads it.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

from ..errors import ConfigError

CONNECT_TIMEOUT_S = 5


def dsn(url: str) -> str:
    """The libpq form of a SQLAlchemy URL (``postgresql+psycopg2://`` -> ``postgresql://``)."""
    scheme, _, rest = url.partition("://")
    return f"postgresql://{rest}" if scheme.startswith("postgres") else url


def where(url: str) -> str:
    """``host:port/database`` of ``url``, without its user and password (for messages)."""
    try:
        parts = urlsplit(dsn(url))
        return f"{parts.hostname or 'localhost'}:{parts.port or 5432}{parts.path or ''}"
    except ValueError:
        return "the configured server"


def connect(url: str, application_name: str = "deepresearch") -> Any:
    """A psycopg2 connection (autocommit), or :class:`ConfigError` naming the server and the fix:
    an unreachable Postgres is a configuration to fix, not a traceback."""
    import psycopg2

    try:
        conn = psycopg2.connect(dsn(url), connect_timeout=CONNECT_TIMEOUT_S, application_name=application_name[:63])
    except psycopg2.Error as exc:
        detail = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise ConfigError(
            f"Postgres at {where(url)} cannot be reached ({detail}): start it, or fix DEEPRESEARCH_POSTGRES_URL "
            "(or postgres_url in the config file)"
        ) from None
    conn.autocommit = True
    return conn


def check_reachable(url: str) -> None:
    connect(url).close()


def lock_id(partition_key: str) -> int:
    """The advisory-lock key of a partition: a stable signed 64-bit hash (Postgres' bigint)."""
    digest = hashlib.sha256(f"deepresearch partition {partition_key}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def holder_name(run_id: str) -> str:
    """The lock holder's ``application_name``: its run and pid (Postgres keeps 63 characters)."""
    return f"dr run {run_id[:40]} pid {os.getpid()}"


def holder(conn: Any, key: int) -> tuple[str, str]:
    """Who holds the advisory lock ``key``: (``pid 123 on host 10.0.0.5, run <id>``, run id), from
    the holder's ``application_name`` and address; ("", "") when unknown."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT a.application_name, host(a.client_addr) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE l.locktype = 'advisory' AND l.granted "
            "AND ((l.classid::bigint << 32) | l.objid::bigint) = %s",
            (key,),
        )
        row = cur.fetchone()
    parts = (row[0] or "").split() if row else []
    if len(parts) != 5 or parts[:2] != ["dr", "run"]:
        return "", ""
    return f"pid {parts[4]} on host {row[1] or 'local socket'}, run {parts[2]}", parts[2]


@contextlib.contextmanager
def advisory_partition_lock(
    url: str,
    partition_key: str,
    run_id: str,
    busy: Callable[[str], Exception],
    wait_s: float = 0.0,
    on_wait: Callable[[str], None] | None = None,
) -> Iterator[None]:
    """Hold a session-level ``pg_advisory_lock`` for the partition on a connection of its own:
    the server releases it when the connection ends, so a killed run (or a lost host) never leaves
    it behind. The connection's ``application_name`` names the holder for the refusal's message;
    ``busy(holder)`` builds the exception raised when the wait runs out. A holder of the same run
    (the process that launched it, or another worker running one of its steps) lets it in: the
    lock keeps other runs out, not the run's own steps."""
    key = lock_id(partition_key)
    conn = connect(url, application_name=holder_name(run_id))
    deadline = time.monotonic() + wait_s if math.isfinite(wait_s) else math.inf
    told = False
    unnamed = 0
    try:
        while True:
            with conn.cursor() as cur:
                cur.execute("SELECT pg_try_advisory_lock(%s)", (key,))
                if cur.fetchone()[0]:
                    break
            held_by, held_by_run = holder(conn, key)
            if held_by_run and held_by_run == run_id[:40]:
                break
            if not held_by and unnamed < 3:
                # No holder found: most likely it let go between the two queries (another worker's
                # step of the same run ending as this one starts), so try again at once.
                unnamed += 1
                continue
            if time.monotonic() >= deadline:
                raise busy(held_by)
            if on_wait is not None and not told:
                told = True
                on_wait(held_by)
            time.sleep(0.2)
        yield
    finally:
        conn.close()  # ends the session: the server drops its advisory locks
