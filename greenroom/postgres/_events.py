"""The event log in PostgreSQL (``gr_events``): :class:`PostgresEventStore`, the log
actor's store, and :class:`EventCursor`, the reader that follows it from any host.

Every row is numbered by a sequence (``seq``) and stamped with its writing transaction
(``xid``), so writers — the log actor's batches and every transition of the task graph,
which writes its events in its own transaction — commit in parallel without a lock, and a
cursor still reads each event once, in order (see :class:`EventCursor`).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from functools import partial
from typing import Any

import anyio
import msgspec

from ..messages import Event, Visibility
from ..store._events import Origin
from ._db import Database, DataRefused
from ._schema import check

_encode = msgspec.json.encode

EventItem = tuple[float, str, str | None, str | None, Visibility, dict[str, Any]]
"""An event to insert: ``(ts, type, task_id, agent_id, visibility, payload)``, already held
to the visibility policy."""


def insert_events(connection: Any, items: Sequence[EventItem]) -> list[Event]:
    """Insert events in this transaction; returns them stored, with their ``seq``. No
    lock is taken: each row's ``seq`` comes from a sequence and its ``xid`` is the writing
    transaction's, so transactions commit in parallel; :class:`EventCursor` reads them in
    ``seq`` order without skipping one still being committed."""
    from psycopg.types.json import Jsonb

    with connection.cursor() as cursor:
        cursor.executemany(
            "INSERT INTO gr_events (ts, type, task_id, agent_id, visibility, payload) "
            "VALUES (%s, %s, %s, %s, %s, %s) RETURNING seq",
            [
                (ts, kind, task_id, agent_id, visibility, Jsonb(payload, dumps=_dumps))
                for ts, kind, task_id, agent_id, visibility, payload in items
            ],
            returning=True,
        )
        seqs = [row[0] for _ in cursor.results() for row in cursor.fetchall()]
    return [
        Event(
            seq=seq,
            ts=ts,
            type=kind,
            visibility=visibility,
            task_id=task_id,
            agent_id=agent_id,
            payload=payload,
        )
        for seq, (ts, kind, task_id, agent_id, visibility, payload) in zip(seqs, items, strict=True)
    ]


def _insert_one(connection: Any, *, item: EventItem) -> list[Event]:
    return insert_events(connection, [item])


def _dumps(value: Any) -> str:
    return _encode(value).decode()


class EventCursor:
    """Reads ``gr_events`` in ``seq`` order, each event once, while writers commit in
    parallel.

    A sequence hands out ``seq`` before the writing transaction commits, so ``seq`` 10 may
    become visible after ``seq`` 11. The cursor therefore stops at a gap; the missing
    numbers belong to transactions running when the gap was first seen (their ``xid`` is
    below the snapshot's ``xmax`` then), so once every one of those has ended
    (``pg_snapshot_xmin`` reached that ``xmax``) a gap still open was an aborted
    transaction's, and the cursor moves past it. Events are never skipped and never
    repeated; ``seq`` may have holes (aborted appends), never an event out of order."""

    def __init__(self, after: int = 0) -> None:
        self.after = after
        self._gap_xmax: int | None = None

    @property
    def waiting(self) -> bool:
        """At a hole whose writer may still commit."""
        return self._gap_xmax is not None

    def read(self, connection: Any, limit: int = 1000) -> list[Event]:
        rows = connection.execute(
            "SELECT seq, ts, type, task_id, agent_id, visibility, payload, "
            "pg_snapshot_xmin(pg_current_snapshot())::text::bigint, "
            "pg_snapshot_xmax(pg_current_snapshot())::text::bigint "
            "FROM gr_events WHERE seq > %s ORDER BY seq LIMIT %s",
            (self.after, limit),
        ).fetchall()
        events: list[Event] = []
        for seq, ts, kind, task_id, agent_id, visibility, payload, xmin, xmax in rows:
            if seq != self.after + 1:  # a hole: an append in flight, or one that was rolled back
                if self._gap_xmax is None:
                    self._gap_xmax = int(xmax)
                    break
                if int(xmin) < self._gap_xmax:
                    break  # a transaction that may hold the missing seq is still running
            self._gap_xmax = None
            self.after = seq
            events.append(
                msgspec.convert(
                    {
                        "seq": seq,
                        "ts": ts,
                        "type": kind,
                        "task_id": task_id,
                        "agent_id": agent_id,
                        "visibility": visibility,
                        "payload": payload,
                    },
                    Event,
                )
            )
        return events


def read_events(connection: Any, after: int = 0, limit: int = 10_000) -> list[Event]:
    """Every event with ``seq > after`` committed so far, in ``seq`` order (for tests and
    a quiet log; a reader following a busy log uses :class:`EventCursor`)."""
    cursor = EventCursor(after)
    events: list[Event] = []
    while len(events) < limit:
        batch = cursor.read(connection, limit - len(events))
        if not batch:
            if cursor.waiting:  # a hole noted just now: look again, past it if its writer is gone
                batch = cursor.read(connection, limit - len(events))
            if not batch:
                return events
        events.extend(batch)
    return events


async def tail_events(
    db: Database, *, after: int = 0, follow: bool = True, last: int | None = None, poll_interval: float = 0.1
) -> AsyncGenerator[Event, None]:
    """The events with ``seq > after`` in order (``last``: only the newest ``last`` of
    those stored now, then new ones); with ``follow``, keep polling until cancelled. An
    :class:`EventCursor` reads them, so nothing is skipped or repeated. Without
    ``follow`` it ends at the end of the log, never at a hole an append still in flight
    may fill (it waits for that append to commit or roll back). Works from any host."""
    if last is not None:
        newest = await db.run(
            lambda c: c.execute(
                "SELECT coalesce(max(seq), 0) FROM gr_events WHERE seq > %s", (after,)
            ).fetchone()[0]
        )
        after = max(after, int(newest) - last)
    cursor = EventCursor(after)
    while True:
        events = await db.run(partial(cursor.read, limit=1000), single=True)
        for event in events:
            yield event
        if events:
            continue
        if not follow and not cursor.waiting:
            return
        await anyio.sleep(poll_interval)


class PostgresEventStore:
    """The log actor's store on ``db`` (whose schema must be this greenroom's)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def open(self) -> Origin | None:
        await self.db.run(check)
        return None  # the task graph writes its own events: no outbox to follow

    async def write(self, events: Sequence[Event]) -> list[Event | ValueError]:
        """One transaction for the batch. A payload PostgreSQL cannot hold (a NUL
        character) fails its own event only: the batch is written again one by one."""
        out: list[Event | ValueError] = []
        items: list[EventItem] = []
        places: list[int] = []
        for event in events:
            try:
                _encode(event.payload)
            except (TypeError, msgspec.EncodeError) as error:
                out.append(ValueError(f"event payload cannot be stored as JSON: {error}"))
                continue
            places.append(len(out))
            out.append(ValueError("not written"))
            items.append(
                (event.ts, event.type, event.task_id, event.agent_id, event.visibility, event.payload)
            )
        if not items:
            return out
        try:
            stored = await self.db.run(lambda c: insert_events(c, items))
        except DataRefused as error:
            if len(items) == 1:
                out[places[0]] = error
                return out
            for place, item in zip(places, items, strict=True):
                try:
                    (one,) = await self.db.run(partial(_insert_one, item=item))
                except DataRefused as refused:
                    out[place] = refused
                else:
                    out[place] = one
            return out
        for place, event in zip(places, stored, strict=True):
            out[place] = event
        return out

    async def close(self) -> None:
        """The pool is the backend's: nothing to release here."""
