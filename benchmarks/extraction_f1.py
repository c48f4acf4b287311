"""Benchmark 7 — main-content extraction: token F1 of ``extract_html`` against Readability's expected output.

Usage: python benchmarks/extraction_f1.py [--pages DIR] [--out FILE] [--full]
(--full is accepted for the suite; every page is always scored.)

Each page folder holds ``source.html`` (the raw page) and ``expected.html`` (its readable content); the score
is bag-of-words F1 between our extracted text and the visible text of ``expected.html``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # runnable as a plain script from any working directory

from deepresearch_dagster.core.web.extract import extract_html, html_visible_text, token_f1  # noqa: E402

SHARED_PAGES = REPO.parent / "shared" / "data" / "web_pages"
FIXTURE_PAGES = REPO / "tests" / "fixtures" / "web_pages"
DEFAULT_OUT = REPO / "benchmarks" / "results" / "extraction_f1.json"


def default_pages() -> Path:
    return SHARED_PAGES if SHARED_PAGES.is_dir() else FIXTURE_PAGES


def score_page(folder: Path) -> dict[str, object]:
    source = (folder / "source.html").read_text(encoding="utf-8", errors="replace")
    expected = html_visible_text((folder / "expected.html").read_text(encoding="utf-8", errors="replace"))
    start = time.perf_counter()
    title, text = extract_html(source)
    seconds = time.perf_counter() - start
    return {
        "page": folder.name,
        "f1": round(token_f1(text, expected), 4),
        "title": title,
        "extracted_words": len(text.split()),
        "expected_words": len(expected.split()),
        "seconds": round(seconds, 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=Path, default=None, help="folder of page folders (source.html, expected.html)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where to write the JSON results")
    parser.add_argument("--full", action="store_true", help="accepted for run_all.py; same pages either way")
    args = parser.parse_args(argv)

    pages_dir: Path = args.pages or default_pages()
    folders = sorted(
        p for p in pages_dir.glob("*") if (p / "source.html").is_file() and (p / "expected.html").is_file()
    )
    if not folders:
        print(f"no page folders with source.html and expected.html under {pages_dir}", file=sys.stderr)
        return 2

    rows = [score_page(folder) for folder in folders]
    mean_f1 = statistics.fmean(float(r["f1"]) for r in rows)  # type: ignore[arg-type]

    row = "{page:<24} {f1:>6.3f} {extracted_words:>7} {expected_words:>8} {seconds:>6.2f}"
    print(f"{'page':<24} {'F1':>6} {'words':>7} {'expected':>8} {'sec':>6}")
    for r in rows:
        print(row.format(**r))
    print(f"{'mean':<24} {mean_f1:>6.3f}   ({len(rows)} pages from {pages_dir})")

    args.out.parent.mkdir(parents=True, exist_ok=True)
    worst = min(rows, key=lambda r: float(r["f1"]))  # type: ignore[arg-type]
    result = {
        "benchmark": "extraction_f1",
        "pages_dir": str(pages_dir),
        "pages": len(rows),
        "mean_f1": round(mean_f1, 4),
        "results": rows,
        "summary": [
            {
                "figure": f"mean token F1 ({len(rows)} pages)",
                "value": round(mean_f1, 3),
                "unit": "",
                "goal": None,
                "met": None,
            },
            {"figure": f"min token F1 ({worst['page']})", "value": worst["f1"], "unit": "", "goal": None, "met": None},
        ],
    }
    args.out.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
