"""Compatibility import: the HTML-to-text converter lives in ``core.web.extract`` (one converter for the project)."""

from ..web.extract import html_to_text

__all__ = ["html_to_text"]
