"""DuckDB lineage: requests, runs, plans, tool calls, LLM calls, context, compressions.

The schema (tables, migrations, views) is :mod:`.schema`; every query of the lineage database
is a named method here (or in :mod:`.audit`), so callers never write SQL.

Connections. DuckDB admits one process at a time on a file, and a connect (catalog load) plus
a close (checkpoint) costs 20-40 ms, which used to be paid by every lineage statement. Now:

* Each process holds at most one connection per database file (:class:`_Lease`), shared by
  every :class:`LineageStore` on that file and opened on first use.
* It stays open only inside a :meth:`LineageStore.session`: a ``pipeline.run_research`` run, a
  Dagster op, a ``launcher.run_job`` run. Outside one, a call connects and closes as before, so
  the file is free again as soon as the call returns.
* Inside a session it is let go after the current statement when another process waits for
  the file (within ``MAX_HOLD_S``: the lease's thread looks every ``_POLL_S``, and every
  statement's end looks too) and at the session's end; while nobody waits it stays open for
  the whole session, so a research pays one connect and one close (each 20-40 ms, which a
  let-go every few seconds used to cost again on the research's path). While the research
  waits on a call the lease's thread checkpoints the committed rows into the file (at most
  every ``CHECKPOINT_EVERY_S``), so the close at the end has little left to write. At a
  session's start the lease's thread opens the file while the caller sets up, so its first
  statement does not pay the connect.
* Processes take turns through ``<db>.lock`` (an flock held while the connection is open); a
  waiter holds a shared flock on ``<db>.wait`` so the holder sees it and lets go. A process
  outside this protocol (the duckdb CLI) gets the file between sessions, with the usual connect
  retries. Without POSIX locks (Windows) every call opens a short connection, as before.
* Inside a session the rows of the frequent calls (LLM calls, tool calls, their summaries and
  caches: :meth:`LineageStore._queued`) are queued in memory and written by the lease's thread
  while the research waits on a model or a tool (:meth:`LineageStore.waiting`) or pauses
  ``COMMIT_IDLE_S``, so the statements overlap its waits on models and pages instead of
  following them or holding up its work (DuckDB lets go of the GIL while it executes); a
  read of a table with queued rows, any other write, the end of the session and letting the
  connection go write them first, in order. A queued row is on disk at the same moments it was
  when written at once: the next commit, below.
* Inside a session the statements share one transaction, committed after ``COMMIT_EVERY_S``,
  at the first pause of ``COMMIT_IDLE_S`` (by the lease's thread, while the research waits on a
  model or a page) and always before the connection is let go: no other process can read the
  file in between, and this process reads its own writes. Each store method is atomic: if one
  fails, the transaction is rolled back and the earlier methods' writes are committed again
  without it (a queued one's error is raised by the process's next lineage call). A process
  killed outright (SIGKILL) loses at most the last ``COMMIT_EVERY_S`` of rows; the raw files,
  always written before their rows, stay on disk.
* Lineage in Postgres (a team deployment, :mod:`.lineage_postgres`): the same queue and grouped
  transactions (:class:`_PostgresLease`) on the process's one connection to the database, which
  is never let go for other processes (Postgres serialises writers itself); outside a session
  every statement commits. A COMMIT whose answer the network lost is checked against the marker
  written in its transaction before its statements are written again.
"""

from __future__ import annotations

import atexit
import importlib.util
import json
import os
import re
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

import duckdb

from ..errors import ConfigError, redact, storage_failure
from ..models import PlanStep, ResearchPlan, SummaryRecord, ToolCallRecord
from .lineage_postgres import PostgresLineage, is_postgres_url
from .schema import migrate

# DuckDB's Python client looks pandas up for every bound parameter and, where pandas is not
# installed, runs the whole import search again each time (twice per parameter, ~40 µs each: a
# tenth of a lineage statement). Python's own marker for a module known to be absent (None in
# sys.modules) makes that lookup fail at once; where pandas is installed nothing changes.
if importlib.util.find_spec("pandas") is None:
    sys.modules.setdefault("pandas", None)  # type: ignore[arg-type]

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no shared connection
    fcntl = None  # type: ignore[assignment]

Connect = Callable[[], AbstractContextManager[duckdb.DuckDBPyConnection]]

# Inside a session the held connection is let go only when another process waits for the file
# (the lock protocol above): that process gets it within this bound (tests).
MAX_HOLD_S = 2.0
# Inside a session, statements are grouped into one transaction, committed after this long or
# as soon as the process pauses this long between statements (by the lease's thread, while the
# research waits for a model or a page), and before the connection is let go.
COMMIT_EVERY_S = 0.5
COMMIT_IDLE_S = 0.02
# A file held for a whole session: while the research waits on a call, the lease's thread
# checkpoints what was committed (at most this often), so the close at the session's end, on
# the research's path, has little left to write into the file.
CHECKPOINT_EVERY_S = 1.0
_POLL_S = 0.01
# Waiting for the lock file: poll interval and the give-up time.
_WAIT_POLL_S = (0.001, 0.005)
_WAIT_TIMEOUT_S = 600.0


def _open_retrying(path: str | Path) -> duckdb.DuckDBPyConnection:
    """``duckdb.connect``, retried briefly while a process outside the lock protocol holds the file."""
    delay = 0.01
    deadline = time.monotonic() + 60.0
    while True:
        try:
            return duckdb.connect(str(path))
        except duckdb.IOException as exc:
            # Only a lock held by another process is worth waiting for: a corrupt, truncated or
            # unwritable file, or a folder, fails the same way every time (errors.storage_failure
            # names it).
            if not _lock_conflict(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 1.5, 0.5)


def _lock_conflict(exc: Exception) -> bool:
    """DuckDB's "Could not set lock on file …: Conflicting lock is held in … (PID …)"."""
    text = str(exc)
    return storage_failure(exc) is None and ("Conflicting lock" in text or "Could not set lock" in text)


# The lineage database a Dagster resource names when it is the configured Postgres one: the URL
# (and its password) stays out of the resource's config, which Dagster shows and stores.
LINEAGE_FROM_CONFIG = "config:lineage_url"


def lineage_target(path: str | Path) -> str | Path:
    """A DuckDB file's path, or a Postgres URL (:data:`LINEAGE_FROM_CONFIG` resolved)."""
    if path == LINEAGE_FROM_CONFIG:
        from ..config import load_settings

        url = load_settings().lineage_postgres
        if not url:
            raise ConfigError("the lineage database is configured as Postgres but DEEPRESEARCH_LINEAGE_URL is not set")
        return url
    return path


def check_database_file(path: str | Path) -> None:
    """Before anything is registered: the lineage database path is a DuckDB file that opens (it
    is created, with its tables, when missing: a full disk shows here). A folder is a setting to fix
    (:class:`~..errors.ConfigError`); a corrupt, truncated or unwritable file raises
    :class:`~..errors.StorageError`; both are one line, at once."""
    from ..errors import ConfigError

    if is_postgres_url(lineage_target(path)):
        LineageStore.at(path).query("SELECT 1")  # unreachable: one ConfigError line naming it
        return
    target = Path(path)
    if target.is_dir():
        raise ConfigError(
            f"the lineage database path {target} is a folder, not a DuckDB file: set DEEPRESEARCH_DUCKDB to a file "
            "path (for example <folder>/lineage.duckdb)"
        )
    try:
        LineageStore.at(target).query("SELECT 1")
    except Exception as exc:
        storage = storage_failure(exc)
        if storage is None:
            raise
        raise storage from exc


def _take_turn(lock_file: Any, wait_file: Any, path: str | Path) -> None:
    """Take ``<db>.lock`` exclusively; while it is held elsewhere, hold ``<db>.wait`` shared so
    the holder sees a waiter and lets go (module docstring)."""
    try:
        fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return
    except BlockingIOError:
        pass
    fcntl.flock(wait_file, fcntl.LOCK_SH)  # the holder sees a waiter and lets go
    try:
        deadline = time.monotonic() + _WAIT_TIMEOUT_S
        delay = _WAIT_POLL_S[0]
        while True:
            try:
                fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise duckdb.IOException(f"{path} stayed locked by another process") from None
                time.sleep(delay)
                delay = min(delay * 2, _WAIT_POLL_S[1])
    finally:
        fcntl.flock(wait_file, fcntl.LOCK_UN)


@contextmanager
def _turn(path: str | Path) -> Iterator[None]:
    """This process's turn on the file for one connection (the lock protocol), where it can be
    taken: a run that holds the file lets go for it within ``MAX_HOLD_S``."""
    files: list[Any] = []
    try:
        if fcntl is not None:  # Windows: connect retries only
            files = [open(f"{path}{suffix}", "a+b") for suffix in (".lock", ".wait")]  # noqa: SIM115
    except OSError:  # no lock files next to a read-only database: connect retries only
        for file in files:
            file.close()
        files = []
    if not files:
        yield
        return
    lock_file, wait_file = files
    try:
        _take_turn(lock_file, wait_file, path)
        try:
            yield
        finally:
            fcntl.flock(lock_file, fcntl.LOCK_UN)
    finally:
        lock_file.close()
        wait_file.close()


def path_connect(path: str | Path) -> Connect:
    """Connection factory for plain-Python use (the CLI's read commands): takes its turn through
    the lock protocol, and retries briefly while a process outside it holds the file."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)

    @contextmanager
    def connect() -> Iterator[duckdb.DuckDBPyConnection]:
        with _turn(path):
            conn = _open_retrying(path)
            try:
                yield conn
            finally:
                conn.close()

    return connect


_REPLACING = re.compile(r"^\s*INSERT\s+OR\s+REPLACE\s+INTO\b", re.IGNORECASE)
_WRITTEN = re.compile(r"^\s*(?:INSERT(?:\s+OR\s+\w+)?\s+INTO|UPDATE|DELETE\s+FROM)\s+(\w+)", re.IGNORECASE)


class _Unit:
    """The statements of one store method, queued inside a session (:meth:`_Lease.defer`), and
    the tables they write (``*``: one the pattern does not name, which any read waits for)."""

    __slots__ = ("statements", "tables", "unsure")

    def __init__(self) -> None:
        self.statements: list[tuple[str, list[Any]]] = []
        self.tables: set[str] = set()
        # The commit marker of a transaction whose COMMIT lost its answer (:class:`_PostgresLease`).
        self.unsure: str | None = None

    def execute(self, sql: str, parameters: Any = None) -> None:
        self.statements.append((sql, list(parameters or [])))
        match = _WRITTEN.match(sql)
        self.tables.add(match.group(1).lower() if match else "*")

    def writes(self, tables: frozenset[str]) -> bool:
        return "*" in self.tables or not self.tables.isdisjoint(tables)


class _Journaled:
    """The shared connection inside a grouped transaction: keeps the writes of the open
    transaction so that a unit of work that fails can be undone alone (:meth:`_Lease.use`)."""

    __slots__ = ("_conn", "_journal")

    def __init__(self, conn: duckdb.DuckDBPyConnection, journal: list[tuple[str, list[Any]]]) -> None:
        self._conn = conn
        self._journal = journal

    def execute(self, sql: str, parameters: Any = None) -> duckdb.DuckDBPyConnection:
        params = list(parameters or [])
        if not sql.lstrip()[:6].upper().startswith(("SELECT", "WITH")):
            self._journal.append((sql, params))
        return self._conn.execute(sql, params)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


class _Lease:
    """This process's connection to one database file (see the module docstring)."""

    _all: ClassVar[dict[tuple[int, str], _Lease]] = {}
    _all_lock: ClassVar[threading.Lock] = threading.Lock()

    # Whether the connection is let go when another process waits (a file admits one process at
    # a time; a Postgres server does not need it).
    lets_go = True

    def __init__(self, path: str) -> None:
        self._init_state(path, threading.RLock())
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._lock_file = open(f"{path}.lock", "a+b")  # noqa: SIM115 - held for the process
        self._wait_file = open(f"{path}.wait", "a+b")  # noqa: SIM115

    def _init_state(self, path: str, lock: threading.RLock) -> None:
        self.path = path
        self.lock = lock
        self.conn: duckdb.DuckDBPyConnection | None = None
        self.in_use = 0
        self.sessions = 0
        self.opened_at = self.last_used = 0.0
        self.yield_next = False  # let a waiting process in before opening again
        self.opens = 0
        self.txn_open = False  # a grouped transaction (inside a session)
        self.txn_started = 0.0
        self.unchecked = False  # writes committed since the last checkpoint (CHECKPOINT_EVERY_S)
        self.checkpointed_at = 0.0
        self.journal: list[tuple[str, list[Any]]] = []
        # Units queued inside a session (defer), and the error of a unit the lease's thread could
        # not write (raised at this process's next lineage call).
        self.queue: list[_Unit] = []
        self.queue_lock = threading.Lock()
        self.failure: BaseException | None = None
        self.retry_at = 0.0  # the lease's thread tries queued units again from then
        # When the lease's thread opens the file ahead of the session's first statement.
        self.reopen_at: float | None = None
        # Compressions this process wrote or read (content-addressed: a key's row never changes),
        # so a cache hit does not wait for the connection, a connect or the queue.
        self.compressions: dict[str, tuple[str, bool, int, int]] = {}
        # Blocks in which a thread of this process makes no lineage statement (a model call, a
        # tool fan-out: LineageStore.waiting): the lease's thread does its slow work then.
        self.waiting = 0
        self._reaper: threading.Thread | None = None
        self._reaper_lock = threading.Lock()

    @classmethod
    def get(cls, path: str) -> _Lease:
        key = (os.getpid(), path)  # a forked child never touches its parent's connection
        with cls._all_lock:
            lease = cls._all.get(key)
            if lease is None:
                lease = cls._all[key] = cls(path)
            return lease

    @contextmanager
    def use(self, grouped: bool = True, reads: frozenset[str] | None = None) -> Iterator[Any]:
        """The connection for one unit of work (one store method). Inside a session the unit
        joins the grouped transaction and is atomic: if it fails, the transaction is rolled
        back and the earlier units' writes are replayed and committed without it. Queued units
        are written first: all of them, or for a read of the tables ``reads`` only those up to
        the last one that writes one of them (the order of the writes is kept)."""
        with self.lock:
            self._raise_failure()
            self._flush(reads)
            if self.conn is None:
                self._open()
            assert self.conn is not None
            if not grouped:
                self._commit()
            elif self.sessions and not self.txn_open:
                self._start_transaction()
            mark = len(self.journal)
            self.in_use += 1
            try:
                yield _Journaled(self.conn, self.journal) if self.txn_open else self.conn
            except BaseException as exc:
                if self.txn_open:
                    self._undo(mark)
                self._lost(exc)
                raise
            finally:
                self.in_use -= 1
                self.last_used = time.monotonic()
                if self.in_use == 0:
                    if self.sessions == 0 or self._others_waiting():
                        self._close()
                    elif self.txn_open and self.last_used - self.txn_started >= COMMIT_EVERY_S:
                        self._commit()

    def defer(self, unit: _Unit) -> None:
        """Queue a unit of writes (inside a session): the lease's thread writes it within
        ``_POLL_S`` of the research's next wait or pause, or the next statement that needs it
        does first. Takes no connection lock, so the research never waits here for a write in
        progress."""
        self._raise_failure()
        with self.queue_lock:
            self.queue.append(unit)
            self.last_used = time.monotonic()
        self._start_reaper()

    def _flush(self, reads: frozenset[str] | None = None, again: bool = True) -> None:
        """Write queued units (all, or up to the last that writes one of ``reads``) into the
        grouped transaction; the caller holds ``self.lock``. A unit that fails is undone alone
        (as in :meth:`use`), the ones after it stay queued, and its error is raised. Where the
        server went away (Postgres), everything not committed is queued again and written once
        more on a new connection (``again``)."""
        with self.queue_lock:
            if reads is None:
                n = len(self.queue)
            else:
                n = max((i + 1 for i, u in enumerate(self.queue) if u.writes(reads)), default=0)
            units, self.queue[:n] = self.queue[:n], []
        if not units:
            return
        try:
            self._begin()
        except BaseException as exc:
            with self.queue_lock:
                self.queue[:0] = units  # nothing written: all of them wait
            self._lost(exc)  # Postgres: the transaction's earlier units go back before them
            if self._gone(exc) and again:
                return self._flush(reads, again=False)  # once, on a new connection
            raise
        for i, unit in enumerate(units):
            mark = len(self.journal)
            try:
                self._write_unit(unit)
            except BaseException as exc:
                if self._gone(exc):
                    with self.queue_lock:
                        self.queue[:0] = units[i:]  # this unit and the rest
                    self._lost(exc)  # the transaction's earlier units go back before them
                    if again:
                        return self._flush(reads, again=False)
                    raise
                with self.queue_lock:
                    self.queue[:0] = units[i + 1 :]
                self._undo(mark)
                if again and self._raced(exc, unit):
                    with self.queue_lock:
                        self.queue.insert(0, unit)
                    return self._flush(reads, again=False)  # once: the row it replaces is there now
                raise
        return None

    def _begin(self) -> None:
        """The open connection inside the grouped transaction."""
        if self.conn is None:
            self._open()
        assert self.conn is not None
        if not self.txn_open:
            self._start_transaction()

    def _start_transaction(self) -> None:
        """BEGIN the grouped transaction. A Ctrl-C can land between a statement and this lease's
        bookkeeping (DuckDB's transaction open or aborted, ``txn_open`` already false): what
        that transaction held was never committed and cannot be, so it is rolled back first
        instead of failing every later statement."""
        assert self.conn is not None
        try:
            self.conn.execute("BEGIN")
        except duckdb.TransactionException:
            self.conn.execute("ROLLBACK")
            self.conn.execute("BEGIN")
        self.txn_open, self.txn_started = True, time.monotonic()
        self.journal.clear()

    def _write_unit(self, unit: _Unit) -> None:
        assert self.conn is not None
        conn = _Journaled(self.conn, self.journal)
        for sql, params in unit.statements:
            conn.execute(sql, params)

    def _lost(self, exc: BaseException) -> None:
        """A statement failed: where the server went away (Postgres), the open transaction's
        units go back to the front of the queue and the next statement connects again."""

    def _transient(self, exc: BaseException) -> bool:
        """A failure the lease's thread retries (the units stay queued) instead of reporting."""
        return False

    def _gone(self, exc: BaseException) -> bool:
        """The server went away (Postgres; a file does not): nothing uncommitted is lost."""
        return False

    def _raced(self, exc: BaseException, unit: _Unit) -> bool:
        """Another writer added the row the unit's INSERT OR REPLACE was about to add (Postgres; a
        file has one writer at a time): written again, the unit replaces it."""
        return False

    def _raise_failure(self) -> None:
        if self.failure is not None:
            failure, self.failure = self.failure, None
            raise failure

    def _commit(self) -> None:
        if not self.txn_open or self.conn is None:
            return
        try:
            self._send_commit()
        except BaseException:
            self._undo(len(self.journal))
            raise
        self.txn_open = False
        self.unchecked = self.unchecked or bool(self.journal)
        self.journal.clear()

    def _send_commit(self) -> None:
        assert self.conn is not None
        self.conn.execute("COMMIT")

    def _undo(self, mark: int) -> None:
        """Roll the grouped transaction back and commit again what came before ``mark``."""
        assert self.conn is not None
        keep = self.journal[:mark]
        self.compressions.clear()  # a queued compression may be among what is rolled back
        self.txn_open = False
        self.journal.clear()
        with suppress(duckdb.Error):
            self.conn.execute("ROLLBACK")
        if keep:
            self.conn.execute("BEGIN")
            try:
                for sql, params in keep:
                    self.conn.execute(sql, params)
                self.conn.execute("COMMIT")
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise

    @contextmanager
    def session(self) -> Iterator[None]:
        with self.queue_lock:  # not self.lock: the lease's thread may be writing or closing
            self.sessions += 1
            first = self.sessions == 1
        if first and self.lets_go and self.conn is None:
            # The lease's thread opens the file (a connect is 20-200 ms) while the caller sets up
            # the run (Dagster's run start, the context): its first statement finds it open.
            self.reopen_at = time.monotonic()
            self._start_reaper()
        try:
            yield
        finally:
            with self.queue_lock:
                self.sessions -= 1
                last = self.sessions == 0
            if last:  # an inner session's end (a tool call's) does not wait for the lease's thread
                with self.lock:
                    if self.sessions == 0:
                        self.compressions.clear()  # kept for a run, not for the process's life
                    if self.sessions == 0 and self.in_use == 0:
                        self._close()
                        self._raise_failure()

    def _open(self) -> None:
        if self.yield_next:
            self.yield_next = False
            time.sleep(2 * _WAIT_POLL_S[1])  # a waiter polls at least this often
        self._lock_exclusive()
        try:
            self.conn = _open_retrying(self.path)
        except BaseException:
            fcntl.flock(self._lock_file, fcntl.LOCK_UN)
            raise
        self.opens += 1
        self.opened_at = self.last_used = time.monotonic()
        self.reopen_at = None
        if self.sessions:
            self._start_reaper()

    def _start_reaper(self) -> None:
        with self._reaper_lock:
            if self._reaper is None or not self._reaper.is_alive():
                self._reaper = threading.Thread(target=self._reap, name="lineage-lease", daemon=True)
                self._reaper.start()

    def _lock_exclusive(self) -> None:
        _take_turn(self._lock_file, self._wait_file, self.path)

    def _others_waiting(self) -> bool:
        try:
            fcntl.flock(self._wait_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(self._wait_file, fcntl.LOCK_UN)
        return False

    def _close(self) -> None:
        try:
            self._flush()
            self._commit()
        finally:
            if self.conn is not None:
                self._disconnect()

    def _disconnect(self) -> None:
        assert self.conn is not None
        conn, self.conn = self.conn, None
        self.txn_open = False
        try:
            conn.close()
        finally:
            fcntl.flock(self._lock_file, fcntl.LOCK_UN)
        if self.sessions and self._others_waiting():
            self.yield_next = True

    def _reap(self) -> None:
        """Write the queued units while the process waits, commit, and let the connection go
        when another process waits for the file or the sessions have ended (see COMMIT_IDLE_S,
        MAX_HOLD_S)."""
        while True:
            time.sleep(_POLL_S)
            if not self.lock.acquire(blocking=False):
                continue  # a statement is running
            try:
                if self.in_use:
                    continue
                now = time.monotonic()
                # Queued units are written while the research waits (a model call, a tool
                # fan-out) or pauses, not while it works between two statements of its own.
                pausing = self.waiting > 0 or now - self.last_used >= COMMIT_IDLE_S
                if self.queue and now >= self.retry_at and pausing:
                    try:
                        self._flush()
                    except Exception as exc:
                        if self._transient(exc):  # the server is away: the units stay queued
                            self.retry_at = now + 0.5
                        else:  # raised by this process's next lineage call
                            self.failure = self.failure or exc
                        continue
                if self.conn is None:
                    if self.reopen_at is not None and now >= self.reopen_at:
                        self.reopen_at = None
                        if self.sessions and not self._others_waiting():
                            self._open()  # off the research's path: it is waiting on a call
                            continue
                    if self.reopen_at is None and self._retire():
                        return
                    continue
                if self.sessions == 0 or (self.lets_go and self._others_waiting()):
                    self._close()
                    if self._retire():
                        return
                if self.txn_open and (
                    self.waiting > 0
                    or now - self.last_used >= COMMIT_IDLE_S
                    or now - self.txn_started >= COMMIT_EVERY_S
                ):
                    self._commit()  # while the research waits: off its critical path
                if (
                    self.lets_go
                    and self.conn is not None
                    and self.unchecked
                    and self.waiting > 0
                    and not self.txn_open
                    and now - self.checkpointed_at >= CHECKPOINT_EVERY_S
                ):
                    self.conn.execute("CHECKPOINT")
                    self.unchecked, self.checkpointed_at = False, time.monotonic()
            except Exception:  # the next statement reports a broken connection
                continue
            finally:
                self.lock.release()

    def _retire(self) -> bool:
        """The lease's thread ends when nothing is queued (a unit queued meanwhile starts a new one)."""
        with self._reaper_lock:
            if self.queue:
                return False
            self._reaper = None
            return True

    @classmethod
    def close_all(cls) -> None:
        for (pid, _), lease in list(cls._all.items()):
            if pid == os.getpid():
                with lease.lock:
                    lease._close()


atexit.register(_Lease.close_all)


class _PostgresLease(_Lease):
    """Lineage in Postgres (a team deployment): the same queue and grouped transactions as a
    file (a stage's rows committed together at its pauses, not one commit per statement), on
    the process's one connection to the database (:class:`.lineage_postgres.PostgresLineage`,
    whose lock is this lease's), which is never let go: Postgres serialises writers itself."""

    lets_go = False

    def __init__(self, target: PostgresLineage) -> None:
        self._init_state(target.url, target.lock)
        self.target = target
        # A COMMIT is answered over the network: the server may apply it and go away before the
        # answer arrives. Each transaction writes this process's marker (``lineage_commits``) with a
        # new token; after a lost answer the marker says whether to write the statements again.
        self.writer = uuid.uuid4().hex
        self.unsure: str | None = None  # the token of the COMMIT whose answer was lost

    @classmethod
    def of(cls, target: PostgresLineage) -> _PostgresLease:
        key = (os.getpid(), f"postgres:{id(target)}")
        with cls._all_lock:
            lease = cls._all.get(key)
            if not isinstance(lease, _PostgresLease) or lease.target is not target:
                lease = cls._all[key] = cls(target)
            return lease

    def _open(self) -> None:
        self.conn = self.target.connection()
        self.opens += 1
        self.opened_at = self.last_used = time.monotonic()
        if self.sessions:
            self._start_reaper()

    def _disconnect(self) -> None:
        self.conn, self.txn_open = None, False  # the process's connection stays open

    def _others_waiting(self) -> bool:
        return False

    def _send_commit(self) -> None:
        assert self.conn is not None
        token = uuid.uuid4().hex
        self.conn.execute("INSERT OR REPLACE INTO lineage_commits (writer, token) VALUES (?, ?)", [self.writer, token])
        self.unsure = token
        self.conn.execute("COMMIT")
        self.unsure = None

    def _committed(self, token: str) -> bool:
        assert self.conn is not None
        found = self.conn.execute(
            "SELECT count(*) FROM lineage_commits WHERE writer = ? AND token = ?", [self.writer, token]
        )
        return bool(found.fetchone()[0])

    def _undo(self, mark: int) -> None:
        keep = self.journal[:mark]
        try:
            if self.unsure is not None:
                with suppress(duckdb.Error):
                    self.conn.execute("ROLLBACK")
                if self._committed(self.unsure):  # it went through: nothing to undo or write again
                    self.unsure, self.txn_open = None, False
                    self.journal.clear()
                    return
                self.unsure = None
            super()._undo(mark)
        except (duckdb.ConnectionException, duckdb.IOException) as exc:  # they wait for the next connection
            self.journal[:] = keep
            self._lost(exc)

    def _write_unit(self, unit: _Unit) -> None:
        if unit.unsure is not None:
            if self._committed(unit.unsure):
                return  # its COMMIT went through before the server went away
            unit.unsure = None
        super()._write_unit(unit)

    def _gone(self, exc: BaseException) -> bool:
        # The extension says "Unable to connect" (IOException) when a commit finds the server gone.
        return isinstance(exc, duckdb.ConnectionException | duckdb.IOException)

    def _lost(self, exc: BaseException) -> None:
        if not self._gone(exc):
            return
        if self.journal:
            unit = _Unit()
            for sql, params in self.journal:
                unit.execute(sql, params)
            unit.unsure, self.unsure = self.unsure, None
            if unit.unsure is not None:
                unit.tables.add("*")  # written (or found committed) before any later commit moves the marker
            with self.queue_lock:
                self.queue.insert(0, unit)
        self.journal.clear()
        self.target.close()  # a restarted server: the next statement connects again
        self.conn, self.txn_open = None, False

    def _transient(self, exc: BaseException) -> bool:
        return self._gone(exc) or isinstance(exc, ConfigError)

    def _raced(self, exc: BaseException, unit: _Unit) -> bool:
        # Two hosts caching the same tool call or compression at once (the shared caches): the
        # extension writes INSERT OR REPLACE as a COPY of the rows it did not find, and the second
        # COPY, waiting on the first writer's transaction, then meets its row (Postgres's message).
        return (
            isinstance(exc, duckdb.Error)
            and "duplicate key value violates unique constraint" in str(exc)
            and all(_REPLACING.match(sql) for sql, _ in unit.statements)
        )


def _insert_rows(conn: duckdb.DuckDBPyConnection, sql: str, rows: list[list[Any]]) -> None:
    """``executemany`` as one multi-row ``VALUES`` statement per chunk: DuckDB runs
    ``executemany`` row by row, each a statement of its own."""
    head, marks = sql.rsplit("VALUES", 1)
    for i in range(0, len(rows), 256):
        chunk = rows[i : i + 256]
        conn.execute(f"{head}VALUES {', '.join([marks.strip()] * len(chunk))}", [v for r in chunk for v in r])


def query_interrupted(exc: BaseException) -> bool:
    """Whether ``exc`` is DuckDB's form of a Ctrl-C or SIGTERM that landed during a statement: it
    turns the signal handler's exception (KeyboardInterrupt, Dagster's interrupt) into
    ``RuntimeError("Query interrupted")``, an ordinary error a retry policy would run the step again
    for, the interrupt lost."""
    return isinstance(exc, duckdb.InterruptException) or (type(exc) is RuntimeError and str(exc) == "Query interrupted")


@contextmanager
def _interrupts_kept() -> Iterator[None]:
    """An interrupted statement raises KeyboardInterrupt again: the research stops, never retried."""
    try:
        yield
    except (RuntimeError, duckdb.Error) as exc:
        if query_interrupted(exc):
            raise KeyboardInterrupt from exc
        raise


class LineageStore:
    _migrated: ClassVar[set[str]] = set()

    def __init__(self, connect: Connect | None = None, database: str | None = None) -> None:
        """``database`` names the file so the schema is applied once per process, not per op.
        Without ``connect`` the store uses this process's shared connection to ``database``."""
        self._lease: _Lease | None = None
        if connect is None and database and fcntl is not None:
            try:
                self._lease = _Lease.get(database)
            except OSError:  # no lock files next to a read-only database: a connection per call
                self._lease = None
        if connect is None:
            if database is None:
                raise ValueError("LineageStore needs a connection factory or a database path")
            connect = path_connect(database)
        self._connect_new = connect
        self._held: duckdb.DuckDBPyConnection | None = None
        # A connection shared by the process (lineage in Postgres) migrates as it connects.
        self._shared = bool(getattr(connect, "shared", False))
        if self._shared:
            if isinstance(connect, PostgresLineage):
                self._lease = _PostgresLease.of(connect)
            return
        if database is None or database not in self._migrated:
            with self._connect(grouped=False) as conn:
                migrate(conn)  # missing migrations in order, then the views (core/store/schema.py)
            if database is not None:
                self._migrated.add(database)

    @classmethod
    def at(cls, path: str | Path) -> LineageStore:
        """The store at a DuckDB file, or at a Postgres database (``postgresql://`` URL, or
        :data:`LINEAGE_FROM_CONFIG`: the configured one)."""
        target = lineage_target(path)
        if is_postgres_url(target):
            return cls(PostgresLineage.get(str(target)))
        return cls(None, str(Path(target).resolve()))

    @classmethod
    @contextmanager
    def session_at(cls, path: str | Path) -> Iterator[LineageStore]:
        """:meth:`at` and :meth:`session` in one: on a DuckDB file the session begins before the
        store checks the schema, so that check's connection is the session's (one connect and
        one close for a run instead of two of each)."""
        target = lineage_target(path)
        lease = None
        if not is_postgres_url(target) and fcntl is not None:
            with suppress(OSError):  # no lock files next to a read-only database: as `at` does
                lease = _Lease.get(str(Path(target).resolve()))
        with lease.session() if lease is not None else nullcontext():
            store = cls.at(path)
            with store.session():
                yield store

    @contextmanager
    def _connect(self, grouped: bool = True, reads: frozenset[str] | None = None) -> Iterator[Any]:
        """``reads``: the tables a query reads, when it needs only their queued rows written first."""
        with _interrupts_kept():
            if self._lease is not None:
                with self._lease.use(grouped, reads) as conn:
                    yield conn
            elif self._held is not None:
                yield self._held
            else:
                with self._connect_new() as conn:
                    yield conn

    @contextmanager
    def session(self) -> Iterator[None]:
        """A unit of work (a stage, an op, a run) that keeps this process's connection between
        statements, released early when another process waits (module docstring); outside a
        session every call opens and closes its own connection."""
        if self._lease is not None:
            with _interrupts_kept(), self._lease.session():  # its last commit is a statement too
                yield
            return
        if self._held is not None or self._shared:
            yield
            return
        with self._connect_new() as conn:
            self._held = conn
            try:
                yield
            finally:
                self._held = None

    @contextmanager
    def waiting(self) -> Iterator[None]:
        """A block in which the caller makes no lineage statement: a model call, a tool fan-out.
        Only a hint: the lease's thread writes the queued rows and commits then, rather than
        while the research works between two statements (which would wait for it). A statement
        made in the block anyway is served as always."""
        lease = self._lease
        if lease is None:
            yield
            return
        with lease.queue_lock:
            lease.waiting += 1
        try:
            yield
        finally:
            with lease.queue_lock:
                lease.waiting -= 1

    def release(self) -> None:
        """Close the shared connection now if no statement or session is using it (stage ends)."""
        if self._lease is not None:
            with self._lease.lock:
                if self._lease.in_use == 0:
                    self._lease._close()

    @contextmanager
    def _transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """Statements that must land together; rolled back on error (the connection may be shared)."""
        with self._connect() as conn:
            if isinstance(conn, _Journaled):
                yield conn  # part of the session's grouped transaction, undone alone on error
                return
            conn.execute("BEGIN")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def _exec(self, sql: str, params: list[Any] | None = None) -> None:
        with self._connect() as conn:
            conn.execute(sql, params or [])

    def _queued(self, sql: str, params: list[Any]) -> None:
        """The write of a frequent call (an LLM call, a tool call, their summaries and caches):
        queued inside a session, written by the lease's thread while the research waits (module
        docstring); at once outside a session."""
        self._queued_unit(lambda conn: conn.execute(sql, params))

    def _queued_unit(self, write: Callable[[Any], Any]) -> None:
        """:meth:`_queued` for a method of several statements (``write(conn)``), atomic either way."""
        lease = self._lease
        if lease is not None and lease.sessions:
            unit = _Unit()
            write(unit)
            lease.defer(unit)
            return
        with self._transaction() as conn:
            write(conn)

    def query(
        self, sql: str, params: list[Any] | None = None, reads: frozenset[str] | None = None
    ) -> list[dict[str, Any]]:
        """Escape hatch for core/store, tests and benchmarks; everything else calls a named method.
        ``reads``: the tables the query reads (queued rows of other tables may wait)."""
        with self._connect(reads=reads) as conn:
            cur = conn.execute(sql, params or [])
            cols = [d[0] for d in cur.description]
            return [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]

    # -- requests and runs ---------------------------------------------------------------
    def register_request(self, partition_key: str, question: str, options: dict[str, Any]) -> None:
        self._exec(
            "INSERT INTO research_requests (partition_key, question, options) VALUES (?, ?, ?) "
            "ON CONFLICT (partition_key) DO UPDATE SET options = excluded.options",
            [partition_key, question, json.dumps(options, sort_keys=True)],
        )

    def get_request(self, partition_key: str) -> tuple[str, dict[str, Any]] | None:
        rows = self.query("SELECT question, options FROM research_requests WHERE partition_key = ?", [partition_key])
        if not rows:
            return None
        return rows[0]["question"], json.loads(rows[0]["options"] or "{}")

    # Stage times come from the clock, not DuckDB's ``current_timestamp``: that is the start of
    # the current transaction, and a session groups a whole stage's writes into one.
    def run_started(self, run_id: str, partition_key: str, stage: str) -> None:
        self._exec(
            "INSERT OR REPLACE INTO runs VALUES (?, ?, ?, 'running', NULL, ?, NULL)",
            [run_id, partition_key, stage, datetime.now()],
        )

    def run_finished(self, run_id: str, stage: str, error: str | None = None) -> None:
        self._exec(
            "UPDATE runs SET status = ?, error = ?, finished_at = ? WHERE run_id = ? AND stage = ?",
            ["failed" if error else "succeeded", redact(error) if error else None, datetime.now(), run_id, stage],
        )

    def abandon_run(self, run_id: str, reason: str) -> int:
        """Mark every still-running stage of a run failed (its process is gone); returns how many."""
        with self._connect() as conn:
            rows = conn.execute(
                "UPDATE runs SET status = 'failed', error = ?, finished_at = ? "
                "WHERE run_id = ? AND status = 'running' RETURNING stage",
                [reason, datetime.now(), run_id],
            ).fetchall()
        return len(rows)

    # -- plan ----------------------------------------------------------------------------
    def record_plan(self, partition_key: str, run_id: str, plan: ResearchPlan, folder: str) -> None:
        with self._transaction() as conn:
            conn.execute("DELETE FROM plan_steps WHERE partition_key = ?", [partition_key])
            conn.execute(
                "INSERT OR REPLACE INTO plans (partition_key, run_id, plan_title, plan_folder, plan) "
                "VALUES (?, ?, ?, ?, ?)",
                [partition_key, run_id, plan.plan_title, folder, plan.model_dump_json()],
            )
            _insert_rows(
                conn,
                "INSERT INTO plan_steps VALUES (?, ?, ?, ?, ?)",
                [[partition_key, s.step_id, i, s.title, s.description] for i, s in enumerate(plan.steps)],
            )

    def record_followup_steps(self, partition_key: str, steps: list[PlanStep], first_position: int) -> None:
        """The critic's follow-up steps, after the plan's: the step audit counts their tool calls too."""
        with self._transaction() as conn:
            _insert_rows(
                conn,
                "INSERT OR REPLACE INTO plan_steps VALUES (?, ?, ?, ?, ?)",
                [[partition_key, s.step_id, first_position + i, s.title, s.description] for i, s in enumerate(steps)],
            )

    # -- tool calls and context ------------------------------------------------------------
    def clear_research_calls(self, partition_key: str) -> None:
        """A re-run replaces the partition's tool calls so rows always mirror the files."""
        with self._transaction() as conn:
            conn.execute("DELETE FROM tool_calls WHERE partition_key = ?", [partition_key])
            conn.execute("DELETE FROM context_messages WHERE partition_key = ?", [partition_key])

    def record_tool_call(self, partition_key: str, run_id: str, rec: ToolCallRecord) -> None:
        self._queued(
            "INSERT OR REPLACE INTO tool_calls (partition_key, call_id, run_id, step_id, seq, tool, "
            "arguments, artifact_file, artifact_path, bytes, sha256, raw_tokens, latency_ms, status, "
            "error, source, cached, tainted, suspected_injection) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                partition_key,
                rec.call_id,
                run_id,
                rec.step_id,
                rec.seq,
                rec.tool,
                json.dumps(rec.arguments, sort_keys=True),
                rec.artifact_file,
                rec.artifact_path,
                rec.bytes,
                rec.sha256,
                rec.raw_tokens,
                rec.latency_ms,
                rec.status,
                redact(rec.error) if rec.error else None,
                rec.source,
                rec.cached,
                rec.tainted,
                json.dumps(rec.suspected_injection) if rec.suspected_injection else None,
            ],
        )

    def put_tool_cache(
        self, key: str, rec: ToolCallRecord, kind: str, arguments: dict[str, Any], links: list[str] | None = None
    ) -> None:
        self._queued(
            "INSERT OR REPLACE INTO tool_cache (cache_key, tool, arguments, artifact_path, sha256, kind, source, "
            "source_title, links) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                key,
                rec.tool,
                json.dumps(arguments),
                rec.artifact_path,
                rec.sha256,
                kind,
                rec.source,
                rec.source_title,
                json.dumps(links) if links else None,
            ],
        )

    def tool_cache_lookup(self, cache_key: str, ttl_s: float) -> dict[str, Any] | None:
        """The cached tool result (artifact_path, sha256, kind, source, source_title, links) if it is
        younger than ``ttl_s`` seconds."""
        return self.tool_cache_lookups([cache_key], ttl_s).get(cache_key)

    def tool_cache_lookups(self, cache_keys: list[str], ttl_s: float) -> dict[str, dict[str, Any]]:
        """:meth:`tool_cache_lookup` of several keys in one query (a fan-out's calls): key → row."""
        if not cache_keys:
            return {}
        keys = list(dict.fromkeys(cache_keys))
        rows = self.query(
            "SELECT cache_key, artifact_path, sha256, kind, source, source_title, links FROM tool_cache "
            f"WHERE cache_key IN ({', '.join('?' * len(keys))}) AND created_at >= current_timestamp - to_seconds(?)",
            [*keys, float(ttl_s)],
            reads=frozenset({"tool_cache"}),
        )
        return {row.pop("cache_key"): row for row in rows}

    def tool_call_ids(self, partition_key: str) -> set[str]:
        rows = self.query("SELECT call_id FROM tool_calls WHERE partition_key = ?", [partition_key])
        return {r["call_id"] for r in rows}

    def tool_call_hashes(self, partition_key: str) -> dict[str, str]:
        """artifact file name -> recorded sha256, for every tool call of the partition."""
        rows = self.query("SELECT artifact_file, sha256 FROM tool_calls WHERE partition_key = ?", [partition_key])
        return {r["artifact_file"]: r["sha256"] for r in rows}

    def tool_call_count(self, partition_key: str) -> int:
        return int(self.query("SELECT count(*) AS n FROM tool_calls WHERE partition_key = ?", [partition_key])[0]["n"])

    def record_tool_summary(self, partition_key: str, summary: SummaryRecord) -> None:
        self._queued(
            "UPDATE tool_calls SET is_useful = ?, injected_tokens = ?, compression_key = ? "
            "WHERE partition_key = ? AND call_id = ?",
            [summary.result.is_useful, summary.injected_tokens, summary.cache_key, partition_key, summary.call_id],
        )

    def record_summaries(self, partition_key: str, summaries: list[SummaryRecord]) -> None:
        if not summaries:
            return
        # One row per key (a multi-row INSERT OR REPLACE may not touch a key twice); the last wins.
        summaries = list({(s.call_id, s.compressor_model, s.prompt_version): s for s in summaries}.values())
        with self._connect() as conn:
            _insert_rows(
                conn,
                "INSERT OR REPLACE INTO summaries (partition_key, call_id, compressor_model, "
                "prompt_version, cache_key, is_useful, injected_tokens, summary_title, grounded, dropped) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    [
                        partition_key,
                        s.call_id,
                        s.compressor_model,
                        s.prompt_version,
                        s.cache_key,
                        s.result.is_useful,
                        s.injected_tokens,
                        s.result.summary_title,
                        s.grounding.grounded,
                        s.grounding.dropped,
                    ]
                    for s in summaries
                ],
            )

    def summary_versions(self, partition_key: str) -> set[tuple[str, str, str]]:
        """(call_id, compressor_model, prompt_version) of every summary recorded for the partition."""
        rows = self.query(
            "SELECT call_id, compressor_model, prompt_version FROM summaries WHERE partition_key = ?",
            [partition_key],
        )
        return {(r["call_id"], r["compressor_model"], r["prompt_version"]) for r in rows}

    def record_context(self, partition_key: str, step_id: str, messages: list[dict[str, str]]) -> None:
        from ..text import estimate_tokens

        rows = [
            [partition_key, step_id, i, m["role"], m["content"], estimate_tokens(m["content"])]
            for i, m in enumerate(messages)
        ]

        def write(conn: Any) -> None:
            conn.execute(
                "DELETE FROM context_messages WHERE partition_key = ? AND step_id = ?", [partition_key, step_id]
            )
            _insert_rows(conn, "INSERT INTO context_messages VALUES (?, ?, ?, ?, ?, ?)", rows)

        self._queued_unit(write)  # written by the lease's thread inside a session (a step's end)

    # -- LLM calls -----------------------------------------------------------------------
    def record_llm_call(
        self,
        partition_key: str,
        run_id: str,
        role: str,
        model: str,
        attempt: int,
        status: str,
        prompt_tokens: int,
        completion_tokens: int,
        latency_ms: float,
        artifact: str | None,
        error: str | None = None,
        wait_s: float = 0.0,
        cached_tokens: int = 0,
        prompt_tps: float | None = None,
        gen_tps: float | None = None,
    ) -> None:
        self._queued(
            "INSERT INTO llm_calls (partition_key, run_id, role, model, attempt, status, error, prompt_tokens, "
            "completion_tokens, latency_ms, artifact, wait_s, cached_tokens, prompt_tps, gen_tps) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                partition_key,
                run_id,
                role,
                model,
                attempt,
                status,
                redact(error) if error else None,  # a server may echo the request headers
                prompt_tokens,
                completion_tokens,
                latency_ms,
                artifact,
                wait_s,
                cached_tokens,
                prompt_tps,
                gen_tps,
            ],
        )

    def model_speed(self, partition_key: str, exclude_model: str) -> dict[str, float | int | None]:
        """This research's model speed: the median prompt-processing and generation tokens/s over
        its answers that measured them (``answers``: how many did), and ``overall_tps``, the
        answers' tokens over the time their calls took (prompt reading included; known for every
        answer the model was asked for, read whole or streamed); ``exclude_model``: the offline
        engine's label."""
        row = self.query(
            "SELECT median(prompt_tps) AS prompt_tps, median(gen_tps) AS gen_tps, count(gen_tps) AS answers, "
            "sum(completion_tokens) / nullif(sum(latency_ms) / 1000, 0) AS overall_tps "
            "FROM llm_calls WHERE partition_key = ? AND model <> ? AND status IN ('ok', 'invalid') AND latency_ms > 0",
            [partition_key, exclude_model],
        )[0]
        return {k: (round(v, 2) if isinstance(v, float) else v) for k, v in row.items()}

    def model_answers(self, partition_key: str, exclude_model: str) -> dict[str, int]:
        """This research's ``llm_calls`` rows from any model but ``exclude_model`` (the offline
        engine's label): ``asked`` (every row) and ``accepted`` (``ok``, or replayed from the
        response cache)."""
        rows = self.query(
            "SELECT count(*) AS asked, count(*) FILTER (WHERE status IN ('ok', 'cached')) AS accepted "
            "FROM llm_calls WHERE partition_key = ? AND model <> ?",
            [partition_key, exclude_model],
        )
        return {"asked": int(rows[0]["asked"]), "accepted": int(rows[0]["accepted"])}

    def role_outcomes(self, partition_key: str, run_ids: list[str], role: str, limit: int = 50) -> list[dict[str, Any]]:
        """A role's outcomes in the given runs, newest first: accepted answers (``ok``) and uses of
        its fallback (``fallback``, ``error`` = kind: message). The circuit breaker and the
        report's fallback counts read them (core/llm/structured.py, core/roles/reporter.py)."""
        if not run_ids:
            return []
        marks = ", ".join("?" for _ in run_ids)
        return self.query(
            f"SELECT status, error FROM llm_calls WHERE partition_key = ? AND role = ? AND run_id IN ({marks}) "
            "AND status IN ('ok', 'fallback') ORDER BY id DESC LIMIT ?",
            [partition_key, role, *run_ids, limit],
            reads=frozenset({"llm_calls"}),
        )

    def stage_run_ids(self, partition_key: str, table: str) -> list[str]:
        """The runs that wrote a partition's ``plans`` or ``tool_calls`` rows as they stand."""
        if table not in ("plans", "tool_calls"):
            raise ValueError(f"no run ids for {table!r}")
        rows = self.query(f"SELECT DISTINCT run_id FROM {table} WHERE partition_key = ?", [partition_key])
        return [r["run_id"] for r in rows if r["run_id"]]

    # -- compression cache -----------------------------------------------------------------
    def get_compression(self, cache_key: str) -> tuple[dict[str, Any], bool, dict[str, int]] | None:
        """The cached result, whether it is the fallback's, and its grounding counts."""
        memo = self._lease.compressions if self._lease is not None else None
        row = memo.get(cache_key) if memo is not None else None
        if row is None:
            rows = self.query(
                "SELECT result, fallback, grounded, dropped FROM compressions WHERE cache_key = ?",
                [cache_key],
                # The queued compressions of this process are in the memo: only they could
                # answer, so none has to be written first.
                reads=frozenset() if memo is not None else frozenset({"compressions"}),
            )
            if not rows:
                return None
            r = rows[0]
            row = (r["result"], bool(r["fallback"]), r["grounded"] or 0, r["dropped"] or 0)
            if memo is not None:
                memo[cache_key] = row
        return json.loads(row[0]), row[1], {"grounded": row[2], "dropped": row[3]}

    def put_compression(
        self,
        cache_key: str,
        raw_sha256: str,
        model: str,
        prompt_version: str,
        result: dict[str, Any],
        fallback: bool,
        grounding: dict[str, int] | None = None,
    ) -> None:
        grounding = grounding or {}
        row = (json.dumps(result, sort_keys=True), fallback, grounding.get("grounded", 0), grounding.get("dropped", 0))
        self._queued(
            "INSERT OR REPLACE INTO compressions (cache_key, raw_sha256, compressor_model, prompt_version, "
            "result, fallback, grounded, dropped) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [cache_key, raw_sha256, model, prompt_version, *row],
        )
        if self._lease is not None:
            self._lease.compressions[cache_key] = row

    def run_spending(self, run_id: str) -> dict[str, Any]:
        """What a run has spent so far, so each Dagster op resumes the same budget ledger."""
        per_model = self.query(
            "SELECT model, sum(prompt_tokens) AS p, sum(completion_tokens) AS c, "
            "count(*) FILTER (WHERE status IN ('ok', 'invalid')) AS n FROM llm_calls WHERE run_id = ? GROUP BY model",
            [run_id],
        )
        tools = self.query("SELECT count(*) AS n FROM tool_calls WHERE run_id = ?", [run_id])[0]["n"]
        started = self.query(
            "SELECT epoch(current_timestamp) - epoch(min(started_at)) AS age FROM runs WHERE run_id = ?", [run_id]
        )[0]["age"]
        return {"per_model": per_model, "tool_calls": int(tools), "elapsed_s": float(started or 0.0)}

    def record_critic_rounds(self, partition_key: str, rounds: list[dict[str, Any]]) -> None:
        with self._connect() as conn:
            conn.execute("DELETE FROM critic_rounds WHERE partition_key = ?", [partition_key])
            if not rounds:
                return
            _insert_rows(
                conn,
                "INSERT INTO critic_rounds (partition_key, round, sufficiency, decision, fallback, verdict) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                [
                    [
                        partition_key,
                        r["round"],
                        r["verdict"]["sufficiency"],
                        r["decision"],
                        r["fallback"],
                        json.dumps(r["verdict"]),
                    ]
                    for r in rounds
                ],
            )

    def record_budget(self, partition_key: str, run_id: str, stage: str, snapshot: dict[str, Any]) -> None:
        rows = [
            [
                partition_key,
                run_id,
                stage,
                dim,
                float(cap),
                float(snapshot["spent"].get(dim, 0.0)),
                snapshot["fraction"],
                json.dumps(snapshot["events"]),
            ]
            for dim, cap in snapshot["limits"].items()
        ]
        with self._connect() as conn:
            _insert_rows(
                conn,
                "INSERT INTO budget_ledger (partition_key, run_id, stage, dimension, cap, spent, fraction, events) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            )

    def latest_budget(self, partition_key: str, stage: str) -> dict[str, dict[str, float]]:
        """dimension -> {"spent", "cap"} from the latest ledger entry of each dimension of a stage."""
        rows = self.query(
            "SELECT dimension, spent, cap FROM budget_ledger WHERE partition_key = ? AND stage = ? "
            "QUALIFY row_number() OVER (PARTITION BY dimension ORDER BY created_at DESC) = 1 ORDER BY dimension",
            [partition_key, stage],
        )
        return {r["dimension"]: {"spent": r["spent"], "cap": r["cap"]} for r in rows}

    def replace_rows(self, table: str, partition_key: str, columns: list[str], rows: list[list[Any]]) -> None:
        """Per-partition derived tables (source scores, citations) are rewritten whole."""
        with self._connect() as conn:
            conn.execute(f"DELETE FROM {table} WHERE partition_key = ?", [partition_key])
            if rows:
                marks = ", ".join("?" for _ in range(len(columns) + 1))
                _insert_rows(
                    conn,
                    f"INSERT INTO {table} (partition_key, {', '.join(columns)}) VALUES ({marks})",
                    [[partition_key, *r] for r in rows],
                )

    # -- researches ------------------------------------------------------------------------
    def list_researches(self) -> list[dict[str, Any]]:
        """Every registered research, oldest first: partition_key, question, created_at, the
        status of its latest run ('registered' before any), tool_calls and reduction_pct."""
        return self.query(
            """
            WITH latest AS (
                SELECT partition_key, status FROM runs
                QUALIFY row_number() OVER (PARTITION BY partition_key ORDER BY started_at DESC) = 1)
            SELECT r.partition_key, r.question, r.created_at, coalesce(l.status, 'registered') AS status,
                   c.tool_calls, c.reduction_pct
            FROM research_requests r
            LEFT JOIN latest l USING (partition_key)
            LEFT JOIN context_reduction_by_research c USING (partition_key)
            ORDER BY r.created_at, r.partition_key
            """
        )

    def partitions_with_prefix(self, prefix: str) -> list[str]:
        """Registered partition keys starting with ``prefix`` (the dated partitions of a topic)."""
        rows = self.query(
            "SELECT partition_key FROM research_requests WHERE starts_with(partition_key, ?) ORDER BY partition_key",
            [prefix],
        )
        return [r["partition_key"] for r in rows]

    def research_status(self, partition_key: str) -> str:
        """Status of the latest run of the partition ('registered' before any run)."""
        rows = self.query(
            "SELECT status FROM runs WHERE partition_key = ? ORDER BY started_at DESC LIMIT 1", [partition_key]
        )
        return rows[0]["status"] if rows else "registered"

    # -- figures -------------------------------------------------------------------------
    def reduction(self, partition_key: str) -> dict[str, Any]:
        rows = self.query("SELECT * FROM context_reduction_by_research WHERE partition_key = ?", [partition_key])
        llm = self.query("SELECT count(*) AS llm_calls FROM llm_calls WHERE partition_key = ?", [partition_key])[0][
            "llm_calls"
        ]
        base = (
            rows[0]
            if rows
            else {"tool_calls": 0, "useful": 0, "raw_tokens": 0, "injected_tokens": 0, "reduction_pct": None}
        )
        return {
            "tool_calls": int(base["tool_calls"]),
            "useful": int(base["useful"] or 0),
            "raw_tokens": int(base["raw_tokens"] or 0),
            "injected_tokens": int(base["injected_tokens"] or 0),
            "context_reduction": float(base["reduction_pct"]) if base["reduction_pct"] is not None else None,
            "llm_calls": int(llm),
        }

    def untrusted_counts(self, partition_key: str) -> dict[str, int]:
        """What the defences against untrusted content did in one research (issue 28): tool calls
        proposed after tool output entered the conversation (``tainted``), calls refused before
        reaching their tool (error ``refused: …``: provenance, confinement) and distinct sources
        flagged as suspected prompt injections."""
        row = self.query(
            "SELECT count(*) FILTER (WHERE tainted) AS tainted_calls, "
            "count(*) FILTER (WHERE status = 'error' AND error LIKE 'refused:%') AS refused_calls, "
            "count(DISTINCT coalesce(source, artifact_path)) FILTER (WHERE suspected_injection IS NOT NULL) "
            "AS flagged_sources FROM tool_calls WHERE partition_key = ?",
            [partition_key],
        )[0]
        return {k: int(v or 0) for k, v in row.items()}

    def evaluation_figures(self, partition_key: str, exclude_roles: tuple[str, ...] = ("JUDGE",)) -> dict[str, Any]:
        """What an evaluation reads of one research: tokens per role (prompt, completion, cached),
        dollars (priced models only; ``None`` when a model is unpriced), the model per role, tool
        calls and raw tokens, and wall seconds (the latest run of each stage). Calls of
        ``exclude_roles`` (the evaluation's judge) are not the research's."""
        roles = list(exclude_roles) or [""]
        marks = ", ".join("?" for _ in roles)
        usage = self.query(
            f"SELECT u.role, u.model, u.prompt_tokens, u.completion_tokens, u.cost_usd, u.ok_calls, "
            f"(SELECT coalesce(sum(cached_tokens), 0) FROM llm_calls c WHERE c.partition_key = u.partition_key "
            f"AND c.role = u.role AND c.model = u.model) AS cached_tokens "
            f"FROM llm_usage_by_research u WHERE u.partition_key = ? AND u.role NOT IN ({marks}) ORDER BY role, model",
            [partition_key, *roles],
        )
        by_role: dict[str, dict[str, int]] = {}
        models: dict[str, str] = {}
        dollars: float | None = 0.0
        for row in usage:
            role = str(row["role"]).lower()
            figures = by_role.setdefault(role, {"prompt": 0, "completion": 0, "cached": 0})
            figures["prompt"] += int(row["prompt_tokens"])
            figures["completion"] += int(row["completion_tokens"])
            figures["cached"] += int(row["cached_tokens"])
            if row["ok_calls"] or role not in models:
                models[role] = row["model"]
            has_tokens = row["prompt_tokens"] or row["completion_tokens"]
            if row["cost_usd"] is None and has_tokens:
                dollars = None
            elif dollars is not None and row["cost_usd"] is not None:
                dollars += float(row["cost_usd"])
        calls = self.reduction(partition_key)
        # The latest run that wrote the report: from its first stage's start to its last one's end.
        wall = self.query(
            "SELECT epoch(max(finished_at)) - epoch(min(started_at)) AS s FROM runs WHERE run_id = "
            "(SELECT run_id FROM runs WHERE partition_key = ? AND stage = 'research_report' AND status = 'succeeded' "
            "ORDER BY started_at DESC LIMIT 1)",
            [partition_key],
        )[0]["s"]
        return {
            "tokens": sum(f["prompt"] + f["completion"] for f in by_role.values()),
            "tokens_by_role": by_role,
            "dollars": round(dollars, 6) if dollars is not None else None,
            "models": models,
            "tool_calls": calls["tool_calls"],
            "raw_tokens": calls["raw_tokens"],
            "wall_s": round(float(wall), 2) if wall is not None else None,
        }

    def summary_reduction(self, partition_key: str, compressor_model: str, prompt_version: str) -> dict[str, Any]:
        """Context reduction of one summary version (view ``context_reduction_by_summary_version``):
        tool_calls, raw_tokens, injected_tokens, reduction_pct (None when nothing raw)."""
        rows = self.query(
            "SELECT tool_calls, raw_tokens, injected_tokens, reduction_pct FROM context_reduction_by_summary_version "
            "WHERE partition_key = ? AND compressor_model = ? AND prompt_version = ?",
            [partition_key, compressor_model, prompt_version],
        )
        if not rows:
            return {"tool_calls": 0, "raw_tokens": 0, "injected_tokens": 0, "reduction_pct": None}
        row = rows[0]
        return {
            "tool_calls": int(row["tool_calls"]),
            "raw_tokens": int(row["raw_tokens"]),
            "injected_tokens": int(row["injected_tokens"]),
            "reduction_pct": float(row["reduction_pct"]) if row["reduction_pct"] is not None else None,
        }
