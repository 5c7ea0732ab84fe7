"""The event log in PostgreSQL (``gr_events``): :class:`PostgresEventStore`, the log
actor's store, and :class:`EventCursor`, the reader that follows it from any host.

Every row is numbered by a sequence (``seq``) and stamped with its writing transaction
(``xid``), so writers — the log actor's batches and every transition of the task graph,
which writes its events in its own transaction — commit in parallel without a lock, and a
cursor still reads each event once, in order (see :class:`EventCursor`).
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio
import msgspec

from ..messages import Event, Visibility
from ..store import EventsGone, HistoryPart, Retention, over_budget
from ._db import Database, DataRefused
from ._schema import check

if TYPE_CHECKING:
    from ..actors import ActorRef

_encode = msgspec.json.encode
encode_payload = _encode

EVENTS_LOCK = 0x6772_6576  # "grev": the advisory lock of the log's partitions

EventItem = tuple[float, str, str | None, str | None, Visibility, dict[str, Any], bytes]
"""An event to insert: ``(ts, type, task_id, agent_id, visibility, payload, payload as
JSON)``, already held to the visibility policy; the JSON is what is sent (encoded once)."""


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
                (ts, kind, task_id, agent_id, visibility, Jsonb(data, dumps=_as_is))
                for ts, kind, task_id, agent_id, visibility, _, data in items
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
        for seq, (ts, kind, task_id, agent_id, visibility, payload, _) in zip(seqs, items, strict=True)
    ]


def _insert_one(connection: Any, *, item: EventItem) -> list[Event]:
    return insert_events(connection, [item])


def _as_is(data: bytes) -> bytes:
    """The payload's JSON, encoded once before (psycopg sends bytes as they are)."""
    return data


class EventCursor:
    """Reads ``gr_events`` in ``seq`` order, each event once, while writers commit in
    parallel.

    A sequence hands out ``seq`` before the writing transaction commits, so ``seq`` 10 may
    become visible after ``seq`` 11. The cursor therefore stops at a gap. The missing
    numbers belong to transactions that had their ``xid`` before the gap was seen (a
    writer takes its ``xid`` before it draws its ``seq``: the column's default asks for
    it first, schema 7). So when the cursor first meets a gap it takes a transaction id
    of its own — larger than every one given before — and once every transaction below
    it has ended (``pg_snapshot_xmin`` passed it) a gap still open was an aborted
    transaction's, and the cursor moves past it. (A snapshot's ``xmax`` will not do: it is
    the newest *finished* transaction's id + 1, and a writer still running may hold a
    larger one.) Events are never skipped and never repeated; ``seq`` may have holes
    (aborted appends), never an event out of order."""

    def __init__(self, after: int = 0) -> None:
        self.after = after
        self._gap_horizon: int | None = None

    @property
    def waiting(self) -> bool:
        """At a hole whose writer may still commit."""
        return self._gap_horizon is not None

    def read(self, connection: Any, limit: int = 1000) -> list[Event]:
        """The next events (at most ``limit``). Raises ``EventsGone`` when retention
        dropped some after :attr:`after`. Run each read as a transaction of its own (an
        autocommit connection): at a hole the cursor takes an id, and a hole is passed
        only once that id's transaction has ended."""
        rows = connection.execute(
            "SELECT seq, ts, type, task_id, agent_id, visibility, payload, "
            "pg_snapshot_xmin(pg_current_snapshot())::text::bigint "
            "FROM gr_events WHERE seq > %s ORDER BY seq LIMIT %s",
            (self.after, limit),
        ).fetchall()
        if not rows or rows[0][0] != self.after + 1:  # a hole, or the end: was it dropped?
            dropped = dropped_through(connection)
            if self.after < dropped:
                raise EventsGone(self.after, dropped + 1)
        events: list[Event] = []
        for seq, ts, kind, task_id, agent_id, visibility, payload, xmin in rows:
            if seq != self.after + 1:  # a hole: an append in flight, or one that was rolled back
                if self._gap_horizon is None:
                    self._gap_horizon = _next_xid(connection)
                    break
                if int(xmin) < self._gap_horizon:
                    break  # a transaction that may hold the missing seq is still running
            self._gap_horizon = None
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


def _next_xid(connection: Any) -> int:
    """An id no transaction running now has, nor one that started before: this
    transaction's own (taken now) + 1. It ends with this transaction."""
    return int(connection.execute("SELECT pg_current_xact_id()::text::bigint").fetchone()[0]) + 1


def read_events(connection: Any, after: int = 0, limit: int = 10_000) -> list[Event]:
    """Every event with ``seq > after`` committed so far, in ``seq`` order (for tests and
    a quiet log; a reader following a busy log uses :class:`EventCursor`). ``connection``
    must not be in a transaction (``db.run(read_events, single=True)``): each read is its
    own, so a hole an aborted append left is stepped over (``ValueError`` otherwise —
    inside one transaction the cursor's own id would hold it at the first hole)."""
    from psycopg.pq import TransactionStatus

    if connection.info.transaction_status != TransactionStatus.IDLE or not connection.autocommit:
        raise RuntimeError("read_events needs a connection outside a transaction: db.run(..., single=True)")
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
    if last is not None:  # the newest `last` of those kept: never a refusal
        newest = await db.run(
            lambda c: c.execute(
                "SELECT coalesce(max(seq), 0) FROM gr_events WHERE seq > %s", (after,)
            ).fetchone()[0]
        )
        after = max(after, int(newest) - last, await db.run(dropped_through))
        until = None if follow else int(newest)
    else:
        until = None
    cursor = EventCursor(after)
    while True:
        events = await db.run(partial(cursor.read, limit=1000), single=True)
        for event in events:
            if until is not None and event.seq > until:
                return
            yield event
        if until is not None and cursor.after >= until:
            return
        if events:
            continue
        if not follow and not cursor.waiting:
            return
        await anyio.sleep(poll_interval)


def dropped_through(connection: Any) -> int:
    """The last ``seq`` retention dropped (0: none)."""
    return int(connection.execute("SELECT seq FROM gr_events_dropped").fetchone()[0])


def event_parts(connection: Any) -> list[tuple[int, int, str]]:
    """The log's partitions, oldest first: ``(first seq, end seq (excluded), name)``."""
    rows = connection.execute(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        "WHERE i.inhparent = 'gr_events'::regclass"
    ).fetchall()
    parts = []
    for (name,) in rows:
        match = re.fullmatch(r"gr_events_(\d+)_(\d+)", name)
        if match is not None:
            parts.append((int(match.group(1)), int(match.group(2)), name))
    return sorted(parts)


def partitions_repair(width: Callable[[], int]) -> Callable[[Any, Exception], bool]:
    """The event log's repair for ``Database.repairs``: an append numbered beyond the log's
    partitions (made ahead at every pass, but a burst outran them) fails its ``CHECK``; the
    next ``width()`` seqs' partitions are made, and the append runs again."""

    def repair(connection: Any, error: Exception) -> bool:
        if 'partition of relation "gr_events"' not in str(error):
            return False
        ensure_event_parts(connection, width())
        return True

    return repair


def ensure_event_parts(connection: Any, width: int) -> int:
    """Create the partitions the next ``width`` events (at least) go to, ``width`` seqs
    each; how many were made. Under an advisory lock: daemons doing it at once make each
    one once."""
    connection.execute("SELECT pg_advisory_xact_lock(%s)", (EVENTS_LOCK,))
    parts = event_parts(connection)  # (a lock waited for at most the session's 5 s: _db.SESSION_BOUNDS)
    next_seq = _next_seq(connection)
    if any(end - start > width and end > next_seq + width for start, end, _ in parts):
        _reshape(connection, parts, width)  # made wider than asked (another config): cut to size
        parts = event_parts(connection)
        next_seq = _next_seq(connection)
    top = parts[-1][1] if parts else 1
    made = 0
    while top <= next_seq + width:
        end = top + width
        # made apart, then attached: ATTACH takes a lock inserts do not wait on (CREATE
        # TABLE ... PARTITION OF would wait for every append in flight, and stop new ones)
        connection.execute(
            f"CREATE TABLE gr_events_{top}_{end} (LIKE gr_events INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"
        )
        connection.execute(
            f"ALTER TABLE gr_events ATTACH PARTITION gr_events_{top}_{end} FOR VALUES FROM ({top}) TO ({end})"
        )
        top, made = end, made + 1
    return made


def _next_seq(connection: Any) -> int:
    last_value, called = connection.execute("SELECT last_value, is_called FROM gr_event_ids").fetchone()
    return int(last_value) + 1 if called else int(last_value)


def _reshape(connection: Any, parts: list[tuple[int, int, str]], width: int) -> None:
    """Partitions made wider than ``width`` (by a command or daemon with another
    ``events_per_segment``, or the default) that reach past the next ``width`` events: the
    empty ones ahead go, and the one being written ends after the next ``width`` seqs, so
    retention can drop the log in segments of the size asked. Appends wait for it (the
    log is locked for the moment it takes); the caller makes the partitions after."""
    connection.execute("LOCK TABLE gr_events IN ACCESS EXCLUSIVE MODE")
    next_seq = _next_seq(connection)  # what was drawn before the lock, taken now
    for start, end, name in parts:
        if end - start <= width or end <= next_seq + width:
            continue
        if start >= next_seq:  # ahead, and empty: nothing has a seq in it yet
            connection.execute(f"DROP TABLE {name}")
            continue
        cut = max(next_seq + width, start + 1)
        connection.execute(f"ALTER TABLE gr_events DETACH PARTITION {name}")
        connection.execute(f"ALTER TABLE {name} RENAME TO gr_events_{start}_{cut}")
        bounds = f"FOR VALUES FROM ({start}) TO ({cut})"
        connection.execute(f"ALTER TABLE gr_events ATTACH PARTITION gr_events_{start}_{cut} {bounds}")


def history_parts(connection: Any) -> tuple[list[HistoryPart], int]:
    """The history retention may drop — every closed partition of the log (all but the
    one holding the newest event, and those after it) and every day of the archive —
    with its newest entry's time and its bytes; and the newest event's ``seq``."""
    newest = int(connection.execute("SELECT coalesce(max(seq), 0) FROM gr_events").fetchone()[0])
    parts: list[HistoryPart] = []
    for _, end, name in event_parts(connection):
        if end > newest:
            break
        row = connection.execute(
            f"SELECT ts, pg_total_relation_size('{name}') FROM {name} ORDER BY seq DESC LIMIT 1"
        ).fetchone()
        at, size = (float(row[0]), int(row[1])) if row else (0.0, 0)
        parts.append(HistoryPart("events", name, at, size))
    for (name,) in connection.execute(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        "WHERE i.inhparent = 'gr_archive'::regclass"
    ).fetchall():
        match = re.fullmatch(r"gr_archive_d(\d+)", name)
        if match is not None:
            size = int(connection.execute(f"SELECT pg_total_relation_size('{name}')").fetchone()[0])
            parts.append(HistoryPart("archive", name, (int(match.group(1)) + 1) * 86400.0, size))
    return parts, newest


def prune_history(connection: Any, retention: Retention, now: float) -> tuple[int, int]:
    """Drop the log's closed partitions past ``events_for``, and the oldest history (log
    partitions and archive days) past the disk budget, whole; never the partition holding
    the newest event. Records what was dropped first, in the same transaction. Returns
    ``(events dropped through, archived tasks dropped)``."""
    connection.execute("SELECT pg_advisory_xact_lock(%s)", (EVENTS_LOCK,))
    connection.execute("SET LOCAL lock_timeout = '2s'")  # shorter than the session's: a pass waits less
    parts, _ = history_parts(connection)
    doomed = {part.name for part in over_budget(parts, retention.disk_budget)}
    if retention.events_for is not None:
        horizon = now - retention.events_for
        doomed.update(part.name for part in parts if part.kind == "events" and part.at < horizon)
    through = 0
    for part in parts:  # the log's partitions, oldest first: only an unbroken run goes
        if part.kind != "events":
            continue
        if part.name not in doomed:
            break
        through = int(part.name.rsplit("_", 1)[1]) - 1
    if through:
        connection.execute("UPDATE gr_events_dropped SET seq = greatest(seq, %s)", (through,))
        for _, end, name in event_parts(connection):
            if end - 1 <= through:
                connection.execute(f"DROP TABLE {name}")
    tasks = 0
    for part in parts:
        if part.kind == "archive" and part.name in doomed:
            tasks += int(connection.execute(f"SELECT count(*) FROM {part.name}").fetchone()[0])
            connection.execute(f"DROP TABLE IF EXISTS {part.name}")
    return through, tasks


def maintain(connection: Any, retention: Retention, now: float) -> tuple[int, int]:
    """One retention pass over the log and the archive: partitions made ahead, history
    dropped by the policy (see :func:`prune_history`)."""
    ensure_event_parts(connection, retention.events_per_segment)
    return prune_history(connection, retention, now)


class PostgresEventStore:
    """The log actor's store on ``db`` (whose schema must be this greenroom's);
    ``retention``: the width of the log's partitions (the ones ahead are made at open and
    every ``check_every`` s)."""

    def __init__(self, db: Database, *, retention: Retention | None = None) -> None:
        self.db = db
        self.retention = retention or Retention()
        self._next_check = 0.0

    async def open(self, log: ActorRef | None = None) -> None:
        """The task graph writes its own events, in each transition's transaction:
        nothing reaches the log from elsewhere, so ``log`` is not needed."""
        await self.db.run(check)
        await self._ensure()

    async def _ensure(self) -> None:
        self._next_check = time.monotonic() + self.retention.check_every
        width = self.retention.events_per_segment
        await self.db.run(lambda c: ensure_event_parts(c, width))

    async def write(
        self, events: Sequence[Event], encoded: Sequence[bytes] | None = None
    ) -> list[Event | ValueError]:
        """One transaction for the batch. A payload PostgreSQL cannot hold (a NUL
        character) fails its own event only: the batch is written again one by one.
        Each payload is encoded once (``encoded`` when the log did it already)."""
        out: list[Event | ValueError] = []
        items: list[EventItem] = []
        places: list[int] = []
        for index, event in enumerate(events):
            if encoded is not None:
                data = encoded[index]
            else:
                try:
                    data = _encode(event.payload)
                except (TypeError, msgspec.EncodeError) as error:
                    out.append(ValueError(f"event payload cannot be stored as JSON: {error}"))
                    continue
            places.append(len(out))
            out.append(ValueError("not written"))
            items.append(
                (event.ts, event.type, event.task_id, event.agent_id, event.visibility, event.payload, data)
            )
        if not items:
            return out
        if time.monotonic() >= self._next_check:
            await self._ensure()
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
