"""``Price``: what a model's tokens cost, so spend can be tracked and budgeted in money."""

from __future__ import annotations

import math
from typing import Any

from .._errors import InvalidInput
from ..messages import Usage


class Price:
    """A model's price per million tokens: ``input`` (prompt) and ``output``
    (completion), in whatever currency you keep accounts in (greenroom never converts).

    Give it to a model (``OpenAIChatModel(price=...)``, the daemon's ``[llm.prices]``) or
    to a harness or chat engine; every call's cost is then counted (run summaries,
    events, the status page) and a ``TokenBudget(cost_limit=...)`` can bound it.
    """

    __slots__ = ("input", "output")

    def __init__(self, input: float, output: float) -> None:
        for name, value in (("input", input), ("output", output)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
                raise InvalidInput(
                    f"Price {name} must be a number >= 0 (per million tokens), got {value!r}",
                    field=name,
                    value=value,
                )
        self.input = float(input)
        self.output = float(output)

    def cost(self, usage: Usage) -> float:
        """What one call with ``usage`` cost."""
        return (usage.prompt_tokens * self.input + usage.completion_tokens * self.output) / 1_000_000

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Price) and (self.input, self.output) == (other.input, other.output)

    def __hash__(self) -> int:
        return hash((self.input, self.output))

    def __repr__(self) -> str:
        return f"Price(input={self.input:g}, output={self.output:g})"


def price_of(model: Any) -> Price | None:
    """The price a model carries (its ``price`` attribute), if any."""
    price = getattr(model, "price", None)
    return price if isinstance(price, Price) else None
