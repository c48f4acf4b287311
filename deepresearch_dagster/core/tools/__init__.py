"""Tools the research team can call. Each has a pydantic argument model and a runner."""

from .base import Tool, ToolError, ToolResult, Toolbox

__all__ = ["Tool", "ToolError", "ToolResult", "Toolbox"]
