"""Tools from outside the core in the Dagster UI (docs/tools.md): the configured MCP servers and
the installed plugin tools on the ``tool_outputs`` asset's definition, and per materialization the
outside tools that research was offered, with their calls.

Listing a server's tools means starting it, which a research does and loading the code location
must not; so the definition names the servers and the materialization lists their tools.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from dagster import AssetKey, AssetsDefinition, MetadataValue

from ..core.config import ResearchSettings
from ..core.models import ToolOutputs
from ..core.naming import markdown_code, markdown_text
from ..core.tools.external import describe_server, plugin_tools

TOOLS_ASSET = AssetKey("tool_outputs")


def _cell(text: object) -> str:
    return markdown_text(text).replace("|", "\\|")


def _bullets(lines: list[str]) -> str:
    return "\n".join(f"- {markdown_text(line)}" for line in lines)


def configured_tools_metadata(settings: ResearchSettings) -> dict[str, Any]:
    """The definition's metadata: one line per configured server (no env, headers or secrets:
    ``describe_server``), the installed plugin tools, and what cannot be used."""
    servers = [describe_server(name, server) for name, server in settings.mcp_servers.items()]
    plugins, problems = plugin_tools(settings.plugins_deny)
    rows = ["| plugin tool | origin | description |", "|---|---|---|"]
    rows += [f"| {markdown_code(t.name)} | {_cell(t.origin)} | {_cell(t.description[:120])} |" for t in plugins]
    metadata: dict[str, Any] = {
        "mcp_servers": MetadataValue.md(_bullets(servers) or "none configured"),
        "plugin_tools": MetadataValue.md("\n".join(rows) if plugins else "none installed"),
        "mcp_server_count": len(servers),
    }
    if problems:
        metadata["tool_problems"] = MetadataValue.md(_bullets(problems))
    return metadata


def with_configured_tools(assets: Iterable[AssetsDefinition], settings: ResearchSettings) -> list[AssetsDefinition]:
    """``assets`` with the configured tools on the tool_outputs asset's definition."""
    metadata = configured_tools_metadata(settings)
    return [
        a.map_asset_specs(lambda spec: spec.merge_attributes(metadata=metadata)) if TOOLS_ASSET in a.keys else a
        for a in assets
    ]


def offered_tools_metadata(outputs: ToolOutputs) -> dict[str, Any]:
    """A materialization's metadata: the outside tools the research was offered with their calls,
    and the servers or plugins that could not be used."""
    metadata: dict[str, Any] = {}
    if outputs.outside_tools:
        calls = Counter(c.tool for c in outputs.calls)
        failed = Counter(c.tool for c in outputs.calls if c.status != "ok")
        rows = ["| tool | origin | calls | failed | description |", "|---|---|---:|---:|---|"]
        rows += [
            f"| {markdown_code(name)} | {_cell(origin)} | {calls[name]} | {failed[name]} | {_cell(desc[:100])} |"
            for name, origin, desc in outputs.outside_tools
        ]
        metadata["outside_tools"] = MetadataValue.md("\n".join(rows))
    if outputs.tool_problems:
        metadata["tool_problems"] = MetadataValue.md(_bullets(outputs.tool_problems))
    return metadata
