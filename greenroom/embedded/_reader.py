"""Reading ``events.jsonl``: all of it, or following it as it grows (the narrator's feed).

Readers never lock: the log actor only appends, and a reader stops at the last
complete line, so a batch being written is seen once it is whole.
"""

from __future__ import annotations

import os
from collections.abc import AsyncGenerator
from pathlib import Path

import anyio

from .._errors import DataError
from ..messages import Event, RecordError
from ..messages._codec import decode_json

EVENTS_FILE = "events.jsonl"


class EventLogError(DataError):
    """``events.jsonl`` has a line that is not a valid event (not a torn last line)."""


def _parse(data: bytes, path: Path, first_line: int) -> list[Event]:
    events = []
    for offset, line in enumerate(data.splitlines()):
        try:
            events.append(decode_json(line, Event, "event"))
        except RecordError as error:
            raise EventLogError(f"{path}, line {first_line + offset}: {error}") from None
    return events


def read_events(path: Path, *, after_seq: int = 0) -> list[Event]:
    """Every complete event in the file with ``seq > after_seq``. Blocking."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    data = data[: data.rfind(b"\n") + 1]
    return [event for event in _parse(data, path, 1) if event.seq > after_seq]


async def tail_events(
    path: str | os.PathLike[str], *, after_seq: int = 0, follow: bool = True, poll_interval: float = 0.2
) -> AsyncGenerator[Event, None]:
    """Yield events with ``seq > after_seq`` in order; with ``follow``, keep waiting for
    new ones (polling every ``poll_interval`` s) until cancelled. Cancellation is
    immediate; no file stays open between polls. Leaving the loop early? Wrap it in
    ``contextlib.aclosing`` so the generator is closed in your task."""
    target = Path(path)
    position = 0
    line_number = 1
    buffer = b""
    while True:
        try:
            async with await anyio.open_file(target, "rb") as file:
                await file.seek(position)
                chunk = await file.read()
        except FileNotFoundError:
            chunk = b""
        if chunk:
            position += len(chunk)
            buffer += chunk
            end = buffer.rfind(b"\n") + 1
            complete, buffer = buffer[:end], buffer[end:]
            for event in _parse(complete, target, line_number):
                if event.seq > after_seq:
                    yield event
            line_number += complete.count(b"\n")
        if not follow:
            return
        await anyio.sleep(poll_interval)
