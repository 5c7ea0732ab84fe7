"""One task per system keeps every deadline: ask timeouts and actor timers.

Why not a cancel scope per ``ask``: entering one costs about as much as a whole
round trip between two actors. An ask pushes ``(deadline, seq, reply)`` onto a heap
instead; the timer task sleeps until the earliest deadline. A reply that arrives in
time marks its entry stale, and the heap is compacted when stale entries dominate.
"""

from __future__ import annotations

import heapq
import itertools
import math
from typing import TYPE_CHECKING, Any, Protocol, final

import anyio

from .._guard import NoPublicConstructor

if TYPE_CHECKING:
    from ._cell import ActorCell


class _Expiring(Protocol):
    done: bool

    def expire(self, now: float) -> None: ...


class TimerService:
    def __init__(self, event_class: Any) -> None:
        self._event_class = event_class
        self._heap: list[tuple[float, int, _Expiring]] = []
        self._seq = itertools.count()
        self._wakeup: Any = None
        self._armed = math.inf
        self.stale = 0

    def add(self, deadline: float, entry: _Expiring) -> None:
        heap = self._heap
        if self.stale > 1024 and self.stale * 2 > len(heap):
            heap[:] = [item for item in heap if not item[2].done]
            heapq.heapify(heap)
            self.stale = 0
        heapq.heappush(heap, (deadline, next(self._seq), entry))
        if deadline < self._armed and self._wakeup is not None:
            self._armed = deadline
            self._wakeup.set()

    async def run(self) -> None:
        """Fire due entries until cancelled (at system shutdown)."""
        heap = self._heap
        while True:
            now = anyio.current_time()
            while heap and heap[0][0] <= now:
                entry = heapq.heappop(heap)[2]
                if entry.done:
                    self.stale = max(0, self.stale - 1)
                else:
                    entry.expire(now)
            self._armed = heap[0][0] if heap else math.inf
            self._wakeup = wakeup = self._event_class()
            with anyio.move_on_after(self._armed - now):
                await wakeup.wait()
            self._wakeup = None


@final
class Timer(metaclass=NoPublicConstructor):
    """A message scheduled for an actor by ``context.schedule_once`` / ``schedule_repeatedly``.

    ``cancel()`` guarantees no further delivery. Timers die with their actor: stop and
    restart cancel them. A tick that finds the mailbox full is a dead letter.
    """

    __slots__ = ("_cell", "_interval", "_message", "done")
    _made_by = "context.schedule_once() / schedule_repeatedly() return one"

    def __init__(self, cell: ActorCell, message: object, interval: float | None) -> None:
        self._cell = cell
        self._message = message
        self._interval = interval
        self.done = False

    @property
    def active(self) -> bool:
        return not self.done

    def cancel(self) -> None:
        if not self.done:
            self.done = True
            self._cell.system._timers.stale += 1
            timers = self._cell.timers
            if timers is not None:
                timers.discard(self)

    def expire(self, now: float) -> None:
        cell = self._cell
        if self._interval is None:
            self.done = True
            if cell.timers is not None:
                cell.timers.discard(self)
        else:
            cell.system._timers.add(now + self._interval, self)
        cell.deliver_tick(self._message)

    def __repr__(self) -> str:
        kind = "once" if self._interval is None else f"every {self._interval:g}s"
        return f"<Timer {kind} to {self._cell.name!r}{' cancelled' if self.done else ''}>"
