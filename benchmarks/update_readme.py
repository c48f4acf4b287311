"""Copy the benchmark summary table into docs/performance.md (the README links to it).

Usage: python benchmarks/update_readme.py [--check]

Replaces what lies between ``<!-- bench:start -->`` and ``<!-- bench:end -->`` in
docs/performance.md with benchmarks/results/summary.md (written by ``benchmarks/run_all.py``;
``make bench`` runs both). Text outside the markers is left as it is. ``--check`` changes nothing
and exits 1 when the page differs from the summary (or 2 when the markers or the summary are
missing). The file keeps its old name because ``make bench`` and older notes call it so.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "performance.md"
SUMMARY = REPO / "benchmarks" / "results" / "summary.md"
START, END = "<!-- bench:start -->", "<!-- bench:end -->"


def render(readme: str, table: str) -> str:
    """``readme`` with the text between the markers replaced by ``table``."""
    if readme.count(START) != 1 or readme.count(END) != 1 or readme.index(START) > readme.index(END):
        raise ValueError(f"{PAGE.relative_to(REPO)} needs exactly one {START} … {END} block")
    head, rest = readme.split(START)
    _, tail = rest.split(END)
    return f"{head}{START}\n{table.strip()}\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is not up to date")
    args = parser.parse_args(argv)
    if not SUMMARY.is_file():
        print(f"no {SUMMARY.relative_to(REPO)}: run `make bench` (or benchmarks/run_all.py) first", file=sys.stderr)
        return 2
    readme = PAGE.read_text("utf-8")
    try:
        updated = render(readme, SUMMARY.read_text("utf-8"))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.check:
        if updated != readme:
            print(f"{PAGE.relative_to(REPO)}'s table differs from benchmarks/results/summary.md", file=sys.stderr)
            return 1
        return 0
    if updated != readme:
        PAGE.write_text(updated, encoding="utf-8")
        print(f"updated the table in {PAGE.relative_to(REPO)}")
    else:
        print(f"{PAGE.relative_to(REPO)}'s table is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
