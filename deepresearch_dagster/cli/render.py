"""Rich tables for ``deepresearch audit`` and ``deepresearch metrics`` (presentation only).

A table that would not fit the terminal is printed stacked instead (one block per row, one
``label: value`` line per cell), so 80–100 columns never break a word in the middle of a cell.

Every value from the data (file names, sources, questions, titles, errors) is printed as plain
text, never as Rich markup, with control characters escaped (``core.naming.printable_name``): a
corpus file named ``a\nb.md`` or ``[red]x[/].md`` is one visible line, as it is.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from ..core.naming import printable_name, short_artifact_name
from ..core.store.audit import Metrics, ResearchAudit


def _fmt(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:,.6f}".rstrip("0").rstrip(".") if abs(value) < 1 else f"{value:,.2f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def _plain(value: Any) -> Text:
    """A data value as literal text on one line (no markup, control characters escaped)."""
    return Text(printable_name(value))


def _fits(cells: list[list[str]], labels: list[str], width: int) -> bool:
    """Whether a table fits ``width`` with no cell wrapped inside a word (borders: 3 per column)."""
    needed = 1
    for i, label in enumerate(labels):
        longest_word = max((len(w) for row in cells for w in row[i].split()), default=0)
        needed += 3 + max(len(label), longest_word, min(max((len(row[i]) for row in cells), default=0), 24))
    return needed <= width


def _stacked(title: str, cells: list[list[str]], labels: list[str]) -> Group:
    """One block per row: ``label: value`` of the first cell as its heading, then the other
    cells as ``label: value`` pairs, wrapped between pairs' words and indented."""
    parts: list[RenderableType] = [Text(title, style="italic")]
    for row in cells:
        parts.append(Text(f"{labels[0]}: {row[0]}", style="bold"))
        line = Text()
        for i, (label, value) in enumerate(zip(labels[1:], row[1:], strict=True)):
            if i:
                line.append(" · ", style="dim")
            line.append(f"{label}: ", style="dim")
            line.append(value)
        parts.append(Padding(line, (0, 0, 0, 2)))
    return Group(*parts, Text(""))


def _table(
    title: str, rows: list[dict[str, Any]], columns: list[tuple[str, str]], width: int | None = None
) -> RenderableType:
    labels = [label for _, label in columns]
    cells = [[printable_name(_fmt(row.get(key))) for key, _ in columns] for row in rows]
    if width is not None and not _fits(cells, labels, width):
        return _stacked(title, cells, labels)
    table = Table(title=title, title_justify="left")
    for label in labels:
        table.add_column(label, overflow="fold")
    for row in cells:
        table.add_row(*(Text(cell) for cell in row))
    return table


def _cost(value: Any) -> str:
    return "unpriced" if value is None else f"${value:,.4f}"


def render_audit(audit: ResearchAudit, console: Console | None = None) -> None:
    console = console or Console()
    console.print(Text.assemble((printable_name(audit.partition_key), "bold"), f"  status: {audit.status}"))
    console.print(Text.assemble("question: ", printable_name(audit.question)))
    console.print(Text.assemble("report: ", printable_name(audit.report_file or "not written yet")))
    if audit.compressor_model:
        console.print(_plain(f"summaries: {audit.compressor_model} / {audit.prompt_version}"))
    folders = sorted({c.artifact_path.rsplit("/", 1)[0] for c in audit.citations if c.artifact_path})
    if folders:
        console.print(_plain(f"raw artifacts: {', '.join(folders)}"))

    title = "Citations → summary → raw artifact → tool call"
    if audit.citations and console.width < 140:
        console.print(_stacked_chain(title, audit))
    elif audit.citations:
        console.print(_chain_table(title, audit))
    else:
        console.print("no citations (no report yet)")

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
            console.width,
        )
    )
    usage = [{**u, "cost": _cost(u["cost_usd"])} for u in audit.llm_usage]
    console.print(_table("LLM calls by role and model", usage, _USAGE_COLUMNS, console.width))
    console.print(_table("Tool calls by tool", audit.tools, _TOOL_COLUMNS, console.width))
    if audit.failures:
        console.print(
            _table(
                "Failed tool calls",
                audit.failures,
                [("call_id", "call"), ("tool", "tool"), ("error", "error"), ("artifact_file", "artifact")],
                console.width,
            )
        )
    if audit.untrusted:
        console.print(
            _table(
                "Untrusted content (tainted: proposed after reading tool output)",
                audit.untrusted,
                [
                    ("call_id", "call"),
                    ("tool", "tool"),
                    ("arguments", "arguments"),
                    ("status", "status"),
                    ("tainted", "tainted"),
                    ("suspected_injection", "suspected injection in"),
                ],
                console.width,
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


_VERIFIED = {True: ("sha256 ok", ""), False: ("sha256 MISMATCH", "red"), None: ("file missing", "red")}
_NO_CALL = ("no tool call recorded", "red")


def _chain_table(title: str, audit: ResearchAudit) -> Table:
    chain = Table(title=title, title_justify="left")
    for label in ("[n]", "source", "summary", "raw artifact", "tool call"):
        chain.add_column(label, overflow="fold")
    for c in audit.citations:
        n, source = Text(f"[{c.n}]"), _plain(c.source)
        if c.call_id is None:
            chain.add_row(n, source, "—", _plain(c.artifact_file), Text.assemble(_NO_CALL))
            continue
        summary = _plain(
            f"{c.summary_title or '—'}\n{c.compressor_model} / {c.prompt_version}, {_fmt(c.injected_tokens)} tokens"
        )
        artifact = Text.assemble(
            printable_name(c.artifact_file),
            f"\n{_fmt(c.bytes)} bytes, sha256 {(c.sha256 or '')[:12]}…, ",
            _VERIFIED[c.artifact_verified],
        )
        args = ", ".join(f"{k}={v!r}" for k, v in (c.arguments or {}).items())
        call = _plain(
            f"{c.call_id} (step {c.step_id}) {c.tool}({args})\n{c.tool_status}, {_fmt(c.latency_ms)} ms"
            + (", cached" if c.cached else "")
        )
        chain.add_row(n, source, summary, artifact, call)
    return chain


def _stacked_chain(title: str, audit: ResearchAudit) -> Group:
    """The citation chain for a narrow terminal: one block per citation, short artifact names
    (full names and paths: ``audit --json``)."""
    lines: list[RenderableType] = [Text(title, style="italic")]
    for c in audit.citations:
        lines.append(Text.assemble((f"[{c.n}] ", "bold"), printable_name(c.source)))
        short = printable_name(short_artifact_name(c.artifact_file))
        if c.call_id is None:
            lines.append(Text.assemble(f"    raw artifact: {short}, ", _NO_CALL))
            continue
        args = ", ".join(f"{k}={v!r}" for k, v in (c.arguments or {}).items())
        for label, value in (
            (
                "summary",
                _plain(
                    f"{c.summary_title or '—'} ({c.compressor_model} / {c.prompt_version}, "
                    f"{_fmt(c.injected_tokens)} tokens)"
                ),
            ),
            ("raw artifact", Text.assemble(f"{short}, {_fmt(c.bytes)} bytes, ", _VERIFIED[c.artifact_verified])),
            (
                "tool call",
                _plain(
                    f"{c.call_id} (step {c.step_id}) {c.tool}({args}), {c.tool_status}, "
                    f"{_fmt(c.latency_ms)} ms" + (", cached" if c.cached else "")
                ),
            ),
        ):
            line = Text("    ")
            line.append(f"{label}: ", style="dim")
            line.append_text(value)
            lines.append(line)
    return Group(*lines, Text(""))


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
    console = console or Console()
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
            console.width,
        )
    )
    console.print(
        _table(
            "Tool calls by tool",
            m.tools,
            [*_TOOL_COLUMNS[:3], ("failure_pct", "failure %"), *_TOOL_COLUMNS[3:]],
            console.width,
        )
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
            console.width,
        )
    )
