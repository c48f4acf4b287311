"""deepresearch-dagster: an orchestrated, auditable deep-research engine."""

__version__ = "0.1.0"
