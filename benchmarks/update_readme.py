"""Copy the benchmark summary table into the README's Performance section.

Usage: python benchmarks/update_readme.py [--check]

Replaces what lies between ``<!-- bench:start -->`` and ``<!-- bench:end -->`` in README.md with
benchmarks/results/summary.md (written by ``benchmarks/run_all.py``; ``make bench`` runs both).
Text outside the markers is left as it is. ``--check`` changes nothing and exits 1 when the README
differs from the summary (or 2 when the markers or the summary are missing).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
SUMMARY = REPO / "benchmarks" / "results" / "summary.md"
START, END = "<!-- bench:start -->", "<!-- bench:end -->"


def render(readme: str, table: str) -> str:
    """``readme`` with the text between the markers replaced by ``table``."""
    if readme.count(START) != 1 or readme.count(END) != 1 or readme.index(START) > readme.index(END):
        raise ValueError(f"README.md needs exactly one {START} … {END} block")
    head, rest = readme.split(START)
    _, tail = rest.split(END)
    return f"{head}{START}\n{table.strip()}\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the README is not up to date")
    args = parser.parse_args(argv)
    if not SUMMARY.is_file():
        print(f"no {SUMMARY.relative_to(REPO)}: run `make bench` (or benchmarks/run_all.py) first", file=sys.stderr)
        return 2
    readme = README.read_text("utf-8")
    try:
        updated = render(readme, SUMMARY.read_text("utf-8"))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.check:
        if updated != readme:
            print("README.md's Performance table differs from benchmarks/results/summary.md", file=sys.stderr)
            return 1
        return 0
    if updated != readme:
        README.write_text(updated, encoding="utf-8")
        print("updated the Performance table in README.md")
    else:
        print("README.md's Performance table is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
