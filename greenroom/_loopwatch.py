"""``LoopWatch``: says, once, when the event loop was blocked — and by which call.

Everything a daemon does on time (each lease's heartbeat, the supervisor's lease check,
the entities' renewals) is a task on one event loop; a call that blocks the loop (a tool
that calls a blocking HTTP client inline, a CPU-bound parse, a stop-the-world) stops them
all. The watch is an actor that stamps the time on a repeating timer, and a watcher
thread — a real OS thread, so it runs while the loop cannot — that looks at the stamp
every ``threshold / 4`` seconds. When the loop has not stamped for ``threshold`` seconds
the watcher reads the loop thread's stack at that moment and logs one warning naming the
innermost call outside anyio, asyncio, trio and greenroom (the one that blocked), with
the stack's tail. Once per stall: the next warning needs the loop to have run again.

Messages: the actor takes only its own timer ticks. Stopping it stops the watcher thread
(``on_stop`` waits for it in a worker thread); ticks scheduled after the stop are dropped
with the actor's timers.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import traceback
from typing import Any

import anyio

from .actors import Actor

logger = logging.getLogger("greenroom.loop")


def _machinery() -> tuple[str, ...]:
    """Where the loop's own code lives: the packages' directories, the modules' files."""
    import asyncio
    import selectors

    import greenroom

    places = [os.path.dirname(module.__file__ or "") + os.sep for module in (anyio, asyncio, greenroom)]
    places += [selectors.__file__, threading.__file__]
    trio = sys.modules.get("trio")
    if trio is not None and trio.__file__:
        places.append(os.path.dirname(trio.__file__) + os.sep)
    return tuple(place for place in places if place)


class _Tick:
    __slots__ = ()


_TICK = _Tick()


class LoopWatch(Actor):
    """See the module doc. ``threshold``: seconds the loop may go without running before
    it is said (a daemon gives a fraction of its lease); ``what``: what the warning says
    a stall costs (``"every lease's heartbeat waited"``)."""

    def __init__(self, threshold: float, what: str = "") -> None:
        super().__init__()
        if not threshold > 0:
            raise ValueError(f"LoopWatch threshold must be > 0 seconds, got {threshold!r}")
        self.threshold = float(threshold)
        self.what = what
        self.stamp = time.monotonic()
        self.checks = 0
        """How many times the watcher has looked."""
        self.looked = threading.Condition()
        """Notified each time the watcher has looked (a test waits on it)."""
        self.stalls = 0
        """Stalls said so far."""
        self._said_for = -1.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop_thread = 0

    async def on_start(self) -> None:
        self._loop_thread = threading.get_ident()
        self.stamp = time.monotonic()
        self._thread = threading.Thread(target=self._watch, name="greenroom-loopwatch", daemon=True)
        self._thread.start()
        self.context.schedule_repeatedly(self.threshold / 4, _TICK)

    async def receive(self, message: Any) -> None:
        self.stamp = time.monotonic()

    async def on_stop(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None:
            await anyio.to_thread.run_sync(thread.join)

    def _watch(self) -> None:
        """The watcher thread: looks every ``threshold / 4`` seconds until stopped."""
        while not self._stop.wait(self.threshold / 4):
            self._look()
            with self.looked:
                self.checks += 1
                self.looked.notify_all()

    def _look(self) -> None:
        """Say the stall if the loop has not stamped for ``threshold`` (once per stall)."""
        stamp = self.stamp
        blocked = time.monotonic() - stamp
        if blocked < self.threshold or stamp == self._said_for:
            return
        self._said_for = stamp
        self.stalls += 1
        frame = sys._current_frames().get(self._loop_thread)
        stack = traceback.extract_stack(frame) if frame is not None else traceback.StackSummary()
        tail = " <- ".join(f"{f.name} ({_short(f.filename)}:{f.lineno})" for f in reversed(stack[-6:]))
        cost = f": {self.what}" if self.what else ""
        logger.warning(
            "the event loop has been blocked for %.1f s (more than %.1f s)%s, in %s — stack: %s",
            blocked, self.threshold, cost, _culprit(stack), tail or "unknown",
        )  # fmt: skip


def _culprit(stack: traceback.StackSummary) -> str:
    """The innermost call of the stack that is not the loop's own machinery: the one
    that blocked it (the innermost call at all when every frame is the machinery's)."""
    ours = _machinery()
    for frame in reversed(stack):
        if not frame.filename.startswith(ours):
            return f"{frame.name} ({_short(frame.filename)}:{frame.lineno})"
    if stack:
        frame = stack[-1]
        return f"{frame.name} ({_short(frame.filename)}:{frame.lineno})"
    return "an unknown call"


def _short(filename: str) -> str:
    try:
        relative = os.path.relpath(filename)
    except ValueError:  # another drive
        return filename
    return filename if relative.startswith("..") else relative
