"""Tools from outside the core: MCP servers (``mcp_client.py``) and Python plugins registered under
the ``deepresearch.tools`` entry point (docs/tools.md).

Each becomes a :class:`Tool` like the built-in ones, so its calls take the research team's one path
(raw output written atomically first, compressed, injected only if useful, cached for resume, one
lineage row). What an outside tool needs on top is here: every call has a wall deadline
(``tool_timeout_s``) and a cap on its raw output (``tool_max_output_bytes``; a bigger answer is a
recorded failure, never a silently cut source), and any exception it raises becomes one
:class:`ToolError` line instead of a traceback.
"""

from __future__ import annotations

import json
import re
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache
from importlib.metadata import EntryPoint, entry_points
from typing import Any
from urllib.parse import urlencode

from pydantic import BaseModel

from ..config import ResearchSettings
from ..errors import ToolError, redact
from ..store.artifacts import dumps_json
from .base import Tool, ToolResult
from .mcp_client import MCPHub, one_line

ENTRY_POINT_GROUP = "deepresearch.tools"
TOOL_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
# The MCP runner enforces its own deadline (and cancels the request); this one is the backstop.
BACKSTOP_S = 2.0


class PluginTool:
    """What a plugin implements (or hand a ready :class:`Tool`): ``name``, ``description``, a
    pydantic ``args_model`` and ``run(args)`` returning a :class:`ToolResult`, a ``str`` (text) or
    a ``dict``/``list`` (JSON). ``cacheable = True`` lets a resumed research re-use its calls."""

    name: str
    description: str
    args_model: type[BaseModel]
    cacheable: bool = False

    def run(self, args: Any) -> ToolResult | str | dict[str, Any] | list[Any]:
        raise NotImplementedError


@dataclass
class ExternalTools:
    tools: list[Tool]
    problems: list[str]  # one line per server or plugin that could not be used
    close: Callable[[], None]


def load_external_tools(settings: ResearchSettings, taken: set[str] = frozenset()) -> ExternalTools:
    """The plugins and the configured MCP servers' tools, bounded; ``taken``: names already used
    (the built-in tools), which an outside tool may not replace."""
    tools, problems = plugin_tools(settings.plugins_deny)
    hub = MCPHub(settings.mcp_servers, settings.tool_timeout_s)
    try:
        mcp_tools, mcp_problems = hub.start()
    except BaseException:
        hub.close()
        raise
    names = set(taken)
    kept = []
    for tool in tools + mcp_tools:
        if tool.name in names:
            problems.append(f"{tool.origin}: a tool named {tool.name} exists already; this one is not offered")
            continue
        names.add(tool.name)
        server = settings.mcp_servers.get(tool.origin.removeprefix("mcp:")) if tool.origin.startswith("mcp:") else None
        deadline = (server.timeout_s or settings.tool_timeout_s) + BACKSTOP_S if server else settings.tool_timeout_s
        kept.append(bounded(tool, deadline, settings.tool_max_output_bytes))
    return ExternalTools(kept, problems + mcp_problems, hub.close)


def describe_server(name: str, server: Any) -> str:
    """One line per configured MCP server, for `deepresearch tools` and the Dagster UI: how it is
    reached and its allow/deny lists; env and headers never, known secrets redacted by value."""
    where = f"streamable HTTP {server.url}" if server.url else f"stdio: {' '.join([server.command, *server.args])}"
    lists = "".join(
        f"; {label} {', '.join(values)}" for label, values in (("allow", server.allow), ("deny", server.deny)) if values
    )
    return redact(f"mcp server {name} ({where}{lists})")


# -- bounds ------------------------------------------------------------------------------------
def as_result(name: str, value: Any) -> ToolResult:
    if isinstance(value, ToolResult):
        return value
    if isinstance(value, str):
        return ToolResult(content=value, kind="text", source_title=name)
    if isinstance(value, dict | list):
        return ToolResult(content=value, kind="json", source_title=name)
    raise ToolError(f"{name} returned a {type(value).__name__}, not text, JSON or a ToolResult")


def output_bytes(result: ToolResult) -> int:
    text = result.content if isinstance(result.content, str) else dumps_json(result.content)
    return len(text.encode("utf-8"))


def bounded(tool: Tool, timeout_s: float, max_bytes: int) -> Tool:
    """``tool`` with a wall deadline, a size cap and its exceptions as one ToolError line. The call
    runs in a daemon thread: a plugin that never returns is abandoned at the deadline (Python cannot
    stop a thread), the research goes on."""

    def run(args: Any) -> ToolResult:
        box: dict[str, Any] = {}
        done = threading.Event()

        def target() -> None:
            try:
                box["result"] = tool.run(args)
            except BaseException as exc:  # reported below as the call's failure
                box["error"] = exc
            finally:
                done.set()

        threading.Thread(target=target, name=f"tool-{tool.name}", daemon=True).start()
        if not done.wait(timeout_s):
            raise ToolError(f"{tool.name}: no answer within {timeout_s:g} s (tool_timeout_s)")
        error = box.get("error")
        if isinstance(error, ToolError):
            raise error
        if error is not None:
            raise ToolError(f"{tool.name} failed: {type(error).__name__}: {one_line(str(error))}") from None
        result = as_result(tool.name, box.get("result"))
        if result.source is None:  # each call is a citable source: the tool and its arguments
            given = args.model_dump(exclude_none=True) if isinstance(args, BaseModel) else {}
            query = urlencode(sorted((k, v if isinstance(v, str) else json.dumps(v)) for k, v in given.items()))
            result = result.model_copy(update={"source": f"tool://{tool.name}" + (f"?{query}" if query else "")})
        size = output_bytes(result)
        if size > max_bytes:
            raise ToolError(
                f"{tool.name}: output of {size:,} bytes is over the cap of {max_bytes:,} (tool_max_output_bytes); "
                "not stored"
            )
        return result

    return replace(tool, run=run)


# -- plugins -----------------------------------------------------------------------------------
def plugin_tools(deny: tuple[str, ...] = ()) -> tuple[list[Tool], list[str]]:
    """The tools of every installed ``deepresearch.tools`` entry point not named in ``deny``. An
    entry point names a :class:`Tool`, a :class:`PluginTool` subclass or instance, or a function
    returning either (or a list of them)."""
    tools: list[Tool] = []
    problems: list[str] = []
    for ep in _entry_points(tuple(sys.path)):
        if ep.name in deny:
            continue
        origin = f"plugin:{ep.dist.name if ep.dist else ep.name}"
        try:
            found = _as_tools(ep.load(), origin)
        except Exception as exc:  # a broken plugin is the plugin's problem: the research goes on
            why = one_line(f"{type(exc).__name__}: {exc}")
            problems.append(f"{origin}: entry point {ep.name} cannot be loaded ({why})")
            continue
        for tool in found:
            if TOOL_NAME.fullmatch(tool.name):
                tools.append(tool)
            else:
                problems.append(f"{origin}: tool name {tool.name!r} is not letters, digits, '_', '-' or '.'")
    return tools, problems


@lru_cache(maxsize=4)
def _entry_points(path: tuple[str, ...]) -> list[EntryPoint]:
    """Scanning every installed distribution takes ~0.1 s: once per process and ``sys.path``."""
    return sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name)


def _as_tools(obj: Any, origin: str, depth: int = 0) -> list[Tool]:
    if isinstance(obj, Tool):
        return [replace(obj, origin=origin)]
    if isinstance(obj, list | tuple):
        return [t for o in obj for t in _as_tools(o, origin, depth)]
    if isinstance(obj, type):
        obj = obj()
    if all(hasattr(obj, a) for a in ("name", "description", "args_model", "run")):
        return [
            Tool(
                name=str(obj.name),
                description=str(obj.description),
                args_model=obj.args_model,
                run=obj.run,
                cacheable=bool(getattr(obj, "cacheable", False)),
                origin=origin,
            )
        ]
    if callable(obj) and depth == 0:
        return _as_tools(obj(), origin, depth + 1)
    raise TypeError(f"{type(obj).__name__} is not a Tool, a PluginTool or a function returning one")
