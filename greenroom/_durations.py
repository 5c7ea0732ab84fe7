"""``DurationCounter``: how long each of many things took, in fixed buckets.

What a writer keeps to say how long its durable writes take (``GraphStats.writes``,
``LogFigures.writes``): a count per bucket and a sum, constant memory however long the
daemon runs, read as a :class:`~greenroom.messages.Durations` (Prometheus's histogram
shape). Counting is a bisection and two additions: cheap enough for every write.
"""

from __future__ import annotations

from bisect import bisect_left

from .messages import Durations

WRITE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)
"""Seconds: a local fsync takes a fraction of a millisecond to tens; a database, a few."""


class DurationCounter:
    """Durations counted into ``bounds`` (ascending seconds); see the module doc."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...] = WRITE_BUCKETS) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0

    def add(self, seconds: float) -> None:
        self.counts[bisect_left(self.bounds, seconds)] += 1
        self.total += seconds

    def figures(self) -> Durations:
        return Durations(list(self.bounds), list(self.counts), round(self.total, 6))
