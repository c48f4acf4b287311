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
    # Network tools: identical calls within the TTL are served from the stored artifact.
    cacheable: bool = False

    def function_definition(self) -> dict[str, Any]:
        schema = json.loads(_schema_json(self.args_model))  # a fresh dict: callers may change it
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": schema},
        }


@lru_cache(maxsize=64)
def _schema_json(args_model: type[BaseModel]) -> str:
    """The argument model's JSON schema without its title, built once per model (pydantic takes
    milliseconds per build, and every researcher turn sends the definitions)."""
    schema = args_model.model_json_schema()
    schema.pop("title", None)
    return json.dumps(schema)


class Toolbox:
    def __init__(self, tools: list[Tool]) -> None:
        self.tools = {t.name: t for t in tools}

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
