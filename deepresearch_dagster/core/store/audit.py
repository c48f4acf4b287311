"""Audit views and queries over the lineage database: tokens and cost by role and model,
tool-call latency and failures, per-step context reduction, and the chain from a report
citation back to its summary, raw artifact and tool call.

Plain Python + SQL; ``LineageStore.__init__`` applies :data:`AUDIT_SQL` after the schema.
Every view aggregates its base table once (no correlated subqueries) so they stay fast on
millions of rows; prices are joined only after aggregation, on a handful of rows.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb
from pydantic import BaseModel, Field, ValidationError

from .artifacts import ArtifactStore, sha256_bytes

if TYPE_CHECKING:
    from .lineage import LineageStore


class Price(BaseModel):
    """USD per one million tokens."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)


# List prices in USD per 1M tokens (input, output); a dated variant such as
# ``gpt-4o-mini-2024-07-18`` is priced by its longest listed prefix. Override or extend with
# DEEPRESEARCH_PRICES (a JSON file path or inline JSON: {"model": {"input": x, "output": y}}).
PRICES: dict[str, Price] = {
    "gpt-4o": Price(input=2.50, output=10.00),
    "gpt-4o-mini": Price(input=0.15, output=0.60),
    "gpt-4.1": Price(input=2.00, output=8.00),
    "gpt-4.1-mini": Price(input=0.40, output=1.60),
    "gpt-4.1-nano": Price(input=0.10, output=0.40),
    "o4-mini": Price(input=1.10, output=4.40),
    "o3-mini": Price(input=1.10, output=4.40),
    "offline-extractive-v1": Price(input=0.0, output=0.0),
}
PRICES_ENV = "DEEPRESEARCH_PRICES"


class PriceConfigError(ValueError):
    """DEEPRESEARCH_PRICES is not a readable price table (message is user-facing)."""


def load_prices(env: dict[str, str] | None = None) -> dict[str, Price]:
    """The built-in table updated by DEEPRESEARCH_PRICES, if set."""
    value = (env if env is not None else os.environ).get(PRICES_ENV, "").strip()
    prices = dict(PRICES)
    if not value:
        return prices
    try:
        text = value if value.startswith("{") else Path(value).read_text("utf-8")
        raw = json.loads(text)
        if not isinstance(raw, dict):
            raise PriceConfigError(f"{PRICES_ENV} must be a JSON object of model -> price")
        for model, price in raw.items():
            prices[str(model)] = (
                Price(input=price[0], output=price[1]) if isinstance(price, list) else Price.model_validate(price)
            )
    except (OSError, json.JSONDecodeError, ValidationError, IndexError, TypeError) as exc:
        raise PriceConfigError(f"{PRICES_ENV}: {exc}") from exc
    return prices


def price_for(model: str, prices: dict[str, Price] | None = None) -> Price | None:
    """Exact match, else the longest listed prefix followed by ``-`` (dated model variants)."""
    table = prices if prices is not None else load_prices()
    if model in table:
        return table[model]
    candidates = [m for m in table if model.startswith(m + "-")]
    return table[max(candidates, key=len)] if candidates else None


def cost_usd(
    model: str, prompt_tokens: int, completion_tokens: int, prices: dict[str, Price] | None = None
) -> float | None:
    price = price_for(model, prices)
    if price is None:
        return None
    return (prompt_tokens * price.input + completion_tokens * price.output) / 1_000_000


# -- DDL ---------------------------------------------------------------------------------------
_REDUCTION = "round(100 * (1 - sum(coalesce(injected_tokens, 0)) / nullif(sum(raw_tokens), 0)), 2)"

AUDIT_SQL = f"""
CREATE TABLE IF NOT EXISTS model_prices (
    model VARCHAR PRIMARY KEY, input_per_1m DOUBLE NOT NULL, output_per_1m DOUBLE NOT NULL);

-- Tokens and cost per research, role and model. Every attempt is a row in llm_calls and is billed.
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
               {_REDUCTION} AS reduction_pct,
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
    WITH calls AS (
        SELECT partition_key, count(*) AS tool_calls,
               count(*) FILTER (WHERE status = 'error') AS tool_failures,
               count(*) FILTER (WHERE is_useful) AS useful,
               coalesce(sum(raw_tokens), 0) AS raw_tokens,
               coalesce(sum(injected_tokens), 0) AS injected_tokens,
               {_REDUCTION} AS reduction_pct
        FROM tool_calls GROUP BY partition_key),
    llm AS (
        SELECT partition_key, sum(calls) AS llm_calls, sum(failed_attempts) AS llm_failed_attempts,
               sum(prompt_tokens) AS prompt_tokens, sum(completion_tokens) AS completion_tokens,
               sum(cost_usd) AS cost_usd, count(*) FILTER (WHERE cost_usd IS NULL) AS unpriced_models
        FROM llm_usage_by_research GROUP BY partition_key)
    SELECT r.partition_key, r.created_at,
           coalesce(c.tool_calls, 0) AS tool_calls, coalesce(c.tool_failures, 0) AS tool_failures,
           coalesce(c.useful, 0) AS useful, coalesce(c.raw_tokens, 0) AS raw_tokens,
           coalesce(c.injected_tokens, 0) AS injected_tokens, c.reduction_pct,
           coalesce(l.llm_calls, 0) AS llm_calls, coalesce(l.llm_failed_attempts, 0) AS llm_failed_attempts,
           coalesce(l.prompt_tokens, 0) AS prompt_tokens, coalesce(l.completion_tokens, 0) AS completion_tokens,
           round(l.cost_usd, 6) AS cost_usd, coalesce(l.unpriced_models, 0) AS unpriced_models
    FROM research_requests r
    LEFT JOIN calls c ON c.partition_key = r.partition_key
    LEFT JOIN llm l ON l.partition_key = r.partition_key;
"""

AUDIT_VIEWS = (
    "llm_usage_by_research",
    "llm_usage_by_role_model",
    "tool_calls_by_research_tool",
    "tool_calls_by_tool",
    "tool_call_failures",
    "artifact_lineage",
    "step_audit",
    "research_metrics",
)


def apply_audit_schema(conn: duckdb.DuckDBPyConnection) -> None:
    """Views plus the price table, seeded with the built-in prices the first time."""
    conn.execute(AUDIT_SQL)
    if conn.execute("SELECT count(*) FROM model_prices").fetchone()[0] == 0:
        conn.executemany(
            "INSERT OR REPLACE INTO model_prices VALUES (?, ?, ?)",
            [[m, p.input, p.output] for m, p in sorted(PRICES.items())],
        )


def sync_prices(lineage: LineageStore, prices: dict[str, Price] | None = None) -> dict[str, Price]:
    """Make the price table match the current configuration before costs are read; writes only
    when something changed, so a read-only audit does not contend for the lock."""
    table = prices if prices is not None else load_prices()
    wanted = {m: (p.input, p.output) for m, p in table.items()}
    with lineage.session():
        stored = {
            r["model"]: (r["input_per_1m"], r["output_per_1m"]) for r in lineage.query("SELECT * FROM model_prices")
        }
        if stored == wanted:
            return table
        lineage.query("DELETE FROM model_prices")
        for model, (inp, out) in sorted(wanted.items()):
            lineage.query("INSERT INTO model_prices VALUES (?, ?, ?)", [model, inp, out])
    return table


# -- reports ---------------------------------------------------------------------------------
class UnknownPartition(LookupError):
    """No research is registered under this partition key (message is user-facing)."""


class CitationLink(BaseModel):
    """One report citation traced back to the tool call that produced its evidence."""

    n: int
    source: str
    artifact_file: str
    call_id: str | None = None
    step_id: str | None = None
    tool: str | None = None
    arguments: dict[str, Any] | None = None
    tool_status: str | None = None
    latency_ms: float | None = None
    cached: bool | None = None
    artifact_path: str | None = None
    bytes: int | None = None
    sha256: str | None = None
    # None when the file is missing; False when its bytes no longer match the recorded sha256.
    artifact_verified: bool | None = None
    summary_title: str | None = None
    compressor_model: str | None = None
    prompt_version: str | None = None
    is_useful: bool | None = None
    injected_tokens: int | None = None

    @property
    def complete(self) -> bool:
        return bool(self.call_id and self.compressor_model and self.artifact_verified)


class ResearchAudit(BaseModel):
    partition_key: str
    question: str
    status: str
    report_file: str | None
    compressor_model: str | None
    prompt_version: str | None
    citations: list[CitationLink]
    steps: list[dict[str, Any]]
    llm_usage: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    failures: list[dict[str, Any]]
    totals: dict[str, Any]


class Metrics(BaseModel):
    totals: dict[str, Any]
    researches: list[dict[str, Any]]
    llm_usage: list[dict[str, Any]]
    tools: list[dict[str, Any]]


def _plain(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """JSON-friendly values (timestamps and decimals from DuckDB)."""
    return json.loads(json.dumps(rows, default=str))


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text("utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def research_status(lineage: LineageStore, partition_key: str) -> str:
    rows = lineage.query(
        "SELECT status FROM runs WHERE partition_key = ? ORDER BY started_at DESC LIMIT 1", [partition_key]
    )
    return rows[0]["status"] if rows else "registered"


def audit_research(lineage: LineageStore, artifacts_root: str | Path, partition_key: str) -> ResearchAudit:
    sync_prices(lineage)
    request = lineage.get_request(partition_key)
    if request is None:
        raise UnknownPartition(f"unknown research partition {partition_key!r} (see `deepresearch ls`)")
    store = ArtifactStore(artifacts_root, partition_key)
    report = _read_json(store.partition_dir / "report.json")
    bundle = _read_json(store.partition_dir / "compressed_summaries.json") or {}
    model, version = bundle.get("compressor_model"), bundle.get("prompt_version")

    lineage_rows = lineage.query(
        "SELECT * FROM artifact_lineage WHERE partition_key = ? ORDER BY step_id, seq", [partition_key]
    )
    by_file: dict[str, dict[str, Any]] = {}
    for row in lineage_rows:
        # Prefer the summary version the current bundle was built with (replays add versions).
        current = row["compressor_model"] == model and row["prompt_version"] == version
        if row["artifact_file"] not in by_file or current:
            by_file[row["artifact_file"]] = row

    links = []
    for c in (report or {}).get("citations", []):
        row = by_file.get(c["artifact_file"])
        link = CitationLink(n=c["n"], source=c["source"], artifact_file=c["artifact_file"])
        if row is not None:
            path = store.root / row["artifact_path"]
            verified = sha256_bytes(path.read_bytes()) == row["sha256"] if path.is_file() else None
            link = link.model_copy(
                update={
                    "call_id": row["call_id"],
                    "step_id": row["step_id"],
                    "tool": row["tool"],
                    "arguments": json.loads(row["arguments"] or "{}"),
                    "tool_status": row["status"],
                    "latency_ms": row["latency_ms"],
                    "cached": row["cached"],
                    "artifact_path": row["artifact_path"],
                    "bytes": row["bytes"],
                    "sha256": row["sha256"],
                    "artifact_verified": verified,
                    "summary_title": row["summary_title"],
                    "compressor_model": row["compressor_model"],
                    "prompt_version": row["prompt_version"],
                    "is_useful": row["is_useful"],
                    "injected_tokens": row["injected_tokens"],
                }
            )
        links.append(link)

    key = [partition_key]
    totals = lineage.query("SELECT * FROM research_metrics WHERE partition_key = ?", key)
    return ResearchAudit(
        partition_key=partition_key,
        question=request[0],
        status=research_status(lineage, partition_key),
        report_file=str(store.partition_dir / "report.md") if report else None,
        compressor_model=model,
        prompt_version=version,
        citations=links,
        steps=_plain(lineage.query("SELECT * FROM step_audit WHERE partition_key = ? ORDER BY position", key)),
        llm_usage=_plain(
            lineage.query("SELECT * FROM llm_usage_by_research WHERE partition_key = ? ORDER BY role, model", key)
        ),
        tools=_plain(
            lineage.query("SELECT * FROM tool_calls_by_research_tool WHERE partition_key = ? ORDER BY tool", key)
        ),
        failures=_plain(
            lineage.query("SELECT * FROM tool_call_failures WHERE partition_key = ? ORDER BY call_id", key)
        ),
        totals=_plain(totals)[0] if totals else {},
    )


def metrics(lineage: LineageStore) -> Metrics:
    sync_prices(lineage)
    researches = _plain(lineage.query("SELECT * FROM research_metrics ORDER BY created_at"))
    totals = lineage.query(
        """
        SELECT count(*) AS researches, count(*) FILTER (WHERE tool_calls > 0) AS researched,
               coalesce(sum(tool_calls), 0) AS tool_calls, coalesce(sum(tool_failures), 0) AS tool_failures,
               coalesce(sum(useful), 0) AS useful, coalesce(sum(raw_tokens), 0) AS raw_tokens,
               coalesce(sum(injected_tokens), 0) AS injected_tokens,
               round(100 * (1 - sum(injected_tokens) / nullif(sum(raw_tokens), 0)), 2) AS reduction_pct,
               coalesce(sum(llm_calls), 0) AS llm_calls, coalesce(sum(llm_failed_attempts), 0) AS llm_failed_attempts,
               coalesce(sum(prompt_tokens), 0) AS prompt_tokens,
               coalesce(sum(completion_tokens), 0) AS completion_tokens,
               round(sum(cost_usd), 6) AS cost_usd
        FROM research_metrics
        """
    )
    return Metrics(
        totals=_plain(totals)[0],
        researches=researches,
        llm_usage=_plain(lineage.query("SELECT * FROM llm_usage_by_role_model ORDER BY role, model")),
        tools=_plain(lineage.query("SELECT * FROM tool_calls_by_tool ORDER BY tool")),
    )
