"""The shared lineage connection (core/store/lineage.py): one connect per session, the file
free outside sessions, other processes let in while a session holds it, atomic store methods."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import duckdb
import pytest

from deepresearch_dagster.core.store import lineage as lineage_module
from deepresearch_dagster.core.store.lineage import LineageStore


@pytest.fixture
def connects(monkeypatch):
    count = {"n": 0}
    real = duckdb.connect

    def counting(*args, **kwargs):
        count["n"] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(lineage_module.duckdb, "connect", counting)
    return count


def _llm_call(store: LineageStore, run_id: str = "r1") -> None:
    store.record_llm_call("k", run_id, "planner", "m", 1, "ok", 10, 5, 1.0, None)


def _llm_rows(path) -> int:
    with duckdb.connect(str(path), read_only=True) as conn:
        return conn.execute("SELECT count(*) FROM llm_calls").fetchone()[0]


def test_a_session_connects_once_and_the_file_is_free_after_it(tmp_path, connects):
    path = tmp_path / "lineage.duckdb"
    store = LineageStore.at(path)
    before = connects["n"]
    with store.session():
        for _ in range(20):
            _llm_call(store)
            store.role_outcomes("k", ["r1"], "planner")
    assert connects["n"] - before == 1
    # Committed and closed at the session's end: a read-only connection (another configuration,
    # which DuckDB refuses while this process holds the file) sees every row.
    assert _llm_rows(path) == 20


def test_outside_a_session_every_call_releases_the_file(tmp_path):
    path = tmp_path / "lineage.duckdb"
    store = LineageStore.at(path)
    _llm_call(store)
    assert _llm_rows(path) == 1


def test_a_failing_store_method_is_undone_alone(tmp_path):
    path = tmp_path / "lineage.duckdb"
    store = LineageStore.at(path)
    with store.session():
        _llm_call(store)
        with pytest.raises(duckdb.Error):
            store.replace_rows("no_such_table", "k", ["x"], [[1]])
        _llm_call(store)  # the session goes on with a healthy connection
        assert len(store.query("SELECT id FROM llm_calls")) == 2
    assert _llm_rows(path) == 2


def test_an_idle_session_commits_and_lets_go(tmp_path, monkeypatch):
    monkeypatch.setattr(lineage_module, "LINGER_S", 0.05)
    path = tmp_path / "lineage.duckdb"
    store = LineageStore.at(path)
    with store.session():
        _llm_call(store)
        time.sleep(0.5)  # a long model call: committed, then the file is let go
        assert _llm_rows(path) == 1
        _llm_call(store)
    assert _llm_rows(path) == 2


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX file locks")
def test_another_process_gets_the_file_while_a_session_holds_it(tmp_path):
    path = tmp_path / "lineage.duckdb"
    store = LineageStore.at(path)
    other = textwrap.dedent(
        f"""
        import time
        from deepresearch_dagster.core.store.lineage import LineageStore
        store = LineageStore.at({str(path)!r})
        start = time.monotonic()
        store.record_llm_call("other", "r2", "planner", "m", 1, "ok", 1, 1, 1.0, None)
        print(round(time.monotonic() - start, 3))
        """
    )
    with store.session():
        _llm_call(store)
        proc = subprocess.Popen([sys.executable, "-c", other], stdout=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            _llm_call(store)  # busy: the waiter is let in between two statements
            time.sleep(0.005)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0
        mine = len(store.query("SELECT id FROM llm_calls WHERE partition_key = 'k'"))
    assert float(out) < 10
    with duckdb.connect(str(path), read_only=True) as conn:
        rows = dict(conn.execute("SELECT partition_key, count(*) FROM llm_calls GROUP BY ALL").fetchall())
    assert rows == {"k": mine, "other": 1}
