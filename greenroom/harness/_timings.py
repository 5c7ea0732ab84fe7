"""``CallTimings``: how fast the recent streamed model calls were, for a status page."""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from collections.abc import Iterable
from typing import Any

from .._durations import DurationCounter
from ..messages import CallTiming

KEPT = 1024
"""Calls a ``CallTimings`` keeps (the most recent)."""

FIRST_TOKEN_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
"""The upper bounds (seconds) of the time-to-first-token histogram (``+Inf`` beyond)."""

CALL_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
"""The upper bounds (seconds) of the whole call's histogram (``+Inf`` beyond)."""


def percentile(values: list[float], fraction: float) -> float:
    """The value below which ``fraction`` of ``values`` lie (nearest rank; sorted here)."""
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(fraction * len(ordered) + 0.5) - 1))
    return ordered[rank]


class CallTimings:
    """The time to first token, the whole call's time and the tokens per second of the
    latest ``keep`` streamed model calls (``calls``: how many were counted in all), and
    every call's times in histograms. Not thread safe: one event loop."""

    __slots__ = (
        "calls", "duration", "durations", "first_token", "first_token_counts", "first_token_sum",
        "tokens_per_second",
    )  # fmt: skip

    def __init__(self, keep: int = KEPT) -> None:
        self.calls = 0
        self.first_token: deque[float] = deque(maxlen=keep)
        self.tokens_per_second: deque[float] = deque(maxlen=keep)
        self.first_token_counts = [0] * (len(FIRST_TOKEN_BUCKETS) + 1)
        """Every call counted (not only the kept ones), per bucket of
        :data:`FIRST_TOKEN_BUCKETS` (the last: beyond them)."""
        self.first_token_sum = 0.0
        self.duration: deque[float] = deque(maxlen=keep)
        self.durations = DurationCounter(CALL_BUCKETS)
        """Every call's whole time, counted (the histogram of ``model_call_seconds``)."""

    def add(self, timing: CallTiming) -> None:
        self.calls += 1
        self.duration.append(timing.duration)
        self.durations.add(timing.duration)
        self.first_token.append(timing.first_token)
        self.first_token_counts[bisect_left(FIRST_TOKEN_BUCKETS, timing.first_token)] += 1
        self.first_token_sum += timing.first_token
        if timing.tokens_per_second is not None:
            self.tokens_per_second.append(timing.tokens_per_second)

    def summary(self) -> dict[str, Any]:
        """``{"calls", "first_token_ms": {"p50", "p99"}, "tokens_per_second": {"p50",
        "p99"}}`` over the calls kept (a figure is ``None`` with no call to count), and
        ``first_token_histogram``: ``{"buckets": [[le, calls at or below], ...], "sum"}``
        (seconds, cumulative, every call counted; the last bound ``"+Inf"``); the same of
        the whole call: ``duration_ms`` and ``duration_histogram``."""
        first = [seconds * 1000 for seconds in self.first_token]
        rates = list(self.tokens_per_second)
        cumulative, buckets = 0, []
        for bound, count in zip((*FIRST_TOKEN_BUCKETS, "+Inf"), self.first_token_counts, strict=True):
            cumulative += count
            buckets.append([bound, cumulative])
        return {
            "calls": self.calls,
            "first_token_ms": _quantiles(first),
            "tokens_per_second": _quantiles(rates),
            "first_token_histogram": {"buckets": buckets, "sum": round(self.first_token_sum, 6)},
            "duration_ms": _quantiles([seconds * 1000 for seconds in self.duration]),
            "duration_histogram": _cumulative(self.durations),
        }


def _cumulative(counter: DurationCounter) -> dict[str, Any]:
    cumulative, buckets = 0, []
    for bound, count in zip((*counter.bounds, "+Inf"), counter.counts, strict=True):
        cumulative += count
        buckets.append([bound, cumulative])
    return {"buckets": buckets, "sum": round(counter.total, 6)}


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
        together.first_token_sum += each.first_token_sum
        for index, count in enumerate(each.first_token_counts):
            together.first_token_counts[index] += count
        together.duration.extend(each.duration)
        together.durations.total += each.durations.total
        for index, count in enumerate(each.durations.counts):
            together.durations.counts[index] += count
    return together
