"""Backend primitives the kernel waits on — the optional backend fast paths.

Everything else in greenroom imports ``anyio`` only. This module is the clearly marked
exception: on asyncio, the kernel's one-shot wake-ups (ask replies, parked workers,
death and room waits) are bare futures instead of ``anyio.Event``, whose asyncio
implementation allocates an ``asyncio.Event`` (with its own deque) per instance and
wakes through two extra coroutine layers; that halves the cost of an ask round trip.
On trio they are ``trio.Event`` itself, without anyio's wrapper coroutine. Under any
other backend anyio's own ``Event`` is used.

The contract of what ``primitives()`` returns is the same on every backend and the
whole test suite runs against both: ``event()`` makes an object with ``set()``,
``is_set()`` and ``await wait()``, waited on by **at most one task**; ``clock()`` is
``anyio.current_time()``. Cancellation is unchanged: anyio cancels an asyncio task by
cancelling the future it is awaiting, which ``wait`` lets propagate.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import anyio


class _FutureEvent:
    """asyncio fast path: a one-waiter event on a bare future."""

    __slots__ = ("_future",)

    create_future: Callable[[], Any]  # bound per system to its loop's create_future

    def __init__(self) -> None:
        self._future = self.create_future()

    def set(self) -> None:
        future = self._future
        if not future.done():
            future.set_result(None)

    def is_set(self) -> bool:
        future = self._future
        return bool(future.done() and not future.cancelled())

    def wait(self) -> Any:
        """The future itself: awaiting it costs no coroutine frame."""
        return self._future


def primitives() -> tuple[Callable[[], Any], Callable[[], float]]:
    """``(event factory, clock)`` for the backend running the current task."""
    import asyncio  # fast path only; see the module docstring

    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        event_class = type(
            "FutureEvent", (_FutureEvent,), {"__slots__": (), "create_future": loop.create_future}
        )
        return event_class, loop.time
    trio = sys.modules.get("trio")
    if trio is not None:
        try:
            trio.lowlevel.current_task()
        except RuntimeError:
            pass
        else:  # trio fast path: trio.Event itself, without anyio's wrapper coroutine
            return trio.Event, trio.current_time
    return type(anyio.Event()), anyio.current_time
