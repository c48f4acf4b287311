"""Budget ledger: tokens, dollars, LLM calls, tool calls and wall time, with hard caps.

Every call reserves its worst case *before* it happens (prompt upper bound + the role's max
output tokens; one tool call), under a lock, and settles to the actual figures afterwards, so
concurrent calls can never push spending past a cap. 80 % warns, 90 % reduces scope, 100 %
stops the research and the report is written from what exists.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field

from ..errors import BudgetExceeded
from .pricing import DEFAULT_PRICES, Price, cost_usd, price_for

WARN_AT, REDUCE_AT = 0.8, 0.9
DIMENSIONS = ("tokens", "dollars", "llm_calls", "tool_calls", "wall_s")


class BudgetLimits(BaseModel):
    tokens: int = Field(default=400_000, ge=0)
    dollars: float = Field(default=2.0, ge=0)
    llm_calls: int = Field(default=300, ge=0)
    tool_calls: int = Field(default=150, ge=0)
    wall_s: float = Field(default=3600.0, ge=0)


def dollars(model: str, prompt_tokens: int, completion_tokens: int, prices: Mapping[str, Price]) -> float:
    """Cost from the one price table; an unpriced model costs 0 here and is reported as unpriced
    (the ledger notes it: the dollar cap cannot cover a model with no known price)."""
    return cost_usd(model, prompt_tokens, completion_tokens, prices) or 0.0


def prompt_upper_bound(messages: list[dict[str, Any]]) -> int:
    """No tokenizer emits fewer than one token per 2 characters of ordinary text plus framing."""
    chars = sum(len(str(m.get("content") or "")) + 16 for m in messages)
    return math.ceil(chars / 2)


@dataclass
class Reservation:
    amounts: dict[str, float]


@dataclass
class BudgetLedger:
    limits: BudgetLimits
    prices: dict[str, Price] = field(default_factory=lambda: dict(DEFAULT_PRICES))
    spent: dict[str, float] = field(default_factory=lambda: dict.fromkeys(DIMENSIONS, 0.0))
    reserved: dict[str, float] = field(default_factory=lambda: dict.fromkeys(DIMENSIONS, 0.0))
    started: float = field(default_factory=time.monotonic)
    events: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def _cap(self, dim: str) -> float:
        return float(getattr(self.limits, dim))

    def _elapsed(self) -> float:
        return time.monotonic() - self.started

    def remaining_wall_s(self) -> float:
        """Seconds of the wall-time budget left: the deadline of any call made now."""
        return max(0.0, self._cap("wall_s") - self._elapsed())

    def fraction(self) -> float:
        """Highest share of any cap in use (spent + reserved)."""
        with self._lock:
            return self._fraction_locked()

    def _fraction_locked(self) -> float:
        shares = [self._elapsed() / self._cap("wall_s") if self._cap("wall_s") else 1.0]
        for dim in DIMENSIONS[:-1]:
            cap = self._cap(dim)
            used = self.spent[dim] + self.reserved[dim]
            shares.append(used / cap if cap else (1.0 if used else 0.0))
        return max(shares)

    def reserve(self, **amounts: float) -> Reservation:
        with self._lock:
            if self._elapsed() >= self._cap("wall_s"):
                raise BudgetExceeded(f"wall-time budget of {self.limits.wall_s:.0f}s used up")
            for dim, amount in amounts.items():
                if self.spent[dim] + self.reserved[dim] + amount > self._cap(dim):
                    raise BudgetExceeded(
                        f"{dim} budget: {self.spent[dim]:.4g} spent + {amount:.4g} needed > cap {self._cap(dim):.4g}"
                    )
            for dim, amount in amounts.items():
                self.reserved[dim] += amount
            self._note_level()
            return Reservation(dict(amounts))

    def settle(self, reservation: Reservation, **actual: float) -> None:
        with self._lock:
            for dim, amount in reservation.amounts.items():
                self.reserved[dim] -= amount
            for dim, amount in actual.items():
                self.spent[dim] += amount
            self._note_level()

    def reserve_llm(self, model: str, messages: list[dict[str, Any]], max_tokens: int) -> Reservation:
        prompt = prompt_upper_bound(messages)
        if price_for(model, self.prices) is None:
            note = f"model {model} is unpriced: the dollar cap does not cover it"
            with self._lock:
                if note not in self.events:
                    self.events.append(note)
        return self.reserve(
            tokens=prompt + max_tokens, dollars=dollars(model, prompt, max_tokens, self.prices), llm_calls=1
        )

    def settle_llm(self, reservation: Reservation, model: str, prompt_tokens: int, completion_tokens: int) -> None:
        self.settle(
            reservation,
            tokens=prompt_tokens + completion_tokens,
            dollars=dollars(model, prompt_tokens, completion_tokens, self.prices),
            llm_calls=1,
        )

    def _note_level(self) -> None:
        level = self._fraction_locked()
        for threshold, label in ((WARN_AT, "warning: 80% of the budget used"), (REDUCE_AT, "90%: scope reduced")):
            if level >= threshold and label not in self.events:
                self.events.append(label)

    @property
    def reduce_scope(self) -> bool:
        return self.fraction() >= REDUCE_AT

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            spent = {**self.spent, "wall_s": round(self._elapsed(), 3)}
            return {
                "limits": self.limits.model_dump(),
                "spent": {k: round(v, 6) for k, v in spent.items()},
                "fraction": round(self._fraction_locked(), 4),
                "events": list(self.events),
            }
