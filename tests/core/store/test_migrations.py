"""Schema versions: a database of any earlier release is migrated in order when it is opened."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import duckdb
import pytest

from deepresearch_dagster.core.models import ToolCallRecord
from deepresearch_dagster.core.store import schema
from deepresearch_dagster.core.store.lineage import LineageStore

FIXTURE_V0 = Path(__file__).resolve().parents[2] / "fixtures" / "lineage_schema_v0.sql"
ALL_VERSIONS = [m.version for m in schema.MIGRATIONS]


def _v0_database(path: Path) -> Path:
    with duckdb.connect(str(path)) as conn:
        conn.execute(FIXTURE_V0.read_text("utf-8"))
    return path


def _columns(conn: duckdb.DuckDBPyConnection, table: str) -> list[tuple[str, str]]:
    return [
        (name, dtype)
        for name, dtype in conn.execute(
            "SELECT column_name, data_type FROM duckdb_columns() WHERE table_name = ? ORDER BY column_index", [table]
        ).fetchall()
    ]


def _versions(path: Path) -> list[int]:
    with duckdb.connect(str(path), read_only=True) as conn:
        return [r[0] for r in conn.execute("SELECT version FROM schema_version ORDER BY version").fetchall()]


def _record(call_id: str = "3.1", cached: bool = True) -> ToolCallRecord:
    return ToolCallRecord(
        call_id=call_id,
        step_id="3",
        step_title="Outlook",
        step_description="Where the market goes",
        seq=1,
        tool="fetch_url",
        arguments={"url": "https://example.org/na-ion"},
        artifact_file=f"{call_id}-fetch_url.txt",
        artifact_path=f"new-research/plan/{call_id}-fetch_url.txt",
        bytes=50,
        sha256="cc",
        raw_tokens=200,
        latency_ms=12.5,
        source="https://example.org/na-ion",
        cached=cached,
    )


def test_migrations_are_numbered_in_order_from_one():
    assert list(range(1, len(ALL_VERSIONS) + 1)) == ALL_VERSIONS
    assert ALL_VERSIONS[-1] == schema.LATEST_VERSION


def test_the_first_release_schema_really_lacks_the_later_columns(tmp_path):
    path = _v0_database(tmp_path / "v0.duckdb")
    with duckdb.connect(str(path)) as conn:
        assert "cached" not in dict(_columns(conn, "tool_calls"))
        assert "wait_s" not in dict(_columns(conn, "llm_calls"))
        with pytest.raises(duckdb.BinderException):
            conn.execute("INSERT INTO llm_calls (partition_key, wait_s) VALUES ('x', 1.0)")


def test_database_of_the_first_release_is_migrated_and_written(tmp_path):
    path = _v0_database(tmp_path / "lineage.duckdb")
    lineage = LineageStore.at(path)

    # Today's writes: the columns added after the first release are filled in.
    lineage.register_request("new-research", "What next for sodium-ion?", {})
    lineage.record_tool_call("new-research", "run-1", _record())
    lineage.record_llm_call("new-research", "run-1", "reporter", "gpt-4o", 1, "ok", 100, 10, 5.0, None, wait_s=1.5)
    lineage.put_tool_cache("k1", _record(), "text", {"url": "https://example.org/na-ion"})
    lineage.record_budget(
        "new-research",
        "run-1",
        "research_report",
        {"limits": {"tool_calls": 10}, "spent": {"tool_calls": 1}, "fraction": 0.1, "events": []},
    )

    assert _versions(path) == ALL_VERSIONS
    with duckdb.connect(str(path), read_only=True) as conn:
        tool_cols = [c for c, _ in _columns(conn, "tool_calls")]
        assert tool_cols[-3:] == ["cached", "tainted", "suspected_injection"]
        assert "wait_s" in dict(_columns(conn, "llm_calls"))
        calls = {
            row[0]: row[1:]
            for row in conn.execute("SELECT call_id, cached, tainted, suspected_injection FROM tool_calls").fetchall()
        }
        # Old rows get the columns' defaults.
        assert calls == {"1.1": (False, False, None), "2.1": (False, False, None), "3.1": (True, False, None)}
        waits = conn.execute("SELECT partition_key, role, wait_s FROM llm_calls ORDER BY id").fetchall()
        assert waits == [("old-research", "planner", 0.0), ("new-research", "reporter", 1.5)]
        assert conn.execute("SELECT count(*) FROM model_prices").fetchone()[0] > 0

    # The old research's rows are intact and every view reads old and new rows alike.
    assert lineage.get_request("old-research") == ("How do sodium-ion batteries work?", {"engine": "offline"})
    assert lineage.reduction("old-research") == {
        "tool_calls": 2,
        "useful": 2,
        "raw_tokens": 1000,
        "injected_tokens": 100,
        "context_reduction": 90.0,
        "llm_calls": 1,
    }
    assert lineage.summary_reduction("old-research", "gpt-4o-mini", "v1")["reduction_pct"] == 90.0
    assert lineage.tool_call_ids("old-research") == {"1.1", "2.1"}
    assert lineage.tool_call_hashes("new-research") == {"3.1-fetch_url.txt": "cc"}
    assert lineage.tool_cache_lookup("k1", 3600)["sha256"] == "cc"
    assert lineage.tool_cache_lookup("k1", 3600)["links"] is None
    lineage.put_tool_cache("k2", _record(), "text", {"url": "https://example.org/a"}, ["https://example.org/b"])
    assert json.loads(lineage.tool_cache_lookup("k2", 3600)["links"]) == ["https://example.org/b"]
    assert lineage.latest_budget("new-research", "research_report") == {"tool_calls": {"spent": 1.0, "cap": 10.0}}
    assert [r["partition_key"] for r in lineage.list_researches()] == ["old-research", "new-research"]
    usage = lineage.query("SELECT * FROM llm_usage_by_research WHERE partition_key = 'new-research'")
    assert usage[0]["wait_s"] == 1.5


def test_reopening_applies_nothing_twice(tmp_path, monkeypatch):
    path = _v0_database(tmp_path / "lineage.duckdb")
    LineageStore.at(path).record_tool_call("new-research", "run-1", _record())
    monkeypatch.setattr(LineageStore, "_migrated", set())  # as a new process would
    LineageStore.at(path)
    assert _versions(path) == ALL_VERSIONS
    with duckdb.connect(str(path)) as conn:
        assert schema.migrate(conn) == []
        assert conn.execute("SELECT count(*) FROM tool_calls").fetchone()[0] == 3


def test_fresh_and_migrated_databases_have_the_same_tables(tmp_path):
    old = _v0_database(tmp_path / "old.duckdb")
    LineageStore.at(old)
    LineageStore.at(tmp_path / "fresh.duckdb")
    shapes = []
    for path in (old, tmp_path / "fresh.duckdb"):
        with duckdb.connect(str(path), read_only=True) as conn:
            tables = [r[0] for r in conn.execute("SELECT table_name FROM duckdb_tables() ORDER BY 1").fetchall()]
            shapes.append({t: _columns(conn, t) for t in tables})
    assert shapes[0] == shapes[1]
    assert _versions(tmp_path / "fresh.duckdb") == ALL_VERSIONS


def test_unversioned_database_of_the_last_release_keeps_its_rows(tmp_path):
    """A file written just before versioning has every table but no schema_version."""
    path = tmp_path / "lineage.duckdb"
    with duckdb.connect(str(path)) as conn:
        for migration in schema.MIGRATIONS:
            conn.execute(migration.sql)
        conn.execute("INSERT INTO model_prices VALUES ('house-model', 1, 2)")
        conn.execute("INSERT INTO tool_calls (partition_key, call_id, cached) VALUES ('k', '1.1', true)")
    # model_prices was not empty, so it is not re-seeded; rows survive.
    LineageStore.at(path)
    assert _versions(path) == ALL_VERSIONS
    with duckdb.connect(str(path), read_only=True) as conn:
        assert conn.execute("SELECT model FROM model_prices").fetchall() == [("house-model",)]
        assert conn.execute("SELECT cached FROM tool_calls").fetchall() == [(True,)]


def test_a_failing_migration_leaves_the_database_as_it_was(tmp_path, monkeypatch):
    path = _v0_database(tmp_path / "lineage.duckdb")
    broken = schema.Migration(99, "broken", "CREATE TABLE half_done (a INTEGER); SELECT * FROM no_such_table;")
    monkeypatch.setattr(schema, "MIGRATIONS", (*schema.MIGRATIONS, broken))
    with duckdb.connect(str(path)) as conn, pytest.raises(duckdb.CatalogException):
        schema.migrate(conn)
    with duckdb.connect(str(path), read_only=True) as conn:
        tables = {r[0] for r in conn.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
        assert "schema_version" not in tables and "half_done" not in tables and "tool_cache" not in tables
        assert "cached" not in dict(_columns(conn, "tool_calls"))


def test_connections_racing_on_a_fresh_file_apply_each_migration_once(tmp_path):
    """Connections of one process share the database and conflict on the catalog; each retries."""
    path = tmp_path / "lineage.duckdb"
    applied: list[list[int]] = []
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def open_and_migrate() -> None:
        try:
            with duckdb.connect(str(path)) as conn:
                start.wait()
                applied.append(schema.migrate(conn))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=open_and_migrate) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sorted(applied, key=len) == [[]] * 7 + [ALL_VERSIONS]
    assert _versions(path) == ALL_VERSIONS


def test_reduction_formula_is_written_once():
    assert schema.VIEWS_SQL.count("100 * (1") == 1
    for view in ("context_reduction_by_research", "context_reduction_by_step", "context_reduction_by_tool"):
        assert view in schema.VIEWS_SQL
    assert "reduction_pct(" in schema.VIEWS_SQL
