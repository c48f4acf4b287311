"""Audit queries over the lineage database: tokens and cost by role and model, tool-call
latency and failures, per-step context reduction, and the chain from a report citation back
to its summary, raw artifact and tool call.

The views they read are defined in :mod:`.schema` (applied when a ``LineageStore`` opens the
file). Prices come from the caller (``ResearchSettings.prices``, see ``core/llm/pricing.py``);
:func:`sync_prices` copies them into ``model_prices`` before costs are read. A model with no
listed price stays unpriced (NULL cost), never charged as another model.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from ..errors import UnknownResearch
from ..llm.pricing import Price
from .artifacts import ArtifactStore
from .schema import AUDIT_VIEWS

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
    return lineage.research_status(partition_key)


def audit_research(
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
    )


def metrics(lineage: LineageStore, prices: Mapping[str, Price]) -> Metrics:
    sync_prices(lineage, prices)
    researches = _plain(lineage.query("SELECT * FROM research_metrics ORDER BY created_at"))
    totals = lineage.query("SELECT * FROM research_totals")
    return Metrics(
        totals=_plain(totals)[0],
        researches=researches,
        llm_usage=_plain(lineage.query("SELECT * FROM llm_usage_by_role_model ORDER BY role, model")),
        tools=_plain(lineage.query("SELECT * FROM tool_calls_by_tool ORDER BY tool")),
    )
