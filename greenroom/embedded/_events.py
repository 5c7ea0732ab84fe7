"""``FileEventStore``: the event log as ``<data dir>/events.jsonl`` — the embedded peer of
the PostgreSQL event store.

One JSON line per event, appended by one log actor: a batch is numbered (``seq`` starts at
1 and has no gaps), written with one ``write`` and one ``fsync``, and only then
acknowledged, so ``seq`` order is file order. With a retention policy the file rolls:
once it holds ``events_per_segment`` events it is renamed whole into
``events/<first>-<last>.jsonl`` and a new ``events.jsonl`` begins; closed segments past
``events_for`` or the disk budget are deleted, oldest first, never the newest (see
:mod:`._reader`). On open a torn end (bytes after the last
newline: an append a crash cut short, never acknowledged) is cut off and reported, never
parsed as data; a complete line that is not a valid event stops the open with an error
naming it, and nothing is cut. The OS lock is held from :meth:`open` to :meth:`close`.

The task graph's events reach it from the journal through the data dir's outbox
(:mod:`._outbox`): each kept once by its ``origin``, in commit order, the log completed
from the outbox when it opens and before a write that follows a lost one.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import msgspec
from msgspec.structs import replace

from .._errors import storage_error
from .._files import OwnerLock, append_durably, fsync_dir, open_for_append, resolve_data_dir, truncate_durably
from .._threads import run_blocking
from ..messages import Event, RecordError
from ..messages._codec import decode_json
from ..store import Origin, Retention, over_budget
from ._archive import history_parts
from ._outbox import Outbox, OutboxBatch, outbox_for
from ._reader import EVENTS_DIR, EVENTS_FILE, EventLogError, _first_seq, segment_name, segments

if TYPE_CHECKING:
    from ..actors import ActorRef

logger = logging.getLogger("greenroom.log")

_TAIL_READ = 1 << 16
_encoder = msgspec.json.Encoder()


class _Line(msgspec.Struct):
    """An event as its line is written, its payload encoded before (``Raw``): the same
    fields, in the same order, as :class:`Event` — the same bytes."""

    seq: int
    ts: float
    type: str
    visibility: str
    task_id: str | None
    agent_id: str | None
    payload: msgspec.Raw
    origin: tuple[int, int] | None


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


_origin_decoder = msgspec.json.Decoder(_Origin)  # built at import: see prepare_types


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


class FileEventStore:
    """``events.jsonl`` of ``data_dir`` (default ``$STREAMING_LLM_DATA_DIR`` or
    ``~/.local/share/greenroom``); ``retention``: when it rolls and what goes (``None``:
    one file, kept whole)."""

    def __init__(
        self, data_dir: str | os.PathLike[str] | None = None, *, retention: Retention | None = None
    ) -> None:
        self._data_dir_arg = data_dir
        self.retention = retention
        self.seq = 0
        """The last event's number."""
        self.first = 1
        """The first event's number in the open segment (``seq + 1`` while it is empty)."""
        self._next_prune = 0.0
        self.torn_bytes = 0
        """Bytes cut off the end at open: a write a crash interrupted."""
        self._fd: int | None = None
        self._lock: OwnerLock | None = None
        self.position: Origin | None = None
        """The origin of the last journal event in the log (``None``: none)."""
        self._outbox: Outbox | None = None

    async def open(self, log: ActorRef | None = None) -> None:
        """Take the log; with ``log``, attach the data dir's outbox to it and write the
        task graph's committed events the log lacks."""
        data_dir = await anyio.to_thread.run_sync(resolve_data_dir, self._data_dir_arg)
        self.path = data_dir / EVENTS_FILE
        lock = OwnerLock(data_dir / "events.lock", "the event log")
        await anyio.to_thread.run_sync(lock.acquire)
        self._lock = lock
        try:
            self.seq, self.torn_bytes = await anyio.to_thread.run_sync(recover_tail, self.path)
            closed = await anyio.to_thread.run_sync(segments, self.path)
            first = await anyio.to_thread.run_sync(_first_seq, self.path)
            if not self.seq and closed:  # a roll just before a crash: the open segment is empty
                self.seq = closed[-1][1]
            self.first = first if first is not None else self.seq + 1
            if self.torn_bytes:
                logger.warning(
                    "%s: cut %d bytes of a torn last line (a crash cut the append short; never acknowledged)",
                    self.path,
                    self.torn_bytes,
                )
            position = await anyio.to_thread.run_sync(last_origin, self.path)
            for _, _, segment in reversed(closed):  # the open segment has none yet
                if position is not None:
                    break
                position = await anyio.to_thread.run_sync(last_origin, segment)
            self._fd = await anyio.to_thread.run_sync(open_for_append, self.path)
            self.position = position
            if log is not None:
                outbox = self._outbox = await anyio.to_thread.run_sync(outbox_for, data_dir)
                missing = outbox.attach(log, position)
                if missing:
                    logger.warning(
                        "%s: the log lacks %d committed event(s) of the task graph; appending them",
                        self.path,
                        sum(len(batch.events) for batch in missing),
                    )
                    await self.write([])
        except BaseException:
            if self._outbox is not None:
                self._outbox.detach()
                self._outbox = None
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            lock.release()
            self._lock = None
            raise

    async def write(
        self, events: Sequence[Event], encoded: Sequence[bytes] | None = None
    ) -> list[Event | ValueError]:
        """Number and encode the batch, then append it with one ``fsync`` (in a worker
        thread; a cancelled caller does not abandon it). A payload that cannot be encoded
        as JSON keeps its event out and takes no number; a payload given ``encoded`` is
        written as those bytes. A journal event the log has is skipped (returned with
        ``seq`` 0); the outbox's events that must come before the first journal event of
        the batch are written first (and so are, with no events, those the log lacks)."""
        out: list[Event | ValueError] = []
        rows: list[_Line] = []
        seq = self.seq
        position = self.position
        outbox = self._outbox
        filled = outbox is None
        if not events and outbox is not None:  # complete the log from the outbox
            seq, position = self._fill(rows, seq, position, outbox.between(position, (2**62, 0)))
            filled = True
        for index, event in enumerate(events):
            origin = event.origin
            if origin is not None:
                if position is not None and origin <= position:
                    out.append(event)  # the log has it: kept once
                    continue
                if not filled:
                    assert outbox is not None
                    seq, position = self._fill(rows, seq, position, outbox.between(position, origin))
                    filled = True
                position = origin
            if encoded is not None:
                payload = encoded[index]
            else:
                try:
                    payload = _encoder.encode(event.payload)
                except (TypeError, msgspec.EncodeError) as error:
                    out.append(ValueError(f"event payload cannot be stored as JSON: {error}"))
                    continue
            seq += 1
            rows.append(
                _Line(
                    seq,
                    event.ts,
                    event.type,
                    event.visibility,
                    event.task_id,
                    event.agent_id,
                    msgspec.Raw(payload),
                    event.origin,
                )
            )
            out.append(replace(event, seq=seq))
        if seq != self.seq:
            fd = self._fd
            assert fd is not None, "FileEventStore.write before open"
            data = _encoder.encode_lines(rows)  # the payloads are JSON already: one C call
            path = self.path

            def append() -> None:
                try:
                    append_durably(fd, data)
                except OSError as error:
                    raise storage_error(path, error) from None

            await run_blocking(append)
            self.seq = seq
            if position != self.position and position is not None:
                self.position = position
                if outbox is not None:
                    outbox.delivered(position)
            retention = self.retention
            if retention is not None:
                if seq - self.first + 1 >= retention.events_per_segment:
                    await run_blocking(self._roll)
                    self._next_prune = 0.0
                if time.monotonic() >= self._next_prune:
                    self._next_prune = time.monotonic() + retention.check_every
                    await run_blocking(self._prune)
        return out

    def _fill(
        self, rows: list[_Line], seq: int, position: Origin | None, batches: list[OutboxBatch]
    ) -> tuple[int, Origin | None]:
        """Add the outbox's ``batches`` (events the log lacks before the next one) to
        ``rows``, stored as the log stores a journal's events (internal, each with its
        origin); returns the last ``seq`` and origin."""
        ts = time.time()
        for batch in batches:
            for index, event in enumerate(batch.events, batch.first):
                try:
                    payload = _encoder.encode(event.payload)
                except (TypeError, msgspec.EncodeError) as error:
                    logger.warning(
                        "event log: left out event %d of journal batch %d: %s", index, batch.seq, error
                    )
                    continue
                seq += 1
                origin = (batch.seq, index)
                rows.append(
                    _Line(
                        seq,
                        ts,
                        event.type,
                        "internal",
                        event.task_id,
                        event.agent_id,
                        msgspec.Raw(payload),
                        origin,
                    )
                )
            position = batch.last
        return seq, position

    def _roll(self) -> None:
        """Close the open segment: rename it whole into ``events/`` and begin a new one.
        A crash between the two leaves no open segment, which :meth:`open` starts again.
        Blocking; on an error the open segment stays as it was (the next write tries
        again)."""
        directory = self.path.parent / EVENTS_DIR
        try:
            directory.mkdir(exist_ok=True)
            os.replace(self.path, directory / segment_name(self.first, self.seq))
            fsync_dir(directory)
            fsync_dir(self.path.parent)
            fd = open_for_append(self.path)
        except OSError as error:
            raise storage_error(self.path, error) from None
        old, self._fd = self._fd, fd
        if old is not None:
            os.close(old)
        self.first = self.seq + 1

    def _prune(self) -> None:
        """Delete the closed segments past ``events_for`` or the disk budget, oldest first,
        never the newest. Blocking; a failure is logged, and the next pass tries again."""
        retention = self.retention
        assert retention is not None
        closed = segments(self.path)[:-1]
        if not closed:
            return
        expired = {path.name for path in _older_than(closed, retention.events_for)}
        expired.update(
            part.name
            for part in over_budget(history_parts(self.path.parent), retention.disk_budget)
            if part.kind == "events"
        )
        gone = 0
        try:
            for _, last, path in closed:
                if path.name not in expired:
                    break  # only the oldest run goes: what is kept stays unbroken
                path.unlink()
                gone = last
            if gone:
                fsync_dir(path.parent)
        except OSError as error:
            logger.warning("event log: could not delete an old segment: %s", error)
        if gone:
            logger.info("event log: retention dropped the events through seq %d", gone)

    async def close(self) -> None:
        outbox, self._outbox = self._outbox, None
        if outbox is not None:
            outbox.detach()
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.release()


def _older_than(closed: list[tuple[int, int, Path]], seconds: float | None) -> list[Path]:
    if seconds is None:
        return []
    horizon = time.time() - seconds
    old = []
    for _, _, path in closed:
        try:
            if path.stat().st_mtime < horizon:
                old.append(path)
        except FileNotFoundError:
            continue
    return old
