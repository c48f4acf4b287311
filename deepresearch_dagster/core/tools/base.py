"""Tool interface: argument models double as OpenAI function definitions."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from ..errors import ToolError


class ToolResult(BaseModel):
    content: Any
    kind: Literal["json", "text"]
    source: str | None = None
    source_title: str | None = None
    # A fetched page's link targets: provenance for later fetches (roles/provenance.py), not stored.
    links: list[str] = Field(default_factory=list, exclude=True)

    @property
    def ext(self) -> str:
        return "json" if self.kind == "json" else "txt"


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    args_model: type[BaseModel]
    run: Callable[[Any], ToolResult]
    # Network and corpus tools: identical calls within the TTL are served from the stored artifact.
    cacheable: bool = False
    # What the answer depends on besides the arguments (a corpus's content hash), part of the
    # cache key: a changed corpus is a miss, never a stale answer.
    cache_scope: str = ""
    # "builtin", "mcp:<server>" or "plugin:<distribution>" (core/tools/external.py).
    origin: str = "builtin"
    # An MCP tool's own JSON schema (its arguments are checked against it when called).
    schema: dict[str, Any] | None = None
    # An outside tool's path arguments may name these directories absolutely (an MCP server's cwd
    # and the directories its configuration names); its fixed arguments are set by the
    # configuration, not the model (both read by roles/provenance.py).
    roots: tuple[str, ...] = ()
    fixed: tuple[str, ...] = ()

    @property
    def wire_name(self) -> str:
        """The name models see: OpenAI function names allow no dot, so ``server.tool`` is sent as
        ``server__tool`` (:meth:`Toolbox.canonical` maps it back)."""
        return self.name.replace(".", "__")

    def function_definition(self) -> dict[str, Any]:
        # A fresh dict either way: callers may change it.
        schema = json.loads(json.dumps(self.schema) if self.schema else _schema_json(self.args_model))
        return {
            "type": "function",
            "function": {"name": self.wire_name, "description": self.description, "parameters": schema},
        }


@lru_cache(maxsize=64)
def _schema_json(args_model: type[BaseModel]) -> str:
    """The argument model's JSON schema without its title, built once per model (pydantic takes
    milliseconds per build, and every researcher turn sends the definitions)."""
    schema = args_model.model_json_schema()
    schema.pop("title", None)
    return json.dumps(schema)


class Toolbox:
    def __init__(
        self,
        tools: list[Tool],
        close: Callable[[], None] | None = None,
        problems: list[str] | None = None,
        term_weight: Callable[[str], float] | None = None,
    ) -> None:
        self.tools = {t.name: t for t in tools}
        self._close = close  # stops what the tools hold open (MCP server processes)
        self.problems = problems or []  # one line per MCP server or plugin that could not be used
        # A stemmed term's rarity in what ``local_search`` searches (``LocalCorpus.idf``), for ranking.
        self.term_weight = term_weight

    def canonical(self, name: str) -> str:
        """A tool's name from the name a model called it by (its wire name or its own)."""
        if name in self.tools:
            return name
        return next((t.name for t in self.tools.values() if t.wire_name == name), name)

    def close(self) -> None:
        if self._close is not None:
            self._close()
            self._close = None

    def definitions(self) -> list[dict[str, Any]]:
        return [t.function_definition() for t in self.tools.values()]

    def call(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        tool = self.tools.get(name)
        if tool is None:
            raise ToolError(f"unknown tool {name!r}; available: {sorted(self.tools)}")
        try:
            args = tool.args_model.model_validate(arguments)
        except ValidationError as exc:
            raise ToolError(f"invalid arguments for {name}: {exc.errors(include_url=False)}") from exc
        return tool.run(args)
