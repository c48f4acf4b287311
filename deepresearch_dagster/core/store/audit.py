"""Audit queries over the lineage database: tokens and cost by role and model, tool-call
latency and failures, per-step context reduction, and the chain from a report citation back
to its summary, raw artifact and tool call.

The views they read are defined in :mod:`.schema` (applied when a ``LineageStore`` opens the
file). Listings are paged inside DuckDB: ``ls`` and the per-research table of ``metrics`` fetch
one page of researches (newest first) and aggregate only that page's rows. The across-research
part of ``metrics`` (totals, usage by role and model, tools) is kept in ``audit_cache`` under a
fingerprint of the rows it aggregates (counts and hashes of ``tool_calls``, ``llm_calls``,
``research_requests`` and ``model_prices``, plus the view definitions): while nothing changed it
is read back instead of re-aggregated; any write changes the fingerprint.

Prices come from the caller (``ResearchSettings.prices``, see ``core/llm/pricing.py``);
:func:`sync_prices` copies them into ``model_prices`` before costs are read. A model with no
listed price stays unpriced (NULL cost), never charged as another model.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb
from pydantic import BaseModel

from ..errors import UnknownResearch
from ..llm.pricing import Price
from .artifacts import ArtifactStore
from .schema import AUDIT_VIEWS, VIEWS_SQL, research_metrics_select

if TYPE_CHECKING:
    from .lineage import LineageStore

__all__ = [
    "AUDIT_VIEWS",
    "CitationLink",
    "Metrics",
    "ResearchAudit",
    "UnknownPartition",
    "audit_research",
    "metrics",
    "research_page",
    "research_status",
    "sync_prices",
]


def sync_prices(lineage: LineageStore, prices: Mapping[str, Price]) -> None:
    """Make the price table match the configured prices before costs are read; writes only
    when something changed, so a read-only audit does not contend for the lock."""
    wanted = {m: (p.input, p.output) for m, p in prices.items()}
    with lineage.session():
        stored = {
            r["model"]: (r["input_per_1m"], r["output_per_1m"]) for r in lineage.query("SELECT * FROM model_prices")
        }
        if stored == wanted:
            return
        lineage.query("DELETE FROM model_prices")
        for model, (inp, out) in sorted(wanted.items()):
            lineage.query("INSERT INTO model_prices VALUES (?, ?, ?)", [model, inp, out])


# -- reports ---------------------------------------------------------------------------------
# No research is registered under this partition key (message is user-facing).
UnknownPartition = UnknownResearch


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
    # Calls a model proposed after reading tool output, and outputs holding text addressed to the
    # model (core/untrusted.py): the sources named were kept out of working memory and the report.
    untrusted: list[dict[str, Any]] = []


class Metrics(BaseModel):
    totals: dict[str, Any]
    # One page of research_metrics rows, newest first (``limit``/``offset``; limit None: all).
    researches: list[dict[str, Any]]
    llm_usage: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    researches_total: int = 0
    limit: int | None = None
    offset: int = 0


def _plain(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """JSON-friendly values (timestamps and decimals from DuckDB)."""
    return json.loads(json.dumps(rows, default=str))


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text("utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def research_status(lineage: LineageStore, partition_key: str) -> str:
    return lineage.research_status(partition_key)


def audit_research(
    lineage: LineageStore, artifacts_root: str | Path, partition_key: str, prices: Mapping[str, Price]
) -> ResearchAudit:
    with lineage.session():  # one connection for every query of the audit
        return _audit_research(lineage, artifacts_root, partition_key, prices)


def _audit_research(
    lineage: LineageStore, artifacts_root: str | Path, partition_key: str, prices: Mapping[str, Price]
) -> ResearchAudit:
    sync_prices(lineage, prices)
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
            verified = store.verify(row["artifact_path"], row["sha256"])
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
        untrusted=_plain(
            lineage.query(
                "SELECT call_id, tool, arguments, status, tainted, suspected_injection FROM tool_calls "
                "WHERE partition_key = ? AND (tainted OR suspected_injection IS NOT NULL) ORDER BY step_id, seq",
                key,
            )
        ),
    )


# -- pages of researches (ls, metrics) -------------------------------------------------------

_PAGE_SQL = (
    "SELECT partition_key, question, created_at FROM research_requests ORDER BY created_at DESC, partition_key DESC"
)


def _page(lineage: LineageStore, limit: int | None, offset: int) -> tuple[list[dict[str, Any]], int]:
    """One page of registered researches, newest first, and how many there are in all."""
    total = int(lineage.query("SELECT count(*) AS n FROM research_requests")[0]["n"])
    sql, params = _PAGE_SQL, []
    if limit is not None:
        sql, params = f"{sql} LIMIT ? OFFSET ?", [limit, offset]
    elif offset:
        sql, params = f"{sql} OFFSET ?", [offset]
    return lineage.query(sql, params), total


def _in(keys: list[str]) -> tuple[str, list[Any]]:
    """``IN (?, ?, …)`` for a page (DuckDB pushes a short constant list into the table scans);
    a long one (``--limit 0`` over thousands of researches) as one list parameter instead."""
    if len(keys) <= 1000:
        return f"IN ({', '.join('?' for _ in keys)})", list(keys)
    return "IN (SELECT unnest(?::VARCHAR[]))", [list(keys)]


def research_page(lineage: LineageStore, limit: int | None = 50, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
    """``deepresearch ls``: one page of researches, newest first — partition_key, question,
    created_at, the status of the latest run ('registered' before any), tool_calls and
    reduction_pct (as ``LineageStore.list_researches``) — and the number of researches.
    The figures are aggregated over the page's rows only (an IN list DuckDB pushes into the scans)."""
    with lineage.session():
        rows, total = _page(lineage, limit, offset)
        keys = [r["partition_key"] for r in rows]
        if not keys:
            return [], total
        among, params = _in(keys)
        status = {
            r["partition_key"]: r["status"]
            for r in lineage.query(
                f"SELECT partition_key, status FROM runs WHERE partition_key {among} "
                "QUALIFY row_number() OVER (PARTITION BY partition_key ORDER BY started_at DESC) = 1",
                params,
            )
        }
        figures = {
            r["partition_key"]: r
            for r in lineage.query(
                "SELECT partition_key, tool_calls, reduction_pct FROM context_reduction_by_research "
                f"WHERE partition_key {among}",
                params,
            )
        }
    out = []
    for r in rows:
        fig = figures.get(r["partition_key"], {})
        out.append(
            {
                **r,
                "status": status.get(r["partition_key"], "registered"),
                "tool_calls": fig.get("tool_calls"),
                "reduction_pct": fig.get("reduction_pct"),
            }
        )
    return out, total


def _research_metrics_of(lineage: LineageStore, keys: list[str]) -> list[dict[str, Any]]:
    """The ``research_metrics`` rows of ``keys``, newest first: the view's own query, restricted
    inside each aggregate so only those researches' rows are read."""
    if not keys:
        return []
    among, params = _in(keys)
    query = research_metrics_select(among) + "\n    ORDER BY r.created_at DESC, r.partition_key DESC"
    return lineage.query(query, params * 3)


# -- the across-research summary, cached under a fingerprint of its inputs ---------------------

# Changes whenever the views (or this summary's shape) change, so an upgrade never serves a stale
# summary computed by older definitions.
_SUMMARY_VERSION = hashlib.sha256(f"metrics-summary-1\n{VIEWS_SQL}".encode()).hexdigest()[:16]

# Counts plus an order-independent hash (bit_xor of row hashes) of what the summary aggregates:
# an insert, delete or update of any of these rows changes it. Rows are hashed on the key and the
# columns the summary's views read (whole rows would hash every path, argument and error text:
# about twice the time at 1M rows); llm_calls rows are only ever inserted, each with a new id.
_FINGERPRINT_SQL = """
SELECT concat_ws('/',
    (SELECT count(*) || ':' || coalesce(bit_xor(hash(partition_key, call_id, tool, status, cached, is_useful,
            raw_tokens, injected_tokens, latency_ms)), 0) FROM tool_calls),
    (SELECT count(*) || ':' || coalesce(bit_xor(hash(id, partition_key, role, model, status, prompt_tokens,
            completion_tokens, latency_ms)), 0) FROM llm_calls),
    (SELECT count(*) || ':' || coalesce(bit_xor(hash(partition_key, created_at)), 0) FROM research_requests),
    (SELECT count(*) || ':' || coalesce(bit_xor(hash(t)), 0) FROM model_prices t)) AS fingerprint
"""


def _summary(lineage: LineageStore) -> dict[str, Any]:
    """totals (view research_totals), llm_usage (llm_usage_by_role_model) and tools
    (tool_calls_by_tool): read from ``audit_cache`` when the fingerprint still matches, else
    computed and stored. The fingerprint is taken first, so rows written meanwhile can only make
    the stored one older than the data (recomputed next time), never newer."""
    fingerprint = f"{_SUMMARY_VERSION}/{lineage.query(_FINGERPRINT_SQL)[0]['fingerprint']}"
    cached = lineage.query(
        "SELECT payload FROM audit_cache WHERE name = 'metrics_summary' AND fingerprint = ?", [fingerprint]
    )
    if cached:
        return json.loads(cached[0]["payload"])
    summary = {
        "totals": _plain(lineage.query("SELECT * FROM research_totals"))[0],
        "llm_usage": _plain(lineage.query("SELECT * FROM llm_usage_by_role_model ORDER BY role, model")),
        "tools": _plain(lineage.query("SELECT * FROM tool_calls_by_tool ORDER BY tool")),
    }
    # A read-only connection or a concurrent writer only costs the next call a recomputation.
    with contextlib.suppress(duckdb.Error):
        lineage.query(
            "INSERT OR REPLACE INTO audit_cache (name, fingerprint, payload, computed_at) "
            "VALUES ('metrics_summary', ?, ?, current_timestamp) RETURNING name",
            [fingerprint, json.dumps(summary)],
        )
    return summary


def metrics(lineage: LineageStore, prices: Mapping[str, Price], limit: int | None = 20, offset: int = 0) -> Metrics:
    """``deepresearch metrics``: totals, LLM usage by role and model and tool figures across every
    research, plus one page of per-research rows (newest first; ``limit=None``: every research)."""
    with lineage.session():  # one connection for every query
        sync_prices(lineage, prices)
        summary = _summary(lineage)
        page, total = _page(lineage, limit, offset)
        researches = _plain(_research_metrics_of(lineage, [r["partition_key"] for r in page]))
    return Metrics(
        totals=summary["totals"],
        researches=researches,
        llm_usage=summary["llm_usage"],
        tools=summary["tools"],
        researches_total=total,
        limit=limit,
        offset=offset,
    )
