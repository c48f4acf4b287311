"""Deterministic engine for every role with no network: heuristics where a model would reason.

It reads the structured ``payload`` that accompanies each prompt, so it keeps to exactly the
same contracts (schemas, field limits, injection rules) as a real model.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from typing import Any

from ..text import STOPWORDS, content_terms, count_sentences, estimate_tokens, split_sentences
from .base import Completion, ToolCallRequest

MODEL = "offline-extractive-v1"

# Words that describe the task rather than the topic; matching them says nothing about relevance.
_INSTRUCTION_WORDS = set(
    content_terms(
        "search corpus read relevant documents document extract concrete facts figures dates named "
        "examples find answer question sub-question key terms what how why which who main "
        "identify investigate background overview step research plan evidence tool tools query"
    )
)
_QUESTION_LEAD = re.compile(
    r"^(?:(?:what|how|why|which|who|whom|when|where|whether)(?:\s+(?:are|is|was|were|do|does|did|"
    r"can|could|should|will|would|has|have|had))?|does|do|did|is|are|was|were|can|could|should|"
    r"will|would|explain|describe|compare|tell me about|give me)\b[\s,]*",
    re.IGNORECASE,
)
_LIST_MARKER = re.compile(r"^\s*(?:[-*+>]|\d+[.)])\s+")
_EMPHASIS = re.compile(r"\*\*|__|`")
_CLAUSE_SPLIT = re.compile(
    r"\s*(?:[;?]\s*|,?\s+and\s+(?=(?:how|what|why|which|who|when|where|whether|does|do|is|are|can)\b))",
    re.IGNORECASE,
)
_DEFINITIONAL = re.compile(r"^(who|what)\s+(is|was|are|were)\s+[^,;]{2,60}\??$", re.IGNORECASE)


def _cap_words(text: str, n: int) -> str:
    parts = text.split()
    return " ".join(parts[:n])


_HYPHENATED = re.compile(r"[A-Za-z0-9]+(?:[-'’][A-Za-z0-9]+)*")
# Words that name an aspect of a topic rather than the topic itself.
_ASPECT_WORDS = set(
    content_terms(
        "main key major primary biggest challenges challenge problems issues benefits advantages "
        "disadvantages effects impact impacts causes role history current state status latest"
    )
)
_ANAPHORA = re.compile(r"^(it|its|this|these|they|that|those|such|he|she|his|her|their)\b", re.IGNORECASE)


def _topic_terms(text: str, drop_aspects: bool = False) -> list[str]:
    """Distinct topic words of ``text`` (hyphenated words kept whole), without task words."""
    skip = _INSTRUCTION_WORDS | (_ASPECT_WORDS if drop_aspects else set())
    seen: dict[str, str] = {}
    for w in _HYPHENATED.findall(text):
        low = w.lower()
        terms = content_terms(low.replace("-", " "))
        if terms and not set(terms) <= skip and low not in seen and low not in STOPWORDS:
            seen[low] = low
    return list(seen.values())


def _sentence_case(text: str) -> str:
    text = text.strip(" ,.?;:")
    return text[:1].upper() + text[1:]


class OfflineEngine:
    name = "offline"

    def model_for(self, role: str) -> str:
        return MODEL

    def complete(
        self,
        role: str,
        messages: list[dict[str, Any]],
        payload: dict[str, Any],
        json_schema: dict[str, Any] | None = None,
        tools: list[dict[str, Any]] | None = None,
    ) -> Completion:
        handler = {
            "planner": self._plan,
            "compressor": self._compress,
            "researcher": self._research,
            "critic": self._critic,
            "reporter": self._report,
        }[role]
        text, tool_calls = handler(payload)
        prompt_text = "\n".join(str(m.get("content") or "") for m in messages)
        return Completion(
            text=text,
            model=MODEL,
            prompt_tokens=estimate_tokens(prompt_text),
            completion_tokens=estimate_tokens(text),
            latency_ms=0.0,
            tool_calls=tool_calls,
        )

    # -- planner -----------------------------------------------------------------------
    def _plan(self, payload: dict[str, Any]) -> tuple[str, list[ToolCallRequest]]:
        question = " ".join(payload["question"].split())
        max_steps = int(payload.get("max_steps", 5))
        clauses = [c.strip(" ,.?") for c in _CLAUSE_SPLIT.split(question) if c and c.strip(" ,.?")]
        topic_words = (
            _topic_terms(clauses[0] if clauses else question, drop_aspects=True)
            or _topic_terms(question)
            or ["the question"]
        )
        topic = " ".join(topic_words[:6])
        title_core = _QUESTION_LEAD.sub("", question.rstrip("?. ")).strip() or question
        plan_title = _cap_words(_sentence_case(title_core), 16)

        steps = [
            (
                f"Background: {topic}",
                f"Find background on {topic}: what it is, how it works and the key terms. "
                f"Search the corpus for '{topic}' and read the most relevant documents.",
                [topic, f"{topic} overview", f"how {topic} works"],
            )
        ]
        for clause in clauses[: max(0, max_steps - 2)]:
            clause_terms = _topic_terms(clause)
            query = " ".join(dict.fromkeys(clause_terms + topic_words))
            steps.append(
                (
                    _cap_words(_sentence_case(clause), 14),
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
            "direct_answer": bool(_DEFINITIONAL.match(question)),
            "steps": [
                {"step_id": i, "title": t, "description": d, "queries": list(dict.fromkeys(q))}
                for i, (t, d, q) in enumerate(steps[:max_steps], 1)
            ],
        }
        return json.dumps(plan), []

    # -- researcher ----------------------------------------------------------------------
    def _research(self, payload: dict[str, Any]) -> tuple[str, list[ToolCallRequest]]:
        # Search fan-out and top-K reads are orchestrated by the research team before the
        # researcher is asked; the heuristic researcher has nothing to add to them.
        return "Retrieval for this step is complete.", []

    # -- critic --------------------------------------------------------------------------
    def _critic(self, payload: dict[str, Any]) -> tuple[str, list[ToolCallRequest]]:
        return json.dumps(critique_heuristically(payload)), []

    # -- compressor ----------------------------------------------------------------------
    def _compress(self, payload: dict[str, Any]) -> tuple[str, list[ToolCallRequest]]:
        return json.dumps(compress_extractively(payload)), []

    # -- reporter ------------------------------------------------------------------------
    def _report(self, payload: dict[str, Any]) -> tuple[str, list[ToolCallRequest]]:
        phase = payload.get("phase")
        if phase == "lookup":
            return "no lookups", []  # the extractive reporter quotes summaries only
        if phase == "outline":
            return json.dumps({"sections": [{"heading": h, "points": []} for h in REPORT_SECTIONS]}), []
        if phase == "direct":
            return json.dumps({"markdown": direct_answer_text(payload)}), []
        return json.dumps({"markdown": extractive_section(payload["section"], payload)}), []


def _not_useful(reason: str, step_title: str) -> dict[str, Any]:
    return {
        "summary_title": _title(f"No relevant information for {step_title}", "in this output"),
        "summary": f"{reason} Nothing in it answers the step. The full output is kept on disk.",
        "extraction": [],
        "is_useful": False,
    }


def _title(text: str, pad: str) -> str:
    parts = text.split()[:12]
    for extra in pad.split():
        if len(parts) >= 5:
            break
        parts.append(extra)
    while len(parts) < 5:
        parts.append("findings")
    return " ".join(parts)


def compress_extractively(payload: dict[str, Any]) -> dict[str, Any]:
    """Extractive compression: sentences scored against the step. Always schema-valid."""
    raw: str = payload["raw"]
    step_title: str = payload["step_title"]
    if payload.get("kind") == "json":
        try:
            data = json.loads(raw)
        except json.JSONDecodeError:
            data = None
        if isinstance(data, dict):
            if "error" in data:
                return _not_useful("The tool call failed with an error.", step_title)
            if isinstance(data.get("results"), list):
                return _compress_search(data, step_title)
            if isinstance(data.get("matches"), list):
                return _compress_grep(data, step_title)
            if isinstance(data.get("content"), str):
                raw = data["content"]
        if not isinstance(data, dict) or not isinstance(data.get("content"), str):
            raw = " ".join(_strings(data)) if data is not None else raw
    return _compress_text(raw, payload)


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def _compress_search(data: dict[str, Any], step_title: str) -> dict[str, Any]:
    results = [r for r in data["results"] if isinstance(r, dict)]
    query = str(data.get("query", ""))
    if not results:
        return _not_useful(f'The search for "{query}" returned no results.', step_title)
    where = lambda r: r.get("path") or r.get("url") or ""  # noqa: E731
    return {
        "summary_title": _title(f"Search results for {_cap_words(query, 8)}", "in the corpus"),
        "summary": (
            f"The search returned {len(results)} results. "
            f'The best match is "{results[0].get("title", "")}". '
            f"The top {min(3, len(results))} are listed with their locations."
        ),
        # The research team ranks and reads sources itself; memory keeps only the best pointers.
        "extraction": [f"{where(r)} — {r.get('title', '')}" for r in results[:3]],
        "is_useful": True,
    }


def _compress_grep(data: dict[str, Any], step_title: str) -> dict[str, Any]:
    matches = [m for m in data["matches"] if isinstance(m, dict)]
    pattern = str(data.get("pattern", ""))
    if not matches:
        return _not_useful(f'No stored artifact matched "{pattern}".', step_title)
    files = sorted({str(m.get("file")) for m in matches})
    return {
        "summary_title": _title(f"Artifact lines matching {_cap_words(pattern, 6)}", "in stored outputs"),
        "summary": (
            f'The pattern "{pattern}" matched {len(matches)} lines. '
            f"The matches come from {len(files)} stored artifacts. "
            "Each extraction item gives the file, line number and text."
        ),
        "extraction": [f"{m.get('file')}:{m.get('line')}: {m.get('text')}" for m in matches[:10]],
        "is_useful": True,
    }


def _candidate_sentences(text: str) -> list[str]:
    out: list[str] = []
    for block in re.split(r"\n", text):
        block = _EMPHASIS.sub("", _LIST_MARKER.sub("", block)).strip()
        if not block or block.startswith("#") or not re.search(r"[.!?][\"')\]]*$", block):
            continue
        out.extend(s for s in split_sentences(block) if 40 <= len(s) <= 280)
    return out


def _compress_text(raw: str, payload: dict[str, Any]) -> dict[str, Any]:
    step_title = payload["step_title"]
    sentences = _candidate_sentences(raw)
    if not sentences:
        return _not_useful("The output contains no readable prose.", step_title)
    step_terms = set(content_terms(f"{step_title} {payload.get('step_description', '')}")) - _INSTRUCTION_WORDS
    plan_terms = set(content_terms(payload.get("plan_title", ""))) - _INSTRUCTION_WORDS - step_terms
    sent_terms = [set(content_terms(s)) for s in sentences]
    df = Counter(t for terms in sent_terms for t in terms)
    n = len(sentences)

    def score(i: int) -> float:
        terms = sent_terms[i]
        s = sum(math.log(1 + n / df[t]) for t in terms & step_terms)
        s += 0.5 * sum(math.log(1 + n / df[t]) for t in terms & plan_terms)
        if re.search(r"\d", sentences[i]):
            s += 0.5
        if _ANAPHORA.match(sentences[i]):
            s *= 0.5  # "It…"/"These…" read badly once lifted out of their paragraph
        return s / (1 + len(terms) / 40)

    scores = [score(i) for i in range(n)]
    matched = set().union(*(sent_terms[i] & step_terms for i in range(n)))
    coverage = len(matched) / max(1, len(step_terms))
    if max(scores) < 1.5 or coverage < 0.25:
        return _not_useful("The output does not address the step's topic.", step_title)

    ranked = sorted(range(n), key=lambda i: (-scores[i], i))
    summary_idx = sorted(ranked[:3])
    # Extraction keeps factual sentences only (figures, dates), the summary carries the gist.
    extraction_idx = [i for i in ranked[3:] if scores[i] > 0 and re.search(r"\d", sentences[i])][:2]
    source_title = payload.get("source_title") or _cap_words(sentences[0], 6)
    summary_sents = [sentences[i] for i in summary_idx]
    spare = [sentences[i] for i in ranked[3:] if i not in extraction_idx]
    padding = [f'The source is titled "{source_title}".', f"It contains about {len(raw.split())} words."]
    # Odd punctuation can make two picked sentences read back as one; top up until the joined
    # summary counts 3 sentences by the schema's own rule.
    while count_sentences(" ".join(summary_sents)) < 3 and (spare or padding):
        summary_sents.append((spare or padding).pop(0))
    return {
        "summary_title": _title(_cap_words(source_title, 12), "— findings for this step"),
        "summary": " ".join(summary_sents),
        "extraction": [sentences[i] for i in sorted(extraction_idx)],
        "is_useful": True,
    }


def critique_heuristically(payload: dict[str, Any]) -> dict[str, Any]:
    """Sufficiency from coverage: question terms found in memory, plan steps with a source."""
    question = payload["question"]
    memory = payload.get("memory", [])
    memory_terms = set(
        content_terms(" ".join(f"{m.get('summary', '')} {' '.join(m.get('extraction', []))}" for m in memory))
    )
    words_ = _topic_terms(question)
    missing = [w for w in words_ if not set(content_terms(w.replace("-", " "))) <= memory_terms]
    coverage = 1 - len(missing) / len(words_) if words_ else 1.0
    steps = payload["plan"]["steps"]
    sourced = {str(m["step_id"]) for m in memory if m.get("source")}
    uncovered = [s for s in steps if str(s["step_id"]) not in sourced]
    step_cov = 1 - len(uncovered) / len(steps) if steps else 1.0
    score = max(1, min(10, round(1 + 9 * (0.5 * coverage + 0.5 * step_cov))))
    topic = " ".join(_topic_terms(question, drop_aspects=True)[:4])
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
