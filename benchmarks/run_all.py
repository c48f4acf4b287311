"""Run the whole benchmark suite (quick by default) and print one summary table.

Usage: python benchmarks/run_all.py [--full] [--only NAME[,NAME...]]

Each benchmark runs as its own process (so one that cannot run does not stop the others), prints
its figures and writes benchmarks/results/<name>.json; this script collects their "summary"
figures into benchmarks/results/summary.json. Exit status is non-zero only when a benchmark could
not run — missing a goal is reported in the table, not as a failure.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
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


def main(argv: list[str] | None = None) -> int:
    args = parse_args(__doc__, argv, only={"default": "", "help": "comma-separated benchmark names"})
    wanted = {n.strip() for n in args.only.split(",") if n.strip()}
    selected = [b for b in BENCHMARKS if not wanted or b[1] in wanted or b[0] in wanted]
    mode = "full" if args.full else "quick"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    rows, runs = [], []
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
        run = {"number": number, "name": name, "exit_code": code, "seconds": seconds, "results": str(path)}
        runs.append(run)
        if code != 0 or not fresh:
            rows.append([number, name, "could not run", f"exit code {code}", "", "ERROR"])
            continue
        figures = json.loads(path.read_text("utf-8")).get("summary", [])
        run["summary"] = figures
        for fig in figures:
            met = {True: "yes", False: "NO", None: ""}[fig.get("met")]
            rows.append([number, name, fig["figure"], _value(fig), fig.get("goal") or "", met])
    total = round(time.perf_counter() - suite_start, 1)

    info = machine()
    print(f"\n{'=' * 100}")
    print_table(
        ["#", "benchmark", "figure", "value", "goal", "met?"],
        rows,
        title=f"Benchmark summary ({mode}) — {info['date']}, {info['nproc']} CPUs, {info['memory_gib']} GiB, "
        f"Python {info['python']}",
    )
    print_table(
        ["#", "benchmark", "seconds", "exit"], [[r["number"], r["name"], r["seconds"], r["exit_code"]] for r in runs]
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
                "table": [
                    dict(zip(["number", "benchmark", "figure", "value", "goal", "met"], r, strict=True)) for r in rows
                ],
            },
            indent=2,
            ensure_ascii=False,
        )
        + "\n",
        encoding="utf-8",
    )
    print(f"wrote {out.relative_to(REPO)}")
    return 1 if any(r["exit_code"] != 0 for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
