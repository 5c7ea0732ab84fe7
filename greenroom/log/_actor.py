"""``LogActor``: the only appender of ``<data dir>/events.jsonl``.

Ask it ``Append(...)``; the reply is the stored ``Event`` (with its ``seq``), sent once
the event is durable. Appends are group-committed (``greenroom._commit.GroupCommit``):
the batch waiting in the mailbox is written with one write and one fsync, then
answered, so ``seq`` order is file order is mailbox order. ``AppendBatch`` carries the
task graph's outbox (the events of one journal batch, each stored with its
``origin``); ``OutboxPosition`` answers the origin of the last one held durably, so
the supervisor can send what a crash kept from the log, and nothing twice. An event
the visibility policy refuses raises :class:`PolicyError` (a ``ValueError`` with
``policy_error``) in the asker and nothing is appended. ``Subscribe(ref)`` tells
``ref`` each event after it is durable.

Messages sent before ``stop()`` are written and answered; messages sent after are
refused by the kernel. On start a torn end (bytes after the last newline: an append a
crash cut short) is cut off and reported, never parsed as data; a complete line that is
not a valid event stops the start with an error naming it, and nothing is cut. The OS
lock is held from ``on_start`` to ``on_stop``.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import msgspec

from .._checks import check_int
from .._commit import GroupCommit
from .._errors import storage_error
from .._files import OwnerLock, append_durably, open_for_append, resolve_data_dir, truncate_durably
from ..actors import Actor, ActorRef, ActorStopped, MailboxFull, PendingReply
from ..messages import (
    Append,
    AppendBatch,
    Event,
    OutboxDelivered,
    OutboxLost,
    OutboxPosition,
    RecordError,
    Subscribe,
    Unsubscribe,
    Visibility,
    decode_json,
)
from ._policy import NarratorCapability, PolicyError, apply_policy
from ._reader import EVENTS_FILE, EventLogError

logger = logging.getLogger("greenroom.log")

_TAIL_READ = 1 << 16
_encoder = msgspec.json.Encoder()


def recover_tail(path: Path) -> tuple[int, int]:
    """Find the last event's ``seq``; cut a torn end (bytes after the last newline: an
    append a crash cut short, never acknowledged). Returns ``(last_seq, bytes_cut)``.
    A complete last line that is not a valid event is damage, not a torn write: it
    raises :class:`EventLogError` naming the line, and nothing is cut. Blocking."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return 0, 0
    with path.open("rb") as file:
        start = max(0, size - _TAIL_READ)
        while True:
            file.seek(start)
            data = file.read()
            lines_end = data.rfind(b"\n") + 1
            complete = data[:lines_end]
            # the last complete line, if we read back far enough to see its start
            body = complete[:-1]
            line_start = body.rfind(b"\n") + 1
            if line_start > 0 or start == 0 or not body:
                break
            start = max(0, start - _TAIL_READ * 4)
    good_end = start + lines_end
    last_seq = 0
    if body:
        try:
            last_seq = decode_json(body[line_start:], Event, "event").seq
        except RecordError as error:
            with path.open("rb") as file:
                number = file.read(start + line_start).count(b"\n") + 1
            raise EventLogError(
                f"{path}, line {number} (the last complete line) is not a valid event: "
                f"{error}; nothing was changed: restore the file or remove the line by hand"
            ) from None
    cut = size - good_end
    if cut:
        truncate_durably(path, good_end)
    return last_seq, cut


class _Origin(msgspec.Struct):
    """An event line's own ``origin`` field, and nothing else of it (a payload's keys are
    inside ``payload``: never read as the event's)."""

    origin: tuple[int, int] | None = None


_origin_decoder = msgspec.json.Decoder(_Origin)


def last_origin(path: Path) -> tuple[int, int] | None:
    """The ``origin`` of the last outbox event in the file (``None``: there is none),
    reading back from the end. Each line's own field decides, never a payload's bytes:
    a line is decoded (its ``origin`` only) when it holds the text an origin makes.
    Blocking; run after :func:`recover_tail`."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return None
    marker = b'"origin":['  # every event with an origin has it; a payload may too
    with path.open("rb") as file:
        end = size
        carry = b""
        while end > 0:
            start = max(0, end - _TAIL_READ)
            file.seek(start)
            chunk = file.read(end - start) + carry
            lines = chunk.split(b"\n")
            carry = lines[0] if start > 0 else b""  # maybe the tail of a line that starts earlier
            for line in reversed(lines if start == 0 else lines[1:]):
                if marker in line:
                    try:
                        origin = _origin_decoder.decode(line).origin
                    except msgspec.DecodeError:
                        origin = decode_json(line, Event, "event").origin  # names the bad line
                    if origin is not None:
                        return origin
            end = start
    return None


_EVENT_TYPE = re.compile(r"[A-Za-z0-9_.:-]{1,100}")
_GOOD_TYPES: set[str] = set()  # types seen valid (a fleet uses a handful); bounded below


def admit(
    append: Append, narrator: NarratorCapability | None, pending: PendingReply | None
) -> Visibility | None:
    """The visibility ``append`` is stored with, or ``None`` when its shape or the
    visibility policy refuses it: then its asker gets the error (a told one is logged)
    and nothing is stored. What every log (the file, PostgreSQL) does with an ``Append``."""
    try:
        check_append(append)
        return apply_policy(append, narrator)
    except (PolicyError, RecordError) as error:
        _refuse(pending, append.type, error)
        return None


def _refuse(pending: PendingReply | None, kind: str, error: ValueError) -> None:
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


class LogActor(Actor):
    """Serialises event appends and applies the visibility policy.

    ``narrator``: the capability whose holder may append ``visibility="user"`` events
    (none: nobody may). ``clock``: the wall clock events are stamped with.
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        *,
        narrator: NarratorCapability | None = None,
        max_batch: int = 4096,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if narrator is not None and not isinstance(narrator, NarratorCapability):
            raise TypeError(f"LogActor narrator must be a NarratorCapability, got {narrator!r}")
        self._data_dir_arg = data_dir
        self._narrator = narrator
        self.max_batch = check_int("LogActor", "max_batch", max_batch)
        self.clock = clock
        self.seq = 0
        self.torn_bytes = 0
        self._fd: int | None = None
        self._lock: OwnerLock | None = None
        self._buffer: list[bytes] = []
        self._commits: GroupCommit[Event] = GroupCommit(self.max_batch)
        self._acks: list[tuple[ActorRef, tuple[int, int]]] = []
        self._subscribers: list[ActorRef] = []
        self.outbox_position: tuple[int, int] | None = None
        """The origin of the last outbox event durable in the file."""
        self._pending_position: tuple[int, int] | None = None

    async def on_start(self) -> None:
        data_dir = await anyio.to_thread.run_sync(resolve_data_dir, self._data_dir_arg)
        self.path = data_dir / EVENTS_FILE
        lock = OwnerLock(data_dir / "events.lock", "the event log")
        await anyio.to_thread.run_sync(lock.acquire)
        self._lock = lock
        try:
            self.seq, self.torn_bytes = await anyio.to_thread.run_sync(recover_tail, self.path)
            if self.torn_bytes:
                logger.warning(
                    "%s: cut %d bytes of a torn last line (a crash cut the append short; never acknowledged)",
                    self.path,
                    self.torn_bytes,
                )
            self.outbox_position = await anyio.to_thread.run_sync(last_origin, self.path)
            self._fd = await anyio.to_thread.run_sync(open_for_append, self.path)
        except BaseException:
            lock.release()
            self._lock = None
            raise

    async def on_stop(self) -> None:
        if self._commits:
            try:
                await self._flush()
            except Exception:
                logger.exception("log: the final flush failed")
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    async def receive(self, message: Any) -> Any:
        context = self.context
        if isinstance(message, Append):
            pending = context.reply_later()
            visibility = admit(message, self._narrator, pending)
            if visibility is not None:
                self._add(
                    pending, message.type, visibility, message.task_id, message.agent_id, message.payload
                )
        elif isinstance(message, AppendBatch):
            self._add_batch(message)
        elif isinstance(message, OutboxPosition):
            if self._commits:
                await self._flush()
            return self.outbox_position
        elif isinstance(message, Subscribe):
            self._subscribers.append(message.ref)
        elif isinstance(message, Unsubscribe):
            self._subscribers = [ref for ref in self._subscribers if ref != message.ref]
        else:
            raise TypeError(f"the log actor does not handle {type(message).__name__} messages")
        if (context.queued == 0 or len(self._commits) >= self.max_batch) and (
            self._commits or self._acks or self._pending_position is not None
        ):
            await self._flush()
        return None

    def _add(
        self,
        pending: PendingReply | None,
        kind: str,
        visibility: Any,
        task_id: str | None,
        agent_id: str | None,
        payload: dict[str, Any],
        origin: tuple[int, int] | None = None,
    ) -> bool:
        event = Event(
            seq=self.seq + 1,
            ts=self.clock(),
            type=kind,
            visibility=visibility,
            task_id=task_id,
            agent_id=agent_id,
            payload=payload,
            origin=origin,
        )
        try:
            line = _encoder.encode(event) + b"\n"
        except (TypeError, msgspec.EncodeError) as error:
            _refuse(pending, kind, ValueError(f"event payload cannot be stored as JSON: {error}"))
            return False
        self.seq += 1
        self._buffer.append(line)
        self._commits.add(pending, event)
        return True

    def _add_batch(self, batch: AppendBatch) -> None:
        """The outbox of one journal batch: each event stored once, with its origin.

        It must follow what this log has (``batch.after``); a gap means a batch before
        it was lost (a failed write): it is dropped and the sender told where to resume.
        """
        known = self._pending_position or self.outbox_position
        if batch.after is not None and (known is None or batch.after > known):
            if batch.ack is not None:
                try:
                    batch.ack.tell(OutboxLost(known))
                except (ActorStopped, MailboxFull):
                    logger.error("log: could not ask %r to resend the events after %s", batch.ack.name, known)
            return
        for index, outboxed in enumerate(batch.events, batch.first_index):
            origin = (batch.seq, index)
            if known is not None and origin <= known:
                continue  # already here (sent again after a crash): stored once
            append = Append(outboxed.type, outboxed.payload, outboxed.task_id, outboxed.agent_id)
            try:
                check_append(append)
                visibility = apply_policy(append, None)
            except (PolicyError, RecordError) as error:
                logger.warning(
                    "log: refused outbox event %s of batch %d: %s", outboxed.type, batch.seq, error
                )
                continue
            self._add(None, append.type, visibility, append.task_id, append.agent_id, append.payload, origin)
        if batch.events:
            last = (batch.seq, batch.first_index + len(batch.events) - 1)
            if known is None or last > known:
                self._pending_position = last
            if batch.ack is not None:
                self._acks.append((batch.ack, last))

    async def _flush(self) -> None:
        data = b"".join(self._buffer)
        self._buffer = []
        acks, self._acks = self._acks, []
        position, self._pending_position = self._pending_position, None
        fd = self._fd
        assert fd is not None
        path = self.path

        def write() -> None:
            try:
                append_durably(fd, data)
            except OSError as error:
                raise storage_error(path, error) from None

        try:
            batch = await self._commits.commit(
                write if data else None,
                stopped=lambda: ActorStopped(self.context.ref, "stopped"),
            )
        except BaseException:
            for ref in {ref for ref, _ in acks}:  # the senders keep the events: they resend
                try:
                    ref.tell(OutboxLost(self.outbox_position))
                except (ActorStopped, MailboxFull):
                    logger.error("log: could not tell %r that outbox events were lost", ref.name)
            raise
        # a restart (after a failed write) re-reads the tail, cutting any partial line
        if position is not None and (self.outbox_position is None or position > self.outbox_position):
            self.outbox_position = position
        for ref, origin in acks:
            try:
                ref.tell(OutboxDelivered(origin))
            except (ActorStopped, MailboxFull):
                pass  # the next acknowledgement covers this one
        if self._subscribers:
            for ref in list(self._subscribers):
                for _, event in batch:
                    try:
                        ref.tell(event)
                    except ActorStopped:
                        self._subscribers.remove(ref)
                        break
                    except MailboxFull:
                        logger.warning("log: subscriber %r is full; it missed event %d", ref.name, event.seq)
