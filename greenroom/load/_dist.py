"""``Dist``: how a workload's quantities vary — a number drawn per use, from a seeded RNG."""

from __future__ import annotations

import math
import random
from typing import Literal

import msgspec

Kind = Literal["fixed", "uniform", "normal", "lognormal", "exponential"]


class Dist(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A distribution: ``fixed`` (``value``), ``uniform`` (``low``..``high``), ``normal`` /
    ``lognormal`` (``mean``, ``sd``: of the value itself, not of its log), or
    ``exponential`` (``mean``). Draws are clipped to ``low``..``high`` when given (a
    ``normal`` never yields a negative token count). In a workload file a bare number is a
    ``fixed`` one."""

    kind: Kind = "fixed"
    value: float = 0.0
    mean: float = 0.0
    sd: float = 0.0
    low: float | None = None
    high: float | None = None

    def check(self, field: str) -> Dist:
        """This distribution, or ``ValueError`` naming ``field`` and what is wrong."""
        numbers = {"value": self.value, "mean": self.mean, "sd": self.sd, "low": self.low, "high": self.high}
        for name, number in numbers.items():
            if number is not None and (not math.isfinite(number) or number < 0):
                raise ValueError(f"{field}.{name} must be a finite number >= 0, got {number!r}")
        if self.kind == "uniform" and (self.low is None or self.high is None or self.low > self.high):
            raise ValueError(
                f"{field}: a uniform distribution needs low <= high, got {self.low!r}..{self.high!r}"
            )
        if self.low is not None and self.high is not None and self.low > self.high:
            raise ValueError(f"{field}: low must be <= high, got {self.low!r} > {self.high!r}")
        if self.kind in ("normal", "lognormal", "exponential") and self.mean <= 0:
            raise ValueError(f"{field}: a {self.kind} distribution needs a mean > 0, got {self.mean!r}")
        return self

    def draw(self, rng: random.Random) -> float:
        kind = self.kind
        if kind == "fixed":
            value = self.value
        elif kind == "uniform":
            assert self.low is not None and self.high is not None
            return rng.uniform(self.low, self.high)
        elif kind == "normal":
            value = rng.gauss(self.mean, self.sd)
        elif kind == "lognormal":
            # the log's parameters for a value of this mean and spread
            variance = math.log(1 + (self.sd / self.mean) ** 2)
            value = rng.lognormvariate(math.log(self.mean) - variance / 2, math.sqrt(variance))
        else:
            value = rng.expovariate(1 / self.mean)
        if self.low is not None:
            value = max(self.low, value)
        if self.high is not None:
            value = min(self.high, value)
        return max(0.0, value)

    def draw_int(self, rng: random.Random, minimum: int = 0) -> int:
        return max(minimum, round(self.draw(rng)))


def fixed(value: float) -> Dist:
    return Dist("fixed", value=value)


def as_dist(raw: object, field: str) -> Dist:
    """A ``Dist`` from a workload file's value: a number (fixed) or a table."""
    if isinstance(raw, bool):
        raise ValueError(f"{field} must be a number or a distribution table, got {raw!r}")
    if isinstance(raw, int | float):
        return Dist("fixed", value=float(raw)).check(field)
    if isinstance(raw, dict):
        try:
            return msgspec.convert(raw, Dist).check(field)
        except msgspec.ValidationError as error:
            raise ValueError(f"{field}: {error}") from None
    raise ValueError(f"{field} must be a number or a distribution table, got {raw!r}")
