"""The heuristic planner: background, one step per sub-question, limitations/outlook."""

from __future__ import annotations

from typing import Any

from .terms import CLAUSE_SPLIT, DEFINITIONAL, QUESTION_LEAD, cap_words, sentence_case, topic_terms


def plan_heuristically(payload: dict[str, Any]) -> dict[str, Any]:
    question = " ".join(payload["question"].split())
    max_steps = int(payload.get("max_steps", 5))
    clauses = [c.strip(" ,.?") for c in CLAUSE_SPLIT.split(question) if c and c.strip(" ,.?")]
    topic_words = (
        topic_terms(clauses[0] if clauses else question, drop_aspects=True) or topic_terms(question) or ["the question"]
    )
    topic = " ".join(topic_words[:6])
    title_core = QUESTION_LEAD.sub("", question.rstrip("?. ")).strip() or question
    plan_title = cap_words(sentence_case(title_core), 16)

    steps = [
        (
            f"Background: {topic}",
            f"Find background on {topic}: what it is, how it works and the key terms. "
            f"Search the corpus for '{topic}' and read the most relevant documents.",
            [topic, f"{topic} overview", f"how {topic} works"],
        )
    ]
    for clause in clauses[: max(0, max_steps - 2)]:
        clause_terms = topic_terms(clause)
        query = " ".join(dict.fromkeys(clause_terms + topic_words))
        steps.append(
            (
                cap_words(sentence_case(clause), 14),
                f"Answer the sub-question '{clause}?' about {topic}. Search for '{query}' "
                "and extract concrete facts, figures, dates and named examples.",
                [query, " ".join(clause_terms) or topic, f"{topic} {' '.join(clause_terms[:3])} examples"],
            )
        )
    if len(steps) < max_steps:
        steps.append(
            (
                f"Limitations and outlook: {topic}",
                f"Identify the limitations, risks, costs, open problems and expected timelines "
                f"for {topic}. Search for '{topic} limitations cost outlook'.",
                [f"{topic} limitations cost outlook", f"{topic} risks open problems", f"{topic} timeline"],
            )
        )
    plan = {
        "plan_title": plan_title,
        "direct_answer": bool(DEFINITIONAL.match(question)),
        "steps": [
            {"step_id": i, "title": t, "description": d, "queries": list(dict.fromkeys(q))}
            for i, (t, d, q) in enumerate(steps[:max_steps], 1)
        ],
    }
    return plan
