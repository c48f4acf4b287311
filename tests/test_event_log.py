"""Dagster's SQLite event log held open for an in-process run (defs/event_log.py): one connection
per event database instead of one per event, every event stored and read back as before, a new
run's database copied from an empty one identical to Dagster's own, Dagster's method restored."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest
from dagster import DagsterInstance, EventLogEntry
from sqlalchemy import event
from sqlalchemy.pool import Pool

from deepresearch_dagster.defs import event_log
from deepresearch_dagster.defs.event_log import held_event_log


def _log(storage, run_id: str, message: str) -> None:
    storage.store_event(EventLogEntry(None, 20, message, run_id, time.time()))


def _messages(storage, run_id: str) -> list[str]:
    return [e.user_message for e in storage.get_logs_for_run(run_id)]


def _schema(path) -> list[tuple]:
    with sqlite3.connect(path) as conn:
        tables = conn.execute("SELECT type, name, sql FROM sqlite_master ORDER BY type, name").fetchall()
        return [*tables, *conn.execute("SELECT * FROM alembic_version").fetchall()]


@pytest.fixture(scope="module")
def instance(tmp_path_factory):
    with DagsterInstance.local_temp(str(tmp_path_factory.mktemp("dagster_home"))) as instance:
        yield instance


@pytest.fixture
def connects():
    count = {"n": 0}

    def counting(*_args):
        count["n"] += 1

    event.listen(Pool, "connect", counting)
    yield count
    event.remove(Pool, "connect", counting)


def test_a_held_run_writes_every_event_on_one_connection_per_database(instance, connects, monkeypatch):
    monkeypatch.setattr(event_log, "_EMPTY_SHARD", [])
    storage = instance.event_log_storage
    with held_event_log(instance):
        _log(storage, "run-a", "first")  # creates run-a's database the way Dagster does
        assert event_log._EMPTY_SHARD  # and keeps its bytes while it is still empty
        before = connects["n"]
        with held_event_log(instance):  # a nested run shares the connections
            for i in range(10):
                _log(storage, "run-a", f"a{i}")
            assert connects["n"] == before  # ten events, not one connection
            exists = storage.has_table("asset_check_executions")  # asked once, then remembered
            before = connects["n"]
            assert [storage.has_table("asset_check_executions") for _ in range(5)] == [exists] * 5
            assert connects["n"] == before
        assert "_connect" in vars(storage)  # the outer run still holds them
        _log(storage, "run-b", "b")  # a copy of the empty database Dagster made for run-a
    assert "_connect" not in vars(storage) and "has_table" not in vars(storage)  # Dagster's own again
    # Read back through Dagster's own connections: everything was committed.
    assert _messages(storage, "run-a") == ["first", *(f"a{i}" for i in range(10))]
    assert _messages(storage, "run-b") == ["b"]
    runs = Path(storage._base_dir)
    assert _schema(runs / "run-b.db") == _schema(runs / "run-a.db")


def test_a_run_database_made_by_another_process_is_never_overwritten(instance):
    storage = instance.event_log_storage
    _log(storage, "run-c", "written without the held connections")
    storage._initialized_dbs.discard("run-c")  # as a process that did not create it
    with held_event_log(instance):
        _log(storage, "run-c", "held")
    assert _messages(storage, "run-c") == ["written without the held connections", "held"]


def test_a_dagster_release_without_the_replaced_internals_runs_dagsters_own_way(instance, monkeypatch):
    storage = instance.event_log_storage
    monkeypatch.setattr(event_log, "_INTERNALS", (*event_log._INTERNALS, "_renamed_by_a_later_release"))
    with held_event_log(instance):
        assert "_connect" not in vars(storage)  # nothing replaced
        _log(storage, "run-d", "unheld")
    assert _messages(storage, "run-d") == ["unheld"]
