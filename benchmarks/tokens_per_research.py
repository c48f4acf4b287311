"""Benchmark 3 — prompt tokens per research, compression on vs off.

Inputs: one web research run twice with the plain-Python pipeline (core.pipeline.run_research)
against fakes on 127.0.0.1: the scripted OpenAI-compatible server (benchmarks/common.BenchModelServer:
a 3-step plan — 5 with --full —, each step with three search queries and three pages to read; the
research team's own search/read fan-out, one extra fetch asked by the researcher per step, the
fake server's default compressor, critic and reporter answers), the fake Brave search API and a
website serving the pages of ../shared/data/web_pages (else tests/fixtures/web_pages).

  compressed  as designed: only compressed summaries enter the researcher's and reporter's context
  raw         context_mode=raw: whole raw tool outputs injected instead, compression skipped

Figures: prompt tokens sent per role and in total, from DuckDB llm_calls.prompt_tokens (the
provider-reported usage; the fake server reports characters ÷ 4), cross-checked with the local
estimate (core.text.estimate_tokens over the message contents the server received). "context
roles" = every role but the compressor, i.e. the conversations a research carries; the total also
counts the compressor, which reads each raw output once (capped at 48,000 characters) in the
compressed run. Budget caps (DEEPRESEARCH_BUDGET_*) are lifted in both runs so they do the same
work; each run's tool calls and stop reason are printed. Goal: ≥ 5× fewer prompt tokens in total
with compression.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from common import (
    clean_env,
    figure,
    guard_extractive_compressor,
    load_pages,
    pages_dir,
    parse_args,
    print_table,
    question,
    web_services,
    write_result,
)

from deepresearch_dagster.core.config import ResearchSettings
from deepresearch_dagster.core.llm.engine import ROLES
from deepresearch_dagster.core.pipeline import run_research
from deepresearch_dagster.core.store.lineage import LineageStore
from deepresearch_dagster.core.text import estimate_tokens
from deepresearch_dagster.core.web.fetch import clear_robots_cache
from tests.fakes.openai_server import role_of

GOAL_X = 5.0
NO_CAPS = {
    "budget_tokens": 10**9,
    "budget_dollars": 1e6,
    "budget_llm_calls": 10**6,
    "budget_tool_calls": 10**6,
    "budget_wall_s": 1e6,
}
# Roles whose prompts carry the research's context (everything but the compressor).
CONTEXT_ROLES = tuple(r for r in ROLES if r != "compressor")


def run_mode(root: Path, services: Any, mode: str) -> dict[str, Any]:
    clear_robots_cache()
    services.model.reset_state()
    first_request = len(services.model.requests)
    # Budget caps lifted so both runs do the same work (a capped raw run would stop early and look cheap).
    lifted = {k: v for k, v in NO_CAPS.items() if k in ResearchSettings.model_fields}
    settings = ResearchSettings.from_env(
        artifacts_dir=str(root / mode / "artifacts"),
        duckdb_path=str(root / mode / "lineage.duckdb"),
        context_mode=mode,
        **lifted,
    )
    ctx, report = run_research(question(0), settings, log=lambda m: None)
    lineage = LineageStore.at(settings.duckdb_file)
    rows = lineage.query(
        "SELECT role, count(*) AS calls, sum(prompt_tokens) AS prompt, sum(completion_tokens) AS completion "
        "FROM llm_calls WHERE partition_key = ? GROUP BY role",
        [ctx.partition_key],
    )
    seen = services.model.requests[first_request:]
    local: dict[str, int] = {}
    for body in seen:
        text = "\n".join(str(m.get("content") or "") for m in body["messages"])
        local[role_of(body)] = local.get(role_of(body), 0) + estimate_tokens(text)
    by_role = {r["role"]: {"calls": int(r["calls"]), "prompt_tokens": int(r["prompt"] or 0)} for r in rows}
    for role in ROLES:
        by_role.setdefault(role, {"calls": 0, "prompt_tokens": 0})["local_estimate"] = local.get(role, 0)
    manifest = json.loads(ctx.store.read_text("tool_outputs.json"))
    return {
        "partition_key": ctx.partition_key,
        "tool_calls": len(manifest.get("calls", [])),
        "stop_reason": manifest.get("stop_reason"),
        "by_role": by_role,
        "total_prompt_tokens": sum(v["prompt_tokens"] for v in by_role.values()),
        "total_local_estimate": sum(v["local_estimate"] for v in by_role.values()),
        "context_roles_prompt_tokens": sum(by_role[r]["prompt_tokens"] for r in CONTEXT_ROLES),
        "requests_seen": len(seen),
        "reduction": lineage.reduction(ctx.partition_key),
        "citations": len(report.citations),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(__doc__, argv)
    clean_env()
    guard = guard_extractive_compressor()
    pages = load_pages()
    steps = 5 if args.full else 3
    print(f"inputs: {len(pages)} pages from {pages_dir()}; plan of {steps} steps × (3 queries, 3 pages)")
    with tempfile.TemporaryDirectory(prefix="bench-tokens-") as tmp, web_services(pages, steps=steps) as services:
        os.environ.update(services.env)
        runs = {mode: run_mode(Path(tmp), services, mode) for mode in ("compressed", "raw")}
    on, off = runs["compressed"], runs["raw"]

    def ratio(a: int, b: int) -> float | None:
        return round(a / b, 2) if b else None

    table = []
    for role in ROLES:
        a, b = off["by_role"][role], on["by_role"][role]
        table.append(
            [
                role,
                b["calls"],
                b["prompt_tokens"],
                a["calls"],
                a["prompt_tokens"],
                ratio(a["prompt_tokens"], b["prompt_tokens"]),
                ratio(a["local_estimate"], b["local_estimate"]),
            ]
        )
    table.append(
        [
            "context roles",
            sum(on["by_role"][r]["calls"] for r in CONTEXT_ROLES),
            on["context_roles_prompt_tokens"],
            sum(off["by_role"][r]["calls"] for r in CONTEXT_ROLES),
            off["context_roles_prompt_tokens"],
            ratio(off["context_roles_prompt_tokens"], on["context_roles_prompt_tokens"]),
            ratio(
                sum(off["by_role"][r]["local_estimate"] for r in CONTEXT_ROLES),
                sum(on["by_role"][r]["local_estimate"] for r in CONTEXT_ROLES),
            ),
        ]
    )
    table.append(
        [
            "total",
            sum(v["calls"] for v in on["by_role"].values()),
            on["total_prompt_tokens"],
            sum(v["calls"] for v in off["by_role"].values()),
            off["total_prompt_tokens"],
            ratio(off["total_prompt_tokens"], on["total_prompt_tokens"]),
            ratio(off["total_local_estimate"], on["total_local_estimate"]),
        ]
    )
    print_table(
        [
            "role",
            "calls (on)",
            "prompt tok (on)",
            "calls (off)",
            "prompt tok (off)",
            "off ÷ on",
            "off ÷ on (local est.)",
        ],
        table,
        title="prompt tokens per research: compression on vs off (llm_calls.prompt_tokens)",
    )
    for mode, run in runs.items():
        print(f"{mode} run: {run['tool_calls']} tool calls, stop reason: {run['stop_reason']}")
    red = on["reduction"]
    print(
        f"compressed run: {red['tool_calls']} tool calls, {red['raw_tokens']:,} raw → {red['injected_tokens']:,} "
        f"injected tokens ({red['context_reduction']} % context reduction)"
    )
    print(f"extractive-compressor bug workaround: {guard['padded']} of {guard['calls']} summaries padded")
    total_x = ratio(off["total_prompt_tokens"], on["total_prompt_tokens"])
    context_x = ratio(off["context_roles_prompt_tokens"], on["context_roles_prompt_tokens"])
    write_result(
        "tokens_per_research",
        {
            "mode": "full" if args.full else "quick",
            "inputs": {"pages_dir": str(pages_dir()), "steps": steps, "calls_per_step": "1 web_search + 3 fetch_url"},
            "goal": "≥ 5× fewer prompt tokens with compression",
            "runs": runs,
            "extractive_summaries_padded": guard,
            "summary": [
                figure(
                    "prompt tokens off ÷ on (total)", total_x, "≥ 5×", total_x is not None and total_x >= GOAL_X, "×"
                ),
                figure("prompt tokens off ÷ on (context roles)", context_x, unit="×"),
                figure("prompt tokens per research, compressed", on["total_prompt_tokens"]),
                figure("prompt tokens per research, raw", off["total_prompt_tokens"]),
            ],
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
