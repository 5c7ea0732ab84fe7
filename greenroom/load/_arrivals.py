"""When sessions start: a closed loop (N at a time, a new one as one ends) or an open loop
(starts at a rate — Poisson, bursty or evenly spaced — after a ramp-up), as offsets in
seconds from the run's start, drawn from a seeded RNG."""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from typing import Literal

from .._errors import InvalidInput

Pattern = Literal["poisson", "bursty", "uniform"]


def open_starts(
    rate: float,
    *,
    pattern: Pattern = "poisson",
    ramp_up: float = 0.0,
    burst: int = 10,
    rng: random.Random,
) -> Iterator[float]:
    """Start offsets (seconds, increasing, without end) of sessions arriving at ``rate`` a
    second: ``poisson`` (independent arrivals: exponential gaps), ``uniform`` (evenly
    spaced), ``bursty`` (``burst`` sessions at once, the bursts themselves Poisson at
    ``rate / burst``). During ``ramp_up`` seconds the rate climbs linearly from zero (the
    schedule is stretched in time, so its shape is kept)."""
    if not (math.isfinite(rate) and rate > 0):
        raise InvalidInput(
            f"rate must be a number of sessions per second > 0, got {rate!r}", field="rate", value=rate
        )
    if not (math.isfinite(ramp_up) and ramp_up >= 0):
        raise InvalidInput(f"ramp_up must be seconds >= 0, got {ramp_up!r}", field="ramp_up", value=ramp_up)
    at = 0.0  # in "full rate" time
    while True:
        if pattern == "poisson":
            at += rng.expovariate(rate)
            yield _ramped(at, rate, ramp_up)
        elif pattern == "uniform":
            at += 1 / rate
            yield _ramped(at, rate, ramp_up)
        else:
            at += rng.expovariate(rate / burst)
            when = _ramped(at, rate, ramp_up)
            for _ in range(burst):
                yield when


def _ramped(at: float, rate: float, ramp_up: float) -> float:
    """The real offset of the ``at``-th second of arrivals at full rate, when the rate
    grows linearly from 0 to full over ``ramp_up`` seconds: during the ramp, arrivals
    that full rate would put at ``at`` happen at ``sqrt(2 * at * ramp_up)``."""
    if ramp_up <= 0:
        return at
    half = ramp_up / 2  # what the ramp delivers, in full-rate seconds
    if at <= half:
        return math.sqrt(2 * at * ramp_up)
    return ramp_up + (at - half)
