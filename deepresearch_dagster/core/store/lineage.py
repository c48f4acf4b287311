"""DuckDB lineage: requests, runs, plans, tool calls, LLM calls, context, compressions.

Every write opens a short-lived connection (through ``DuckDBResource.get_connection`` in
Dagster, ``duckdb.connect`` in the CLI) so several processes can take turns on the file.
The schema (tables, migrations, views) is :mod:`.schema`; every query of the lineage database
is a named method here (or in :mod:`.audit`), so callers never write SQL.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, ClassVar

import duckdb

from ..errors import redact
from ..models import ResearchPlan, SummaryRecord, ToolCallRecord
from .schema import migrate

Connect = Callable[[], AbstractContextManager[duckdb.DuckDBPyConnection]]


def path_connect(path: str | Path) -> Connect:
    """Connection factory for plain-Python use; retries briefly while another process writes."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)

    @contextmanager
    def connect() -> Iterator[duckdb.DuckDBPyConnection]:
        delay = 0.05
        for attempt in range(40):
            try:
                conn = duckdb.connect(str(path))
                break
            except duckdb.IOException:
                if attempt == 39:
                    raise
                time.sleep(delay)
                delay = min(delay * 1.5, 1.0)
        try:
            yield conn
        finally:
            conn.close()

    return connect


class LineageStore:
    _migrated: ClassVar[set[str]] = set()

    def __init__(self, connect: Connect, database: str | None = None) -> None:
        """``database`` names the file so the schema is applied once per process, not per op."""
        self._connect_new = connect
        self._held: duckdb.DuckDBPyConnection | None = None
        if database is None or database not in self._migrated:
            with self._connect() as conn:
                migrate(conn)  # missing migrations in order, then the views (core/store/schema.py)
            if database is not None:
                self._migrated.add(database)

    @classmethod
    def at(cls, path: str | Path) -> LineageStore:
        return cls(path_connect(path), str(Path(path).resolve()))

    @contextmanager
    def _connect(self) -> Iterator[duckdb.DuckDBPyConnection]:
        if self._held is not None:
            yield self._held
            return
        with self._connect_new() as conn:
            yield conn

    @contextmanager
    def session(self) -> Iterator[None]:
        """Hold one connection for a short unit of work (one tool call, one op) instead of
        opening one per row; the file lock is released again as soon as the unit ends."""
        if self._held is not None:
            yield
            return
        with self._connect_new() as conn:
            self._held = conn
            try:
                yield
            finally:
                self._held = None

    def _exec(self, sql: str, params: list[Any] | None = None) -> None:
        with self._connect() as conn:
            conn.execute(sql, params or [])

    def query(self, sql: str, params: list[Any] | None = None) -> list[dict[str, Any]]:
        """Escape hatch for core/store, tests and benchmarks; everything else calls a named method."""
        with self._connect() as conn:
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

    def run_started(self, run_id: str, partition_key: str, stage: str) -> None:
        self._exec(
            "INSERT OR REPLACE INTO runs VALUES (?, ?, ?, 'running', NULL, current_timestamp, NULL)",
            [run_id, partition_key, stage],
        )

    def run_finished(self, run_id: str, stage: str, error: str | None = None) -> None:
        self._exec(
            "UPDATE runs SET status = ?, error = ?, finished_at = current_timestamp WHERE run_id = ? AND stage = ?",
            ["failed" if error else "succeeded", redact(error) if error else None, run_id, stage],
        )

    def abandon_run(self, run_id: str, reason: str) -> int:
        """Mark every still-running stage of a run failed (its process is gone); returns how many."""
        with self._connect() as conn:
            rows = conn.execute(
                "UPDATE runs SET status = 'failed', error = ?, finished_at = current_timestamp "
                "WHERE run_id = ? AND status = 'running' RETURNING stage",
                [reason, run_id],
            ).fetchall()
        return len(rows)

    # -- plan ----------------------------------------------------------------------------
    def record_plan(self, partition_key: str, run_id: str, plan: ResearchPlan, folder: str) -> None:
        with self._connect() as conn:
            conn.execute("BEGIN")
            conn.execute("DELETE FROM plan_steps WHERE partition_key = ?", [partition_key])
            conn.execute(
                "INSERT OR REPLACE INTO plans (partition_key, run_id, plan_title, plan_folder, plan) "
                "VALUES (?, ?, ?, ?, ?)",
                [partition_key, run_id, plan.plan_title, folder, plan.model_dump_json()],
            )
            conn.executemany(
                "INSERT INTO plan_steps VALUES (?, ?, ?, ?, ?)",
                [[partition_key, s.step_id, i, s.title, s.description] for i, s in enumerate(plan.steps)],
            )
            conn.execute("COMMIT")

    # -- tool calls and context ------------------------------------------------------------
    def clear_research_calls(self, partition_key: str) -> None:
        """A re-run replaces the partition's tool calls so rows always mirror the files."""
        with self._connect() as conn:
            conn.execute("BEGIN")
            conn.execute("DELETE FROM tool_calls WHERE partition_key = ?", [partition_key])
            conn.execute("DELETE FROM context_messages WHERE partition_key = ?", [partition_key])
            conn.execute("COMMIT")

    def record_tool_call(self, partition_key: str, run_id: str, rec: ToolCallRecord) -> None:
        self._exec(
            "INSERT OR REPLACE INTO tool_calls (partition_key, call_id, run_id, step_id, seq, tool, "
            "arguments, artifact_file, artifact_path, bytes, sha256, raw_tokens, latency_ms, status, "
            "error, source, cached) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
            ],
        )

    def put_tool_cache(self, key: str, rec: ToolCallRecord, kind: str, arguments: dict[str, Any]) -> None:
        self._exec(
            "INSERT OR REPLACE INTO tool_cache (cache_key, tool, arguments, artifact_path, sha256, kind, source, "
            "source_title) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [key, rec.tool, json.dumps(arguments), rec.artifact_path, rec.sha256, kind, rec.source, rec.source_title],
        )

    def tool_cache_lookup(self, cache_key: str, ttl_s: float) -> dict[str, Any] | None:
        """The cached tool result (artifact_path, sha256, kind, source, source_title) if it is
        younger than ``ttl_s`` seconds."""
        rows = self.query(
            "SELECT artifact_path, sha256, kind, source, source_title FROM tool_cache WHERE cache_key = ? "
            "AND created_at >= current_timestamp - to_seconds(?)",
            [cache_key, float(ttl_s)],
        )
        return rows[0] if rows else None

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
        self._exec(
            "UPDATE tool_calls SET is_useful = ?, injected_tokens = ?, compression_key = ? "
            "WHERE partition_key = ? AND call_id = ?",
            [summary.result.is_useful, summary.injected_tokens, summary.cache_key, partition_key, summary.call_id],
        )

    def record_summaries(self, partition_key: str, summaries: list[SummaryRecord]) -> None:
        if not summaries:
            return
        with self._connect() as conn:
            conn.executemany(
                "INSERT OR REPLACE INTO summaries (partition_key, call_id, compressor_model, "
                "prompt_version, cache_key, is_useful, injected_tokens, summary_title) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
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

        with self._connect() as conn:
            conn.execute("BEGIN")
            conn.execute(
                "DELETE FROM context_messages WHERE partition_key = ? AND step_id = ?", [partition_key, step_id]
            )
            conn.executemany(
                "INSERT INTO context_messages VALUES (?, ?, ?, ?, ?, ?)",
                [
                    [partition_key, step_id, i, m["role"], m["content"], estimate_tokens(m["content"])]
                    for i, m in enumerate(messages)
                ],
            )
            conn.execute("COMMIT")

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
    ) -> None:
        self._exec(
            "INSERT INTO llm_calls (partition_key, run_id, role, model, attempt, status, error, prompt_tokens, "
            "completion_tokens, latency_ms, artifact, wait_s) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
            ],
        )

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
        )

    def stage_run_ids(self, partition_key: str, table: str) -> list[str]:
        """The runs that wrote a partition's ``plans`` or ``tool_calls`` rows as they stand."""
        if table not in ("plans", "tool_calls"):
            raise ValueError(f"no run ids for {table!r}")
        rows = self.query(f"SELECT DISTINCT run_id FROM {table} WHERE partition_key = ?", [partition_key])
        return [r["run_id"] for r in rows if r["run_id"]]

    # -- compression cache -----------------------------------------------------------------
    def get_compression(self, cache_key: str) -> tuple[dict[str, Any], bool] | None:
        rows = self.query("SELECT result, fallback FROM compressions WHERE cache_key = ?", [cache_key])
        return (json.loads(rows[0]["result"]), bool(rows[0]["fallback"])) if rows else None

    def put_compression(
        self, cache_key: str, raw_sha256: str, model: str, prompt_version: str, result: dict[str, Any], fallback: bool
    ) -> None:
        self._exec(
            "INSERT OR REPLACE INTO compressions (cache_key, raw_sha256, compressor_model, prompt_version, "
            "result, fallback) VALUES (?, ?, ?, ?, ?, ?)",
            [cache_key, raw_sha256, model, prompt_version, json.dumps(result, sort_keys=True), fallback],
        )

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
            conn.executemany(
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
            conn.executemany(
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
                conn.executemany(
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
