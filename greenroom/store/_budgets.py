"""``BudgetStore``: what each named budget has spent, kept across restarts.

A :class:`~greenroom.harness.TokenBudget` given a ``name`` (a team's budget, the chat
assistant's) is durable in a daemon: its spend is added here, in batches, and a
restarted daemon — or another daemon of a fleet on the same database — continues from
the total kept here, not from zero. A budget of one run needs none of this: a replayed
step restores what it spent from the step journal.

The embedded store keeps the totals in SQLite under the data dir (``budgets.sqlite3``),
the PostgreSQL store in a table every daemon of a fleet shares.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

import msgspec

from .._errors import InvalidInput

MAX_NAME = 200
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/-]*$")


class Spent(msgspec.Struct, frozen=True):
    """What a budget spent: ``tokens``, ``cost`` (in the prices' currency), ``calls``;
    ``updated_at`` (seconds since the epoch) when read from a store."""

    tokens: int = 0
    cost: float = 0.0
    calls: int = 0
    updated_at: float = 0.0


def check_budget_name(name: object) -> str:
    """A budget's name (``InvalidInput`` naming the field otherwise)."""
    if not isinstance(name, str) or not name or len(name) > MAX_NAME or not _NAME.match(name):
        raise InvalidInput(
            f"budget name must be 1 to {MAX_NAME} letters, digits or . _ : / - (starting with a "
            f"letter or digit), got {name!r:.80}",
            field="name",
            value=name,
        )
    return name


def check_spent(name: str, spent: Spent) -> None:
    """Refuse an increment a store cannot add (negative, not finite), naming the field."""
    if isinstance(spent.tokens, bool) or not isinstance(spent.tokens, int) or not 0 <= spent.tokens < 2**62:
        raise InvalidInput(
            f"budget {name!r}: tokens must be 0 to 2**62, got {spent.tokens!r}", field="tokens"
        )
    if not isinstance(spent.cost, (int, float)) or not 0 <= spent.cost < math.inf:
        raise InvalidInput(f"budget {name!r}: cost must be a number >= 0, got {spent.cost!r}", field="cost")
    if isinstance(spent.calls, bool) or not isinstance(spent.calls, int) or not 0 <= spent.calls < 2**62:
        raise InvalidInput(f"budget {name!r}: calls must be 0 to 2**62, got {spent.calls!r}", field="calls")


def spend_rows(spends: Mapping[str, Spent]) -> list[tuple[str, int, float, int, float]]:
    """``(name, tokens, cost, calls, now)`` for each increment, in name order (two writers
    lock rows in one order), after checking them all (``InvalidInput`` naming the field:
    nothing of a refused batch is added)."""
    for name, spent in spends.items():
        check_budget_name(name)
        check_spent(name, spent)
    now = time.time()
    return [(name, s.tokens, float(s.cost), s.calls, now) for name, s in sorted(spends.items())]


@runtime_checkable
class BudgetStore(Protocol):
    """The named budgets' totals. Every call is one transaction."""

    async def add(self, spends: Mapping[str, Spent]) -> dict[str, Spent]:
        """Add each increment to its budget's total (creating it at zero) in one durable
        transaction; answers the totals after it — what every daemon spent, for each name
        given (so a writer also learns what others spent). ``InvalidInput`` (naming the
        field) for a bad name or increment, before anything is added."""
        ...

    async def read(self, names: Sequence[str] | None = None) -> dict[str, Spent]:
        """The totals of ``names`` (``None``: every budget); a name never spent is
        absent."""
        ...

    async def reset(self, name: str) -> Spent | None:
        """Start ``name`` from zero again (an operator's new period); what it had spent,
        or ``None`` if it had no total."""
        ...

    async def aclose(self) -> None:
        """Release what the store holds (a pool it was given stays open)."""
        ...
