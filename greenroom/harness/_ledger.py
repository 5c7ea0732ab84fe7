"""``BudgetLedgerActor``: named budgets whose spend lasts — across restarts, and across
the daemons of a fleet sharing one database.

Give a :class:`TokenBudget` a ``name`` and ask the ledger to ``TrackBudget`` it: the
budget starts from the total the store holds for that name (not from zero), and from then
on each call it admits adds its spend to that total. The ledger writes in batches: a call
that spends wakes it, and it adds everything spent since its last write in one
transaction, whenever its mailbox is empty. The store answers each write with the new
totals — what every daemon spent — and the budget takes them as its own, so a fleet
shares one limit (each daemon may overshoot it by the calls it has in flight), and an
operator's ``greenroom budgets reset NAME`` reaches running daemons. While nothing is
spent, the ledger reads the totals every ``refresh_every`` seconds.

A tracked budget is not charged again by a replayed step (``TokenBudget.restore`` does
nothing for it): what the step spent is in the total already. What a SIGKILL can lose is
the spend of calls that finished after the ledger's last write (milliseconds of work).

Messages sent before ``stop()`` are handled; the spend not yet written is written on stop.
Messages sent after are refused.
"""

from __future__ import annotations

import logging
from typing import Any

from .._checks import check_seconds
from .._commit import Batcher
from .._errors import DataError, InvalidInput
from .._request import Request
from ..actors import Actor
from ._budget import WRITE_SPEND, TokenBudget
from ._totals import BudgetStore, Spent

logger = logging.getLogger("greenroom.harness")


class TrackBudget(Request[Spent]):
    """Make ``budget`` (it has a ``name``) durable: it continues from its stored total,
    answered. A second budget of the same name shares the total (both are kept in step)."""

    __slots__ = ("budget",)

    def __init__(self, budget: TokenBudget) -> None:
        self.budget = budget


class _Refresh:
    __slots__ = ()


_REFRESH = _Refresh()


class BudgetLedgerActor(Actor):
    """Keeps the named budgets of one process in step with ``store`` (a ``BudgetStore``)."""

    def __init__(self, store: BudgetStore, *, refresh_every: float = 5.0) -> None:
        self.store = store
        self.refresh_every = check_seconds("BudgetLedgerActor", "refresh_every", refresh_every)
        self.budgets: dict[str, list[TokenBudget]] = {}
        self._spent: Batcher[None] = Batcher(owner="BudgetLedgerActor")
        """Told that a budget spent (each wake-up, nothing to answer): written together once
        the mailbox is drained."""
        self.writes = 0

    async def on_start(self) -> None:
        self.context.schedule_repeatedly(self.refresh_every, _REFRESH)

    async def receive(self, message: Any) -> Any:
        if message is WRITE_SPEND:
            self._spent.add(None, None)
        elif message is _REFRESH:
            if not self._spent:
                await self._refresh()
        elif isinstance(message, TrackBudget):
            return await self._track(message.budget)
        else:
            raise TypeError(f"BudgetLedgerActor does not handle {type(message).__name__} messages")
        if self._spent.due(self.context.queued):
            await self._write()
        return None

    async def _track(self, budget: TokenBudget) -> Spent:
        name = budget.name
        if name is None:
            raise InvalidInput("TrackBudget: only a budget with a name can be tracked", field="budget")
        await self._write()  # the total includes what the budgets of this name spent so far
        total = (await self.store.read([name])).get(name, Spent())
        same = self.budgets.setdefault(name, [])
        if budget not in same:
            same.append(budget)
        budget._track(self.context.ref, total)
        return total

    async def _write(self) -> None:
        """Add what every budget spent since the last write, in one transaction (the wake-ups
        waiting are all answered by it: the spend is read from the budgets, not from them)."""
        for woken in self._spent.drain():
            self._spent.done(woken)
        spends: dict[str, Spent] = {}
        taken: list[tuple[TokenBudget, Spent]] = []
        for name, budgets in self.budgets.items():
            tokens, cost, calls = 0, 0.0, 0
            for budget in budgets:
                spent = budget._take_unwritten()
                taken.append((budget, spent))
                tokens, cost, calls = tokens + spent.tokens, cost + spent.cost, calls + spent.calls
            if tokens or cost or calls:
                spends[name] = Spent(tokens, cost, calls)
        if not spends:
            return
        try:
            totals = await self.store.add(spends)
        except BaseException:
            for budget, spent in taken:  # not written: written by the next write instead
                budget._give_back(spent)
            raise
        self.writes += 1
        self._apply(totals)

    async def _refresh(self) -> None:
        if self.budgets:
            totals = await self.store.read(list(self.budgets))
            self._apply({name: totals.get(name, Spent()) for name in self.budgets})

    def _apply(self, totals: dict[str, Spent]) -> None:
        for name, total in totals.items():
            for budget in self.budgets.get(name, ()):
                budget._synced(total)

    async def on_stop(self) -> None:
        """The spend not yet written is written; a store that cannot (a full disk) is
        said in one line."""
        try:
            await self._write()
        except (DataError, OSError) as error:
            logger.error("budgets: the last spend was not written: %s", error)
        finally:
            await self.store.aclose()
