"""Contracts of the outside-tool helpers, property-based: the offline engine's arguments satisfy the
tool's own schema, and an MCP answer keeps every text block and never stores binary content."""

from __future__ import annotations

import jsonschema
import pytest
from hypothesis import given
from hypothesis import strategies as st
from mcp_types import CallToolResult, ImageContent, TextContent

from deepresearch_dagster.core.errors import ToolError
from deepresearch_dagster.core.heuristics.tool_choice import arguments_for, choose_tool_calls
from deepresearch_dagster.core.tools.mcp_client import to_result, visible_schema

names = st.text("abcdefghij_", min_size=1, max_size=8)
specs = st.one_of(
    st.just({"type": "string"}),
    st.builds(lambda m: {"type": "integer", "minimum": m}, st.integers(-5, 5)),
    st.builds(lambda d: {"type": "integer", "default": d}, st.integers()),
    st.just({"type": "string", "enum": ["a", "b"]}),
    st.just({"type": "boolean"}),
)
schemas = st.dictionaries(names, specs, max_size=5).flatmap(
    lambda props: st.builds(
        lambda required: {"type": "object", "properties": props, "required": sorted(required)},
        st.sets(st.sampled_from(sorted(props))) if props else st.just(set()),
    )
)


@given(schemas, st.text(min_size=1, max_size=40))
def test_offline_arguments_satisfy_the_tool_schema_or_the_tool_is_skipped(schema, query):
    args = arguments_for(schema, query)
    if args is None:
        fillable = ("string", "integer")
        assert any(
            schema["properties"][r].get("type") not in fillable or "enum" in schema["properties"][r]
            for r in schema["required"]
            if "default" not in schema["properties"][r]
        )
    else:
        jsonschema.validate(args, schema)


@given(schemas, st.dictionaries(names, st.integers(), max_size=3))
def test_fixed_arguments_leave_the_visible_schema(schema, fixed):
    seen = visible_schema(schema, fixed)
    assert not set(fixed) & set(seen["properties"]) and not set(fixed) & set(seen.get("required", []))
    assert set(seen["properties"]) == set(schema["properties"]) - set(fixed)


def test_the_offline_researcher_picks_tools_by_description():
    tools = [
        {
            "name": "wiki.search",
            "description": "Search the wiki for ingestion queue designs",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
        },
        {"name": "weather.now", "description": "Current weather in a city", "parameters": {"type": "object"}},
    ]
    step = {"title": "Queue migration", "description": "Why the ingestion queue moved", "queries": ["queue move"]}
    payload = {"step": step, "calls": [], "external_tools": tools}
    assert choose_tool_calls(payload) == [("wiki.search", {"q": "queue move"})]
    payload["calls"] = [{"tool": "wiki.search", "arguments": {"q": "queue move"}}]
    assert choose_tool_calls(payload) == []  # once per step


blocks = st.lists(
    st.one_of(
        st.builds(lambda t: TextContent(type="text", text=t), st.text(max_size=30)),
        st.just(ImageContent(type="image", data="iVBORw0KGgo=", mime_type="image/png")),
    ),
    max_size=4,
)


@given(blocks, st.booleans())
def test_an_mcp_answer_keeps_its_text_and_refuses_binary(content, is_error):
    result = CallToolResult(content=content, is_error=is_error)
    texts = [b.text for b in content if b.type == "text"]
    try:
        out = to_result("s.t", "mcp://s/t", result)
    except ToolError as exc:
        assert is_error or not texts
        assert "\n" not in str(exc)
        return
    assert not is_error and (texts or not content)
    stored = out.content if out.kind == "text" else None
    if stored is not None:
        assert all(t in stored for t in texts) and "iVBORw0KGgo" not in stored


def test_an_answer_of_only_binary_content_is_refused():
    with pytest.raises(ToolError, match="only binary content"):
        to_result(
            "s.t", "mcp://s/t", CallToolResult(content=[ImageContent(type="image", data="AA==", mime_type="image/png")])
        )
