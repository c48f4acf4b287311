"""Dagster definitions: ``dagster dev`` / ``dg dev`` load this module."""

from dagster import JobDefinition

from .defs.build import build_definitions
from .defs.jobs import research_job

__all__ = ["build_definitions", "defs", "job_definition", "research_job"]

defs = build_definitions()


def job_definition(name: str) -> JobDefinition:
    """Job ``name`` of definitions built now, from this process's configuration: what a Celery
    worker (and the process orchestrating the run) executes (``defs.runs``). Not ``defs``, which
    was built when this module was first imported, perhaps before the broker was configured."""
    return build_definitions(schedules=False).resolve_job_def(name)
