"""``grep_artifacts`` and ``read_artifact`` as tools for the research team and reporter."""

from __future__ import annotations

from pydantic import BaseModel, Field

from ..store.artifacts import ArtifactAccessError, ArtifactReader
from .base import Tool, ToolError, ToolResult


class GrepArgs(BaseModel):
    pattern: str = Field(min_length=1, max_length=200, description="regular expression (case-insensitive)")


class ReadArtifactArgs(BaseModel):
    file: str = Field(min_length=1, max_length=255, description="artifact file name")
    offset: int = Field(default=0, ge=0)
    limit: int = Field(default=4000, ge=1, le=20000)


def artifact_tools(reader: ArtifactReader) -> list[Tool]:
    def grep(args: GrepArgs) -> ToolResult:
        try:
            matches = reader.grep(args.pattern)
        except ArtifactAccessError as exc:
            raise ToolError(str(exc)) from exc
        return ToolResult(content={"pattern": args.pattern, "matches": matches}, kind="json")

    def read(args: ReadArtifactArgs) -> ToolResult:
        try:
            return ToolResult(content=reader.read(args.file, args.offset, args.limit), kind="json")
        except ArtifactAccessError as exc:
            raise ToolError(str(exc)) from exc

    return [
        Tool("grep_artifacts", "Search this research's stored raw tool outputs.", GrepArgs, grep),
        Tool("read_artifact", "Read part of one stored raw tool output.", ReadArtifactArgs, read),
    ]
