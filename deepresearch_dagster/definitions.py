"""Dagster definitions: ``dagster dev`` / ``dg dev`` load this module."""

from .defs.build import build_definitions
from .defs.jobs import research_job

__all__ = ["build_definitions", "defs", "research_job"]

defs = build_definitions()
