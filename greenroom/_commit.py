"""``Batcher``: group commit, once — requests gathered into batches, one write each, and
every reply sent only after its batch's write.

Every greenroom writer that acknowledges a change only once it is durable is built on it,
as trio builds its locks and conditions on one ``ParkingLot``: the files' task graph (its
journal), the log actor (``events.jsonl``; ``gr_events``), the step journal (a write lane,
then a sync lane), the budget ledger, and the PostgreSQL task graph (a lane per kind of
request). The way is always the same:

1. While handling a message the actor applies it in memory and :meth:`Batcher.add`\\ s
   the reply it owes (``context.reply_later()``; ``None`` for a told message) and the
   value the write needs.
2. When the batch is :meth:`~Batcher.due`, the actor takes it (:meth:`~Batcher.take`)
   and writes it — or lets :meth:`~Batcher.commit` do both.
3. Only once the write returned are the replies answered (:meth:`Batch.answer`). If it
   raised, every reply of the batch fails with that error (a cancellation: with
   ``stopped()``) and the error propagates, so the actor fails and its restart reloads
   what is durable.

So a reply always means durable: a crash (even ``kill -9``) between the write and the
replies loses nothing that was acknowledged, and a failed write acknowledges nothing.
Messages that arrive during the write form the next batch.

The policies the writers need are three knobs:

- ``max_batch``: a batch holds at most this many values; a full one is due at once.
- ``linger``: seconds a batch of *told* values only (nobody waits for them) may wait for
  more once the mailbox is drained (Kafka's ``linger.ms``): :meth:`~Batcher.lingering`
  says when to arm the timer. An asked value makes the batch due as soon as the mailbox
  is drained.
- lanes: values added under a ``key`` gather per key; :meth:`~Batcher.take` hands out the
  oldest key's batch and passes over a key whose batch is in flight until
  :meth:`~Batcher.done` — unless a full batch waits — so what arrives during a write
  gathers behind it and one write serves it all (one transaction in flight per kind).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable, Iterator, Sequence
from typing import Any, Generic, Protocol, TypeVar

from ._checks import check_int, check_seconds

T = TypeVar("T")


class Owed(Protocol):
    """A reply a batch owes: a ``PendingReply``, or any object answered the same way."""

    def succeed(self, value: Any) -> None: ...

    def fail(self, error: BaseException) -> None: ...


class Batch(Generic[T]):
    """One batch taken for a write: its ``values`` and the replies they owe (``owed``,
    parallel to them; ``None`` for a told value), under ``key``."""

    __slots__ = ("key", "owed", "values")

    def __init__(self, key: Hashable, owed: list[Owed | None], values: list[T]) -> None:
        self.key = key
        self.owed = owed
        self.values = values

    def __len__(self) -> int:
        return len(self.values)

    def __iter__(self) -> Iterator[tuple[Owed | None, T]]:
        """Each reply owed (``None``: told) with its value, in order."""
        return zip(self.owed, self.values, strict=True)

    def answer(self, results: Sequence[object] | None = None) -> None:
        """Answer every reply: with its own result (``results[i]``; an exception fails
        it), or, without ``results``, with its value."""
        answers = self.values if results is None else results
        for pending, result in zip(self.owed, answers, strict=True):
            if pending is not None:
                if isinstance(result, BaseException):
                    pending.fail(result)
                else:
                    pending.succeed(result)

    def fail(self, error: BaseException) -> None:
        """Fail every reply with ``error`` (the write failed: nothing is acknowledged)."""
        for pending in self.owed:
            if pending is not None:
                pending.fail(error)


class _Lane:
    __slots__ = ("owed", "values")

    def __init__(self) -> None:
        self.owed: list[Owed | None] = []
        self.values: list[Any] = []


class Batcher(Generic[T]):
    """Values waiting for their write, and the replies they owe, by lane.

    Not thread-safe: one actor drives it, from its own task (its helpers, where it has
    some, run on the same event loop and call it between awaits)."""

    __slots__ = ("_asked", "_count", "_default", "_lanes", "_running", "linger", "max_batch")

    def __init__(self, *, max_batch: int = 4096, linger: float = 0.0, owner: str = "Batcher") -> None:
        self.max_batch = check_int(owner, "max_batch", max_batch)
        self.linger = check_seconds(owner, "linger", linger, zero_ok=True)
        self._lanes: dict[Hashable, _Lane] = {}
        self._default: _Lane | None = None
        self._running: dict[Hashable, int] = {}
        self._count = 0
        self._asked = 0

    def __len__(self) -> int:
        """Values waiting (not taken yet), in every lane."""
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    # -- gathering ---------------------------------------------------------------------------

    def add(self, pending: Owed | None, value: T, key: Hashable = None) -> None:
        """Owe ``pending`` (``None``: a told value, nothing to answer, but part of the
        batch) an answer once ``value``'s batch is written; in lane ``key``."""
        lane = self._default if key is None else self._lanes.get(key)
        if lane is None:
            lane = self._lane(key)
        lane.owed.append(pending)
        lane.values.append(value)
        self._count += 1
        if pending is not None:
            self._asked += 1

    def add_many(self, pending: Owed | None, values: Sequence[T], key: Hashable = None) -> None:
        """:meth:`add` each of ``values``, owing ``pending`` each time (one source's values,
        answered together: a ``pending`` that counts its answers)."""
        lane = self._default if key is None else self._lanes.get(key)
        if lane is None:
            lane = self._lane(key)
        count = len(values)
        lane.owed.extend([pending] * count)
        lane.values.extend(values)
        self._count += count
        if pending is not None:
            self._asked += count

    def _lane(self, key: Hashable) -> _Lane:
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = _Lane()
        if key is None:
            self._default = lane
        return lane

    @property
    def full(self) -> bool:
        """A batch's worth waits."""
        return self._count >= self.max_batch

    def due(self, queued: int) -> bool:
        """Time to write: a full batch waits, or something waits, the mailbox is drained
        (``queued == 0``, see ``context.queued``) and either someone waits for an answer
        or there is no ``linger``."""
        count = self._count
        return bool(count) and (
            count >= self.max_batch or (queued == 0 and (self._asked > 0 or not self.linger))
        )

    def lingering(self, queued: int) -> bool:
        """Told values wait for ``linger`` (the mailbox is drained and nobody waits): the
        caller arms a timer of ``linger`` seconds and writes when it fires."""
        return bool(self._count) and queued == 0 and not self._asked and self.linger > 0

    # -- taking ------------------------------------------------------------------------------

    def take(self) -> Batch[T] | None:
        """The oldest lane's waiting values (up to ``max_batch``), or ``None``. A lane with
        a batch in flight is passed over until that one is :meth:`done`, unless a full
        batch waits in it; a lane with values left goes behind the others (each gets its
        turn)."""
        running = self._running
        for key, lane in self._lanes.items():
            if key in running and len(lane.values) < self.max_batch:
                continue
            return self._take(key, lane)  # (the loop ends here)
        return None

    def _take(self, key: Hashable, lane: _Lane) -> Batch[T]:
        del self._lanes[key]
        if len(lane.values) <= self.max_batch:
            owed, values = lane.owed, lane.values
            if key is None:
                self._default = None
        else:
            cut = self.max_batch
            owed, values = lane.owed[:cut], lane.values[:cut]
            del lane.owed[:cut], lane.values[:cut]
            self._lanes[key] = lane
        self._count -= len(values)
        self._asked -= sum(1 for pending in owed if pending is not None)
        self._running[key] = self._running.get(key, 0) + 1
        return Batch(key, owed, values)

    def done(self, batch: Batch[T]) -> None:
        """``batch``'s write ended (written or failed): its lane may run again."""
        left = self._running.pop(batch.key) - 1
        if left:
            self._running[batch.key] = left

    def put_back(self, batch: Batch[T]) -> None:
        """``batch`` could not be written by whom it was given to (a worker gone): it goes
        first, in a lane of its own, and its lane may run again."""
        self.done(batch)
        lane = _Lane()
        lane.owed, lane.values = batch.owed, batch.values
        self._lanes = {object(): lane, **self._lanes}
        self._count += len(batch.values)
        self._asked += sum(1 for pending in batch.owed if pending is not None)

    def in_flight(self, key: Hashable = None) -> bool:
        """Whether lane ``key`` has a batch being written."""
        return key in self._running

    def drain(self) -> list[Batch[T]]:
        """Every value waiting, taken as batches, in flight or not (each in flight now:
        call :meth:`done` for each)."""
        batches = []
        while self._lanes:
            key, lane = next(iter(self._lanes.items()))
            batches.append(self._take(key, lane))
        return batches

    def fail_all(self, error: BaseException) -> None:
        """Fail every reply still waiting (an actor stopping with an unwritten batch)."""
        for batch in self.drain():
            self.done(batch)
            batch.fail(error)

    # -- writing -----------------------------------------------------------------------------

    async def commit(
        self,
        write: Callable[[list[T]], Awaitable[Sequence[object] | None]] | None,
        *,
        stopped: Callable[[], BaseException],
        answer: bool = True,
    ) -> Batch[T] | None:
        """Take the next batch (``None``: nothing waits), write it (``await
        write(values)``; ``None``: nothing to write) and answer each reply — with the
        result the write returned for it, or its value — then free its lane. Returns the
        batch (``answer=False``: unanswered, for a caller that answers later).

        On a write error every reply fails with it and it is re-raised. A write cancelled
        acknowledges nothing: every reply fails with ``stopped()`` and the cancellation
        propagates (a write in a worker thread still finishes there).
        """
        batch = self.take()
        if batch is None:
            return None
        try:
            results = await write(batch.values) if write is not None else None
        except BaseException as error:
            batch.fail(error if isinstance(error, Exception) else stopped())
            raise
        finally:
            self.done(batch)
        if answer:
            batch.answer(results)
        return batch
