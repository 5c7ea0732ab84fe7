"""Checks for constructor arguments: a bad value is an ``InvalidInput`` (a ``ValueError``)
naming the owner, the field and the value, raised before anything is created."""

from __future__ import annotations

import math
from typing import Any

from ._errors import InvalidInput


def check_int(owner: str, field: str, value: Any, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidInput(
            f"{owner} {field} must be an int >= {minimum}, got {value!r}", field=field, value=value
        )
    return value


def check_seconds(owner: str, field: str, value: Any, *, zero_ok: bool = False) -> float:
    """A finite number of seconds, > 0 (or >= 0 with ``zero_ok``)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value < 0
        or (value == 0 and not zero_ok)
    ):
        what = "a number >= 0" if zero_ok else "a positive number of seconds"
        raise InvalidInput(f"{owner} {field} must be {what}, got {value!r}", field=field, value=value)
    return float(value)


def check_name(owner: str, field: str, value: Any) -> str:
    """A non-empty string of at most 200 characters without surrounding whitespace."""
    if not isinstance(value, str) or not value or len(value) > 200 or value != value.strip():
        raise InvalidInput(
            f"{owner} {field} must be a non-empty string without padding, got {value!r}",
            field=field,
            value=value,
        )
    return value
