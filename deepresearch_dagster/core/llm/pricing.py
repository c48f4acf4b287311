"""The one price table: USD per 1M tokens, its parser, and how a model name finds its price.

A dated variant such as ``gpt-4o-mini-2024-07-18`` is priced by its longest listed prefix;
a model with no listed prefix is *unpriced* (``None``) — never silently charged as another
model. The budget ledger, the audit views and the CLI all use these functions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, Field, ValidationError


class Price(BaseModel):
    """USD per one million tokens."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)


DEFAULT_PRICES: dict[str, Price] = {
    "gpt-4o": Price(input=2.50, output=10.00),
    "gpt-4o-mini": Price(input=0.15, output=0.60),
    "gpt-4.1": Price(input=2.00, output=8.00),
    "gpt-4.1-mini": Price(input=0.40, output=1.60),
    "gpt-4.1-nano": Price(input=0.10, output=0.40),
    "o4-mini": Price(input=1.10, output=4.40),
    "o3-mini": Price(input=1.10, output=4.40),
    "offline-extractive-v1": Price(input=0.0, output=0.0),
}


def parse_prices(value: Any) -> dict[str, Price]:
    """``{"model": {"input": x, "output": y}}`` (documented) or ``{"model": [x, y]}``.
    Raises ValueError with a user-facing message."""
    if not isinstance(value, Mapping):
        raise ValueError("prices must be an object of model -> {input, output}")
    table: dict[str, Price] = {}
    for model, price in value.items():
        try:
            if isinstance(price, list | tuple):
                if len(price) != 2:
                    raise ValueError("a list price needs exactly [input, output]")
                table[str(model)] = Price(input=price[0], output=price[1])
            else:
                table[str(model)] = Price.model_validate(price)
        except (ValidationError, ValueError, TypeError) as exc:
            detail = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
            raise ValueError(f"price of {model!r}: {detail}") from exc
    return table


def price_for(model: str, prices: Mapping[str, Price]) -> Price | None:
    """Exact match, else the longest listed prefix followed by ``-`` (dated model variants)."""
    if model in prices:
        return prices[model]
    candidates = [m for m in prices if model.startswith(m + "-")]
    return prices[max(candidates, key=len)] if candidates else None


def cost_usd(model: str, prompt_tokens: int, completion_tokens: int, prices: Mapping[str, Price]) -> float | None:
    price = price_for(model, prices)
    if price is None:
        return None
    return (prompt_tokens * price.input + completion_tokens * price.output) / 1_000_000
