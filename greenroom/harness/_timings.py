"""``CallTimings``: how fast the recent streamed model calls were, for a status page."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any

from ..messages import CallTiming

KEPT = 1024
"""Calls a ``CallTimings`` keeps (the most recent)."""


def percentile(values: list[float], fraction: float) -> float:
    """The value below which ``fraction`` of ``values`` lie (nearest rank; sorted here)."""
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(fraction * len(ordered) + 0.5) - 1))
    return ordered[rank]


class CallTimings:
    """The time to first token and the tokens per second of the latest ``keep`` streamed
    model calls (``calls``: how many were counted in all). Not thread safe: one event
    loop."""

    __slots__ = ("calls", "first_token", "tokens_per_second")

    def __init__(self, keep: int = KEPT) -> None:
        self.calls = 0
        self.first_token: deque[float] = deque(maxlen=keep)
        self.tokens_per_second: deque[float] = deque(maxlen=keep)

    def add(self, timing: CallTiming) -> None:
        self.calls += 1
        self.first_token.append(timing.first_token)
        if timing.tokens_per_second is not None:
            self.tokens_per_second.append(timing.tokens_per_second)

    def summary(self) -> dict[str, Any]:
        """``{"calls", "first_token_ms": {"p50", "p99"}, "tokens_per_second": {"p50",
        "p99"}}`` over the calls kept (a figure is ``None`` with no call to count)."""
        first = [seconds * 1000 for seconds in self.first_token]
        rates = list(self.tokens_per_second)
        return {
            "calls": self.calls,
            "first_token_ms": _quantiles(first),
            "tokens_per_second": _quantiles(rates),
        }


def _quantiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p99": None}
    return {"p50": round(percentile(values, 0.5), 3), "p99": round(percentile(values, 0.99), 3)}


def merged(timings: Iterable[CallTimings]) -> CallTimings:
    """One ``CallTimings`` holding what each of ``timings`` keeps (and counted)."""
    together = CallTimings(keep=KEPT * 8)
    for each in timings:
        together.calls += each.calls
        together.first_token.extend(each.first_token)
        together.tokens_per_second.extend(each.tokens_per_second)
    return together
