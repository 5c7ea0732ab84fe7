"""Reading the event log: all of it, or following it as it grows (the narrator's feed).

The log is ``events.jsonl`` (the open segment, the only one written) and, once it rolls,
closed segments ``events/<first>-<last>.jsonl`` (zero-padded ``seq`` bounds), each
renamed there whole and never changed again. Retention deletes closed segments, oldest
first, never the newest; so the events kept are always one unbroken run of ``seq``, and
what was dropped is everything before the oldest segment's first event.

Readers never lock: the log actor only appends and renames, and a reader stops at the
last complete line, so a batch being written is seen once it is whole. A reader asking
for events retention dropped gets :class:`EventsGone` (with the oldest kept), never a
silent gap.
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import AsyncGenerator, Iterator
from pathlib import Path

import anyio

from .._errors import DataError
from ..messages import Event, RecordError
from ..messages._codec import decode_json
from ..store import EventsGone

EVENTS_FILE = "events.jsonl"
EVENTS_DIR = "events"
_SEGMENT = re.compile(r"(\d{12,})-(\d{12,})\.jsonl")


class EventLogError(DataError):
    """The event log has a line that is not a valid event (not a torn last line)."""


def segment_name(first: int, last: int) -> str:
    return f"{first:012d}-{last:012d}.jsonl"


def segments(log: Path) -> list[tuple[int, int, Path]]:
    """The closed segments of the log whose open segment is ``log``, oldest first, as
    ``(first seq, last seq, path)``. Blocking."""
    try:
        names = os.listdir(log.parent / EVENTS_DIR)
    except FileNotFoundError:
        return []
    found = []
    for name in names:
        match = _SEGMENT.fullmatch(name)
        if match is not None:
            found.append((int(match.group(1)), int(match.group(2)), log.parent / EVENTS_DIR / name))
    return sorted(found)


def _parse_lines(data: bytes, path: Path, first_line: int) -> Iterator[Event]:
    """The events of ``data`` (whole lines), one line at a time: a segment's lines are
    never all split out at once."""
    for offset, line in enumerate(io.BytesIO(data)):
        try:
            yield decode_json(line, Event, "event")
        except RecordError as error:
            raise EventLogError(f"{path}, line {first_line + offset}: {error}") from None


def _first_seq(path: Path) -> int | None:
    """The ``seq`` of the file's first complete line (``None``: it has none)."""
    try:
        with path.open("rb") as file:
            line = file.readline()
    except FileNotFoundError:
        return None
    if not line.endswith(b"\n"):
        return None
    return next(_parse_lines(line, path, 1)).seq


def dropped_through(log: Path) -> int:
    """The last ``seq`` retention dropped (0: none), from what is on disk. Blocking."""
    closed = segments(log)
    if closed:
        return closed[0][0] - 1
    first = _first_seq(log)
    return 0 if first is None else first - 1


def last_seq(log: Path) -> int:
    """The newest event's ``seq`` (0: none), reading only the end of the open segment (or
    a closed segment's name). Blocking."""
    try:
        with log.open("rb") as file:
            size = file.seek(0, os.SEEK_END)
            start = size
            tail = b""
            while start > 0 and tail.count(b"\n") < 2:
                start = max(0, start - 65536)
                file.seek(start)
                tail = file.read(size - start)
    except FileNotFoundError:
        tail = b""
    lines = tail[: tail.rfind(b"\n") + 1].splitlines()
    if lines:
        return next(_parse_lines(lines[-1], log, 1)).seq
    closed = segments(log)
    return closed[-1][1] if closed else 0


def _check_kept(log: Path, after: int) -> None:
    floor = dropped_through(log)
    if after < floor:
        raise EventsGone(after, floor + 1)


def read_events(path: Path, *, after_seq: int = 0) -> list[Event]:
    """Every complete event of the log whose open segment is ``path``, with ``seq >
    after_seq``, closed segments first. Raises :class:`EventsGone` if retention dropped
    some of those. Blocking."""
    try:
        file = path.open("rb")  # held first: a roll after this leaves it a closed segment
    except FileNotFoundError:
        file = None
    try:
        _check_kept(path, after_seq)
        events: list[Event] = []
        seen = after_seq
        for _, last, segment in segments(path):
            if last > seen:
                data = _read_segment(segment, path, seen)
                events.extend(event for event in _parse_lines(data, segment, 1) if event.seq > seen)
                seen = events[-1].seq if events else seen
        if file is not None:
            data = file.read()
            data = data[: data.rfind(b"\n") + 1]
            events.extend(event for event in _parse_lines(data, path, 1) if event.seq > seen)
        return events
    finally:
        if file is not None:
            file.close()


async def tail_events(
    path: str | os.PathLike[str], *, after_seq: int = 0, follow: bool = True, poll_interval: float = 0.2
) -> AsyncGenerator[Event, None]:
    """Yield the log's events with ``seq > after_seq`` in order (``path``: its open
    segment); with ``follow``, keep waiting for new ones (polling every ``poll_interval``
    s) until cancelled, across rolls. Raises :class:`EventsGone` when retention dropped
    events it has not yet yielded — at once for a too-old ``after_seq``, or later for a
    reader that fell behind retention. Cancellation is immediate; no file stays open
    between polls. Leaving the loop early? Wrap it in ``contextlib.aclosing`` so the
    generator is closed in your task."""
    target = Path(path)
    seen = after_seq
    inode: int | None = None
    file_first: int | None = None  # the open segment's first event, once read
    position = 0
    line_number = 1
    buffer = b""
    await anyio.to_thread.run_sync(_check_kept, target, seen)
    while True:
        try:
            file = await anyio.open_file(target, "rb")
        except FileNotFoundError:
            file = None
        rolled: list[tuple[Path, int, bytes]] = []  # (segment, from byte, what was read of it)
        chunk = b""
        if file is not None:
            async with file:  # opened first: a roll after this leaves it a closed segment
                current = os.fstat(file.wrapped.fileno()).st_ino
                if current != inode:  # the first look, or the open segment rolled since
                    closed = await anyio.to_thread.run_sync(segments, target)
                    for first, last, segment in closed:
                        if last > seen:  # the one it was reading goes on from where it was (its
                            # first event and inode both: a deleted file's inode is reused)
                            same = (
                                first == file_first
                                and await anyio.to_thread.run_sync(_inode, segment) == inode
                            )
                            rolled.append((segment, position, buffer) if same else (segment, 0, b""))
                    inode, position, line_number, buffer, file_first = current, 0, 1, b"", None
                await file.seek(position)
                chunk = await file.read()
        for segment, start, head in rolled:  # read them before what the open one holds
            data = head + await anyio.to_thread.run_sync(_read_segment, segment, target, seen, start)
            for event in _parse_lines(data, segment, 1):
                if event.seq > seen:
                    if event.seq != seen + 1:
                        raise EventsGone(seen, event.seq)
                    seen = event.seq
                    yield event
        if chunk:
            position += len(chunk)
            buffer += chunk
            end = buffer.rfind(b"\n") + 1
            complete, buffer = buffer[:end], buffer[end:]
            for event in _parse_lines(complete, target, line_number):
                if file_first is None:
                    file_first = event.seq
                if event.seq > seen:
                    if event.seq != seen + 1:
                        raise EventsGone(seen, event.seq)
                    seen = event.seq
                    yield event
            line_number += complete.count(b"\n")
        if not follow:
            return
        await anyio.sleep(poll_interval)


def _inode(path: Path) -> int | None:
    try:
        return path.stat().st_ino
    except FileNotFoundError:
        return None


def _read_segment(path: Path, log: Path, after: int, start: int = 0) -> bytes:
    """A closed segment's bytes from ``start``; one retention deleted meanwhile is
    :class:`EventsGone`."""
    try:
        with path.open("rb") as file:
            file.seek(start)
            return file.read()
    except FileNotFoundError:
        _check_kept(log, after)
        raise
