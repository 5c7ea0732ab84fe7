"""Virtual time on both loops: a clock that jumps ahead when every task waits.

This module is backend-specific on purpose (like ``actors/_backend.py``): virtual time
is each event loop's own clock.

- **trio**: ``trio.testing.MockClock(autojump_threshold=...)``.
- **asyncio**: :class:`VirtualTimeLoop`, a ``SelectorEventLoop`` whose ``time()`` stands
  still but for jumps, as ``MockClock``'s (its ``rate`` is 0): real time spent running
  code never moves it, so a test's timings are the same on a loaded machine. Its
  selector, asked to wait for a timer ``t`` seconds away, first waits
  ``autojump_threshold`` real seconds (or ``t``, if less) for I/O; if none came, the
  clock jumps by ``t`` and the timer is due at once.

With a threshold of 0 (the default) time jumps as soon as every task waits — also while
one waits on a socket, as with trio's ``MockClock``. A test whose tasks wait on real I/O
under a deadline gives a threshold (e.g. 0.05 real seconds) so the clock does not jump
past the deadline while the other side works.

**greenroom's own work in worker threads holds the clock** (both loops): while a store
write or query runs in a thread for the loop (``greenroom._threads.working``: the files'
SQLite and journal calls, every PostgreSQL transaction), the clock does not jump — that
is work, not idleness, however slow a loaded machine makes it. A long poll in a thread
(the mail's ``LISTEN``) is not counted: the clock jumps past it as past any wait.
"""

from __future__ import annotations

import asyncio
import functools
import math
import selectors
import sys
import time
import weakref
from typing import Any

from .. import _threads
from .._errors import InvalidInput


class _JumpingSelector(selectors.BaseSelector):
    def __init__(self, loop: VirtualTimeLoop, threshold: float) -> None:
        self._loop = loop
        self._threshold = threshold
        self._inner = selectors.DefaultSelector()

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._inner.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._inner.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._inner.modify(fileobj, events, data)

    def get_key(self, fileobj: Any) -> selectors.SelectorKey:
        return self._inner.get_key(fileobj)

    def get_map(self) -> Any:
        return self._inner.get_map()

    def close(self) -> None:
        self._inner.close()

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None:  # no timer to jump to: wait for I/O
            return self._inner.select(None)
        if timeout > 0 and _threads.working():  # work in a thread: real time, until it is back
            ready = self._inner.select(timeout)
            if ready or _threads.working():
                return ready
        ready = self._inner.select(min(timeout, self._threshold))
        if not ready and timeout > 0:  # nothing came in the real wait: the timer is due now
            self._loop.jump_to_timer(timeout)
        return ready


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An asyncio loop whose clock jumps to the next timer when every task waits (for
    ``autojump_threshold`` real seconds). ``anyio.current_time()`` and every deadline
    (``fail_after``, ``sleep``, ``move_on_after``) follow it."""

    def __new__(cls, autojump_threshold: float = 0.0) -> VirtualTimeLoop:
        # checked before the loop exists: a loop half made by a failed __init__ would
        # report an ignored exception from its __del__ when collected
        if not isinstance(autojump_threshold, int | float) or not autojump_threshold >= 0:
            raise InvalidInput(
                f"autojump_threshold must be a number >= 0, not {autojump_threshold!r}",
                field="autojump_threshold",
            )
        return super().__new__(cls)

    def __init__(self, autojump_threshold: float = 0.0) -> None:
        self._now = time.monotonic()  # where it starts; from here on it moves only by jumps
        super().__init__(_JumpingSelector(self, autojump_threshold))

    def time(self) -> float:
        return self._now

    @property
    def _clock_resolution(self) -> float:
        """How close to now a timer counts as due (asyncio reads it each turn): the clock's
        own resolution, or a few steps of a float at this time — after a long jump (a
        sleep of years) ``now + 1e-9`` is ``now``, and a timer due now would never run."""
        return max(1e-9, 4 * math.ulp(self._now))

    @_clock_resolution.setter
    def _clock_resolution(self, value: float) -> None:
        pass  # asyncio's __init__ sets the monotonic clock's: this clock has its own

    def jump_to_timer(self, timeout: float) -> None:
        """Jump ``timeout`` ahead — exactly to the next timer when that is where it lands
        (``now + (when - now)`` can fall a rounding short of ``when``: a 60 s sleep would
        wake at 59.999999999)."""
        scheduled: list[asyncio.TimerHandle] = getattr(self, "_scheduled", [])  # asyncio's heap of timers
        target = self._now + timeout
        if scheduled:
            when = scheduled[0].when()
            if math.isfinite(when) and abs(when - target) <= 4 * math.ulp(max(abs(when), 1.0)):
                target = max(target, when)
        self.jump(target - self._now)
        if self._now < target:
            self._now = target

    def jump(self, seconds: float) -> None:
        """Move the clock ``seconds`` ahead now (timers due meanwhile run at the loop's next
        turn)."""
        if seconds < 0:
            raise InvalidInput(
                f"a clock jumps forward: seconds must be >= 0, not {seconds!r}", field="seconds"
            )
        self._now += seconds


def virtual_time(backend: str, *, autojump_threshold: float = 0.0) -> tuple[str, dict[str, Any]]:
    """An anyio backend with virtual time: ``(name, options)`` for ``anyio.run(...,
    backend=name, backend_options=options)`` or as the value of anyio's pytest
    ``anyio_backend`` fixture. Call it once per run (each gets its own clock).

    ``backend`` is ``"asyncio"`` or ``"trio"``; ``autojump_threshold`` the real seconds
    every task must wait before the clock jumps (see the module docstring).
    """
    if autojump_threshold < 0:
        raise InvalidInput(
            f"autojump_threshold must be >= 0, not {autojump_threshold!r}", field="autojump_threshold"
        )
    if backend == "asyncio":
        return "asyncio", {"loop_factory": functools.partial(VirtualTimeLoop, autojump_threshold)}
    if backend == "trio":
        from trio.testing import MockClock

        clock = MockClock(autojump_threshold=autojump_threshold)
        _thresholds[clock] = autojump_threshold
        return "trio", {"clock": clock}
    raise InvalidInput(
        f"backend must be 'asyncio' or 'trio', not {backend!r}", field="backend", value=backend
    )


_thresholds: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()
"""The trio clocks :func:`virtual_time` made, and their jump thresholds."""


def _hold_trio_clock(working: bool) -> None:
    """While greenroom work runs in a thread for a trio loop on one of our clocks, it
    does not jump (threshold infinite); then it jumps as it did."""
    trio = sys.modules.get("trio")
    if trio is None or not _thresholds:
        return
    try:
        clock = trio.lowlevel.current_clock()
    except RuntimeError:  # not in trio
        return
    threshold = _thresholds.get(clock)
    if threshold is not None:
        clock.autojump_threshold = math.inf if working else threshold


_threads.hooks.append(_hold_trio_clock)
