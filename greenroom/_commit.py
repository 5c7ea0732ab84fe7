"""``GroupCommit``: one durable write per batch of messages, replies only after it.

The supervisor (the task graph's journal) and the log actor (``events.jsonl``) are the
two writers that acknowledge a change only once it is on disk. Both work the same way,
and this is that way, once:

1. While handling a message the actor applies it in memory and :meth:`add`\\ s the reply
   it owes (taken with ``context.reply_later()``; ``None`` for a told message) and the
   value to answer with.
2. When :meth:`due` (the mailbox is drained, or ``max_batch`` replies wait), the actor
   calls :meth:`commit` with the blocking function that writes the batch. It runs once,
   off the event loop (``_threads.run_blocking``).
3. Only when it returned are the replies sent. If it raised, every reply of the batch is
   failed with that error (a cancellation: with ``stopped()``) and the error propagates,
   so the actor fails and its restart reloads what is on disk.

So a reply always means durable: a crash (even ``kill -9``) between the write and the
replies loses nothing that was acknowledged, and a failed write acknowledges nothing.
Messages that arrive during the write form the next batch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

from ._checks import check_int
from ._threads import run_blocking

T = TypeVar("T")


class Owed(Protocol):
    """A reply a batch owes: a ``PendingReply``, or any object answered the same way."""

    def succeed(self, value: Any) -> None: ...

    def fail(self, error: BaseException) -> None: ...


Answer = Callable[[Owed, T], None]


def _succeed(pending: Owed, value: Any) -> None:
    pending.succeed(value)


class GroupCommit(Generic[T]):
    """The replies a batch owes, answered once the batch's write is durable."""

    __slots__ = ("_waiting", "max_batch")

    def __init__(self, max_batch: int = 4096) -> None:
        self.max_batch = check_int("GroupCommit", "max_batch", max_batch)
        self._waiting: list[tuple[Owed | None, T]] = []

    def __len__(self) -> int:
        return len(self._waiting)

    def add(self, pending: Owed | None, value: T) -> None:
        """Owe ``value`` to ``pending`` (``None``: a told message, nothing to answer,
        but still part of the batch) once the batch is durable."""
        self._waiting.append((pending, value))

    def due(self, queued: int) -> bool:
        """Time to commit: something waits and the mailbox is drained (``queued == 0``,
        see ``context.queued``) or the batch is full."""
        return bool(self._waiting) and (queued == 0 or len(self._waiting) >= self.max_batch)

    async def commit(
        self,
        write: Callable[[], object] | None,
        *,
        stopped: Callable[[], BaseException],
        answer: Answer[T] | None = None,
    ) -> list[tuple[Owed | None, T]]:
        """Write the batch (``write()``, blocking, in a worker thread; ``None``: nothing
        to write), then answer each reply (``answer(pending, value)``, default
        ``pending.succeed(value)``). Returns the batch.

        On a write error every reply fails with it and it is re-raised. On
        cancellation the write is not abandoned (it finishes in its thread) but nothing
        is acknowledged: every reply fails with ``stopped()`` and the cancellation
        propagates.
        """
        batch, self._waiting = self._waiting, []
        if write is not None:
            try:
                await run_blocking(write)
            except BaseException as error:
                failure = error if isinstance(error, Exception) else stopped()
                for pending, _ in batch:
                    if pending is not None:
                        pending.fail(failure)
                raise
        reply = _succeed if answer is None else answer
        for pending, value in batch:
            if pending is not None:
                reply(pending, value)
        return batch

    def fail_all(self, error: BaseException) -> None:
        """Fail every reply still owed (an actor stopping with an uncommitted batch)."""
        batch, self._waiting = self._waiting, []
        for pending, _ in batch:
            if pending is not None:
                pending.fail(error)
