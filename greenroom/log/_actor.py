"""``LogActor``: serialises event appends and applies the visibility policy, on any store.

Ask it ``Append(...)``; the reply is the stored ``Event`` (with its ``seq``), sent once
the event is durable. Appends are group-committed: the batch waiting in the mailbox goes to
the :class:`EventStore` (``events.jsonl`` under a data dir, or PostgreSQL) in one write,
then is answered, so ``seq`` order is mailbox order. An event the visibility policy
refuses raises :class:`PolicyError` (a ``ValueError`` with ``policy_error``) in the asker
and nothing is appended; so does one whose payload the store cannot hold.
``AppendMany`` appends several events from one source at once (all or nothing; one
reply, the stored events in order): the way to make the log cheap per event. Each
payload is encoded once, here, as it is admitted (a payload that is not JSON is refused
then, before anything is stored); the store writes those bytes.
``Subscribe(ref)`` tells ``ref`` each event after it is durable (a stopped subscriber is
dropped; a full one misses the event, with a warning).

An ``AppendMany`` with an ``origin`` carries events from a durable journal (the files'
task graph sends its committed events so): each is stored with its own origin, and the
store keeps each once. ``Flush()`` answers once everything taken before it is durable.
``LogStats()`` answers ``LogFigures``: the events made durable since it started and how
long each write took (``/metrics``).

If a write fails, the batch's askers get the error: a store out of reach
(``StoreUnavailable``) leaves the actor serving (the askers retry); any other failure (the
disk) fails the actor, and its restart opens the store again from what is durable (a
journal's events the failed write lost are the store's to complete: see ``EventStore``).

Messages sent before ``stop()`` are written and answered; messages sent after are
refused by the kernel.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from typing import Any

import msgspec

from .._commit import Batch, Batcher, Owed
from .._durations import DurationCounter
from .._errors import InvalidInput, StoreUnavailable
from ..actors import Actor, ActorRef, ActorStopped, MailboxFull, PendingReply, Timer
from ..messages import (
    Append,
    AppendMany,
    Event,
    Flush,
    LogFigures,
    LogStats,
    RecordError,
    Subscribe,
    Unsubscribe,
    Visibility,
)
from ..store import EventStore
from ._policy import NarratorCapability, apply_policy

logger = logging.getLogger("greenroom.log")

_EVENT_TYPE = re.compile(r"[A-Za-z0-9_.:-]{1,100}")
_GOOD_TYPES: set[str] = set()  # types seen valid (a fleet uses a handful); bounded below


_encode_payload = msgspec.json.Encoder().encode


def encode_payload(payload: dict[str, Any]) -> bytes:
    """``payload`` as the JSON the store writes, encoded once; ``ValueError`` if it is not
    JSON (a value msgspec cannot encode)."""
    try:
        return _encode_payload(payload)
    except (TypeError, msgspec.EncodeError) as error:
        raise InvalidInput(f"event payload cannot be stored as JSON: {error}", field="payload") from None


def admitted(append: Append, narrator: NarratorCapability | None) -> tuple[Visibility, bytes]:
    """What every log does with an ``Append`` before storing it: its shape checked, the
    visibility policy applied, its payload encoded once. Returns the visibility it is
    stored with and the payload's JSON; raises the ``ValueError`` that refuses it
    (``RecordError``, ``PolicyError``, or a payload that is not JSON)."""
    check_append(append)
    return apply_policy(append, narrator), encode_payload(append.payload)


def _refuse(pending: Owed | None, kind: str, error: ValueError) -> None:
    if pending is None:
        logger.warning("log: refused a told %s event: %s", kind, error)
    else:
        pending.fail(error)


def check_append(append: Append) -> None:
    """The shape ``Event`` needs (a Struct is not validated when built in-process)."""
    kind = append.type
    if not isinstance(kind, str) or kind not in _GOOD_TYPES:
        if not isinstance(kind, str) or not _EVENT_TYPE.fullmatch(kind):
            raise RecordError("event", "type", kind, "must be 1-100 letters, digits or _.:-")
        if len(_GOOD_TYPES) >= 1024:
            _GOOD_TYPES.clear()
        _GOOD_TYPES.add(kind)
    if not isinstance(append.payload, dict):
        raise RecordError("event", "payload", append.payload, "must be a JSON object (a dict)")
    for field in ("task_id", "agent_id"):
        value = getattr(append, field)
        if value is not None and not isinstance(value, str):
            raise RecordError("event", field, value, "must be a string or None")


_LINGERED = object()
"""The linger timer's message: write the told events held."""


class _Journaled:
    """What a journal's events owe: nobody waits for them, yet they are written as soon as
    the mailbox is drained, never held for the linger — a reader of the log right after a
    transition's answer sees its events, as on PostgreSQL."""

    __slots__ = ()

    def succeed(self, value: object) -> None:
        return None

    def fail(self, error: BaseException) -> None:
        logger.warning("log: a journal's event was not stored: %s", error)


_JOURNALED = _Journaled()


class _Gathered:
    """The one reply of an ``AppendMany``: its events' outcomes, answered once all are in
    (all stored: the list; one refused by the store as it wrote: that error)."""

    __slots__ = ("events", "left", "pending")

    def __init__(self, pending: PendingReply, count: int) -> None:
        self.pending = pending
        self.events: list[Event] = []
        self.left = count

    def succeed(self, event: Event) -> None:
        self.events.append(event)
        self.left -= 1
        if not self.left:
            self.pending.succeed(self.events)

    def fail(self, error: BaseException) -> None:
        self.pending.fail(error)  # the first failure answers; later fills are ignored


class LogActor(Actor):
    """The event log's one writer, over ``store`` (an :class:`EventStore`; the daemon
    gets one from its backend, ``Store.event_store()``).

    ``narrator``: the capability whose holder may append ``visibility="user"`` events
    (none: nobody may). ``max_batch``: appends written together at most. ``clock``: the
    wall clock events are stamped with.

    ``linger``: seconds a batch holding only *told* appends (nobody waits for them) may
    wait for more before it is written — one ``fsync`` for a request's several events
    instead of one each (Kafka's ``linger.ms``). A batch with an asked append, a flush
    or ``linger=0`` is written as soon as the mailbox is empty, as before; a full
    batch at once; a stop writes what is held. A told event is therefore durable (and
    seen by subscribers) at most ``linger`` after the log took it.
    """

    def __init__(
        self,
        store: EventStore,
        *,
        narrator: NarratorCapability | None = None,
        max_batch: int = 4096,
        clock: Callable[[], float] = time.time,
        linger: float = 0.005,
    ) -> None:
        if not isinstance(store, EventStore):
            raise TypeError(f"LogActor store must be an EventStore, got {store!r}")
        if narrator is not None and not isinstance(narrator, NarratorCapability):
            raise TypeError(f"LogActor narrator must be a NarratorCapability, got {narrator!r}")
        self.store = store
        self._narrator = narrator
        self._commits: Batcher[tuple[Event, bytes]] = Batcher(
            max_batch=max_batch, linger=linger, owner="LogActor"
        )
        """The events waiting for their write, each with its payload encoded once as it was
        admitted, and the replies they owe."""
        self._flushes: list[PendingReply] = []
        """``Flush`` asks (and asked journal batches), answered once what waits is written."""
        self.max_batch = self._commits.max_batch
        self.linger = self._commits.linger
        self._linger_timer: Timer | None = None
        self.clock = clock
        self._subscribers: list[ActorRef] = []
        self.appended = 0
        self.writes = DurationCounter()
        """Events made durable, and each write's time, since it started (``LogStats``)."""

    async def on_start(self) -> None:
        await self.store.open(self.context.ref)

    async def on_stop(self) -> None:
        try:
            if self._commits or self._flushes:
                try:
                    await self._flush()
                except Exception:
                    logger.exception("log: the final write failed")
        finally:
            await self.store.close()

    async def receive_many(self, deliveries: list[tuple[Any, PendingReply | None]]) -> None:
        """Every message ready in the mailbox at once (the kernel's batch delivery): each
        admitted or refused on its own — a bad one fails its own ask, never its batch — then
        the batch is written (or left to linger) once."""
        for message, pending in deliveries:
            if type(message) is Append:
                self._append(message, pending)
            elif message is _LINGERED:
                self._linger_timer = None
                if self._commits:
                    await self._flush()
            else:
                await self._other(message, pending)
            if self._commits.full:
                await self._flush()
        commits, queued = self._commits, self.context.queued
        if commits.due(queued) or (self._flushes and not queued):
            await self._flush()
        elif self._linger_timer is None and commits.lingering(queued):  # told only: let more join them
            self._linger_timer = self.context.schedule_once(self.linger, _LINGERED)

    async def receive(self, message: Any) -> Any:
        """One message, the way :meth:`receive_many` takes it (the kernel calls that)."""
        await self.receive_many([(message, self.context.reply_later())])

    def _append(self, message: Append, pending: PendingReply | None) -> None:
        try:
            visibility, encoded = admitted(message, self._narrator)
        except ValueError as error:
            _refuse(pending, message.type, error)
            return
        self._add(
            pending, message.type, visibility, message.task_id, message.agent_id, message.payload, encoded
        )

    async def _other(self, message: Any, pending: PendingReply | None) -> None:
        if isinstance(message, Append):  # a subclass of it
            self._append(message, pending)
            return
        if isinstance(message, AppendMany):
            await self._add_many(message, pending)
            return
        if isinstance(message, Flush):
            if pending is not None:
                self._flushes.append(pending)
            return
        if isinstance(message, LogStats):
            if pending is not None:
                pending.succeed(LogFigures(self.appended, self.writes.figures()))
            return
        if isinstance(message, Subscribe):
            self._subscribers.append(message.ref)
        elif isinstance(message, Unsubscribe):
            self._subscribers = [ref for ref in self._subscribers if ref != message.ref]
        else:
            error = TypeError(f"the log actor does not handle {type(message).__name__} messages")
            logger.error("log: %s (refused; the log keeps serving)", error)
            if pending is not None:
                pending.fail(error)
            return
        if pending is not None:
            pending.succeed(None)

    def _add(
        self,
        pending: PendingReply | _Gathered | None,
        kind: str,
        visibility: Visibility,
        task_id: str | None,
        agent_id: str | None,
        payload: dict[str, Any],
        encoded: bytes,
    ) -> None:
        event = Event(
            seq=0,
            ts=self.clock(),
            type=kind,
            visibility=visibility,
            task_id=task_id,
            agent_id=agent_id,
            payload=payload,
        )
        self._commits.add(pending, (event, encoded))

    async def _add_many(self, message: AppendMany, pending: PendingReply | None) -> None:
        """Check every append of ``message`` (nothing is added if one is refused), then add
        them all to one batch, answered together once written. With an ``origin``, each is
        admitted on its own instead (see :class:`AppendMany`)."""
        appends = message.appends
        if message.origin is not None:
            await self._add_journaled(message, pending)
            return
        try:
            if not isinstance(appends, (list, tuple)):
                raise RecordError("event batch", "appends", appends, "must be a list of Append messages")
            if len(appends) > self.max_batch:
                raise RecordError(
                    "event batch",
                    "appends",
                    f"{len(appends)} appends",
                    f"at most {self.max_batch} per message",
                )
            checked: list[tuple[Append, Visibility, bytes]] = []
            for index, append in enumerate(appends):
                if not isinstance(append, Append):
                    raise RecordError("event batch", f"appends[{index}]", append, "must be an Append message")
                try:
                    visibility, encoded = admitted(append, self._narrator)
                except ValueError as error:  # the same error an Append gets, saying which one
                    error.args = (f"appends[{index}]: {error}",)
                    if isinstance(error, InvalidInput):
                        error.field = (
                            f"appends[{index}].{error.field}" if error.field else f"appends[{index}]"
                        )
                    raise
                checked.append((append, visibility, encoded))
        except ValueError as error:
            _refuse(pending, "batch of", error)
            return
        if not checked:
            if pending is not None:
                pending.succeed([])
            return
        commits = self._commits
        if len(commits) + len(checked) > self.max_batch:
            await self._flush()  # one message, one write: its events are never split
        gathered = None if pending is None else _Gathered(pending, len(checked))
        ts = self.clock()  # one source, one moment: the events share their stamp
        commits.add_many(
            gathered,
            [
                (
                    Event(0, ts, append.type, visibility, append.task_id, append.agent_id, append.payload),
                    encoded,
                )
                for append, visibility, encoded in checked
            ],
        )

    async def _add_journaled(self, message: AppendMany, pending: PendingReply | None) -> None:
        """Events of a durable journal (a task graph's own): each checked on its own and
        stored internal with its origin — as PostgreSQL stores the graph's events in its
        transactions, with no visibility check (they are facts already, and nobody is left
        to refuse them to); one of a bad shape is logged and left out. Over as many batches
        as they fill."""
        origin = message.origin
        appends = message.appends
        if (
            not isinstance(origin, tuple)
            or len(origin) != 2
            or not all(type(part) is int and part >= 0 for part in origin)
            or not isinstance(appends, (list, tuple))
        ):
            error = RecordError("event batch", "origin", origin, "must be (seq, first): two ints >= 0")
            _refuse(pending, "journal batch of", error)
            return
        seq, first = origin
        ts = self.clock()
        commits = self._commits
        for index, append in enumerate(appends, first):
            if commits.full:
                await self._flush()
            try:
                if not isinstance(append, Append):
                    raise RecordError("event batch", f"appends[{index - first}]", append, "must be an Append")
                check_append(append)
                encoded = encode_payload(append.payload)
            except ValueError as error:
                logger.warning("log: left out event %d of journal batch %d: %s", index, seq, error)
                continue
            event = Event(
                0, ts, append.type, "internal", append.task_id, append.agent_id, append.payload, (seq, index)
            )
            commits.add(_JOURNALED, (event, encoded))
        if pending is not None:
            self._flushes.append(pending)  # answered (None) once they are durable

    async def _flush(self) -> None:
        """Write what waits (a batch at a time) and answer it; then the ``Flush`` asks."""
        timer, self._linger_timer = self._linger_timer, None
        if timer is not None:
            timer.cancel()
        commits = self._commits
        flushes, self._flushes = self._flushes, []
        away: StoreUnavailable | None = None
        try:
            while commits:
                batch = commits.take()
                assert batch is not None  # one lane, never left in flight
                try:
                    away = await self._write(batch) or away
                finally:
                    commits.done(batch)
        except BaseException as error:
            failure = error if isinstance(error, Exception) else ActorStopped(self.context.ref, "stopped")
            for flush in flushes:
                flush.fail(failure)
            raise
        for flush in flushes:
            if away is None:
                flush.succeed(None)
            else:
                flush.fail(away)

    async def _write(self, batch: Batch[tuple[Event, bytes]]) -> StoreUnavailable | None:
        """Write ``batch`` and answer it; the store's ``StoreUnavailable`` is returned (its
        askers got it; the actor keeps serving), any other failure raised."""
        values = batch.values
        started = time.perf_counter()
        try:
            outcomes = await self.store.write(
                [event for event, _ in values], [encoded for _, encoded in values]
            )
            self.writes.add(time.perf_counter() - started)
        except BaseException as error:
            batch.fail(error if isinstance(error, Exception) else ActorStopped(self.context.ref, "stopped"))
            if isinstance(error, StoreUnavailable):
                logger.error("log: %d event(s) not stored: %s", len(values), error)
                return error  # the store is away: the askers retry, the actor keeps serving
            raise  # the restart opens the store again from what is durable
        stored: list[Event] = []
        for pending, outcome, (event, _) in zip(batch.owed, outcomes, values, strict=True):
            if isinstance(outcome, Event):
                if outcome.seq:  # 0: a journal's event the store had already
                    stored.append(outcome)
                    self.appended += 1
                if pending is not None:
                    pending.succeed(outcome)
            else:
                _refuse(pending, event.type, outcome)
        if self._subscribers and stored:
            self._publish(stored)
        return None

    def _publish(self, events: list[Event]) -> None:
        for ref in list(self._subscribers):
            for event in events:
                try:
                    ref.tell(event)
                except ActorStopped:
                    self._subscribers.remove(ref)
                    break
                except MailboxFull:
                    logger.warning("log: subscriber %r is full; it missed event %d", ref.name, event.seq)
