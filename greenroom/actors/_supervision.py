"""What a parent decides when one of its children fails in ``receive``.

The default, for actors whose parent sets no strategy and for top-level actors of a
system built without one: **restart**, at most 3 restarts within 5 seconds, no backoff.
The fourth failure inside the window stops the actor with the failure as its reason.
"""

from __future__ import annotations

import enum
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from .._errors import InvalidInput


class Directive(enum.Enum):
    """What happens to a child whose ``receive`` (or ``on_start``) raised."""

    RESTART = "restart"
    """A fresh instance from the factory; the mailbox is kept, the failing message is not retried."""
    RESUME = "resume"
    """Keep the instance and its state; carry on with the next message."""
    STOP = "stop"
    """Stop without draining: queued messages become dead letters."""
    ESCALATE = "escalate"
    """Stop the child and fail the parent with ``ChildFailed`` (at the top: fail the system)."""


def _check_number(name: str, value: object, *, minimum: float, strict: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise InvalidInput(f"{name} must be a number, got {value!r}", field=name, value=value)
    if value < minimum or (strict and value == minimum):
        relation = ">" if strict else ">="
        raise InvalidInput(f"{name} must be {relation} {minimum:g}, got {value!r}", field=name, value=value)
    return float(value)


@dataclass(frozen=True)
class Backoff:
    """Exponential delay between restarts: ``initial * multiplier**(n-1)``, capped at ``maximum``.

    ``n`` counts the restarts inside the strategy's window, so a child that stays up for
    a whole window starts again from ``initial``. A stop requested during the wait ends
    it: the child is restarted only if messages sent before the stop wait to be handled
    (a draining stop), else it stops as it is, without a new instance's ``on_start``.
    """

    initial: float = 0.1
    maximum: float = 10.0
    multiplier: float = 2.0

    def __post_init__(self) -> None:
        _check_number("Backoff.initial", self.initial, minimum=0.0, strict=False)
        _check_number("Backoff.maximum", self.maximum, minimum=0.0, strict=False)
        _check_number("Backoff.multiplier", self.multiplier, minimum=1.0, strict=False)
        if self.maximum < self.initial:
            raise InvalidInput(
                f"Backoff.maximum must be >= Backoff.initial ({self.initial!r}), got {self.maximum!r}",
                field="Backoff.maximum",
                value=self.maximum,
            )

    def delay(self, restarts: int) -> float:
        return min(self.maximum, self.initial * self.multiplier ** max(0, restarts - 1))


def _always_restart(error: Exception) -> Directive:
    return Directive.RESTART


@dataclass(frozen=True)
class SupervisorStrategy:
    """A parent's policy for its children's failures (one-for-one: only the failed child).

    ``decider`` maps the exception to a :class:`Directive` (default: always restart).
    ``max_restarts`` restarts are allowed within ``within`` seconds; the next failure
    stops the child for good and its watchers get ``Terminated`` with the error as
    reason. ``max_restarts=None`` never gives up (pair it with a ``backoff``).
    """

    decider: Callable[[Exception], Directive] = _always_restart
    max_restarts: int | None = 3
    within: float = 5.0
    backoff: Backoff | None = None

    def __post_init__(self) -> None:
        if not callable(self.decider):
            raise TypeError(f"SupervisorStrategy.decider must be callable, got {self.decider!r}")
        if self.max_restarts is not None and (
            isinstance(self.max_restarts, bool)
            or not isinstance(self.max_restarts, int)
            or self.max_restarts < 0
        ):
            raise InvalidInput(
                f"SupervisorStrategy.max_restarts must be an int >= 0 or None, got {self.max_restarts!r}",
                field="SupervisorStrategy.max_restarts",
                value=self.max_restarts,
            )
        _check_number("SupervisorStrategy.within", self.within, minimum=0.0, strict=True)
        if self.backoff is not None and not isinstance(self.backoff, Backoff):
            raise TypeError(f"SupervisorStrategy.backoff must be a Backoff or None, got {self.backoff!r}")

    @classmethod
    def of(cls, directive: Directive, **options: object) -> SupervisorStrategy:
        """A strategy that answers every failure with ``directive``."""
        if not isinstance(directive, Directive):
            raise TypeError(f"directive must be a Directive, got {directive!r}")
        return cls(decider=lambda error: directive, **options)  # type: ignore[arg-type]

    def decide(self, error: Exception) -> Directive:
        directive = self.decider(error)
        if not isinstance(directive, Directive):
            raise TypeError(
                f"SupervisorStrategy.decider returned {directive!r} for {type(error).__name__}, "
                "expected a Directive"
            )
        return directive

    def admit_restart(self, history: deque[float], now: float) -> float | None:
        """Record a restart at ``now``; the delay to wait before it, or ``None`` past the limit."""
        horizon = now - self.within
        while history and history[0] <= horizon:
            history.popleft()
        if self.max_restarts is not None and len(history) >= self.max_restarts:
            return None
        history.append(now)
        return self.backoff.delay(len(history)) if self.backoff is not None else 0.0


DEFAULT_STRATEGY = SupervisorStrategy()
