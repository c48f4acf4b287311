"""``deepresearch tools``: the configured MCP servers, the installed plugins and their tools.

It starts each stdio server (and connects each HTTP one) as a research would, lists, and stops them:
what it prints is what a research is offered. Server env values, headers and URL credentials are
never printed.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from .common import EXIT_OK, settings_from_args


def cmd_tools(args: argparse.Namespace) -> int:
    from ..core.tools.external import describe_server, load_external_tools

    settings = settings_from_args(args)
    external = load_external_tools(settings)
    try:
        tools = [
            {"name": t.name, "origin": t.origin, "description": t.description, "cacheable": t.cacheable}
            | {"parameters": t.function_definition()["function"]["parameters"]}
            for t in external.tools
        ]
    finally:
        external.close()
    if args.json:
        servers = {n: describe_server(n, s) for n, s in settings.mcp_servers.items()}
        print(json.dumps({"servers": servers, "tools": tools, "problems": external.problems}, indent=2))
        return EXIT_OK
    for name, server in settings.mcp_servers.items():
        print(describe_server(name, server))
    if not tools:
        print("no plugin or MCP tools (docs/tools.md says how to add them)")
    for origin in dict.fromkeys(t["origin"] for t in tools):
        print(f"{origin}:")
        for t in (t for t in tools if t["origin"] == origin):
            print(f"  {t['name']:<28} {t['description'][:68]}")
    for problem in external.problems:
        print(f"warning: {problem}")
    return EXIT_OK


def add_tools_command(sub: Any) -> None:
    tools = sub.add_parser("tools", help="list the plugin and MCP tools a research is offered (docs/tools.md)")
    tools.add_argument("--json", action="store_true", help="servers, tools with their JSON schemas, problems")
    tools.set_defaults(func=cmd_tools)
