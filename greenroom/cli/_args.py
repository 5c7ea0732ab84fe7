"""Flag types and the options several commands share.

Stdlib only: every command's parser is built from these before anything else is
imported, so ``greenroom --version`` pays for argparse and nothing more.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

Handler = Callable[[argparse.Namespace], int]
"""What a command runs once its flags are parsed: returns the exit code."""


def int_between(minimum: int, maximum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        wanted = f"must be a whole number from {minimum} to {maximum}, got {text!r:.40}"
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(wanted) from None
        if not minimum <= value <= maximum:
            raise argparse.ArgumentTypeError(wanted)
        return value

    return parse


positive_int = int_between(1, 1_000_000)


def _number(wanted: str, above: float | None, at_least: float | None, below: float) -> Callable[[str], float]:
    """A parser of a number ``> above`` (or ``>= at_least``) and ``< below``; ``wanted``
    is the error's text (the value given follows it)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {wanted}, got {text!r}") from None
        low_ok = value > above if above is not None else at_least is not None and value >= at_least
        if not (low_ok and value < below):
            raise argparse.ArgumentTypeError(f"must be {wanted}, got {text!r}")
        return value

    return parse


seconds = _number("a number of seconds > 0", 0.0, None, 1e6)
seconds_or_zero = _number("a number of seconds >= 0", None, 0.0, 1e6)
positive_float = _number("a number > 0", 0.0, None, 1e12)


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration(text: str) -> float:
    """A span of time: seconds (``90``), or with a unit (``90s``, ``15m``, ``1h``, ``2d``)."""
    wanted = f"must be a duration such as 90s, 15m, 1h or 2d, got {text!r:.40}"
    unit = _UNITS.get(text[-1:].lower())
    try:
        value = float(text[:-1] if unit else text) * (unit or 1)
    except ValueError:
        raise argparse.ArgumentTypeError(wanted) from None
    if not 0 < value < 1e10:
        raise argparse.ArgumentTypeError(wanted)
    return value


def temperature(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 2:
        raise argparse.ArgumentTypeError(f"must be a number from 0 to 2, got {text!r}")
    return value


def data_dir(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--data-dir", help="default: $STREAMING_LLM_DATA_DIR or ~/.local/share/greenroom")


def store(sub: argparse.ArgumentParser, what: str) -> None:
    sub.add_argument(
        "--store", metavar="postgresql://...", default=os.environ.get("GREENROOM_STORE"),
        help=f"{what} (default: $GREENROOM_STORE; the password from $PGPASSWORD)",
    )  # fmt: skip


def remote(sub: argparse.ArgumentParser) -> None:
    """The options of a command that goes to the daemon serving the data dir (or ``--url``),
    and with no daemon to the backend itself."""
    data_dir(sub)
    sub.add_argument("--url", help="a daemon's API elsewhere (default: the one serving the data dir)")
    sub.add_argument("--token", help="the API token for --url (default: $GREENROOM_TOKEN)")
    store(sub, "with no daemon to ask, work on this PostgreSQL database")


def actions(parser: argparse.ArgumentParser) -> Any:
    """The sub-commands of a command group; the group alone prints its help (exit 2)."""
    parser.set_defaults(handler=lambda args: _group_help(parser))
    return parser.add_subparsers(dest="action", metavar="ACTION")


def _group_help(parser: argparse.ArgumentParser) -> int:
    import sys

    parser.print_help(sys.stderr)
    return 2
