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


class PendingReply:
    """The answer to an ``ask``, taken out of ``receive`` by ``context.reply_later()``.

    Fill it once, from any task of the same event loop, with :meth:`succeed` or
    :meth:`fail`; later fills are ignored. If ``receive`` raises after taking it,
    the asker gets that exception (unless the reply was already filled). If the
    asker timed out or was cancelled, ``wanted`` is ``False`` and a fill is dropped.
    Nothing fills it for you when the actor stops: an actor that keeps pending
    replies should fail them in ``on_stop`` (the asker's timeout bounds the wait).
    """

    __slots__ = ("_reply",)

    def __init__(self, reply: Reply) -> None:
        self._reply = reply

    @property
    def wanted(self) -> bool:
        """``True`` until the reply is filled or the asker stopped waiting."""
        return not self._reply.done

    def succeed(self, value: Any) -> None:
        self._reply.succeed(value)

    def fail(self, error: BaseException) -> None:
        self._reply.fail(error)


_ABANDONED = RuntimeError("the asker was cancelled")
