"""An evaluation as text: the per-item table (100 columns), the summary, ``eval.md`` and the
item-by-item comparison of two evaluations."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ..store.artifacts import atomic_write_bytes
from .run import ANSWER_FIGURES, Evaluation
from .score import ItemScore

__all__ = [
    "compare",
    "compare_lines",
    "evaluation_markdown",
    "item_line",
    "summary_lines",
    "table_lines",
    "write_evaluation",
]

WIDTH = 100
_SHORT = {"answer_in_report": "report", "answer_in_summary": "summary", "answer_in_findings": "findings",
          "answer_in_memory": "memory", "answer_in_raw": "raw"}  # fmt: skip
_CATEGORY = {"answer": "answer", "yes_no": "yes/no", "non_verbatim": "reworded", "in_question": "in-quest",
             "facts": "facts", "judge_only": "judge"}  # fmt: skip


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _yes(value: bool | None) -> str:
    return "-" if value is None else ("yes" if value else "no")


def _num(value: float | int | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def item_line(index: int, total: int, score: ItemScore) -> str:
    """The progress line of one item (fits 100 columns)."""
    head = f"[{index}/{total}] {_cut(score.id, 34)}"
    if score.status == "failed":
        return _cut(f"{head} failed: {score.reason}", WIDTH)
    parts = [f"{_SHORT[f]} {_yes(getattr(score, f))}" for f in ANSWER_FIGURES if getattr(score, f) is not None]
    if score.facts_total:
        parts.append(f"facts {score.facts_found}/{score.facts_total}")
    parts.append("resumed" if score.resumed else f"{_num(score.wall_s, 1)} s")
    return _cut(f"{head}  " + " · ".join(parts), WIDTH)


_HEADER = (
    f"{'item':<20} {'split':<7} {'kind':<8} {'rep':>3} {'sum':>3} {'fnd':>3} {'mem':>3} {'raw':>3} "
    f"{'facts':>5} {'stale':>5} {'cit ok/rm':>9} {'unc':>3} {'tokens':>8} {'wall s':>6}"
)


def _row(s: ItemScore) -> str:
    if s.status == "failed":
        return _cut(f"{_cut(s.id, 20):<20} {s.split:<7} failed: {s.reason}", WIDTH)
    facts = f"{s.facts_found}/{s.facts_total}" if s.facts_total else "-"
    return (
        f"{_cut(s.id, 20):<20} {s.split:<7} {_CATEGORY.get(s.category, s.category):<8} "
        + "".join(f"{_yes(getattr(s, f)):>3} " for f in ANSWER_FIGURES)
        + f"{facts:>5} {s.stale:>5} "
        f"{f'{s.verified_citations}/{s.removed_citations}':>9} {s.uncited_sentences:>3} "
        f"{_num(s.tokens):>8} {_num(s.wall_s, 1):>6}"
    )


def table_lines(evaluation: Evaluation) -> list[str]:
    return [_HEADER, "-" * len(_HEADER), *(_row(s) for s in evaluation.items)]


def _cell(group: dict[str, Any], name: str) -> str:
    pct = group.get(f"{name}_pct")
    return f"{group[name]}" + (f" ({pct:.0f} %)" if pct is not None else "")


def _group_row(label: str, group: dict[str, Any]) -> str:
    answers = [_cell(group, f) for f in ANSWER_FIGURES] if group["answerable"] else ["-"] * len(ANSWER_FIGURES)
    failed = f"  {group['failed']} failed" if group["failed"] else ""
    return f"{label:<24}{group['answerable']:>6}  " + "".join(f"{a:<12}" for a in answers).rstrip() + failed


def summary_lines(evaluation: Evaluation) -> list[str]:
    """The summary as a small table (answers found, by half and by kind) and two lines of totals."""
    s = evaluation.summary
    lines = [f"{'':<24}{'items':>6}  " + "".join(f"{_SHORT[f]:<12}" for f in ANSWER_FIGURES).rstrip()]
    lines.append(_group_row("plain answers", s))
    for split, group in s["by_split"].items():
        lines.append(_group_row(f"  {'development' if split == 'dev' else 'held-out'} half", group))
    for category, group in s["by_category"].items():
        if category != "answer" and group["answerable"]:
            lines.append(_group_row(f"{_CATEGORY.get(category, category)} (apart)", group))
    if ranges := report_intervals(s):
        lines.append(ranges)
    if s["facts_total"] or s["by_category"].get("facts"):
        facts = sum(g["facts_found"] for g in s["by_category"].values())
        total = sum(g["facts_total"] for g in s["by_category"].values())
        lines.append(f"gold facts found {facts}/{total} · stale figures stated {s['stale']}")
    dollars = "unpriced" if s["dollars"] is None else f"${s['dollars']:,.4f}"
    lines.append(
        f"citations verified {s['verified_citations']:,} · removed {s['removed_citations']:,} · "
        f"uncited sentences {s['uncited_sentences']:,} · figures not in their cited sources "
        f"{s.get('ungrounded_figures', 0):,} · contradictions {s.get('contradictions', 0):,} · "
        f"duplicated sentences {s.get('duplicated_sentences', 0):,}"
    )
    lines.append(f"tokens {s['tokens']:,} · {dollars} · {s['tool_calls']:,} tool calls · {s['wall_s']:,.0f} s")
    if s["fallbacks"]:
        lines.append("fallbacks: " + ", ".join(f"{r} {n}" for r, n in s["fallbacks"].items()))
    if evaluation.recompress:
        r = evaluation.recompress
        lines.append(f"recompress {r['compressor']}/{r['prompt_version']} (tool calls made {r['tool_calls_made']}):")
        lines.append(
            f"  memory keeps the answer {r['kept']}/{r['answerable']} (was {r['kept_before']}) · injected tokens "
            f"{r['injected_tokens']:,} (was {r['injected_tokens_before']:,})"
        )
    return [_cut(line, WIDTH) for line in lines]


def _models(models: dict[str, str]) -> str:
    if len(set(models.values())) == 1:
        return f"{next(iter(models.values()))} (every role)"
    return ", ".join(f"{role} {model}" for role, model in sorted(models.items()))


def evaluation_markdown(evaluation: Evaluation) -> str:
    config = evaluation.config
    lines = [
        f"# Evaluation {evaluation.key}",
        "",
        f"- suite: `{evaluation.suite}`",
        f"- engine: {evaluation.engine}" + (f" · models: {_models(evaluation.models)}" if evaluation.models else ""),
        f"- corpus: `{config.corpus}`" if config.corpus else "- corpus: each item's own",
        "",
        "rep: a gold answer in report.md · fnd: in a cited finding · mem: in the working memory · raw: in a raw",
        "tool output. yes/no, reworded and in-question items are reported apart (string presence cannot",
        "judge them). Development and held-out halves are fixed by the item id (core/evaluation/suite.py).",
        "",
        "## Summary",
        "",
        "```",
        *summary_lines(evaluation),
        "```",
        "",
        "## Items",
        "",
        "```",
        *table_lines(evaluation),
        "```",
    ]
    if evaluation.failures:
        lines += ["", "## Suite lines not read", ""]
        lines += [f"- line {f.line or '-'} ({f.id or 'no id'}): {f.reason}" for f in evaluation.failures]
    return "\n".join(lines) + "\n"


def write_evaluation(evaluation: Evaluation, folder: Path) -> tuple[Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    json_path, md_path = folder / "eval.json", folder / "eval.md"
    atomic_write_bytes(json_path, evaluation.model_dump_json(indent=2).encode("utf-8"))
    atomic_write_bytes(md_path, evaluation_markdown(evaluation).encode("utf-8"))
    return json_path, md_path


# -- comparison -------------------------------------------------------------------------------

_COMPARED = (
    *ANSWER_FIGURES,
    "facts_found",
    "stale",
    "removed_citations",
    "uncited_sentences",
    "ungrounded_figures",
    "contradictions",
    "duplicated_sentences",
    "tokens",
)


def compare(a: Evaluation, b: Evaluation) -> dict[str, Any]:
    """Item by item (by id): the figures that changed from ``a`` to ``b``, and both summaries."""
    before = {s.id: s for s in a.items}
    changes = []
    for item in b.items:
        old = before.get(item.id)
        if old is None:
            changes.append({"id": item.id, "change": "only in B"})
            continue
        diff = {f: [getattr(old, f), getattr(item, f)] for f in _COMPARED if getattr(old, f) != getattr(item, f)}
        if old.status != item.status:
            diff["status"] = [old.status, item.status]
        if diff:
            changes.append({"id": item.id, "change": diff})
    in_b = {s.id for s in b.items}
    changes += [{"id": i, "change": "only in A"} for i in before if i not in in_b]
    keys = [*_COMPARED, "wall_s"]
    summary = {k: [a.summary.get(k), b.summary.get(k)] for k in keys}
    # Paired over the plain-answer items scored in both: how many each answer figure gained and lost,
    # and whether that split could be chance.
    both = [(before[s.id], s) for s in b.items if s.id in before and s.category == before[s.id].category == "answer"]
    paired = {}
    for f in ANSWER_FIGURES if both else ():  # a suite of gold facts only has no answer to pair
        gained = sum(1 for x, y in both if not getattr(x, f) and getattr(y, f))
        lost = sum(1 for x, y in both if getattr(x, f) and not getattr(y, f))
        paired[f] = {"gained": gained, "lost": lost, "p": round(sign_test(gained, lost), 3)}
    return {"a": a.key, "b": b.key, "summary": summary, "paired": paired, "items": changes}


def report_intervals(summary: dict[str, Any]) -> str:
    """ "report, 95 % interval (Wilson): plain answers 83–96 % · development …": how far the report
    figure may be from the rate on other questions like these (±7 points on 73); empty when no item
    has a plain answer."""
    halves = [("plain answers", summary)]
    halves += [("development" if k == "dev" else "held-out", g) for k, g in summary["by_split"].items()]
    ranges = [f"{label} {wilson(g['answer_in_report'], g['answerable'])}" for label, g in halves if g["answerable"]]
    return "report, 95 % interval (Wilson): " + " · ".join(ranges) if ranges else ""


def wilson(k: int, n: int, z: float = 1.96) -> str:
    """The 95 % Wilson score interval of ``k`` successes in ``n`` items, as "83–96 %" (67 of 73)."""
    p, spread = k / n, z * math.sqrt(k * (n - k) / n + z * z / 4) / n
    centre, half = (p + z * z / (2 * n)) / (1 + z * z / n), spread / (1 + z * z / n)
    return f"{100 * max(0.0, centre - half):.0f}–{100 * min(1.0, centre + half):.0f} %"


def sign_test(gained: int, lost: int) -> float:
    """Two-sided exact sign test (McNemar's exact test on paired yes/no scores): the chance, were
    each changed item a coin toss, of a split between gains and losses at least this uneven. A few
    lines of ``math.comb`` rather than a statistics dependency for one binomial tail."""
    n = gained + lost
    tail = sum(math.comb(n, k) for k in range(min(gained, lost) + 1)) / 2**n
    return min(1.0, 2 * tail)


def compare_lines(result: dict[str, Any]) -> list[str]:
    lines = [f"A {result['a']}", f"B {result['b']}", "", f"{'figure':<22} {'A':>12} {'B':>12} {'change':>10}"]
    for name, (x, y) in result["summary"].items():
        delta = "" if x is None or y is None else f"{y - x:+,.1f}".replace(".0", "")
        lines.append(f"{name:<22} {_num(x, 1 if isinstance(x, float) else 0):>12} "
                     f"{_num(y, 1 if isinstance(y, float) else 0):>12} {delta:>10}")  # fmt: skip
    paired = result.get("paired") or {}
    if paired:
        lines += ["", "paired, plain-answer items in both    gained    lost  p (exact sign test)"]
        lines += [f"{f:<36} {x['gained']:>6} {x['lost']:>7}  {x['p']:.2f}" for f, x in paired.items()]
        lines.append("p ≥ 0.05: a split that chance gives as often; the change is not shown to matter")
    lines.append("")
    if not result["items"]:
        lines.append("no item changed")
    for change in result["items"]:
        what = change["change"]
        text = what if isinstance(what, str) else ", ".join(f"{k} {v[0]}→{v[1]}" for k, v in what.items())
        lines.append(_cut(f"{_cut(change['id'], 30)}: {text}", WIDTH))
    return lines
