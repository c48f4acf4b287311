"""The heuristic critic: sufficiency from coverage of question terms and plan steps."""

from __future__ import annotations

from typing import Any

from ..text import content_terms
from .aspects import aspect_terms
from .planning import part_terms, research_terms
from .report import parts_of, unanswered_parts
from .terms import sentence_case

# Words that shape the question rather than name its topic ("which strategies work best").
QUESTION_SHAPE = frozenset(
    "work works best better worst way ways make makes use uses do does done get good "
    # the kind of answer asked ("which company", "how long", "what is it worth"): a name, a
    # duration, an amount answers it, not the word
    "company companies firm firms contractor supplier worth long much many typically typical".split()
)


def critique_heuristically(payload: dict[str, Any]) -> dict[str, Any]:
    """Sufficiency from coverage: question terms found in memory, plan steps with a source."""
    question = payload["question"]
    memory = payload.get("memory", [])
    memory_terms = set(
        content_terms(" ".join(f"{m.get('summary', '')} {' '.join(m.get('extraction', []))}" for m in memory))
    )
    # The request's topic, not its wording: "prepare", "brief", "cite your sources" are never gaps.
    words_ = [w for w in research_terms(question) if w not in QUESTION_SHAPE]
    # An aspect word ("challenges", "effects") is covered by its answer words ("costly", "failure").
    missing = [
        w
        for w in words_
        if not set(content_terms(w.replace("-", " "))) <= memory_terms and not aspect_terms(w) & memory_terms
    ]
    # A part of the question that no source answers with the kind of answer it asks for ("when was
    # the contract awarded" and no date about it) is a gap, however many of its words are covered.
    sources = [{**m, "n": i + 1, "extraction": m.get("extraction", [])} for i, m in enumerate(memory)]
    parts = parts_of(question)
    unanswered = unanswered_parts({"question": question, "plan": payload["plan"], "sources": sources})
    coverage = min(
        1 - len(missing) / len(words_) if words_ else 1.0,
        1 - len(unanswered) / len(parts),
    )
    steps = payload["plan"]["steps"]
    sourced = {str(m["step_id"]) for m in memory if m.get("source")}
    uncovered = [s for s in steps if str(s["step_id"]) not in sourced]
    step_cov = 1 - len(uncovered) / len(steps) if steps else 1.0
    score = max(1, min(10, round(1 + 9 * (0.5 * coverage + 0.5 * step_cov))))
    topic = " ".join(research_terms(question)[:4])
    gaps = [
        {
            "description": f"Step '{s['title']}' found no usable source.",
            "severity": "high",
            "suggested_query": (s.get("queries") or [s["title"]])[-1],
        }
        for s in uncovered
    ]
    gaps += [
        {
            "description": f"No source yet answers '{sentence_case(part)}?'.",
            "severity": "high",
            "suggested_query": " ".join(dict.fromkeys([*part_terms(part), *research_terms(question)[:4]])),
        }
        for part in unanswered[:3]
    ]
    gaps += [
        {
            "description": f"No evidence yet on '{w}'.",
            "severity": "high" if coverage < 0.5 else "medium",
            "suggested_query": f"{w} {topic}".strip(),
        }
        for w in missing[:3]
    ]
    return {
        "sufficiency": score,
        "gaps": gaps[:10],
        "contradictions": [],
        "recommendation": "Sufficient to report." if not gaps else "Research the listed gaps before reporting.",
    }
