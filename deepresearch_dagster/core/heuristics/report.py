"""The extractive reporter: report sections quoting the working memory with citations."""

from __future__ import annotations

from typing import Any

from ..text import content_terms, split_sentences

REPORT_SECTIONS = ("Executive summary", "Key findings", "Analysis", "Limitations", "Suggested next steps")


def extractive_section(heading: str, payload: dict[str, Any]) -> str:
    """One report section quoting the working memory; every factual sentence cites ``[n]``."""
    writer = {
        "Executive summary": _exec_summary,
        "Key findings": _key_findings,
        "Analysis": _analysis,
        "Limitations": _limitations,
        "Suggested next steps": _next_steps,
    }.get(heading)
    return writer(payload) if writer else "No content for this section."


def _by_step(payload: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for src in payload["sources"]:
        out.setdefault(str(src["step_id"]), []).append(src)
    return out


def _all_steps(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [*plan["steps"], *plan.get("followup_steps", [])]


def _exec_summary(payload: dict[str, Any]) -> str:
    question_terms = set(content_terms(payload["question"]))
    by_step = _by_step(payload)
    lines: list[str] = []
    for step in _all_steps(payload["plan"]):
        for src in by_step.get(str(step["step_id"]), [])[:1]:
            best = max(split_sentences(src["summary"]), key=lambda s: len(question_terms & set(content_terms(s))))
            line = f"{best} [{src['n']}]"
            if line not in lines:
                lines.append(line)
    return " ".join(lines[:6]) if lines else "The research found no useful sources."


def _key_findings(payload: dict[str, Any]) -> str:
    by_step = _by_step(payload)
    seen: set[str] = set()
    blocks: list[str] = []
    for step in _all_steps(payload["plan"]):
        bullets = []
        for src in by_step.get(str(step["step_id"]), []):
            for sentence in [*split_sentences(src["summary"]), *src["extraction"]]:
                key = " ".join(sentence.lower().split())
                if key not in seen:
                    seen.add(key)
                    bullets.append(f"- {sentence} [{src['n']}]")
        blocks.append(
            f"### {step['step_id']}. {step['title']}\n\n" + ("\n".join(bullets) or "- No useful source was found.")
        )
    return "\n\n".join(blocks)


def _analysis(payload: dict[str, Any]) -> str:
    corroborated = payload.get("corroborated", [])
    rounds = payload.get("critic_rounds", [])
    parts = []
    if corroborated:
        parts.append("These findings are stated by two or more independent sources:")
        parts.append("\n".join(f"- {claim} {''.join(f'[{n}]' for n in ns)}" for claim, ns in corroborated[:6]))
    else:
        parts.append("No finding was stated by more than one independent source.")
    if rounds:
        scores = ", ".join(f"round {r['round']}: {r['verdict']['sufficiency']}/10" for r in rounds)
        parts.append(f"The critic's sufficiency scores were {scores}.")
    return "\n\n".join(parts)


def _limitations(payload: dict[str, Any]) -> str:
    return (
        "- Written by the offline extractive engine: every finding is a sentence quoted from a compressed "
        "source summary, not a synthesis."
    )


def _next_steps(payload: dict[str, Any]) -> str:
    gaps = payload.get("open_gaps", [])
    if not gaps:
        return "- The critic named no open gaps; widen the corpus or enable web search to test the findings."
    return "\n".join(f'- {g["description"]} Suggested query: "{g["suggested_query"]}".' for g in gaps[:5])


def extractive_report(payload: dict[str, Any]) -> str:
    """The whole report body without a model (used when the reporter model fails)."""
    return "\n\n".join(f"## {h}\n\n{extractive_section(h, payload)}" for h in REPORT_SECTIONS)


def direct_answer_text(payload: dict[str, Any]) -> str:
    return (
        "The planner judged this question answerable from model knowledge and the depth was 0, so no "
        "tools were called and no sources were consulted. The offline engine has no model knowledge of "
        "its own: configure a model for a direct answer, or run with depth 1 or more to research it."
    )
