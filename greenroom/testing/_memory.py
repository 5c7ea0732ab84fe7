"""``MemoryRecordStore``: the records primitive kept in this process's memory.

A peer of the embedded and PostgreSQL records behind ``greenroom.store.RecordStore``,
proved by the same contract suite: for tests and embedding apps that want a durable
feature's logic (budgets, load records, their own) with nothing on disk. What it keeps is
gone with the object. Every call runs whole between two awaits, so it is one transaction;
a cancelled caller is cancelled before the call starts or after it finished.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Sequence

import anyio

from ..messages import AgentTask
from ..store import (
    Change,
    Conflict,
    Fenced,
    Put,
    Versioned,
    add_rows,
    change_rows,
    check_bump,
    check_collection,
    check_fence,
    check_key_prefix,
    check_limit,
    check_record_key,
    check_seq,
    counted,
    fenced,
    prefix_end,
    put_by_write,
)

LiveTask = Callable[[str], "AgentTask | None"]
"""``task_id -> the task as it is live now, or None`` (for fenced writes)."""


class RecordsKept:
    """What :class:`MemoryRecordStore` s share: the collections (a :class:`MemoryStore`'s
    ``records()`` each see the same)."""

    __slots__ = ("collections", "keys", "seq")

    def __init__(self) -> None:
        self.collections: dict[str, dict[str, Versioned]] = {}
        self.keys: dict[str, list[str]] = {}  # each collection's keys, sorted
        self.seq = 0


class MemoryRecordStore:
    """``RecordStore`` in memory. ``live_task``: how the task graph sees a task now, for
    writes under a task attempt (``fence``); without one a fenced write is refused, since
    no attempt can be checked. ``kept``: records to share with other instances (default:
    its own)."""

    def __init__(
        self,
        *,
        live_task: LiveTask | None = None,
        clock: Callable[[], float] = time.time,
        kept: RecordsKept | None = None,
    ) -> None:
        self._live_task = live_task
        self._clock = clock
        self._kept = kept if kept is not None else RecordsKept()
        self._collections = self._kept.collections
        self._keys = self._kept.keys

    async def get(self, collection: str, keys: Sequence[str]) -> dict[str, Versioned]:
        check_collection(collection)
        records = self._collections.get(collection, {})
        await anyio.lowlevel.checkpoint()
        return {key: records[key] for key in (check_record_key(k) for k in keys) if key in records}

    async def scan(
        self, collection: str, prefix: str = "", *, after: str | None = None, limit: int | None = None
    ) -> list[Versioned]:
        keys = self._range(collection, prefix, after)
        limit = check_limit(limit)
        records = self._collections.get(collection, {})
        await anyio.lowlevel.checkpoint()
        return [records[key] for key in keys[:limit]]

    async def since(
        self, collection: str, prefix: str = "", *, after: int = 0, limit: int | None = None
    ) -> list[Versioned]:
        keys = self._range(collection, prefix, None)
        limit = check_limit(limit)
        check_seq(after)
        records = self._collections.get(collection, {})
        found = sorted((records[key] for key in keys if records[key].seq > after), key=lambda r: r.seq)
        await anyio.lowlevel.checkpoint()
        return found[:limit]

    async def count(self, collection: str, prefix: str = "") -> int:
        keys = self._range(collection, prefix, None)
        await anyio.lowlevel.checkpoint()
        return len(keys)

    async def collections(self, prefix: str = "") -> dict[str, int]:
        if prefix:
            check_collection(prefix)
        await anyio.lowlevel.checkpoint()
        return {
            name: len(records)
            for name, records in sorted(self._collections.items())
            if records and name.startswith(prefix)
        }

    async def put(
        self, collection: str, puts: Sequence[Put], *, fence: tuple[str, int] | None = None
    ) -> dict[str, int]:
        return await put_by_write(self, collection, puts, fence)

    async def write(
        self, changes: Sequence[Change], *, fence: tuple[str, int] | None = None
    ) -> dict[tuple[str, str], int]:
        rows = change_rows(changes)
        self._check_fence(check_fence(fence), "write records")
        for collection, put in rows:
            records = self._collections.get(collection, {})
            found = records[put.key].version if put.key in records else 0
            if put.expect is not None and put.expect != found:
                raise Conflict(collection, put.key, put.expect, found)
        now = self._clock()
        versions: dict[tuple[str, str], int] = {}
        for collection, put in rows:
            if put.body is None:
                self._delete(collection, put.key)
                versions[collection, put.key] = 0
                continue
            before = self._collections.get(collection, {}).get(put.key)
            version = 1 if before is None else before.version + 1
            self._write(collection, Versioned(put.key, put.body, version, self._next(), now))
            versions[collection, put.key] = version
        await anyio.lowlevel.checkpoint()
        return versions

    async def add(
        self, collection: str, records: Sequence[tuple[str, bytes]], *, fence: tuple[str, int] | None = None
    ) -> int:
        rows = add_rows(collection, records)
        self._check_fence(check_fence(fence), "add records")
        kept = self._collections.get(collection, {})
        now = self._clock()
        new = 0
        for key, body in rows:
            if key not in kept:
                self._write(collection, Versioned(key, body, 1, self._next(), now))
                kept = self._collections[collection]
                new += 1
        await anyio.lowlevel.checkpoint()
        return new

    async def bump(self, collection: str, key: str, by: int = 1) -> int:
        check_bump(collection, key, by)
        before = self._collections.get(collection, {}).get(key)
        value = counted(collection, key, None if before is None else before.body, by)
        version = 1 if before is None else before.version + 1
        self._write(collection, Versioned(key, b"%d" % value, version, self._next(), self._clock()))
        await anyio.lowlevel.checkpoint()
        return value

    async def drop(self, collection: str, prefix: str = "") -> int:
        keys = self._range(collection, prefix, None)
        for key in keys:
            self._delete(collection, key)
        await anyio.lowlevel.checkpoint()
        return len(keys)

    async def aclose(self) -> None:
        await anyio.lowlevel.checkpoint()

    # -- the one copy of the state --------------------------------------------------------------

    def _range(self, collection: str, prefix: str, after: str | None) -> list[str]:
        check_collection(collection)
        check_key_prefix(prefix)
        if after is not None:
            check_record_key(after, "after")
        keys = self._keys.get(collection, [])
        start = bisect.bisect_left(keys, prefix)
        if after is not None:
            start = max(start, bisect.bisect_right(keys, after))
        end = prefix_end(prefix)
        stop = len(keys) if end is None else bisect.bisect_left(keys, end)
        return keys[start:stop]

    def _next(self) -> int:
        self._kept.seq += 1
        return self._kept.seq

    def _write(self, collection: str, record: Versioned) -> None:
        records = self._collections.setdefault(collection, {})
        if record.key not in records:
            bisect.insort(self._keys.setdefault(collection, []), record.key)
        records[record.key] = record

    def _delete(self, collection: str, key: str) -> None:
        records = self._collections.get(collection, {})
        if records.pop(key, None) is not None:
            keys = self._keys[collection]
            del keys[bisect.bisect_left(keys, key)]

    def _check_fence(self, fence: tuple[str, int] | None, action: str) -> None:
        if fence is None:
            return
        task_id, token = fence
        task = None if self._live_task is None else self._live_task(task_id)
        refusal: Fenced | None = fenced(task, task_id, None, token, action)
        if refusal is not None:
            raise refusal
