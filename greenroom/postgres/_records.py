"""``PostgresRecordStore``: the records primitive in PostgreSQL (``gr_records``), shared by
every daemon of a fleet — the peer of the embedded SQLite records behind
``greenroom.store.RecordStore``.

Keys are ``COLLATE "C"`` (code point order, as the files and memory read them), so a key
prefix is the index range ``[prefix, prefix_end(prefix))``. A put is one statement per
record, each carrying its own condition (``version = expect``; an insert of a record
expected absent does nothing if one is there), sent in one pipeline in key order (two
writers lock rows in one order, never a deadlock): a condition that did not hold is a
:class:`~greenroom.store.Conflict` and the transaction rolls back whole.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from ..messages import AgentTask, TaskStatus
from ..store import (
    Change,
    Conflict,
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
    prefix_range,
    put_by_write,
)
from ._db import Database

_COLUMNS = "key, body, version, seq, updated_at"


def _versioned(rows: Any) -> list[Versioned]:
    return [Versioned(key, bytes(body), int(v), int(seq), float(at)) for key, body, v, seq, at in rows]


def _check_fence(connection: Any, fence: tuple[str, int] | None, action: str) -> None:
    """Refuse a write whose task attempt is not the live one, the task's row locked until
    the write's transaction ends (a grant waits for it, never the other way round)."""
    if fence is None:
        return
    task_id, token = fence
    row = connection.execute(
        "SELECT status, owner, token FROM gr_tasks WHERE id = %s FOR SHARE", (task_id,)
    ).fetchone()
    live = None
    if row is not None:
        live = AgentTask(task_id, "-", status=TaskStatus(row[0]), owner=row[1], token=row[2])
    refusal = fenced(live, task_id, None, token, action)
    if refusal is not None:
        raise refusal


def _put_statement(collection: str, put: Put, now: float) -> tuple[str, tuple[Any, ...]]:
    """The one statement of a :class:`Put`, returning the version it wrote or deleted —
    none when its ``expect`` did not hold (a delete expecting no record: one when there
    was one)."""
    where = "WHERE collection = %s AND key = %s"
    args: tuple[Any, ...] = (collection, put.key)
    if put.body is None:
        if put.expect:
            where, args = where + " AND version = %s", (*args, put.expect)
        return f"DELETE FROM gr_records {where} RETURNING version", args
    if put.expect:
        return (
            "UPDATE gr_records SET body = %s, version = version + 1, seq = nextval('gr_record_seq'), "
            f"updated_at = %s {where} AND version = %s RETURNING version",
            (put.body, now, *args, put.expect),
        )
    insert = (
        "INSERT INTO gr_records (collection, key, body, version, updated_at) VALUES (%s, %s, %s, 1, %s) "
        "ON CONFLICT (collection, key) DO "
    )
    if put.expect == 0:
        return insert + "NOTHING RETURNING version", (collection, put.key, put.body, now)
    return (
        insert + "UPDATE SET body = excluded.body, version = gr_records.version + 1, "
        "seq = nextval('gr_record_seq'), updated_at = excluded.updated_at RETURNING version",
        (collection, put.key, put.body, now),
    )


class PostgresRecordStore:
    """``RecordStore`` on the backend's database (the pool is the backend's)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def get(self, collection: str, keys: Sequence[str]) -> dict[str, Versioned]:
        check_collection(collection)
        wanted = [check_record_key(key) for key in keys]
        if not wanted:
            return {}

        def fetch(connection: Any) -> dict[str, Versioned]:
            rows = connection.execute(
                f"SELECT {_COLUMNS} FROM gr_records WHERE collection = %s AND key = ANY(%s)",
                (collection, wanted),
            )
            return {record.key: record for record in _versioned(rows)}

        return await self.db.run(fetch, single=True)

    async def scan(
        self, collection: str, prefix: str = "", *, after: str | None = None, limit: int | None = None
    ) -> list[Versioned]:
        check_collection(collection)
        where, args = prefix_range("key", check_key_prefix(prefix), "%s")
        if after is not None:
            where, args = where + " AND key > %s", (*args, check_record_key(after, "after"))
        check_limit(limit)
        query = f"SELECT {_COLUMNS} FROM gr_records WHERE collection = %s{where} ORDER BY key LIMIT %s"
        return await self.db.run(
            lambda connection: _versioned(connection.execute(query, (collection, *args, limit))), single=True
        )

    async def since(
        self, collection: str, prefix: str = "", *, after: int = 0, limit: int | None = None
    ) -> list[Versioned]:
        check_collection(collection)
        where, args = prefix_range("key", check_key_prefix(prefix), "%s")
        check_limit(limit)
        check_seq(after)
        query = f"SELECT {_COLUMNS} FROM gr_records WHERE collection = %s AND seq > %s{where} "
        query += "ORDER BY seq LIMIT %s"
        return await self.db.run(
            lambda connection: _versioned(connection.execute(query, (collection, after, *args, limit))),
            single=True,
        )

    async def count(self, collection: str, prefix: str = "") -> int:
        check_collection(collection)
        where, args = prefix_range("key", check_key_prefix(prefix), "%s")
        query = f"SELECT count(*) FROM gr_records WHERE collection = %s{where}"
        return await self.db.run(
            lambda connection: int(connection.execute(query, (collection, *args)).fetchone()[0]), single=True
        )

    async def collections(self, prefix: str = "") -> dict[str, int]:
        if prefix:
            check_collection(prefix)
        where, args = prefix_range("collection", prefix, "%s")
        query = f"SELECT collection, count(*) FROM gr_records WHERE true{where}"

        def fetch(connection: Any) -> dict[str, int]:
            rows = connection.execute(query + " GROUP BY collection ORDER BY collection", args)
            return {name: int(n) for name, n in rows}

        return await self.db.run(fetch, single=True)

    async def put(
        self, collection: str, puts: Sequence[Put], *, fence: tuple[str, int] | None = None
    ) -> dict[str, int]:
        return await put_by_write(self, collection, puts, fence)

    async def write(
        self, changes: Sequence[Change], *, fence: tuple[str, int] | None = None
    ) -> dict[tuple[str, str], int]:
        rows = change_rows(changes)
        fence = check_fence(fence)
        if not rows:
            return {}
        now = time.time()

        def write(connection: Any) -> dict[tuple[str, str], int]:
            _check_fence(connection, fence, "write records")
            with connection.pipeline():  # every statement sent at once, read back at the end
                cursors = [
                    connection.execute(*_put_statement(collection, put, now)) for collection, put in rows
                ]
            versions: dict[tuple[str, str], int] = {}
            for (collection, put), cursor in zip(rows, cursors, strict=True):
                row = cursor.fetchone()
                expect = put.expect
                refused = (row is not None) if expect == 0 and put.body is None else (row is None)
                if refused and (put.body is not None or (expect is not None)):
                    there = connection.execute(
                        "SELECT version FROM gr_records WHERE collection = %s AND key = %s",
                        (collection, put.key),
                    ).fetchone()  # the transaction rolls back: nothing of the write is kept
                    raise Conflict(collection, put.key, expect or 0, int(there[0]) if there else 0)
                versions[collection, put.key] = 0 if put.body is None else int(row[0])
            return versions

        return await self.db.run(write)

    async def add(
        self, collection: str, records: Sequence[tuple[str, bytes]], *, fence: tuple[str, int] | None = None
    ) -> int:
        rows = add_rows(collection, records)
        fence = check_fence(fence)
        if not rows:
            return 0
        keys = [key for key, _ in rows]
        bodies = [body for _, body in rows]
        now = time.time()

        def insert(connection: Any) -> int:
            _check_fence(connection, fence, "add records")
            cursor = connection.execute(
                "INSERT INTO gr_records (collection, key, body, version, updated_at) "
                "SELECT %s, k, b, 1, %s FROM unnest(%s::text[], %s::bytea[]) WITH ORDINALITY AS t(k, b, n) "
                "ORDER BY n ON CONFLICT (collection, key) DO NOTHING",
                (collection, now, keys, bodies),
            )
            return int(cursor.rowcount)

        return await self.db.run(insert, single=fence is None)

    async def bump(self, collection: str, key: str, by: int = 1) -> int:
        check_bump(collection, key, by)
        now = time.time()

        def bump(connection: Any) -> int:
            row = connection.execute(  # the row locked by the upsert: writers take turns, none retries
                "INSERT INTO gr_records (collection, key, body, version, updated_at) "
                "VALUES (%s, %s, '0', 0, %s) "
                "ON CONFLICT (collection, key) DO UPDATE SET updated_at = excluded.updated_at "
                "RETURNING body, version",
                (collection, key, now),
            ).fetchone()
            value = counted(collection, key, bytes(row[0]), by)
            connection.execute(
                "UPDATE gr_records SET body = %s, version = %s, seq = nextval('gr_record_seq') "
                "WHERE collection = %s AND key = %s",
                (b"%d" % value, int(row[1]) + 1, collection, key),
            )
            return value

        return await self.db.run(bump)

    async def drop(self, collection: str, prefix: str = "") -> int:
        check_collection(collection)
        where, args = prefix_range("key", check_key_prefix(prefix), "%s")
        query = f"DELETE FROM gr_records WHERE collection = %s{where}"
        return await self.db.run(
            lambda connection: int(connection.execute(query, (collection, *args)).rowcount), single=True
        )

    async def aclose(self) -> None:
        pass
