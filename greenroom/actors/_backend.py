"""Backend primitives the kernel waits on — the optional backend fast paths.

Everything else in greenroom imports ``anyio`` only. This module is the clearly marked
exception: on asyncio, the kernel's one-shot wake-ups (ask replies, parked workers,
death and room waits) are bare futures instead of ``anyio.Event``, whose asyncio
implementation allocates an ``asyncio.Event`` (with its own deque) per instance and
wakes through two extra coroutine layers; that halves the cost of an ask round trip.
On trio they are a one-waiter event on ``trio.lowlevel.wait_task_rescheduled`` /
``reschedule`` (trio's own ``Event`` keeps a set of waiters and builds an abort
closure per wait; this saves ~0.35 µs of a ~3 µs ask). Under any other backend
anyio's own ``Event`` is used.

The contract of what ``primitives()`` returns is the same on every backend and the
whole test suite runs against both: ``event()`` makes an object with ``set()``,
``is_set()`` and ``await wait()``, waited on by **at most one task** (the one that calls
``wait()``, awaiting it at once); ``clock()`` is ``anyio.current_time()``. Cancellation
is unchanged: anyio cancels an asyncio task by cancelling the future it is awaiting,
which ``wait`` lets propagate.
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


class _TrioOneShot:
    """trio fast path: a one-waiter event. Same checkpoint semantics as ``trio.Event``:
    ``wait`` is a checkpoint whether or not the event is already set."""

    __slots__ = ("_flag", "_task")

    lowlevel: Any  # trio.lowlevel, bound when the trio path is chosen

    def __init__(self) -> None:
        self._flag = False
        self._task: Any = None

    def set(self) -> None:
        if not self._flag:
            self._flag = True
            task = self._task
            if task is not None:
                self._task = None
                self.lowlevel.reschedule(task)

    def is_set(self) -> bool:
        return self._flag

    def _abort(self, _: Any) -> Any:
        self._task = None  # cancelled while waiting: a later set() wakes nobody
        return self.lowlevel.Abort.SUCCEEDED

    def wait(self) -> Any:
        """trio's own awaitable, returned: no coroutine frame of ours per wait. The
        waiter is the task that calls ``wait()``, so await it at once (the kernel does)."""
        lowlevel = self.lowlevel
        if self._flag:
            return lowlevel.checkpoint()
        if self._task is not None:
            raise RuntimeError("a kernel event is waited on by one task at most")
        self._task = lowlevel.current_task()
        return lowlevel.wait_task_rescheduled(self._abort)


def fast_path() -> tuple[str, Any] | None:
    """Which backend fast path applies to the current task: ``("asyncio", loop)``,
    ``("trio", trio.lowlevel)``, or ``None`` (another backend: use anyio's own calls).
    Shared by :func:`primitives` and ``greenroom._threads``."""
    import asyncio  # fast path only; see the module docstring

    try:
        return "asyncio", asyncio.get_running_loop()
    except RuntimeError:
        pass
    trio = sys.modules.get("trio")
    if trio is not None:
        try:
            trio.lowlevel.current_task()
        except RuntimeError:
            pass
        else:
            return "trio", trio.lowlevel
    return None


def primitives() -> tuple[Callable[[], Any], Callable[[], float]]:
    """``(event factory, clock)`` for the backend running the current task."""
    path = fast_path()
    if path is None:
        return type(anyio.Event()), anyio.current_time
    kind, handle = path
    if kind == "asyncio":
        event_class = type(
            "FutureEvent", (_FutureEvent,), {"__slots__": (), "create_future": handle.create_future}
        )
        return event_class, handle.time
    # trio fast path: a one-waiter event on trio's low-level scheduling calls
    _TrioOneShot.lowlevel = handle
    return _TrioOneShot, sys.modules["trio"].current_time
