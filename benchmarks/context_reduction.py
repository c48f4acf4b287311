"""Benchmark 1 — context reduction on real pages: injected ÷ raw tokens per compressed tool call.

Inputs: every page folder in ../shared/data/web_pages (else tests/fixtures/web_pages). Each page is
fed to the real compressor (core.compressor.compress, content-addressed cache in a temp DuckDB) as
the raw output of one `fetch_url` call in a realistic step (plan and step titled after the page, step
description = "extract the key facts…" + the page's excerpt), in two forms:

  extracted  what `fetch_url` stores: "Title:/URL:" header + the project's extracted main text
  raw_html   the page's source.html as it came off the wire (a tool that skipped extraction)

Compressors: the offline extractive compressor (the default engine) and, separately, the OpenAI
path against the scripted fake server on 127.0.0.1 (its compressor answer = the first three
sentences as summary, the next two as extraction — a stand-in for a model, not a model).
Tokens: core.text.estimate_tokens for raw and injected text alike; injected = the assistant message
`{summary_title, summary, extraction, artifact_file}` (0 when is_useful is false).
Figures: per call injected/raw (mean, median, p95), reduction % = 1 - Σinjected/Σraw.
--full adds a second step per page (titled after the page's first sentence instead of its title).
Goal: ≥ 95 % reduction.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import (
    Page,
    clean_env,
    fetch_output,
    figure,
    load_pages,
    pages_dir,
    parse_args,
    per_call_budget,
    print_table,
    stats,
    write_result,
)

from deepresearch_dagster.core.config import ResearchSettings
from deepresearch_dagster.core.context import ResearchContext, make_engine
from deepresearch_dagster.core.models import ToolCallRecord
from deepresearch_dagster.core.roles.compressor import StepContext, compress
from deepresearch_dagster.core.store.artifacts import sha256_bytes
from deepresearch_dagster.core.store.lineage import LineageStore
from deepresearch_dagster.core.text import estimate_tokens, split_sentences
from tests.fakes.openai_server import FakeOpenAIServer

GOAL_PCT = 95.0


def _cap(text: str, n: int) -> str:
    return " ".join(text.split()[:n])


def steps_for(page: Page, full: bool) -> list[StepContext]:
    desc = "Read the article and extract the key facts, figures, dates and named examples."
    steps = [
        StepContext(
            plan_title=f"Research: {_cap(page.title, 10)}",
            step_title=_cap(page.title, 12),
            step_description=f"{desc} {page.excerpt}".strip(),
            tool_name="fetch_url",
        )
    ]
    if full:
        first = next(iter(split_sentences(page.text)), page.title)
        steps.append(
            StepContext(
                plan_title=f"Research: {_cap(page.title, 10)}",
                step_title=_cap(first, 12),
                step_description=f"{desc} Focus on: {_cap(first, 40)}",
                tool_name="fetch_url",
            )
        )
    return steps


def make_context(root: Path, engine: str, base_url: str | None = None) -> ResearchContext:
    settings = ResearchSettings.from_env(
        engine=engine,
        artifacts_dir=str(root / "artifacts"),
        duckdb_path=str(root / "lineage.duckdb"),
        openai_base_url=base_url,
        llm_max_attempts=1,
    )
    lineage = LineageStore.at(settings.duckdb_file)
    key = f"bench-reduction-{engine}"
    lineage.register_request(key, "What do these web pages report?", {})
    return ResearchContext(
        partition_key=key,
        question="What do these web pages report?",
        run_id=f"bench-{engine}",
        settings=settings,
        engine=make_engine(settings),
        lineage=lineage,
        log=lambda m: None,
    )


def compress_page(ctx: ResearchContext, page: Page, step: StepContext, form: str, seq: int) -> dict[str, Any]:
    url = f"https://example.org/pages/{page.name}"
    raw = fetch_output(page, url) if form == "extracted" else page.html
    filename = f"step{seq}_{page.name}_{form}.txt"
    stored = ctx.store.write_raw(step.plan_title, filename, raw)
    record = ToolCallRecord(
        call_id=f"1.{seq}",
        step_id="1",
        step_title=step.step_title,
        step_description=step.step_description,
        seq=seq,
        tool="fetch_url",
        arguments={"url": url},
        artifact_file=stored.filename,
        artifact_path=stored.relpath,
        bytes=stored.bytes,
        sha256=sha256_bytes(raw.encode("utf-8")),
        raw_tokens=estimate_tokens(raw),
        source=url,
        source_title=page.title,
    )
    start = time.perf_counter()
    base = {"page": page.name, "form": form, "step_title": step.step_title, "raw_tokens": record.raw_tokens}
    try:
        summary = compress(per_call_budget(ctx), step, record, raw, "text")
    except Exception as exc:  # a crash of the compressor is a finding, not the end of the benchmark
        return {**base, "error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"}
    ms = (time.perf_counter() - start) * 1000
    return {
        **base,
        "injected_tokens": summary.injected_tokens,
        "ratio": summary.injected_tokens / record.raw_tokens if record.raw_tokens else 0.0,
        "is_useful": summary.result.is_useful,
        "fallback": summary.fallback,
        "compress_ms": round(ms, 2),
    }


def aggregate(all_rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Figures over the calls that compressed; crashed calls are counted under ``errors``."""
    rows = [r for r in all_rows if "error" not in r]
    raw = sum(r["raw_tokens"] for r in rows)
    injected = sum(r["injected_tokens"] for r in rows)
    useful = [r for r in rows if r["is_useful"]]
    return {
        "calls": len(rows),
        "errors": len(all_rows) - len(rows),
        "error_messages": [f"{r['page']}: {r['error']}" for r in all_rows if "error" in r],
        "useful": len(useful),
        "fallbacks": sum(r["fallback"] for r in rows),
        "raw_tokens": raw,
        "injected_tokens": injected,
        "reduction_pct": round(100 * (1 - injected / raw), 2) if raw else None,
        "ratio_all": stats([r["ratio"] for r in rows]),
        "ratio_useful": stats([r["ratio"] for r in useful]),
        "compress_ms": stats([r["compress_ms"] for r in rows]),
    }


def why_reduction(rows: list[dict[str, Any]], engine: str) -> str:
    """Why a reduction under the goal, from the calls themselves: the contract's floor (title and
    three sentences: the smallest useful message seen) exceeds 5 % of the shorter outputs."""
    useful = [r for r in rows if "error" not in r and r["is_useful"]]
    if not useful:
        return "no useful call to measure"
    floor = min(r["injected_tokens"] for r in useful)
    small = [r for r in useful if r["injected_tokens"] > (1 - GOAL_PCT / 100) * r["raw_tokens"]]
    rest = [r for r in useful if r not in small]
    rest_raw = sum(r["raw_tokens"] for r in rest)
    rest_pct = f"{100 * (1 - sum(r['injected_tokens'] for r in rest) / rest_raw):.1f} %" if rest_raw else "n/a"
    what = (
        "the fake model's answer is the page's first three sentences plus the next two (a stand-in with no size "
        "budget), so its size follows the page's sentences"
        if engine == "fake_model"
        else f"the smallest message the contract allows (5-word title, three sentences) is {floor} tokens here"
    )
    return (
        f"{len(small)} of {len(useful)} useful calls inject more than 5 % of their raw output; {what}. "
        f"The remaining {len(rest)} reach {rest_pct}. It would take outputs of more than ~{20 * floor:,} tokens "
        "each, or a contract that allows a shorter summary."
    )


def run_engine(root: Path, engine: str, pages: list[Page], full: bool, base_url: str | None = None) -> list[dict]:
    ctx = make_context(root / engine, engine, base_url)
    rows = []
    seq = 0
    for page in pages:
        for step in steps_for(page, full):
            for form in ("extracted", "raw_html"):
                seq += 1
                rows.append(compress_page(ctx, page, step, form, seq))
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parse_args(__doc__, argv)
    clean_env()
    pages = load_pages()
    print(f"inputs: {len(pages)} pages from {pages_dir()}; {'full' if args.full else 'quick'} mode")
    results: dict[str, Any] = {}
    per_call: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-reduction-") as tmp:
        offline_rows = run_engine(Path(tmp), "offline", pages, args.full)
        with FakeOpenAIServer() as server:
            fake_rows = run_engine(Path(tmp), "openai", pages, args.full, server.base_url)
    for engine, rows in (("offline", offline_rows), ("fake_model", fake_rows)):
        for form in ("extracted", "raw_html"):
            subset = [r for r in rows if r["form"] == form]
            results[f"{engine}/{form}"] = aggregate(subset)
            per_call += [{**r, "compressor": engine} for r in subset]

    table = []
    for name, agg in results.items():
        ra, ru = agg["ratio_all"], agg["ratio_useful"]
        table.append(
            [
                name,
                f"{agg['useful']}/{agg['calls']}" + (f" ({agg['errors']} crashed)" if agg["errors"] else ""),
                agg["raw_tokens"],
                agg["injected_tokens"],
                ra["mean"],
                ra["median"],
                ra["p95"],
                ru["mean"],
                f"{agg['reduction_pct']}%",
                agg["fallbacks"],
                agg["compress_ms"]["median"],
            ]
        )
    print_table(
        [
            "compressor/input",
            "useful",
            "raw tok",
            "injected",
            "mean",
            "median",
            "p95",
            "mean(useful)",
            "reduction",
            "fallbk",
            "ms/call",
        ],
        table,
        title="injected ÷ raw tokens per call (all calls; 'mean(useful)' over useful calls only)",
    )
    for name, agg in results.items():
        for message in agg["error_messages"]:
            print(f"compressor crashed ({name}): {message}")
    print()
    print_table(
        ["page", "raw tok (text)", "inj (text)", "raw tok (html)", "inj (html)", "useful text/html"],
        [
            [
                t["page"],
                t["raw_tokens"],
                t.get("injected_tokens", "crash"),
                h["raw_tokens"],
                h.get("injected_tokens", "crash"),
                f"{t.get('is_useful', 'crash')}/{h.get('is_useful', 'crash')}",
            ]
            for t, h in zip(
                [r for r in offline_rows if r["form"] == "extracted"],
                [r for r in offline_rows if r["form"] == "raw_html"],
                strict=True,
            )
        ],
        title="offline compressor, per page",
    )

    summary = []
    for name in ("offline/extracted", "offline/raw_html", "fake_model/extracted", "fake_model/raw_html"):
        pct = results[name]["reduction_pct"]
        engine, form = name.split("/")
        why = why_reduction([r for r in per_call if r["compressor"] == engine and r["form"] == form], engine)
        summary.append(figure(f"reduction % ({name})", pct, "≥ 95 %", pct is not None and pct >= GOAL_PCT, "%", why))
        if results[name]["errors"]:
            summary.append(figure(f"compressor crashes ({name})", results[name]["errors"], "0", False))
    summary.append(
        figure(
            "median injected÷raw (offline/extracted)",
            round(results["offline/extracted"]["ratio_all"]["median"], 4),
        )
    )
    write_result(
        "context_reduction",
        {
            "mode": "full" if args.full else "quick",
            "inputs": {
                "pages_dir": str(pages_dir()),
                "pages": [p.name for p in pages],
                "forms": ["extracted", "raw_html"],
            },
            "goal": "≥ 95 % reduction",
            "results": results,
            "per_call": per_call,
            "summary": summary,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
