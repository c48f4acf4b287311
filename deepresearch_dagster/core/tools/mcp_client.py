"""MCP servers as tools, through the maintained SDK (``mcp``, its high-level ``Client``).

The SDK is async and the research team calls tools from plain threads, so one :class:`MCPHub`
runs an event loop in a daemon thread and keeps one client per configured server open for the
whole research: a stdio server is started once (not once per call) and a streamable HTTP server
is connected once. Each server tool becomes a :class:`Tool` named ``<server>.<tool>`` whose runner
blocks on the loop with the call's wall deadline; what comes back is turned into a
:class:`ToolResult` (text, JSON, text resources; binary content is refused with a note, never
stored as text). Failures are :class:`ToolError` lines, so the research team records them like any
other failed call: a crash ("the server closed the connection"), a hang (deadline), an error
result (its first line).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import tempfile
import threading
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from pydantic import BaseModel, ConfigDict

from ..config import MCPServerSettings
from ..errors import ToolError, redact
from .base import Tool, ToolResult

CLOSE_TIMEOUT_S = 5.0
# Starting a server (an interpreter or `npx` importing its SDK) takes seconds: not a call's deadline.
START_TIMEOUT_S = 60.0


class OpenArguments(BaseModel):
    """An MCP tool's arguments: checked against the server's own JSON schema (jsonschema), not a
    pydantic model, so everything the model sent is kept for that check."""

    model_config = ConfigDict(extra="allow")


@dataclass
class _Server:
    name: str
    settings: MCPServerSettings
    client: Any = None
    stop: asyncio.Event | None = None
    task: concurrent.futures.Future[None] | None = None
    errlog: Any = None


def offered(name: str, settings: MCPServerSettings) -> bool:
    """The allow/deny lists (shell-style patterns on the server's own tool names)."""
    if settings.allow and not any(fnmatchcase(name, p) for p in settings.allow):
        return False
    return not any(fnmatchcase(name, p) for p in settings.deny)


def visible_schema(schema: dict[str, Any], fixed: dict[str, Any]) -> dict[str, Any]:
    """The input schema the model sees: without its title and without the fixed arguments."""
    out = {k: v for k, v in schema.items() if k != "title"}
    if fixed and isinstance(out.get("properties"), dict):
        out["properties"] = {k: v for k, v in out["properties"].items() if k not in fixed}
        if isinstance(out.get("required"), list):
            out["required"] = [r for r in out["required"] if r not in fixed]
    out.setdefault("type", "object")
    out.setdefault("properties", {})
    return out


def server_roots(settings: MCPServerSettings) -> tuple[str, ...]:
    """The directories a server was configured to work in: its cwd and every existing directory
    among its args and fixed arguments (a filesystem server's allowed folders, a repository)."""
    named = [settings.cwd, *settings.args, *(v for v in settings.arguments.values() if isinstance(v, str))]
    folders = [Path(p) for p in named if p and Path(p).is_absolute() and Path(p).is_dir()]
    # As written and resolved: a model may name either spelling of a folder behind a symlink.
    return tuple(sorted({str(f.resolve()) for f in folders} | {os.path.normpath(f) for f in folders}))


def one_line(text: str, limit: int = 240) -> str:
    line = " ".join(str(text).split())
    return redact(line if len(line) <= limit else line[: limit - 1] + "…")


def to_result(name: str, source: str, result: Any) -> ToolResult:
    """A ``CallToolResult`` as a ToolResult; ToolError for an error result or binary-only content."""
    parts: list[str] = []
    refused: list[str] = []
    for block in result.content:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind == "resource" and hasattr(block.resource, "text"):
            parts.append(block.resource.text)
        elif kind == "resource_link":
            parts.append(f"[resource {block.uri}: {block.name}]")
        else:  # image, audio, blob resource: bytes are not text a compressor can ground on
            mime = getattr(block, "mime_type", None) or getattr(getattr(block, "resource", None), "mime_type", None)
            refused.append(f"{kind} ({mime or 'unknown type'})")
    if result.is_error:
        raise ToolError(f"{name} returned an error: {one_line(' '.join(parts) or 'no message')}")
    if refused and not parts:
        raise ToolError(f"{name} returned only binary content ({', '.join(refused)}): refused, nothing stored")
    parts += [f"[binary {r} content refused]" for r in refused]
    if not parts and result.structured_content is not None:
        return ToolResult(content=result.structured_content, kind="json", source=source, source_title=name)
    text = "\n\n".join(parts)
    if len(parts) == 1 and text.lstrip()[:1] in ("{", "["):
        with contextlib.suppress(ValueError):
            return ToolResult(content=json.loads(text), kind="json", source=source, source_title=name)
    return ToolResult(content=text, kind="text", source=source, source_title=name)


class MCPHub:
    """The configured servers' clients, open from :meth:`start` to :meth:`close`."""

    def __init__(self, servers: dict[str, MCPServerSettings], timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._servers = {name: _Server(name, s) for name, s in servers.items()}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> tuple[list[Tool], list[str]]:
        """Connect every server (concurrently) and list its tools: (tools, one line per server that
        could not be used). A server that fails to start leaves the others usable."""
        if not self._servers:
            return [], []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="mcp-client", daemon=True)
        self._thread.start()
        pending = {}
        for server in self._servers.values():
            ready: concurrent.futures.Future[list[Any]] = concurrent.futures.Future()
            server.task = asyncio.run_coroutine_threadsafe(self._serve(server, ready), self._loop)
            pending[server.name] = ready
        tools: list[Tool] = []
        problems: list[str] = []
        for name, ready in pending.items():
            server = self._servers[name]
            timeout = max(server.settings.timeout_s or self.timeout_s, START_TIMEOUT_S)
            try:
                listed = ready.result(timeout=timeout)
            except concurrent.futures.TimeoutError:
                problems.append(f"mcp server {name}: no answer within {timeout:g} s; its tools are not offered")
                if server.task is not None:
                    server.task.cancel()
                continue
            except Exception as exc:  # the SDK's and the OS's errors: the server is unusable, not a bug here
                why = self._reason(server, exc)
                problems.append(f"mcp server {name}: cannot start ({why}); its tools are not offered")
                continue
            tools += [self._tool(server, t) for t in listed if offered(t.name, server.settings)]
        return tools, problems

    def close(self) -> None:
        if self._loop is None:
            return
        for server in self._servers.values():
            self._stop(server)
        for server in self._servers.values():
            if server.task is not None:
                try:
                    server.task.result(timeout=CLOSE_TIMEOUT_S)
                except concurrent.futures.TimeoutError:
                    server.task.cancel()
                except (Exception, concurrent.futures.CancelledError):
                    pass  # reported when it happened
            if server.errlog is not None:
                server.errlog.close()
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(CLOSE_TIMEOUT_S)
        if self._thread is None or not self._thread.is_alive():
            self._loop.close()
        self._loop = None

    def _stop(self, server: _Server) -> None:
        if self._loop is not None and server.stop is not None:
            self._loop.call_soon_threadsafe(server.stop.set)

    async def _serve(self, server: _Server, ready: concurrent.futures.Future[list[Any]]) -> None:
        """Open the client, list the tools, then hold the connection until :meth:`close`."""
        from mcp import Client

        server.stop = asyncio.Event()
        try:
            async with Client(self._transport(server)) as client:
                listed, cursor = [], None
                while True:
                    page = await client.list_tools(cursor=cursor)
                    listed += page.tools
                    cursor = page.next_cursor
                    if not cursor:
                        break
                server.client = client
                ready.set_result(listed)
                await server.stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
        finally:
            server.client = None

    def _transport(self, server: _Server) -> Any:
        s = server.settings
        if s.url:
            from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

            headers = {k: v.get_secret_value() for k, v in s.headers.items()}
            return streamable_http_client(s.url, http_client=create_mcp_http_client(headers=headers))
        from mcp.client.stdio import StdioServerParameters, stdio_client

        # The server's own log goes to a scratch file, not our terminal: its last line explains a
        # failed start.
        server.errlog = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115 (closed in close())
        env = {k: v.get_secret_value() for k, v in s.env.items()}
        params = StdioServerParameters(command=s.command or "", args=list(s.args), env=env, cwd=s.cwd)
        return stdio_client(params, errlog=server.errlog)

    def _reason(self, server: _Server, exc: BaseException) -> str:
        text = "; ".join(dict.fromkeys(str(e) or type(e).__name__ for e in _leaves(exc)))
        if server.errlog is not None:
            with contextlib.suppress(OSError, ValueError):
                server.errlog.seek(0)
                lines = [ln.strip() for ln in server.errlog.read()[-4000:].splitlines() if ln.strip()]
                if lines:
                    text += f"; its last log line: {lines[-1]}"
        return one_line(text)

    # -- calls ---------------------------------------------------------------------------------
    def _tool(self, server: _Server, listed: Any) -> Tool:
        name = f"{server.name}.{listed.name}"
        takes = (listed.input_schema or {}).get("properties") or {}
        fixed = {k: v for k, v in server.settings.arguments.items() if k in takes}
        schema = visible_schema(dict(listed.input_schema or {}), fixed)
        timeout = server.settings.timeout_s or self.timeout_s

        def run(args: OpenArguments) -> ToolResult:
            given = dict(args.model_extra or {})
            _check_arguments(name, schema, given)
            sent = {**given, **fixed}
            source = f"mcp://{server.name}/{listed.name}" + (f"?{urlencode(sorted(given.items()))}" if given else "")
            return to_result(name, source, self._call(server, listed.name, sent, timeout))

        return Tool(
            name=name,
            description=one_line(listed.description or listed.name, 1000),
            args_model=OpenArguments,
            run=run,
            cacheable=True,  # a server call may be slow or paid: a resumed research re-uses it
            origin=f"mcp:{server.name}",
            schema=schema,
            roots=server_roots(server.settings),
            fixed=tuple(fixed),
        )

    def _call(self, server: _Server, tool: str, arguments: dict[str, Any], timeout: float) -> Any:
        name = f"{server.name}.{tool}"
        client = server.client
        if client is None or self._loop is None:
            raise ToolError(f"{name}: the server is not running (it exited earlier in this research)")
        future = asyncio.run_coroutine_threadsafe(client.call_tool(tool, arguments), self._loop)
        try:
            return future.result(timeout=timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()  # the SDK sends the server a cancellation for the request
            raise ToolError(f"{name}: no answer within {timeout:g} s (tool_timeout_s)") from None
        except Exception as exc:
            if "connection closed" in str(exc).lower():
                raise ToolError(f"{name}: the server closed the connection (it exited or crashed)") from None
            raise ToolError(f"{name}: {type(exc).__name__}: {one_line(str(exc))}") from None


def _leaves(exc: BaseException) -> list[BaseException]:
    """The errors inside the (nested) exception groups of the SDK's task groups."""
    inner = getattr(exc, "exceptions", None)
    return [leaf for e in inner for leaf in _leaves(e)] if inner else [exc]


def _check_arguments(name: str, schema: dict[str, Any], arguments: dict[str, Any]) -> None:
    """The arguments against the server's schema, before a round trip (one line when invalid)."""
    import jsonschema

    try:
        jsonschema.validate(arguments, schema)
    except jsonschema.ValidationError as exc:
        where = ".".join(map(str, exc.absolute_path)) or "arguments"
        raise ToolError(f"invalid arguments for {name}: {where}: {one_line(exc.message)}") from None
    except jsonschema.SchemaError as exc:
        why = one_line(exc.message)
        raise ToolError(f"{name}: the server's input schema is not valid JSON Schema: {why}") from None
