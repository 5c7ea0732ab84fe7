"""``TokenBudget``: one budget — in tokens, in money, or both — for every model call of
a run, or of a team.

The guarantee, exactly: the tokens spent by all calls admitted under one budget never
exceed ``limit`` by more than one call's usage, provided no call uses more tokens than
the reservation it was admitted with; the same holds for the money spent against
``cost_limit``. A call's token reservation is ``reserve_per_call`` or the most any call
under this budget has used so far, whichever is larger; its cost reservation is the
most any call has cost so far.

How: a call is admitted at once while, for each limit set, ``spent + reserved_in_flight +
reservation <= limit`` (it provably fits). Otherwise, if no call is in flight and nothing
is spent past a limit, it is admitted alone (the one call that may overshoot, as a lone
agent checking its budget before each call would). Otherwise it waits for an in-flight
call to finish and decides again; once either limit is reached every call is refused.
Until the first call finishes, with no ``reserve_per_call``, the reservation is unknown
and calls are admitted one at a time. Every decision runs without a checkpoint between
the check and the reservation, so concurrent callers cannot race past it.
"""

from __future__ import annotations

import logging
import math
from types import TracebackType

import anyio

from .._checks import check_int
from .._errors import InvalidInput
from ..actors import ActorRef, ActorStopped, MailboxFull
from ._totals import Spent, check_budget_name

logger = logging.getLogger("greenroom.harness")


class _WriteSpend:
    """To the ledger: a tracked budget spent (told once per write, not per call)."""

    __slots__ = ()


WRITE_SPEND = _WriteSpend()


class Admission:
    """Permission for one model call. Report what it used with ``spend(tokens, cost)``;
    leaving without spending (an error, a cancellation) frees the reservation."""

    __slots__ = ("_budget", "_done", "reserved", "reserved_cost")

    def __init__(self, budget: TokenBudget, reserved: int, reserved_cost: float) -> None:
        self._budget = budget
        self.reserved = reserved
        self.reserved_cost = reserved_cost
        self._done = False

    def spend(self, tokens: int, cost: float = 0.0) -> None:
        """What the call used: ``tokens`` (prompt + completion) and ``cost`` (in the
        prices' currency; 0 when the model has no price). Once; later calls do nothing."""
        if not self._done:
            self._done = True
            self._budget._finish(self, tokens, cost)

    def release(self) -> None:
        self.spend(0)

    def __enter__(self) -> Admission:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


def _check_cost(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
        raise InvalidInput(
            f"TokenBudget cost_limit must be a number >= 0, got {value!r}", field="cost_limit", value=value
        )
    return float(value)


class TokenBudget:
    """``limit``: tokens (prompt + completion) for every call admitted by this budget;
    ``cost_limit``: money for them, by the model's price (``greenroom.llm.Price``); either,
    both or neither (``None``: unlimited, still counted). Give the same object to several
    callers — harness actors, the chat engine — for a shared budget.

    ``name``: a budget whose spend lasts — tracked by a ``BudgetLedgerActor`` (a daemon
    tracks every named budget of its agents, and names its chat budget ``chat``), it
    continues from what was spent before a restart and shares its total with the other
    daemons on the same database (see ``_ledger.py``). Without one, a budget lives as long
    as the object.
    """

    def __init__(
        self,
        limit: int | None = None,
        *,
        reserve_per_call: int = 0,
        counts_into: TokenBudget | None = None,
        cost_limit: float | None = None,
        name: str | None = None,
    ) -> None:
        self.name = None if name is None else check_budget_name(name)
        self.limit = None if limit is None else check_int("TokenBudget", "limit", limit, minimum=0)
        self.cost_limit = _check_cost(cost_limit)
        self.reserve_per_call = check_int("TokenBudget", "reserve_per_call", reserve_per_call, minimum=0)
        self.counts_into = counts_into
        """Another budget that also counts what this one spends (a per-run budget into
        its setup's running total); it never limits this one."""
        self.spent = 0
        self.cost = 0.0
        """Money spent, in the prices' currency (0 while no model has a price)."""
        self.calls = 0
        self.largest_call = 0
        self.largest_cost = 0.0
        self._in_flight = 0
        self._reserved = 0
        self._reserved_cost = 0.0
        self._changed: anyio.Event | None = None
        self._ledger: ActorRef | None = None
        self._unwritten = Spent()
        self._wrote_since_wake = True

    def check_priced(self, where: str, price: object) -> None:
        """Refuse (``ValueError``) to count calls without a price against a cost limit:
        they would all cost 0 and the limit would never bind."""
        if self.cost_limit is not None and price is None:
            raise InvalidInput(
                f"{where}: the budget has a cost_limit, but the model has no price "
                "(give a greenroom.llm.Price, or [llm.prices] in the daemon's config)",
                field="price",
                value=None,
            )

    @property
    def exhausted(self) -> bool:
        return (self.limit is not None and self.spent >= self.limit) or (
            self.cost_limit is not None and self.cost >= self.cost_limit
        )

    @property
    def remaining(self) -> float:
        """Tokens left (``inf`` without a token limit)."""
        return math.inf if self.limit is None else max(0, self.limit - self.spent)

    @property
    def remaining_cost(self) -> float:
        """Money left (``inf`` without a cost limit)."""
        return math.inf if self.cost_limit is None else max(0.0, self.cost_limit - self.cost)

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def _reservation(self) -> int | None:
        """Tokens to hold for a new call; ``None`` while nothing is known about calls."""
        known = max(self.reserve_per_call, self.largest_call)
        return known if known or self.calls else None

    def try_admit(self) -> Admission | bool | None:
        """Decide now: an ``Admission``, ``None`` (exhausted: refuse), or ``False``
        (wait for an in-flight call to finish, then ask again)."""
        if self.exhausted:
            return None
        reservation = 0
        reserved_cost = 0.0
        fits = True
        if self.limit is not None:
            known = self._reservation()
            fits = known is not None and self.spent + self._reserved + known <= self.limit
            reservation = known or 0
        if self.cost_limit is not None:
            known_cost = self.largest_cost if self.calls else None
            fits = (
                fits
                and known_cost is not None
                and self.cost + self._reserved_cost + known_cost <= self.cost_limit
            )
            reserved_cost = known_cost or 0.0
        if not fits and self._in_flight:
            return False
        admission = Admission(self, reservation, reserved_cost)
        self._in_flight += 1
        self._reserved += reservation
        self._reserved_cost += reserved_cost
        return admission

    async def admit(self) -> Admission | None:
        """Wait until a call may start: an ``Admission``, or ``None`` once the budget is
        spent. Cancellation while waiting admits nothing."""
        while True:
            decision = self.try_admit()
            if decision is not False:
                assert decision is not True
                return decision
            if self._changed is None:
                self._changed = anyio.Event()
            await self._changed.wait()

    def restore(self, tokens: int, cost: float = 0.0) -> None:
        """Count what a step replayed from a journal spent when it was recorded (an
        earlier attempt, perhaps in a process that died): the limit holds across a crash,
        and nothing is charged twice — the step is not asked again. Not added to
        ``counts_into`` (a running total of what this process spent). A tracked budget
        (``name``, in a ledger) takes nothing: its stored total has the step already."""
        if self._ledger is not None:
            return
        self.spent += tokens
        self.cost += cost
        changed, self._changed = self._changed, None
        if changed is not None:
            changed.set()

    def _finish(self, admission: Admission, tokens: int, cost: float) -> None:
        self._in_flight -= 1
        self._reserved -= admission.reserved
        self._reserved_cost -= admission.reserved_cost
        if tokens or cost:
            self.spent += tokens
            self.cost += cost
            self.calls += 1
            self.largest_call = max(self.largest_call, tokens)
            self.largest_cost = max(self.largest_cost, cost)
            total = self.counts_into
            if total is not None:
                total.spent += tokens
                total.cost += cost
                total.calls += 1
            if self._ledger is not None:
                self._owe(tokens, cost)
        self._wake()

    def _wake(self) -> None:
        changed, self._changed = self._changed, None
        if changed is not None:
            changed.set()

    # -- the ledger's side (``_ledger.py``) -------------------------------------------------

    def _track(self, ledger: ActorRef, total: Spent) -> None:
        self._ledger = ledger
        self._synced(total)

    def _owe(self, tokens: int, cost: float) -> None:
        owed = self._unwritten
        self._unwritten = Spent(owed.tokens + tokens, owed.cost + cost, owed.calls + 1)
        if self._wrote_since_wake:
            self._wrote_since_wake = False
            ledger = self._ledger
            assert ledger is not None
            try:
                ledger.tell(WRITE_SPEND)
            except (MailboxFull, ActorStopped) as error:  # kept: the ledger's next write takes it
                self._wrote_since_wake = True
                logger.warning("budget %r: the ledger was not told of new spend: %s", self.name, error)

    def _take_unwritten(self) -> Spent:
        taken, self._unwritten = self._unwritten, Spent()
        self._wrote_since_wake = True
        return taken

    def _give_back(self, spent: Spent) -> None:
        owed = self._unwritten
        self._unwritten = Spent(owed.tokens + spent.tokens, owed.cost + spent.cost, owed.calls + spent.calls)

    def _synced(self, total: Spent) -> None:
        """The stored total (every daemon's spend) plus what this one has not written."""
        owed = self._unwritten
        self.spent = total.tokens + owed.tokens
        self.cost = total.cost + owed.cost
        self.calls = max(self.calls, total.calls + owed.calls)
        self._wake()
