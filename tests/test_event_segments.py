"""The embedded event log in segments: what only the files can get wrong — a reader that
fell behind the retention it races, a crash between a roll's rename and the new file, a
damaged segment. (What every store does is in ``test_store_contract.py``.)"""

from __future__ import annotations

from contextlib import aclosing
from pathlib import Path

import pytest

from greenroom.embedded import FileEventStore, read_events
from greenroom.embedded._reader import EVENTS_DIR, EventLogError, dropped_through, segments, tail_events
from greenroom.messages import Event
from greenroom.store import EventsGone
from greenroom.store._retention import Retention

pytestmark = pytest.mark.anyio


def _event(i: int, origin: tuple[int, int] | None = None) -> Event:
    return Event(seq=0, ts=1.0, type="agent.update", payload={"i": i}, origin=origin)


async def _write(store: FileEventStore, first: int, count: int) -> None:
    for i in range(first, first + count):
        (stored,) = await store.write([_event(i)])
        assert isinstance(stored, Event)


async def test_a_follower_that_fell_behind_retention_is_told_where_the_log_now_starts(tmp_path: Path) -> None:
    store = FileEventStore(tmp_path, retention=Retention(events_per_segment=10, disk_budget=1))
    await store.open()
    try:
        await _write(store, 1, 5)
        follower = tail_events(tmp_path / "events.jsonl", after_seq=0, follow=True, poll_interval=0.01)
        async with aclosing(follower):
            assert (await follower.__anext__()).seq == 1  # it read what the open segment held
            await _write(store, 6, 40)  # four rolls; the budget keeps only the newest closed segment
            floor = dropped_through(tmp_path / "events.jsonl")
            assert floor == 30 and [s[:2] for s in segments(tmp_path / "events.jsonl")] == [(31, 40)]
            seen = [(await follower.__anext__()).seq for _ in range(4)]  # what it had read already
            assert seen == [2, 3, 4, 5]
            with pytest.raises(EventsGone) as gone:
                await follower.__anext__()
        assert (gone.value.after, gone.value.oldest) == (5, 31)
        with pytest.raises(EventsGone):
            read_events(tmp_path / "events.jsonl", after_seq=29)
        assert [e.seq for e in read_events(tmp_path / "events.jsonl", after_seq=30)] == list(range(31, 46))
    finally:
        await store.close()


async def test_a_crash_between_a_roll_and_the_new_file_loses_nothing(tmp_path: Path) -> None:
    """A roll renames the open segment, then starts a new one: killed in between, the next
    open finds no open segment and continues the numbering and the outbox position from
    the newest closed one."""
    store = FileEventStore(tmp_path, retention=Retention(events_per_segment=10))
    await store.open()
    await _write(store, 1, 9)
    (tenth,) = await store.write([_event(10, origin=(3, 0))])
    assert isinstance(tenth, Event) and tenth.seq == 10
    await store.close()
    assert [s[:2] for s in segments(tmp_path / "events.jsonl")] == [(1, 10)]
    (tmp_path / "events.jsonl").unlink()  # as if killed after the rename
    again = FileEventStore(tmp_path, retention=Retention(events_per_segment=10))
    await again.open()
    assert again.position == (3, 0)  # the log's position, read from the closed segment
    try:
        await _write(again, 11, 2)
    finally:
        await again.close()
    events = read_events(tmp_path / "events.jsonl")
    assert [e.seq for e in events] == list(range(1, 13))
    assert [e.payload["i"] for e in events] == list(range(1, 13))


async def test_a_damaged_closed_segment_is_named_and_not_skipped(tmp_path: Path) -> None:
    store = FileEventStore(tmp_path, retention=Retention(events_per_segment=5))
    await store.open()
    try:
        await _write(store, 1, 12)
    finally:
        await store.close()
    (first, _, path), *_ = segments(tmp_path / "events.jsonl")
    data = path.read_bytes().splitlines(keepends=True)
    damaged = b"".join([data[0], b'{"seq": "two"}\n', *data[2:]])
    path.write_bytes(damaged)
    with pytest.raises(EventLogError, match=f"{EVENTS_DIR}/{path.name}, line 2"):
        read_events(tmp_path / "events.jsonl")
    assert first == 1 and path.read_bytes() == damaged  # found as it was: nothing cut or removed
