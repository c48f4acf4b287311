"""Rich tables for ``deepresearch audit`` and ``deepresearch metrics`` (presentation only)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from ..core.store.audit import Metrics, ResearchAudit


def _fmt(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:,.6f}".rstrip("0").rstrip(".") if abs(value) < 1 else f"{value:,.2f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def _table(title: str, rows: list[dict[str, Any]], columns: list[tuple[str, str]]) -> Table:
    table = Table(title=title, title_justify="left")
    for _, label in columns:
        table.add_column(label, overflow="fold")
    for row in rows:
        table.add_row(*(_fmt(row.get(key)) for key, _ in columns))
    return table


def _cost(value: Any) -> str:
    return "unpriced" if value is None else f"${value:,.4f}"


def render_audit(audit: ResearchAudit, console: Console | None = None) -> None:
    console = console or Console(soft_wrap=True)
    console.print(f"[bold]{audit.partition_key}[/bold]  status: {audit.status}")
    console.print(f"question: {audit.question}")
    console.print(f"report: {audit.report_file or 'not written yet'}")
    if audit.compressor_model:
        console.print(f"summaries: {audit.compressor_model} / {audit.prompt_version}")
    folders = sorted({c.artifact_path.rsplit("/", 1)[0] for c in audit.citations if c.artifact_path})
    if folders:
        console.print(f"raw artifacts: {', '.join(folders)}")

    chain = Table(title="Citations → summary → raw artifact → tool call", title_justify="left")
    for label in ("[n]", "source", "summary", "raw artifact", "tool call"):
        chain.add_column(label, overflow="fold")
    for c in audit.citations:
        if c.call_id is None:
            chain.add_row(f"[{c.n}]", c.source, "—", c.artifact_file, "[red]no tool call recorded[/red]")
            continue
        verified = {True: "sha256 ok", False: "[red]sha256 MISMATCH[/red]", None: "[red]file missing[/red]"}[
            c.artifact_verified
        ]
        summary = f"{c.summary_title or '—'}\n{c.compressor_model} / {c.prompt_version}, {c.injected_tokens} tokens"
        artifact = f"{c.artifact_file}\n{_fmt(c.bytes)} bytes, sha256 {(c.sha256 or '')[:12]}…, {verified}"
        args = ", ".join(f"{k}={v!r}" for k, v in (c.arguments or {}).items())
        call = f"{c.call_id} (step {c.step_id}) {c.tool}({args})\n{c.tool_status}, {_fmt(c.latency_ms)} ms"
        chain.add_row(f"[{c.n}]", c.source, summary, artifact, call + (", cached" if c.cached else ""))
    console.print(chain if audit.citations else "no citations (no report yet)")

    console.print(
        _table(
            "Steps",
            audit.steps,
            [
                ("step_id", "step"),
                ("title", "title"),
                ("tool_calls", "tool calls"),
                ("failures", "failures"),
                ("useful", "useful"),
                ("raw_tokens", "raw tokens"),
                ("injected_tokens", "injected"),
                ("reduction_pct", "reduction %"),
                ("tool_latency_ms", "tool ms"),
            ],
        )
    )
    usage = [{**u, "cost": _cost(u["cost_usd"])} for u in audit.llm_usage]
    console.print(_table("LLM calls by role and model", usage, _USAGE_COLUMNS))
    console.print(_table("Tool calls by tool", audit.tools, _TOOL_COLUMNS))
    if audit.failures:
        console.print(
            _table(
                "Failed tool calls",
                audit.failures,
                [("call_id", "call"), ("tool", "tool"), ("error", "error"), ("artifact_file", "artifact")],
            )
        )
    t = audit.totals
    if t:
        console.print(
            f"totals: {t['tool_calls']} tool calls ({t['tool_failures']} failed), {t['raw_tokens']:,} raw → "
            f"{t['injected_tokens']:,} injected tokens ({_fmt(t['reduction_pct'])} % reduction), "
            f"{t['llm_calls']} LLM calls, {t['prompt_tokens'] + t['completion_tokens']:,} LLM tokens, "
            f"cost {_cost(t['cost_usd'])}" + (" (some models unpriced)" if t["unpriced_models"] else "")
        )


_USAGE_COLUMNS = [
    ("role", "role"),
    ("model", "model"),
    ("calls", "calls"),
    ("failed_attempts", "failed"),
    ("prompt_tokens", "prompt tokens"),
    ("completion_tokens", "completion tokens"),
    ("latency_ms", "latency ms"),
    ("cost", "cost"),
]
_TOOL_COLUMNS = [
    ("tool", "tool"),
    ("calls", "calls"),
    ("failures", "failures"),
    ("cached", "cached"),
    ("avg_latency_ms", "avg ms"),
    ("p50_latency_ms", "p50 ms"),
    ("p95_latency_ms", "p95 ms"),
    ("max_latency_ms", "max ms"),
]


def render_metrics(m: Metrics, console: Console | None = None) -> None:
    console = console or Console(soft_wrap=True)
    t = m.totals
    totals = Table(title="Totals across researches", show_header=False, title_justify="left")
    for label, value in [
        ("researches (with tool calls)", f"{t['researches']} ({t['researched']})"),
        ("tool calls (failed)", f"{t['tool_calls']:,} ({t['tool_failures']:,})"),
        ("raw → injected tokens", f"{t['raw_tokens']:,} → {t['injected_tokens']:,}"),
        ("context reduction", f"{_fmt(t['reduction_pct'])} %"),
        ("LLM calls (failed attempts)", f"{t['llm_calls']:,} ({t['llm_failed_attempts']:,})"),
        ("LLM prompt + completion tokens", f"{t['prompt_tokens']:,} + {t['completion_tokens']:,}"),
        ("cost", _cost(t["cost_usd"])),
    ]:
        totals.add_row(label, value)
    console.print(totals)
    usage = [{**u, "cost": _cost(u["cost_usd"])} for u in m.llm_usage]
    console.print(
        _table(
            "LLM calls by role and model",
            usage,
            [*_USAGE_COLUMNS[:2], ("researches", "researches"), *_USAGE_COLUMNS[2:]],
        )
    )
    console.print(
        _table("Tool calls by tool", m.tools, [*_TOOL_COLUMNS[:3], ("failure_pct", "failure %"), *_TOOL_COLUMNS[3:]])
    )
    researches = [{**r, "cost": _cost(r["cost_usd"])} for r in m.researches]
    console.print(
        _table(
            "Per research",
            researches,
            [
                ("partition_key", "partition"),
                ("tool_calls", "tool calls"),
                ("tool_failures", "failed"),
                ("reduction_pct", "reduction %"),
                ("llm_calls", "LLM calls"),
                ("cost", "cost"),
            ],
        )
    )
