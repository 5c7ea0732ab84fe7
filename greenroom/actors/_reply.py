"""The one-shot slot an ``ask`` waits on."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._ref import ActorRef
    from ._timers import TimerService


class Reply:
    """Filled once, by the actor (a value or its exception), the timer (``AskTimeout``),
    or the kernel (``ActorStopped``); later fills are ignored. ``done`` also marks the
    heap entry of its deadline as stale, so the timer service can skip it.
    """

    __slots__ = ("done", "error", "event", "message", "ref", "timeout", "timers", "value")

    # set only when the ask has a deadline (read by ``expire``)
    ref: ActorRef
    message: Any
    timeout: float

    def __init__(self, event: Any) -> None:
        self.event = event
        self.value: Any = None
        self.error: BaseException | None = None
        self.done = False
        self.timers: TimerService | None = None

    def succeed(self, value: Any) -> None:
        self._fill(value, None)

    def fail(self, error: BaseException) -> None:
        self._fill(None, error)

    def _fill(self, value: Any, error: BaseException | None) -> None:
        if not self.done:
            self.done = True
            self.value = value
            self.error = error
            self.event.set()
            if self.timers is not None:
                self.timers.stale += 1

    def abandon(self) -> None:
        """The asker stopped waiting (cancelled); a later reply is dropped."""
        self.fail(_ABANDONED)

    def expire(self, now: float) -> None:
        from ._exceptions import AskTimeout

        self.timers = None  # the heap entry is being consumed, not left stale
        self.fail(AskTimeout(self.ref, self.message, self.timeout))

    async def wait(self) -> Any:
        await self.event.wait()
        if self.error is not None:
            raise self.error
        return self.value


_ABANDONED = RuntimeError("the asker was cancelled")
