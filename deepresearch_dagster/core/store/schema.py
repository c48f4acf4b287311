"""Every table, view and macro of the lineage database, and the ordered migrations that build them.

A database records the migrations it has had in ``schema_version`` (one row per version).
Opening a database applies the missing ones in order, then (re)creates the macro and views, all
in one transaction: a file written by any earlier release (with no ``schema_version`` at all) is
brought up to date before the first insert. Every migration is idempotent (``IF NOT EXISTS``),
because an unversioned file may come from any earlier release.

DuckDB admits one writing process per file, so processes take turns; connections of one
process share the database and may race on a fresh file, which :func:`migrate` absorbs by
retrying the whole transaction after a conflict (the version is re-read inside it).

The context-reduction formula lives here once, as the ``reduction_pct`` macro; every view that
reports a reduction uses it.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import duckdb

from ..llm.pricing import DEFAULT_PRICES

# -- migrations ------------------------------------------------------------------------------

# Version 1: the tables of the first release, exactly as it created them.
BASELINE_SQL = """
CREATE TABLE IF NOT EXISTS research_requests (
    partition_key VARCHAR PRIMARY KEY, question VARCHAR NOT NULL, options JSON,
    created_at TIMESTAMP DEFAULT current_timestamp);
CREATE TABLE IF NOT EXISTS runs (
    run_id VARCHAR, partition_key VARCHAR, stage VARCHAR, status VARCHAR, error VARCHAR,
    started_at TIMESTAMP, finished_at TIMESTAMP, PRIMARY KEY (run_id, stage));
CREATE TABLE IF NOT EXISTS plans (
    partition_key VARCHAR PRIMARY KEY, run_id VARCHAR, plan_title VARCHAR, plan_folder VARCHAR,
    plan JSON, created_at TIMESTAMP DEFAULT current_timestamp);
CREATE TABLE IF NOT EXISTS plan_steps (
    partition_key VARCHAR, step_id VARCHAR, position INTEGER, title VARCHAR, description VARCHAR,
    PRIMARY KEY (partition_key, step_id));
CREATE TABLE IF NOT EXISTS tool_calls (
    partition_key VARCHAR, call_id VARCHAR, run_id VARCHAR, step_id VARCHAR, seq INTEGER,
    tool VARCHAR, arguments JSON, artifact_file VARCHAR, artifact_path VARCHAR, bytes BIGINT,
    sha256 VARCHAR, raw_tokens INTEGER, latency_ms DOUBLE, status VARCHAR, error VARCHAR,
    source VARCHAR, is_useful BOOLEAN, injected_tokens INTEGER, compression_key VARCHAR,
    created_at TIMESTAMP DEFAULT current_timestamp, PRIMARY KEY (partition_key, call_id));
CREATE SEQUENCE IF NOT EXISTS llm_call_ids;
CREATE TABLE IF NOT EXISTS llm_calls (
    id BIGINT PRIMARY KEY DEFAULT nextval('llm_call_ids'), partition_key VARCHAR, run_id VARCHAR,
    role VARCHAR, model VARCHAR, attempt INTEGER, status VARCHAR, error VARCHAR,
    prompt_tokens INTEGER, completion_tokens INTEGER, latency_ms DOUBLE, artifact VARCHAR,
    created_at TIMESTAMP DEFAULT current_timestamp);
CREATE TABLE IF NOT EXISTS context_messages (
    partition_key VARCHAR, step_id VARCHAR, position INTEGER, role VARCHAR, content VARCHAR,
    tokens INTEGER, PRIMARY KEY (partition_key, step_id, position));
CREATE TABLE IF NOT EXISTS compressions (
    cache_key VARCHAR PRIMARY KEY, raw_sha256 VARCHAR, compressor_model VARCHAR,
    prompt_version VARCHAR, result JSON, fallback BOOLEAN,
    created_at TIMESTAMP DEFAULT current_timestamp);
CREATE TABLE IF NOT EXISTS summaries (
    partition_key VARCHAR, call_id VARCHAR, compressor_model VARCHAR, prompt_version VARCHAR,
    cache_key VARCHAR, is_useful BOOLEAN, injected_tokens INTEGER, summary_title VARCHAR,
    created_at TIMESTAMP DEFAULT current_timestamp,
    PRIMARY KEY (partition_key, call_id, compressor_model, prompt_version));
"""

# Version 2: the time an LLM call waited on the rate limiter.
LLM_WAIT_SQL = "ALTER TABLE llm_calls ADD COLUMN IF NOT EXISTS wait_s DOUBLE DEFAULT 0;"

# Version 3: the tool-call cache, and whether a tool call was served from it.
TOOL_CACHE_SQL = """
CREATE TABLE IF NOT EXISTS tool_cache (
    cache_key VARCHAR PRIMARY KEY, tool VARCHAR, arguments JSON, artifact_path VARCHAR, sha256 VARCHAR,
    kind VARCHAR, source VARCHAR, source_title VARCHAR, created_at TIMESTAMP DEFAULT current_timestamp);
ALTER TABLE tool_calls ADD COLUMN IF NOT EXISTS cached BOOLEAN DEFAULT false;
"""

# Version 4: research depth (critic rounds, budget ledger, source scores, verified citations).
DEPTH_SQL = """
CREATE TABLE IF NOT EXISTS critic_rounds (
    partition_key VARCHAR, round INTEGER, sufficiency INTEGER, decision VARCHAR, fallback BOOLEAN, verdict JSON,
    created_at TIMESTAMP DEFAULT current_timestamp, PRIMARY KEY (partition_key, round));
CREATE TABLE IF NOT EXISTS budget_ledger (
    partition_key VARCHAR, run_id VARCHAR, stage VARCHAR, dimension VARCHAR, cap DOUBLE, spent DOUBLE,
    fraction DOUBLE, events JSON, created_at TIMESTAMP DEFAULT current_timestamp);
CREATE TABLE IF NOT EXISTS source_scores (
    partition_key VARCHAR, source VARCHAR, domain VARCHAR, credibility DOUBLE, recency DOUBLE,
    corroboration DOUBLE, score DOUBLE, published VARCHAR, PRIMARY KEY (partition_key, source));
CREATE TABLE IF NOT EXISTS citations (
    partition_key VARCHAR, n INTEGER, source VARCHAR, artifact_file VARCHAR, quote VARCHAR, verified BOOLEAN,
    PRIMARY KEY (partition_key, n));
"""

# Version 5: the price table the cost views join (kept in step with the configuration by
# ``audit.sync_prices``; seeded with the built-in prices so the views price from the start).
PRICES_SQL = """
CREATE TABLE IF NOT EXISTS model_prices (
    model VARCHAR PRIMARY KEY, input_per_1m DOUBLE NOT NULL, output_per_1m DOUBLE NOT NULL);
"""


# Version 8: a model compression's statements checked against the raw output (roles/compressor.py):
# how many were kept and how many dropped, with the cached compression and each research's summary.
GROUNDING_SQL = """
ALTER TABLE compressions ADD COLUMN IF NOT EXISTS grounded INTEGER DEFAULT 0;
ALTER TABLE compressions ADD COLUMN IF NOT EXISTS dropped INTEGER DEFAULT 0;
ALTER TABLE summaries ADD COLUMN IF NOT EXISTS grounded INTEGER DEFAULT 0;
ALTER TABLE summaries ADD COLUMN IF NOT EXISTS dropped INTEGER DEFAULT 0;
"""


# Version 9: untrusted text (core/untrusted.py, roles/provenance.py): a call a model proposed after
# tool output entered its conversation, the sources of an output whose text addresses the model
# (a JSON list; NULL when none), and a cached page's links (provenance for what it links to).
UNTRUSTED_SQL = """
ALTER TABLE tool_calls ADD COLUMN IF NOT EXISTS tainted BOOLEAN DEFAULT false;
ALTER TABLE tool_calls ADD COLUMN IF NOT EXISTS suspected_injection JSON;
ALTER TABLE tool_cache ADD COLUMN IF NOT EXISTS links JSON;
"""

# Version 11: each answer's prompt-processing and generation speed, tokens per second (the server's
# own timings, else measured on the stream; NULL when unknown: core/llm/openai_engine.py speeds).
SPEED_SQL = """
ALTER TABLE llm_calls ADD COLUMN IF NOT EXISTS prompt_tps DOUBLE;
ALTER TABLE llm_calls ADD COLUMN IF NOT EXISTS gen_tps DOUBLE;
"""


def _seed_prices(conn: duckdb.DuckDBPyConnection) -> None:
    if conn.execute("SELECT count(*) FROM model_prices").fetchone()[0] == 0:
        conn.executemany(
            "INSERT INTO model_prices VALUES (?, ?, ?)",
            [[m, p.input, p.output] for m, p in sorted(DEFAULT_PRICES.items())],
        )


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    sql: str
    after: Callable[[duckdb.DuckDBPyConnection], None] | None = None

    def apply(self, conn: duckdb.DuckDBPyConnection) -> None:
        conn.execute(self.sql)
        if self.after is not None:
            self.after(conn)


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "baseline tables", BASELINE_SQL),
    Migration(2, "llm_calls.wait_s", LLM_WAIT_SQL),
    Migration(3, "tool_cache table, tool_calls.cached", TOOL_CACHE_SQL),
    Migration(4, "critic_rounds, budget_ledger, source_scores, citations", DEPTH_SQL),
    Migration(5, "model_prices", PRICES_SQL, _seed_prices),
    # Prompt tokens the provider served from its prompt cache (0 when it does not say).
    Migration(
        6, "llm_calls.cached_tokens", "ALTER TABLE llm_calls ADD COLUMN IF NOT EXISTS cached_tokens INTEGER DEFAULT 0;"
    ),
    # The across-research part of `deepresearch metrics`, kept under a fingerprint of the rows it
    # aggregates (core/store/audit.py: _summary) so an unchanged database is not re-aggregated.
    Migration(
        7,
        "audit_cache",
        "CREATE TABLE IF NOT EXISTS audit_cache (name VARCHAR PRIMARY KEY, fingerprint VARCHAR NOT NULL, "
        "payload JSON NOT NULL, computed_at TIMESTAMP DEFAULT current_timestamp);",
    ),
    Migration(8, "compressions and summaries: grounded, dropped", GROUNDING_SQL),
    Migration(9, "tool_calls: tainted, suspected_injection; tool_cache.links", UNTRUSTED_SQL),
    # Every critique, revision and draft of a report (core/roles/revision.py), per research.
    Migration(
        10,
        "report_revisions",
        "CREATE TABLE IF NOT EXISTS report_revisions (partition_key VARCHAR, draft INTEGER, round INTEGER, "
        "stage VARCHAR, issues INTEGER, counts JSON, artifact VARCHAR, accepted BOOLEAN);",
    ),
    Migration(11, "llm_calls: prompt_tps, gen_tps", SPEED_SQL),
    # Lineage in Postgres: each writing process's last commit marker, written in the committed
    # transaction, so a COMMIT whose answer was lost is known to have happened or not
    # (core/store/lineage.py: _PostgresLease) instead of its rows being written twice.
    Migration(
        12,
        "lineage_commits",
        "CREATE TABLE IF NOT EXISTS lineage_commits (writer VARCHAR PRIMARY KEY, token VARCHAR NOT NULL, "
        "committed_at TIMESTAMP DEFAULT current_timestamp);",
    ),
)
LATEST_VERSION = MIGRATIONS[-1].version

SCHEMA_VERSION_SQL = """
CREATE TABLE IF NOT EXISTS schema_version (
    version INTEGER PRIMARY KEY, applied_at TIMESTAMP DEFAULT current_timestamp);
"""

# -- macro and views (recreated on every open, after the migrations) ---------------------------


def research_metrics_select(among: str = "") -> str:
    """The query behind the ``research_metrics`` view. ``among`` (``IN (?, …)``) restricts it to
    some researches inside each aggregate, so a page of rows reads only those researches' rows
    (core/store/audit.py; its parameters go three times, once per restriction)."""
    where = f"WHERE partition_key {among}" if among else ""
    final_where = f"WHERE r.partition_key {among}" if among else ""
    return f"""
    WITH calls AS (
        SELECT partition_key, count(*) AS tool_calls,
               count(*) FILTER (WHERE status = 'error') AS tool_failures,
               count(*) FILTER (WHERE is_useful) AS useful,
               coalesce(sum(raw_tokens), 0) AS raw_tokens,
               coalesce(sum(injected_tokens), 0) AS injected_tokens,
               reduction_pct(sum(injected_tokens), sum(raw_tokens)) AS reduction_pct
        FROM tool_calls {where} GROUP BY partition_key),
    llm AS (
        SELECT partition_key, sum(calls) AS llm_calls, sum(failed_attempts) AS llm_failed_attempts,
               sum(prompt_tokens) AS prompt_tokens, sum(completion_tokens) AS completion_tokens,
               sum(cost_usd) AS cost_usd, count(*) FILTER (WHERE cost_usd IS NULL) AS unpriced_models
        FROM llm_usage_by_research {where} GROUP BY partition_key)
    SELECT r.partition_key, r.created_at,
           coalesce(c.tool_calls, 0) AS tool_calls, coalesce(c.tool_failures, 0) AS tool_failures,
           coalesce(c.useful, 0) AS useful, coalesce(c.raw_tokens, 0) AS raw_tokens,
           coalesce(c.injected_tokens, 0) AS injected_tokens, c.reduction_pct,
           coalesce(l.llm_calls, 0) AS llm_calls, coalesce(l.llm_failed_attempts, 0) AS llm_failed_attempts,
           coalesce(l.prompt_tokens, 0) AS prompt_tokens, coalesce(l.completion_tokens, 0) AS completion_tokens,
           round(l.cost_usd, 6) AS cost_usd, coalesce(l.unpriced_models, 0) AS unpriced_models
    FROM research_requests r
    LEFT JOIN calls c ON c.partition_key = r.partition_key
    LEFT JOIN llm l ON l.partition_key = r.partition_key
    {final_where}"""


VIEWS_SQL = (
    """
-- The one definition of context reduction: the share of raw tool-output tokens that did not
-- enter the model's context. NULL when nothing raw was recorded.
CREATE OR REPLACE MACRO reduction_pct(injected, raw) AS
    round(100 * (1 - coalesce(injected, 0) / nullif(raw, 0)), 2);

CREATE OR REPLACE VIEW context_reduction_by_research AS
    SELECT partition_key, count(*) AS tool_calls, count(*) FILTER (WHERE is_useful) AS useful,
           sum(raw_tokens) AS raw_tokens, sum(coalesce(injected_tokens, 0)) AS injected_tokens,
           reduction_pct(sum(injected_tokens), sum(raw_tokens)) AS reduction_pct
    FROM tool_calls GROUP BY partition_key;

CREATE OR REPLACE VIEW context_reduction_by_step AS
    SELECT partition_key, step_id, count(*) AS tool_calls, sum(raw_tokens) AS raw_tokens,
           sum(coalesce(injected_tokens, 0)) AS injected_tokens,
           reduction_pct(sum(injected_tokens), sum(raw_tokens)) AS reduction_pct
    FROM tool_calls GROUP BY partition_key, step_id;

CREATE OR REPLACE VIEW context_reduction_by_tool AS
    SELECT partition_key, tool, count(*) AS tool_calls, sum(raw_tokens) AS raw_tokens,
           sum(coalesce(injected_tokens, 0)) AS injected_tokens,
           reduction_pct(sum(injected_tokens), sum(raw_tokens)) AS reduction_pct
    FROM tool_calls GROUP BY partition_key, tool;

-- Per compressor model and prompt version (a replay adds a version): the raw tokens of the
-- summarised tool calls against what that version's summaries injected.
CREATE OR REPLACE VIEW context_reduction_by_summary_version AS
    SELECT s.partition_key, s.compressor_model, s.prompt_version, count(*) AS tool_calls,
           coalesce(sum(t.raw_tokens), 0) AS raw_tokens,
           coalesce(sum(s.injected_tokens), 0) AS injected_tokens,
           reduction_pct(sum(s.injected_tokens), sum(t.raw_tokens)) AS reduction_pct
    FROM summaries s
    JOIN tool_calls t ON t.partition_key = s.partition_key AND t.call_id = s.call_id
    GROUP BY s.partition_key, s.compressor_model, s.prompt_version;

-- Tokens and cost per research, role and model. Every attempt is a row in llm_calls and is billed.
-- Prices are joined after aggregation: exact model, else the longest listed prefix + '-'.
CREATE OR REPLACE VIEW llm_usage_by_research AS
    WITH usage AS (
        SELECT partition_key, role, model, count(*) AS calls,
               count(*) FILTER (WHERE status = 'ok') AS ok_calls,
               count(*) FILTER (WHERE status NOT IN ('ok', 'fallback')) AS failed_attempts,
               count(*) FILTER (WHERE status = 'fallback') AS fallbacks,
               coalesce(sum(prompt_tokens), 0) AS prompt_tokens,
               coalesce(sum(completion_tokens), 0) AS completion_tokens,
               round(coalesce(sum(latency_ms), 0), 3) AS latency_ms, round(coalesce(sum(wait_s), 0), 3) AS wait_s
        FROM llm_calls GROUP BY partition_key, role, model)
    SELECT u.*, u.prompt_tokens + u.completion_tokens AS total_tokens,
           round((u.prompt_tokens * p.input_per_1m + u.completion_tokens * p.output_per_1m) / 1e6, 6) AS cost_usd
    FROM usage u LEFT JOIN model_prices p ON u.model = p.model OR starts_with(u.model, p.model || '-')
    QUALIFY row_number() OVER (PARTITION BY u.partition_key, u.role, u.model ORDER BY length(p.model) DESC) = 1;

-- The same across every research.
CREATE OR REPLACE VIEW llm_usage_by_role_model AS
    WITH usage AS (
        SELECT role, model, count(DISTINCT partition_key) AS researches, count(*) AS calls,
               count(*) FILTER (WHERE status = 'ok') AS ok_calls,
               count(*) FILTER (WHERE status NOT IN ('ok', 'fallback')) AS failed_attempts,
               count(*) FILTER (WHERE status = 'fallback') AS fallbacks,
               coalesce(sum(prompt_tokens), 0) AS prompt_tokens,
               coalesce(sum(completion_tokens), 0) AS completion_tokens,
               round(coalesce(sum(latency_ms), 0), 3) AS latency_ms
        FROM llm_calls GROUP BY role, model)
    SELECT u.*, u.prompt_tokens + u.completion_tokens AS total_tokens,
           round((u.prompt_tokens * p.input_per_1m + u.completion_tokens * p.output_per_1m) / 1e6, 6) AS cost_usd
    FROM usage u LEFT JOIN model_prices p ON u.model = p.model OR starts_with(u.model, p.model || '-')
    QUALIFY row_number() OVER (PARTITION BY u.role, u.model ORDER BY length(p.model) DESC) = 1;

-- Tool-call latency and failures per research and tool, and across researches.
CREATE OR REPLACE VIEW tool_calls_by_research_tool AS
    SELECT partition_key, tool, count(*) AS calls,
           count(*) FILTER (WHERE status = 'error') AS failures,
           count(*) FILTER (WHERE cached) AS cached,
           coalesce(sum(bytes), 0) AS bytes, coalesce(sum(raw_tokens), 0) AS raw_tokens,
           round(avg(latency_ms), 3) AS avg_latency_ms,
           round(quantile_cont(latency_ms, 0.5), 3) AS p50_latency_ms,
           round(quantile_cont(latency_ms, 0.95), 3) AS p95_latency_ms,
           round(max(latency_ms), 3) AS max_latency_ms
    FROM tool_calls GROUP BY partition_key, tool;

CREATE OR REPLACE VIEW tool_calls_by_tool AS
    SELECT tool, count(DISTINCT partition_key) AS researches, count(*) AS calls,
           count(*) FILTER (WHERE status = 'error') AS failures,
           round(100.0 * count(*) FILTER (WHERE status = 'error') / count(*), 2) AS failure_pct,
           count(*) FILTER (WHERE cached) AS cached,
           round(avg(latency_ms), 3) AS avg_latency_ms,
           round(quantile_cont(latency_ms, 0.5), 3) AS p50_latency_ms,
           round(quantile_cont(latency_ms, 0.95), 3) AS p95_latency_ms,
           round(max(latency_ms), 3) AS max_latency_ms
    FROM tool_calls GROUP BY tool;

CREATE OR REPLACE VIEW tool_call_failures AS
    SELECT partition_key, call_id, step_id, tool, arguments, error, artifact_file, latency_ms, created_at
    FROM tool_calls WHERE status = 'error';

-- One row per tool call and summary version: tool call -> raw artifact -> compressed summary.
CREATE OR REPLACE VIEW artifact_lineage AS
    SELECT t.partition_key, t.call_id, t.step_id, t.seq, t.tool, t.arguments, t.status, t.error,
           t.latency_ms, t.cached, t.run_id, t.source, t.artifact_file, t.artifact_path, t.bytes,
           t.sha256, t.raw_tokens, s.compressor_model, s.prompt_version, s.cache_key,
           s.is_useful, s.injected_tokens, s.summary_title
    FROM tool_calls t
    LEFT JOIN summaries s ON s.partition_key = t.partition_key AND s.call_id = t.call_id;

-- Per step: what the tools returned, what entered the context, and how long the tools took.
CREATE OR REPLACE VIEW step_audit AS
    WITH calls AS (
        SELECT partition_key, step_id, count(*) AS tool_calls,
               count(*) FILTER (WHERE status = 'error') AS failures,
               count(*) FILTER (WHERE is_useful) AS useful,
               coalesce(sum(raw_tokens), 0) AS raw_tokens,
               coalesce(sum(injected_tokens), 0) AS injected_tokens,
               reduction_pct(sum(injected_tokens), sum(raw_tokens)) AS reduction_pct,
               round(coalesce(sum(latency_ms), 0), 3) AS tool_latency_ms
        FROM tool_calls GROUP BY partition_key, step_id)
    SELECT p.partition_key, p.step_id, p.position, p.title,
           coalesce(c.tool_calls, 0) AS tool_calls, coalesce(c.failures, 0) AS failures,
           coalesce(c.useful, 0) AS useful, coalesce(c.raw_tokens, 0) AS raw_tokens,
           coalesce(c.injected_tokens, 0) AS injected_tokens, c.reduction_pct,
           coalesce(c.tool_latency_ms, 0) AS tool_latency_ms
    FROM plan_steps p LEFT JOIN calls c ON c.partition_key = p.partition_key AND c.step_id = p.step_id;

-- One row per research: requests joined to pre-aggregated tool and LLM figures.
CREATE OR REPLACE VIEW research_metrics AS
"""
    + research_metrics_select()
    + """;

-- Totals across every research (what `deepresearch metrics` prints first).
CREATE OR REPLACE VIEW research_totals AS
    SELECT count(*) AS researches, count(*) FILTER (WHERE tool_calls > 0) AS researched,
           coalesce(sum(tool_calls), 0) AS tool_calls, coalesce(sum(tool_failures), 0) AS tool_failures,
           coalesce(sum(useful), 0) AS useful, coalesce(sum(raw_tokens), 0) AS raw_tokens,
           coalesce(sum(injected_tokens), 0) AS injected_tokens,
           reduction_pct(sum(injected_tokens), sum(raw_tokens)) AS reduction_pct,
           coalesce(sum(llm_calls), 0) AS llm_calls, coalesce(sum(llm_failed_attempts), 0) AS llm_failed_attempts,
           coalesce(sum(prompt_tokens), 0) AS prompt_tokens,
           coalesce(sum(completion_tokens), 0) AS completion_tokens,
           round(sum(cost_usd), 6) AS cost_usd
    FROM research_metrics;
"""
)

AUDIT_VIEWS = (
    "llm_usage_by_research",
    "llm_usage_by_role_model",
    "tool_calls_by_research_tool",
    "tool_calls_by_tool",
    "tool_call_failures",
    "artifact_lineage",
    "step_audit",
    "research_metrics",
    "research_totals",
)

# -- applying ----------------------------------------------------------------------------------

# What a connection racing another one on the same catalog gets ("write-write conflict").
_CONFLICTS = (duckdb.TransactionException, duckdb.ConstraintException)
_ATTEMPTS = 20


def schema_version(conn: duckdb.DuckDBPyConnection) -> int:
    """The highest migration applied to this database (0 for a file from before versioning)."""
    exists = conn.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'schema_version' AND schema_name = 'main'"
    ).fetchone()[0]
    if not exists:
        return 0
    return int(conn.execute("SELECT coalesce(max(version), 0) FROM schema_version").fetchone()[0])


def _migrate_once(conn: duckdb.DuckDBPyConnection) -> list[int]:
    conn.execute("BEGIN TRANSACTION")
    try:
        conn.execute(SCHEMA_VERSION_SQL)
        current = schema_version(conn)  # re-read inside the transaction: another connection may have won
        applied = []
        for migration in MIGRATIONS:
            if migration.version > current:
                migration.apply(conn)
                conn.execute("INSERT INTO schema_version (version) VALUES (?)", [migration.version])
                applied.append(migration.version)
        conn.execute(VIEWS_SQL)
        conn.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(duckdb.Error):  # the failed statement may have ended it already
            conn.execute("ROLLBACK")
        raise
    return applied


# -- on Postgres (core/store/lineage_postgres.py) ------------------------------------------------
# What DuckDB's postgres extension cannot do with this schema, and what is done instead:
# * CREATE SEQUENCE and CREATE MACRO ("Postgres databases do not support creating sequences /
#   functions"), and ALTER TABLE … ADD COLUMN with a DEFAULT ("only constant DEFAULT expressions
#   are supported"): the migrations' DDL is run by Postgres itself (postgres_execute), with
#   DuckDB's DOUBLE spelled DOUBLE PRECISION;
# * JSON columns: the extension's upserts (INSERT OR REPLACE, ON CONFLICT DO UPDATE) send VARCHAR,
#   which Postgres refuses for a json column ("column … is of type json but expression is of type
#   character varying"): they are TEXT in Postgres, and DuckDB's JSON functions read them alike;
# * the extension's upserts send NULL for the columns a statement leaves out, where DuckDB would
#   apply the DEFAULT (a new row) or keep the value (an existing one): a trigger does the same for
#   ``created_at`` (the one such column the upserts leave out that queries read);
# * views and the macro use DuckDB SQL (QUALIFY, FILTER, quantile_cont, the macro itself): they
#   are TEMP on each connection, over the attached tables, instead of stored in Postgres.
_PG_TYPES = ((re.compile(r"\bDOUBLE\b"), "DOUBLE PRECISION"), (re.compile(r"\bJSON\b"), "TEXT"))
# pg_advisory_xact_lock key: one migrating process at a time across hosts (any constant of our own).
PG_MIGRATION_LOCK = 7_420_251_125


_PG_CREATED_AT_SQL = """
CREATE OR REPLACE FUNCTION keep_created_at() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
    IF NEW.created_at IS NULL THEN
        IF TG_OP = 'UPDATE' THEN NEW.created_at := OLD.created_at; END IF;
        NEW.created_at := coalesce(NEW.created_at, current_timestamp);
    END IF;
    RETURN NEW;
END $f$;
DO $d$ DECLARE t text; BEGIN
    FOR t IN SELECT table_name FROM information_schema.columns
             WHERE table_schema = current_schema() AND column_name = 'created_at' LOOP
        EXECUTE format('DROP TRIGGER IF EXISTS keep_created_at ON %I', t);
        EXECUTE format('CREATE TRIGGER keep_created_at BEFORE INSERT OR UPDATE ON %I '
                       'FOR EACH ROW EXECUTE FUNCTION keep_created_at()', t);
    END LOOP;
END $d$;
"""


ALIAS = "lineage"  # the attached database, as DuckDB names it (core/store/lineage_postgres.py)
SCHEMA = "deepresearch"  # the Postgres schema of the lineage tables (Dagster's own are in public)


def postgres_execute(conn: Any, sql: str, in_schema: bool = True) -> None:
    """Postgres SQL run by Postgres itself (DDL the extension cannot translate), in the current
    transaction, in the lineage schema."""
    prefix = f"SET LOCAL search_path TO {SCHEMA}; " if in_schema else ""
    conn.execute(f"CALL postgres_execute('{ALIAS}', ?)", [prefix + sql])


def postgres_ddl(sql: str) -> str:
    for pattern, replacement in _PG_TYPES:
        sql = pattern.sub(replacement, sql)
    return sql


def temp_views_sql() -> str:
    return VIEWS_SQL.replace("CREATE OR REPLACE VIEW", "CREATE OR REPLACE TEMP VIEW").replace(
        "CREATE OR REPLACE MACRO", "CREATE OR REPLACE TEMP MACRO"
    )


def migrate_postgres(conn: duckdb.DuckDBPyConnection) -> list[int]:
    """:func:`migrate` for lineage in Postgres: the missing migrations in one transaction under
    an advisory lock (hosts migrating at once take turns), then this connection's views. The
    extension's transactions are REPEATABLE READ: one that waited for the lock sees the catalog
    as it was before the winner committed, fails, and is tried again with a fresh snapshot."""
    delay = 0.05
    for attempt in range(_ATTEMPTS):
        try:
            return _migrate_postgres_once(conn)
        except duckdb.Error:
            if attempt == _ATTEMPTS - 1:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.5)
    raise AssertionError("unreachable")


def _migrate_postgres_once(conn: duckdb.DuckDBPyConnection) -> list[int]:
    conn.execute("BEGIN TRANSACTION")
    try:
        postgres_execute(conn, f"SELECT pg_advisory_xact_lock({PG_MIGRATION_LOCK})")
        postgres_execute(conn, postgres_ddl(SCHEMA_VERSION_SQL))
        conn.execute("CALL pg_clear_cache()")
        current = int(conn.execute("SELECT coalesce(max(version), 0) FROM schema_version").fetchone()[0])
        applied = []
        for migration in MIGRATIONS:
            if migration.version > current:
                postgres_execute(conn, postgres_ddl(migration.sql))
                conn.execute("CALL pg_clear_cache()")
                if migration.after is not None:
                    migration.after(conn)
                conn.execute("INSERT INTO schema_version (version) VALUES (?)", [migration.version])
                applied.append(migration.version)
        if applied:
            postgres_execute(conn, _PG_CREATED_AT_SQL)
        conn.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(duckdb.Error):
            conn.execute("ROLLBACK")
        raise
    conn.execute("CALL pg_clear_cache()")  # another host's migrations, if it won the lock
    conn.execute(temp_views_sql())
    return applied


def migrate(conn: duckdb.DuckDBPyConnection) -> list[int]:
    """Apply the missing migrations in order, then (re)create the macro and views, in one
    transaction; retried when another connection changed the catalog at the same time.
    Returns the versions applied."""
    delay = 0.02
    for attempt in range(_ATTEMPTS):
        try:
            return _migrate_once(conn)
        except _CONFLICTS:
            if attempt == _ATTEMPTS - 1:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.5)
    raise AssertionError("unreachable")
