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


def test_a_run_on_a_new_file_connects_once_schema_included(tmp_path, connects):
    path = tmp_path / "lineage.duckdb"
    with LineageStore.session_at(path) as store:
        _llm_call(store)
        store.role_outcomes("k", ["r1"], "planner")
    assert connects["n"] == 1  # the schema check's connection is the session's
    assert _llm_rows(path) == 1


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


def test_a_session_commits_and_keeps_the_file_while_nobody_waits(tmp_path, monkeypatch, connects):
    """A research's connection stays open between its waits (one connect per session, however
    long), yet its rows are committed while it waits (they survive a kill: test below)."""
    monkeypatch.setattr(lineage_module, "MAX_HOLD_S", 0.05)
    store = LineageStore.at(tmp_path / "lineage.duckdb")
    lease = store._lease
    before, opens = connects["n"], lease.opens
    with store.session():
        for _ in range(3):
            _llm_call(store)
            with store.waiting():  # a model call: the lease's thread writes and commits meanwhile
                assert _wait_for(lambda: _committed(lease))
            assert _wait_for(lambda: time.monotonic() - lease.opened_at > 2 * lineage_module.MAX_HOLD_S)
            assert lease.conn is not None
        assert lease.opens - opens == 1
    assert connects["n"] - before == 1
    assert _llm_rows(tmp_path / "lineage.duckdb") == 3


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX file locks")
def test_a_read_command_takes_its_turn_while_a_run_holds_the_file(tmp_path):
    """The CLI's read commands (``deepresearch ls``, ``audit``: ``path_connect``) announce
    themselves like a waiting run: the run lets go instead of holding the file to its end."""
    path = tmp_path / "lineage.duckdb"
    store = LineageStore.at(path)
    lease = store._lease
    with store.session():
        _llm_call(store)
        with store.waiting():
            assert _wait_for(lambda: _committed(lease))
            start = time.monotonic()
            with lineage_module.path_connect(path)() as conn:
                assert conn.execute("SELECT count(*) FROM llm_calls").fetchone()[0] == 1
            assert time.monotonic() - start < lineage_module.MAX_HOLD_S
        _llm_call(store)  # the run takes the file back
    assert _llm_rows(path) == 2


def test_the_lease_thread_checkpoints_while_the_research_waits(tmp_path, monkeypatch):
    """Committed rows are moved from the write-ahead log into the file during a wait, not all by
    the close at the session's end (on the research's path)."""
    monkeypatch.setattr(lineage_module, "CHECKPOINT_EVERY_S", 0.0)
    path = tmp_path / "lineage.duckdb"
    store = LineageStore.at(path)
    lease = store._lease
    wal = tmp_path / "lineage.duckdb.wal"
    with store.session():
        _llm_call(store)
        assert _wait_for(lambda: _committed(lease))  # committed: in the write-ahead log
        assert lease.unchecked and wal.stat().st_size > 0
        with store.waiting():
            assert _wait_for(lambda: not lease.unchecked)
        assert not wal.exists() or wal.stat().st_size == 0
        assert lease.conn is not None
    assert _llm_rows(path) == 1


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX file locks")
def test_a_waiting_process_gets_the_file_within_max_hold(tmp_path):
    """Another process that waits for the file (a shared flock on ``<db>.wait``, as
    ``_Lease._lock_exclusive`` takes) gets it within MAX_HOLD_S while a session waits on a call,
    and the session takes it back at its next statement."""
    import fcntl

    path = tmp_path / "lineage.duckdb"
    store = LineageStore.at(path)
    lease = store._lease
    with store.session():
        _llm_call(store)
        with store.waiting():
            assert _wait_for(lambda: lease.conn is not None)
            with open(f"{path}.wait", "a+b") as wait, open(f"{path}.lock", "a+b") as lock:
                fcntl.flock(wait, fcntl.LOCK_SH)  # another process starts waiting
                start = time.monotonic()

                def taken() -> bool:  # what the waiting process polls for
                    try:
                        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:
                        return False
                    return True

                assert _wait_for(taken, timeout=lineage_module.MAX_HOLD_S)
                assert time.monotonic() - start < lineage_module.MAX_HOLD_S
                assert lease.conn is None
                assert _llm_rows(path) == 1  # committed before it was let go
                fcntl.flock(lock, fcntl.LOCK_UN)
                fcntl.flock(wait, fcntl.LOCK_UN)
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


def test_queued_rows_are_read_back_in_order_and_a_failing_one_is_undone_alone(tmp_path):
    path = tmp_path / "lineage.duckdb"
    store = LineageStore.at(path)
    with store.session():
        for status in ("ok", "fallback", "ok"):
            store.record_llm_call("k", "r1", "compressor", "m", 1, status, 1, 1, 1.0, None, "invalid: x")
        # A read of the table waits for its queued rows (this process reads its own writes).
        assert [r["status"] for r in store.role_outcomes("k", ["r1"], "compressor")] == ["ok", "fallback", "ok"]
        store._queued("INSERT INTO no_such_table VALUES (?)", [1])  # a unit that cannot be written
        with pytest.raises(duckdb.Error):
            store.query("SELECT id FROM llm_calls")  # a read of any table: every queued unit first
        _llm_call(store)  # the session goes on; the rows before the failed unit are kept
        assert len(store.query("SELECT id FROM llm_calls")) == 4
    assert _llm_rows(path) == 4


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_a_tool_call_row_queued_before_a_model_wait_survives_a_kill(tmp_path):
    assert_survives_a_kill(str(tmp_path / "lineage.duckdb"))


def assert_survives_a_kill(target: str) -> None:
    """A process records a tool call inside a session, then waits (its compression's model call)
    and is killed: the row is in the lineage database (the rule the queue keeps). Shared with the
    Postgres test (tests/test_team_deployment.py)."""
    import signal

    script = textwrap.dedent(
        f"""
        import time
        from deepresearch_dagster.core.models import ToolCallRecord
        from deepresearch_dagster.core.store.lineage import LineageStore
        store = LineageStore.at({target!r})
        store.register_request("k", "A question?", {{}})
        with store.session():
            record = ToolCallRecord(call_id="1.1", step_id="1", step_title="t", step_description="d", seq=1,
                                    tool="web_search", arguments={{"query": "q"}}, artifact_file="a.json",
                                    artifact_path="p/a.json", bytes=2, sha256="0" * 64, raw_tokens=1)
            store.record_tool_call("k", "r1", record)
            print("recorded", flush=True)
            time.sleep(60)  # the model call
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "recorded"
        time.sleep(0.3)  # the research waits: the lease's thread writes and commits meanwhile
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert LineageStore.at(target).tool_call_ids("k") == {"1.1"}


def _committed(lease) -> bool:
    with lease.lock:  # not while the lease's thread is between taking the queue and committing it
        return lease.conn is not None and not lease.queue and not lease.txn_open


def _wait_for(condition, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.005)
    return condition()


def test_the_lease_thread_opens_the_file_ahead_of_the_research(tmp_path, connects):
    """At a session's start, so the research's first statement does not wait for a connect."""
    store = LineageStore.at(tmp_path / "lineage.duckdb")
    lease = store._lease
    before = connects["n"]
    with store.session():
        assert _wait_for(lambda: lease.conn is not None)  # opened by the lease's thread
        _llm_call(store)
        assert connects["n"] - before == 1
    assert _llm_rows(tmp_path / "lineage.duckdb") == 1


def test_compressions_are_served_from_the_run_memo_and_stored_all_the_same(tmp_path, monkeypatch):
    path = tmp_path / "lineage.duckdb"
    store = LineageStore.at(path)
    result = {"summary_title": "t", "summary": "s", "extraction": [], "is_useful": True}
    with store.session():
        store.put_compression("key1", "0" * 64, "m", "v1", result, False, {"grounded": 2, "dropped": 1})
        expected = (result, False, {"grounded": 2, "dropped": 1})
        with monkeypatch.context() as m:
            m.setattr(store, "query", lambda *a, **k: pytest.fail("a memoized compression read the database"))
            assert store.get_compression("key1") == expected
        assert store.get_compression("missing") is None
        # A unit that cannot be written rolls the transaction back: the memo goes with it, and the
        # compression (queued before it) is committed again and read from the database.
        store._queued("INSERT INTO no_such_table VALUES (?)", [1])
        with pytest.raises(duckdb.Error):
            store.query("SELECT 1")
        assert store._lease.compressions == {}
        assert store.get_compression("key1") == expected
    assert store._lease.compressions == {}  # kept for a run only
    assert LineageStore.at(path).get_compression("key1") == expected


def test_a_step_context_is_queued_in_a_session_and_replaced_whole(tmp_path):
    path = tmp_path / "lineage.duckdb"
    store = LineageStore.at(path)
    messages = [{"role": "system", "content": "a"}, {"role": "user", "content": "b"}]
    with store.session():
        store.record_context("k", "1", messages)
        store.record_context("k", "1", [*messages, {"role": "assistant", "content": "c"}])
        rows = store.query("SELECT content FROM context_messages WHERE step_id = '1' ORDER BY position")
        assert [r["content"] for r in rows] == ["a", "b", "c"]
    with duckdb.connect(str(path), read_only=True) as conn:
        assert conn.execute("SELECT count(*) FROM context_messages").fetchone()[0] == 3


def test_a_transaction_an_interrupt_left_aborted_does_not_fail_the_sessions_end(tmp_path):
    """Ctrl-C between a statement and the lease's bookkeeping can leave DuckDB's transaction
    aborted while the lease thinks none is open (seen once in CI: the run's end failed with
    "Current transaction is aborted" and a traceback instead of exit 130). The next grouped
    transaction rolls it back first; the queued rows are still written."""
    path = tmp_path / "lineage.duckdb"
    store = LineageStore.at(path)
    lease = store._lease
    with store.session():
        _llm_call(store)
        with lease.lock:
            lease._close()  # written and committed: nothing of the lease's is open
            lease._open()
            lease.conn.execute("BEGIN")
            with pytest.raises(duckdb.Error):
                lease.conn.execute("SELECT * FROM no_such_table")  # DuckDB's transaction: aborted
            assert not lease.txn_open
        _llm_call(store)  # queued; written by the session's end
    assert _llm_rows(path) == 2
