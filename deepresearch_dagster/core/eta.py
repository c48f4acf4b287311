"""Expected remaining time for the progress lines.

A research's parts (plan steps, follow-up steps, the report) take similar time on one model: the
mean time of the parts done so far, times the parts left, is the estimate. Nothing is said before
one part is done (no measurement yet), and the figure is rounded to what a person plans with.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field


def rough_duration(seconds: float) -> str:
    """``40 s``, ``3 min``, ``1 h 20 min``: precise enough to plan a coffee."""
    if seconds < 60:
        return f"{max(5, round(seconds / 5) * 5):.0f} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"


@dataclass
class Eta:
    """``total`` parts, ``done`` of them finished since ``started`` (``time.monotonic()``)."""

    total: int
    done: int = 0
    started: float = field(default_factory=time.monotonic)
    clock: object = field(default=time.monotonic, repr=False)

    def left_s(self) -> float | None:
        if self.done <= 0 or self.done >= self.total:
            return None
        elapsed = self.clock() - self.started  # type: ignore[operator]
        return elapsed / self.done * (self.total - self.done)

    def note(self) -> str:
        """`` (about 3 min left)``, or nothing when there is no measurement yet."""
        left = self.left_s()
        return "" if left is None else f" (about {rough_duration(left)} left)"
