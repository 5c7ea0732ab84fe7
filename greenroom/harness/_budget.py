"""``TokenBudget``: one token budget for every model call of a run, or of a team.

The guarantee, exactly: the tokens spent by all calls admitted under one budget never
exceed ``limit`` by more than one call's usage, provided no call uses more tokens than
the reservation it was admitted with. The reservation is ``reserve_per_call`` or the
most any call under this budget has used so far, whichever is larger.

How: a call is admitted at once while ``spent + reserved_in_flight + reservation <=
limit`` (it provably fits). Otherwise, if no call is in flight and ``spent < limit``,
it is admitted alone (the one call that may overshoot, as a lone agent checking its
budget before each call would). Otherwise it waits for an in-flight call to finish
and decides again; once ``spent >= limit`` every call is refused. Until the first call
finishes, with no ``reserve_per_call``, the reservation is unknown and calls are
admitted one at a time. Every decision runs without a checkpoint between the check
and the reservation, so concurrent harness actors cannot race past it.
"""

from __future__ import annotations

import math
from types import TracebackType

import anyio

from .._checks import check_int


class Admission:
    """Permission for one model call. Report what it used with ``spend(tokens)``;
    leaving without spending (an error, a cancellation) frees the reservation."""

    __slots__ = ("_budget", "_done", "reserved")

    def __init__(self, budget: TokenBudget, reserved: int) -> None:
        self._budget = budget
        self.reserved = reserved
        self._done = False

    def spend(self, tokens: int) -> None:
        if not self._done:
            self._done = True
            self._budget._finish(self, tokens)

    def release(self) -> None:
        self.spend(0)

    def __enter__(self) -> Admission:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


class TokenBudget:
    """``limit``: tokens (prompt + completion) for every call admitted by this budget;
    ``None``: unlimited (still counted). Give the same object to several harness
    actors for a team budget.
    """

    def __init__(
        self, limit: int | None = None, *, reserve_per_call: int = 0, counts_into: TokenBudget | None = None
    ) -> None:
        self.limit = None if limit is None else check_int("TokenBudget", "limit", limit, minimum=0)
        self.reserve_per_call = check_int("TokenBudget", "reserve_per_call", reserve_per_call, minimum=0)
        self.counts_into = counts_into
        """Another budget that also counts what this one spends (a per-run budget into
        its setup's running total); it never limits this one."""
        self.spent = 0
        self.calls = 0
        self.largest_call = 0
        self._in_flight = 0
        self._reserved = 0
        self._changed: anyio.Event | None = None

    @property
    def exhausted(self) -> bool:
        return self.limit is not None and self.spent >= self.limit

    @property
    def remaining(self) -> float:
        return math.inf if self.limit is None else max(0, self.limit - self.spent)

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
        limit = self.limit
        if limit is not None:
            if self.spent >= limit:
                return None
            reservation = self._reservation()
            fits = reservation is not None and self.spent + self._reserved + reservation <= limit
            if not fits and self._in_flight:
                return False
        else:
            reservation = 0
        admission = Admission(self, reservation or 0)
        self._in_flight += 1
        self._reserved += admission.reserved
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

    def _finish(self, admission: Admission, tokens: int) -> None:
        self._in_flight -= 1
        self._reserved -= admission.reserved
        if tokens:
            self.spent += tokens
            self.calls += 1
            self.largest_call = max(self.largest_call, tokens)
            total = self.counts_into
            if total is not None:
                total.spent += tokens
                total.calls += 1
        changed, self._changed = self._changed, None
        if changed is not None:
            changed.set()
