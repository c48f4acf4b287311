"""Run the whole benchmark suite (quick by default) and print one summary table.

Usage: python benchmarks/run_all.py [--full] [--only NAME[,NAME...]] [--summary-only]

Each benchmark runs as its own process (so one that cannot run does not stop the others), prints
its figures and writes benchmarks/results/<name>.json. This script then builds one table —
figure, now, goal, met — from the "summary" figures of every benchmarks/results/<name>.json
present (so `--only` refreshes some rows and keeps the others, each with its own date and mode),
prints it and writes it to benchmarks/results/summary.json and, as a Markdown table,
benchmarks/results/summary.md (which `benchmarks/update_readme.py` copies into docs/performance.md's
Performance section). `--summary-only` runs nothing and rebuilds the table from the files.
Exit status is non-zero only when a benchmark could not run — missing a goal is reported in the
table, not as a failure.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

from common import REPO, RESULTS, machine, parse_args, print_table

BENCHMARKS = [
    ("1", "context_reduction", "context reduction on real pages"),
    ("2", "retention", "retention of planted facts"),
    ("3", "tokens_per_research", "prompt tokens, compression on vs off"),
    ("4", "orchestration_overhead", "orchestration overhead"),
    ("5", "throughput", "throughput, N concurrent Dagster runs"),
    ("6", "audit_scale", "audit views at scale"),
    ("7", "extraction_f1", "extraction quality"),
    ("8", "private_docs", "research over private document folders"),
]


def _value(fig: dict) -> str:
    value = fig.get("value")
    unit = fig.get("unit") or ""
    if isinstance(value, float):
        text = f"{value:,.3f}".rstrip("0").rstrip(".") if abs(value) < 100 else f"{value:,.1f}"
    elif isinstance(value, int) and not isinstance(value, bool):
        text = f"{value:,}"
    else:
        text = "" if value is None else str(value)
    return f"{text} {unit}".strip() if unit and text else text


HEADERS = ["figure", "now", "goal", "met"]
MET = {True: "yes", False: "no", None: ""}


def collect(failed: dict[str, int]) -> tuple[list[list[str]], list[dict], list[str]]:
    """One row per summary figure of every benchmark with a results file (in suite order), where
    each benchmark's figures come from (mode, date), and for every goal not met the benchmark's
    measured reason ("<figure>: <why>"). ``failed``: name -> exit code of a benchmark that could
    not run this time (its row says so; older figures are not shown)."""
    rows, sources, reasons = [], [], []
    for number, name, title in BENCHMARKS:
        path = RESULTS / f"{name}.json"
        if name in failed:
            rows.append([f"{number} {title}: could not run (exit code {failed[name]})", "", "", "ERROR"])
            continue
        if not path.is_file():
            continue
        data = json.loads(path.read_text("utf-8"))
        figures = data.get("summary") or []
        sources.append(
            {
                "number": number,
                "name": name,
                "title": title,
                "mode": data.get("mode") or "",
                "date": (data.get("machine") or {}).get("date") or "",
                "figures": len(figures),
            }
        )
        for fig in figures:
            rows.append([f"{number} {fig['figure']}", _value(fig), fig.get("goal") or "", MET[fig.get("met")]])
            if fig.get("met") is False:
                why = fig.get("why") or "no measured reason recorded by this benchmark"
                reasons.append(f"{number} {fig['figure']}: {why}")
    return rows, sources, reasons


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(rows: list[list[str]], sources: list[dict], info: dict, reasons: list[str]) -> str:
    lines = ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    if reasons:
        lines += ["", "Goals not met, with the measured reason and what it would take:", ""]
        lines += [f"- {_cell(r)}" for r in reasons]
    made = ", ".join(
        f"{s['number']} `{s['name']}.py` ({', '.join(x for x in (s['mode'], s['date']) if x) or 'undated'})"
        for s in sources
    )
    return (
        "\n".join(lines) + f"\n\nFigures from: {made}. Machine: {info['nproc']} CPUs, {info['memory_gib']} GiB, "
        f"Python {info['python']}; other work on the same machine makes timings vary from run to run.\n"
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(
        __doc__,
        argv,
        only={"default": "", "help": "comma-separated benchmark names or numbers"},
        summary_only={"action": "store_true", "help": "run nothing; rebuild the table from the results files"},
    )
    wanted = {n.strip() for n in args.only.split(",") if n.strip()}
    selected = [] if args.summary_only else [b for b in BENCHMARKS if not wanted or b[1] in wanted or b[0] in wanted]
    mode = "full" if args.full else "quick"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    runs, failed = [], {}
    suite_start = time.perf_counter()
    for number, name, title in selected:
        print(f"\n{'=' * 100}\n[{number}] {title}: benchmarks/{name}.py ({mode})\n{'=' * 100}", flush=True)
        path = RESULTS / f"{name}.json"
        started_at = time.time()
        start = time.perf_counter()
        cmd = [sys.executable, str(REPO / "benchmarks" / f"{name}.py"), *(["--full"] if args.full else [])]
        code = subprocess.call(cmd, cwd=REPO, env=env)
        seconds = round(time.perf_counter() - start, 1)
        fresh = path.is_file() and path.stat().st_mtime >= started_at
        runs.append({"number": number, "name": name, "exit_code": code, "seconds": seconds, "results": str(path)})
        if code != 0 or not fresh:
            failed[name] = code
    total = round(time.perf_counter() - suite_start, 1)

    rows, sources, reasons = collect(failed)
    info = machine()
    print(f"\n{'=' * 100}")
    print_table(
        HEADERS,
        rows,
        title=f"Benchmark summary — {info['date']}, {info['nproc']} CPUs, {info['memory_gib']} GiB, "
        f"Python {info['python']} (this run: {mode}; each benchmark's own mode and date in summary.md)",
    )
    if reasons:
        print("\nGoals not met, with the measured reason and what it would take:")
        for reason in reasons:
            print(textwrap.fill(reason, 100, initial_indent="- ", subsequent_indent="  "))
    if runs:
        print_table(
            ["#", "benchmark", "seconds", "exit"],
            [[r["number"], r["name"], r["seconds"], r["exit_code"]] for r in runs],
        )
        print(f"total {total} s")
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "summary.json"
    out.write_text(
        json.dumps(
            {
                "mode": mode,
                "machine": info,
                "total_seconds": total,
                "benchmarks": runs,
                "sources": sources,
                "table": [dict(zip(HEADERS, r, strict=True)) for r in rows],
                "not_met": reasons,
            },
            indent=2,
            ensure_ascii=False,
        )
        + "\n",
        encoding="utf-8",
    )
    md = RESULTS / "summary.md"
    md.write_text(markdown(rows, sources, info, reasons), encoding="utf-8")
    print(f"wrote {out.relative_to(REPO)} and {md.relative_to(REPO)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
