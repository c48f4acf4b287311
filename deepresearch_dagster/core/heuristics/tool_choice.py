"""The offline researcher's use of plugin and MCP tools: a tool whose description shares content
terms with the step is called once per step, with the step's query in its required text arguments;
a tool that failed in an earlier step of the research is not called again, and one that told
earlier steps nothing useful yields to tools not tried yet.

Built-in search and reads are orchestrated by the research team before the researcher is asked;
outside tools are only known by their descriptions and JSON schemas, so term overlap between a
description and the step is the general signal (no tool names, no word lists).
"""

from __future__ import annotations

from typing import Any

from ..text import content_terms

MAX_CALLS_PER_STEP = 2  # the best-matching tools; the step's cap bounds them too
MIN_SHARED_TERMS = 1


def arguments_for(schema: dict[str, Any], query: str) -> dict[str, Any] | None:
    """Arguments filling each required property: its default, else text with the query, a number
    with its minimum; None when a required property cannot be filled (the tool is not called)."""
    properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    out: dict[str, Any] = {}
    for name in schema.get("required") or []:
        spec = properties.get(name) if isinstance(properties.get(name), dict) else {}
        kind = spec.get("type")
        if "default" in spec:
            out[name] = spec["default"]  # required all the same: sent as the schema suggests
        elif kind == "string" and "enum" not in spec:
            out[name] = query
        elif kind in ("integer", "number") and "minimum" in spec:
            out[name] = spec["minimum"]
        else:
            return None
    return out


def choose_tool_calls(payload: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(tool name, arguments) for the outside tools that match the step and were not called in it."""
    step = payload.get("step") or {}
    queries = [q for q in step.get("queries") or [] if isinstance(q, str) and q.strip()]
    query = queries[0] if queries else f"{step.get('title', '')} {step.get('description', '')}".strip()
    step_terms = set(content_terms(" ".join([str(step.get("title", "")), str(step.get("description", "")), *queries])))
    called = {c.get("tool") for c in payload.get("calls") or []}
    earlier = payload.get("earlier_outcomes") or {}
    scored = []
    for tool in payload.get("external_tools") or []:
        name = str(tool.get("name"))
        # A tool whose call with such arguments failed in an earlier step would fail again.
        if name in called or earlier.get(name) == "failed":
            continue
        shared = step_terms & set(content_terms(str(tool.get("description") or "")))
        if len(shared) < MIN_SHARED_TERMS:
            continue
        args = arguments_for(tool.get("parameters") or {}, query)
        if args is not None:
            # Tools that told earlier steps nothing yield to those not tried yet.
            scored.append((earlier.get(name) == "not useful", -len(shared), name, args))
    return [(s[2], s[3]) for s in sorted(scored, key=lambda s: s[:3])[:MAX_CALLS_PER_STEP]]
