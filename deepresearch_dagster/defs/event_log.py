"""One SQLite connection per event database for the length of an in-process run.

Dagster's SQLite event log (the embedded default) opens every event's write on a new engine and a
new connection and closes it after the commit (``SqliteEventLogStorage._connect``): about 85
events per research, each paying an open, a schema read, the commit's fsync and, because it was
the file's last connection, a WAL checkpoint (another fsync) on close — 15-30 ms per event on
this machine's disk, 1.3-2.5 s per research, all of it between the research's model calls.

While :func:`held_event_log` is active, the storage keeps one connection per database it writes
(the run's own and the index) and reuses it, and remembers which of its tables exist (Dagster
asks about 60 times per run, each time on a new engine). A new run's database is a copy of an
empty one made earlier in the process, not created again through alembic (0.2-0.5 s).

Every event is still its own transaction, committed before the run goes on. The connection uses
``synchronous=NORMAL``, SQLite's recommended setting in WAL mode: the commit is written to the
WAL but not fsync'd; the WAL is fsync'd at each checkpoint (SQLite's auto-checkpoint, and when
the connection closes at the run's end). A killed process loses no event (they are in the
operating system's cache); a power cut may lose a run's last events, never corrupt the file (the
run then shows as unfinished, and the launcher's stale-run reconciliation marks it failed, as for
a killed one). The project's own records (raw outputs, lineage) keep their fsyncs. WAL mode lets
other processes (the webserver, the daemon, another run) read and write the same files while a
connection is open: an idle connection holds no lock. Other storages (Postgres, a consolidated
SQLite log) are left as they are.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from dagster import DagsterInstance
from dagster._core.storage.event_log.sqlite.sqlite_event_log import INDEX_SHARD_NAME, SqliteEventLogStorage
from dagster._core.storage.sqlite import SQLITE_BUSY_TIMEOUT_SECONDS
from sqlalchemy import create_engine, event
from sqlalchemy.pool import NullPool, StaticPool

_LOCK = threading.Lock()
# storage id → [runs holding it, {shard: engine}]
_HELD: dict[int, list[Any]] = {}


def _wal_normal(dbapi_connection: Any, _record: Any) -> None:
    # SQLite's recommended setting in WAL mode: a commit is not fsync'd, the WAL is at each
    # checkpoint. A killed process loses nothing (the commit is in the OS's cache); only a power
    # cut can lose the last events, never corrupt the file (module docstring).
    dbapi_connection.execute("PRAGMA synchronous=NORMAL")


def _held_connect(storage: SqliteEventLogStorage, engines: dict[str, Any]) -> Any:
    @contextmanager
    def connect(shard: str) -> Iterator[Any]:
        with storage._db_lock:  # as Dagster's own: one statement at a time per storage
            engine = engines.get(shard)
            if engine is None:
                if shard not in storage._initialized_dbs:
                    _init_shard(storage, shard)
                    storage._initialized_dbs.add(shard)
                engine = engines[shard] = create_engine(
                    storage.conn_string_for_shard(shard),
                    poolclass=StaticPool,  # the one connection, reused (under _db_lock)
                    connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS, "check_same_thread": False},
                )
                event.listen(engine, "connect", _wal_normal)
            with engine.connect() as conn, conn.begin():
                yield conn

    return connect


# A new run's own event database as Dagster creates it (tables, WAL mode, alembic stamp; no rows):
# its bytes, kept from the first run of this process. Creating one takes Dagster 0.3-0.5 s (alembic
# loads every migration script to find the head revision), at the start of every run.
_EMPTY_SHARD: list[bytes] = []


def _create_only(path: Path, data: bytes) -> None:
    """``path`` with ``data``, complete or not at all; FileExistsError if another process made it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.link(tmp, path)  # refuses an existing file, unlike a rename
    finally:
        tmp.unlink(missing_ok=True)


def _init_shard(storage: SqliteEventLogStorage, shard: str) -> None:
    """Create ``shard``'s database: a copy of an empty one made earlier in this process when there
    is one (never over an existing file), else Dagster's own way (on a throwaway engine)."""
    path = Path(storage.path_for_shard(shard))
    if _EMPTY_SHARD and shard != INDEX_SHARD_NAME and not path.exists():
        with suppress(FileExistsError):
            _create_only(path, _EMPTY_SHARD[0])
            return
    existed = path.exists()
    storage._initdb(
        create_engine(
            storage.conn_string_for_shard(shard),
            poolclass=NullPool,
            connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS},
        )
    )
    wal = path.with_name(path.name + "-wal")
    if shard != INDEX_SHARD_NAME and not existed and not (wal.exists() and wal.stat().st_size):
        # Just created and checkpointed (its only connection closed), before any event: empty.
        _EMPTY_SHARD[:] = [path.read_bytes()]


def _remembered(has_table: Any) -> Any:
    """``has_table`` answered once per table for the run: Dagster asks it about 60 times per run
    (whether the partitions and asset-check tables exist), each time on a new engine and connection.
    Tables appear only when the instance is migrated, which a run does not do."""
    known: dict[str, bool] = {}

    def remembered(table_name: str) -> bool:
        if table_name not in known:
            known[table_name] = has_table(table_name)
        return known[table_name]

    return remembered


# The private parts of Dagster's SqliteEventLogStorage this module relies on.
_INTERNALS = (
    "_connect",
    "_db_lock",
    "_initialized_dbs",
    "_initdb",
    "conn_string_for_shard",
    "path_for_shard",
    "has_table",
)


@contextmanager
def held_event_log(instance: DagsterInstance) -> Iterator[None]:
    """Keep the event log's SQLite connections open while the block runs (module docstring).
    Nested and concurrent blocks on one instance share them; the last one out closes them."""
    storage = instance.event_log_storage
    if type(storage) is not SqliteEventLogStorage or not all(hasattr(storage, name) for name in _INTERNALS):
        # Another storage, or a Dagster release whose SQLite storage no longer has the private
        # parts replaced here: Dagster's own behaviour, only slower (tests/test_event_log.py fails).
        yield
        return
    key = id(storage)
    with _LOCK:
        entry = _HELD.get(key)
        if entry is None:
            entry = _HELD[key] = [0, {}]
            storage._connect = _held_connect(storage, entry[1])  # type: ignore[method-assign]
            storage.has_table = _remembered(storage.has_table)  # type: ignore[method-assign]
        entry[0] += 1
    try:
        yield
    finally:
        with _LOCK:
            entry[0] -= 1
            if entry[0] == 0:
                del _HELD[key]
                with storage._db_lock:
                    del storage._connect, storage.has_table  # Dagster's own methods again
                    for engine in entry[1].values():
                        engine.dispose()  # closes the connection: SQLite checkpoints the WAL
