"""Deterministic logic of the offline engine (planner, compressor, critic, reporter).

Roles import these as their fallbacks; the offline engine wraps them as a model would answer.
"""

OFFLINE_MODEL = "offline-extractive-v1"
