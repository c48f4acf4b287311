"""Tools the research team can call. Each has a pydantic argument model and a runner."""

from .base import Tool, Toolbox, ToolError, ToolResult

__all__ = ["Tool", "ToolError", "ToolResult", "Toolbox"]
