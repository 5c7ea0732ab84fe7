"""How a failure becomes one line and an exit code (the one place that decides it)."""

from __future__ import annotations

import sys
import traceback
from typing import TextIO

from .._errors import GreenroomError, InternalError


def _leaves(error: BaseException) -> list[BaseException]:
    from ..actors import ChildFailed

    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    if isinstance(error, ChildFailed):  # an actor escalated it: what the user needs is its cause
        return _leaves(error.error)
    return [error]


def _describe(error: BaseException) -> str:
    if isinstance(error, OSError) and not isinstance(error, GreenroomError):
        what = error.strerror or str(error) or type(error).__name__
        where = error.filename if error.filename is not None else None
        return f"{where}: {what}" if where is not None else what
    return str(error) or type(error).__name__


def report_error(error: BaseException, *, debug: bool = False, err: TextIO | None = None) -> int:
    """One line for an error a user can act on (exit 1); for anything else, one line
    saying it is a bug, and the traceback only with ``debug`` (exit 70)."""
    out = err if err is not None else sys.stderr
    leaves = _leaves(error)
    if all(isinstance(e, (GreenroomError, OSError)) and not isinstance(e, InternalError) for e in leaves):
        seen: set[str] = set()
        for leaf in leaves:
            line = _describe(leaf)
            if line not in seen:
                seen.add(line)
                print(f"greenroom: error: {line}", file=out)
        return 1
    bug = next(
        e for e in leaves if not isinstance(e, (GreenroomError, OSError)) or isinstance(e, InternalError)
    )
    print(
        f"greenroom: internal error ({type(bug).__name__}: {_describe(bug)[:200]}): this is a bug in "
        "greenroom; nothing you typed caused it. Please report it.",
        file=out,
    )
    if debug:
        traceback.print_exception(error, file=out)
    else:
        print("greenroom: run it again with --debug (or GREENROOM_DEBUG=1) to see the traceback", file=out)
    return 70
