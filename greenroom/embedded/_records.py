"""``SQLiteRecordStore``: the records primitive on one SQLite file under the data dir
(``records.sqlite3``, WAL, ``synchronous=FULL``: a write returned is on disk; readable by
its owner only, as it keeps the API's hashed tokens among the rest).

Records are rows keyed by ``(collection, key)``; ``seq`` comes from a one-row counter
bumped in each writing transaction (writers take the write lock at once, so seqs follow
commit order). A key prefix is read as the index range ``[prefix, prefix_end(prefix))``.

The first open of a data dir an older greenroom wrote folds its ``budgets.sqlite3`` and
``load.sqlite3`` in (the budgets as collection ``budgets``, a load run as ``load/<run>``,
in the order they were written) and renames each to ``<name>.folded``: nothing kept there
is lost, and a fold cut short is done again whole (the keys are written if absent).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

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
from ._sqlite import SQLiteFile
from ._steps import LiveTask

RECORDS_DB = "records.sqlite3"
FOLDED = (("budgets.sqlite3", "budgets"), ("load.sqlite3", "load_records"), ("chat.sqlite3", "chat"))
"""Files of the features an older greenroom kept apart, folded into the records."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    collection TEXT NOT NULL,
    key TEXT NOT NULL,
    body BLOB NOT NULL,
    version INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (collection, key)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS records_by_seq ON records (collection, seq);
CREATE TABLE IF NOT EXISTS record_seq (one INTEGER PRIMARY KEY CHECK (one = 1), seq INTEGER NOT NULL);
INSERT OR IGNORE INTO record_seq VALUES (1, 0);
"""

_COLUMNS = "key, body, version, seq, updated_at"


def _versioned(row: tuple[Any, ...]) -> Versioned:
    return Versioned(row[0], bytes(row[1]), int(row[2]), int(row[3]), float(row[4]))


def _take_seqs(db: sqlite3.Connection, n: int) -> int:
    """Reserve ``n`` seqs in this transaction; the first of them."""
    last = int(db.execute("UPDATE record_seq SET seq = seq + ? RETURNING seq", (n,)).fetchone()[0])
    return last - n + 1


class SQLiteRecordStore:
    """``RecordStore`` on one SQLite file. Close it with :meth:`aclose`.

    ``live_task``: how this process's task graph sees a task now, for fenced writes (the
    data dir's one owner process grants its attempts)."""

    def __init__(self, path: str | Path, *, live_task: LiveTask | None = None) -> None:
        self.path = Path(path)
        self._file = SQLiteFile(self.path, _SCHEMA, upgrade=self._fold, mode=0o600)
        self._live_task = live_task

    def _check_fence(self, fence: tuple[str, int] | None, action: str) -> None:
        if fence is None or self._live_task is None:  # a process that grants nothing
            return
        owned, task, _ = self._live_task(fence[0])
        refusal = fenced(task, fence[0], None, fence[1], action) if owned else None
        if refusal is not None:
            raise refusal

    async def get(self, collection: str, keys: Sequence[str]) -> dict[str, Versioned]:
        check_collection(collection)
        wanted = [check_record_key(key) for key in keys]

        def select(db: sqlite3.Connection) -> dict[str, Versioned]:
            found: dict[str, Versioned] = {}
            for start in range(0, len(wanted), 500):
                chunk = wanted[start : start + 500]
                rows = db.execute(
                    f"SELECT {_COLUMNS} FROM records WHERE collection = ? AND key IN "
                    f"({','.join('?' * len(chunk))})",
                    (collection, *chunk),
                )
                found.update((row[0], _versioned(row)) for row in rows)
            return found

        return await self._file.run(select, write=False) if wanted else {}

    async def scan(
        self, collection: str, prefix: str = "", *, after: str | None = None, limit: int | None = None
    ) -> list[Versioned]:
        check_collection(collection)
        where, args = prefix_range("key", check_key_prefix(prefix), "?")
        if after is not None:
            where, args = where + " AND key > ?", (*args, check_record_key(after, "after"))
        check_limit(limit)
        query = f"SELECT {_COLUMNS} FROM records WHERE collection = ?{where} ORDER BY key LIMIT ?"
        return await self._file.run(
            lambda db: [_versioned(row) for row in db.execute(query, (collection, *args, limit or -1))],
            write=False,
        )

    async def since(
        self, collection: str, prefix: str = "", *, after: int = 0, limit: int | None = None
    ) -> list[Versioned]:
        check_collection(collection)
        where, args = prefix_range("key", check_key_prefix(prefix), "?")
        check_limit(limit)
        check_seq(after)
        query = f"SELECT {_COLUMNS} FROM records WHERE collection = ? AND seq > ?{where} ORDER BY seq LIMIT ?"
        return await self._file.run(
            lambda db: [
                _versioned(row) for row in db.execute(query, (collection, after, *args, limit or -1))
            ],
            write=False,
        )

    async def count(self, collection: str, prefix: str = "") -> int:
        check_collection(collection)
        where, args = prefix_range("key", check_key_prefix(prefix), "?")
        query = f"SELECT count(*) FROM records WHERE collection = ?{where}"
        return await self._file.run(
            lambda db: int(db.execute(query, (collection, *args)).fetchone()[0]), write=False
        )

    async def collections(self, prefix: str = "") -> dict[str, int]:
        if prefix:
            check_collection(prefix)
        where, args = prefix_range("collection", prefix, "?")
        query = f"SELECT collection, count(*) FROM records WHERE true{where}"

        def select(db: sqlite3.Connection) -> dict[str, int]:
            rows = db.execute(query + " GROUP BY collection ORDER BY collection", args)
            return {name: int(n) for name, n in rows}

        return await self._file.run(select, write=False)

    async def put(
        self, collection: str, puts: Sequence[Put], *, fence: tuple[str, int] | None = None
    ) -> dict[str, int]:
        return await put_by_write(self, collection, puts, fence)

    async def write(
        self, changes: Sequence[Change], *, fence: tuple[str, int] | None = None
    ) -> dict[tuple[str, str], int]:
        rows = change_rows(changes)
        self._check_fence(check_fence(fence), "write records")
        if not rows:
            return {}
        now = time.time()

        def write(db: sqlite3.Connection) -> dict[tuple[str, str], int]:
            found: dict[tuple[str, str], int] = {}
            by_collection: dict[str, list[str]] = {}
            for collection, put in rows:
                by_collection.setdefault(collection, []).append(put.key)
            for collection, keys in by_collection.items():  # one read per collection
                for start in range(0, len(keys), 500):
                    chunk = keys[start : start + 500]
                    for key, version in db.execute(
                        "SELECT key, version FROM records WHERE collection = ? AND key IN "
                        f"({','.join('?' * len(chunk))})",
                        (collection, *chunk),
                    ):
                        found[collection, key] = int(version)
            for collection, put in rows:
                have = found.setdefault((collection, put.key), 0)
                if put.expect is not None and put.expect != have:
                    raise Conflict(collection, put.key, put.expect, have)
            seq = _take_seqs(db, len(rows))
            versions: dict[tuple[str, str], int] = {}
            gone: list[tuple[str, str]] = []
            kept: list[tuple[str, str, bytes, int, int, float]] = []
            for n, (collection, put) in enumerate(rows):
                if put.body is None:
                    gone.append((collection, put.key))
                    versions[collection, put.key] = 0
                else:
                    version = versions[collection, put.key] = found[collection, put.key] + 1
                    kept.append((collection, put.key, put.body, version, seq + n, now))
            if gone:
                db.executemany("DELETE FROM records WHERE collection = ? AND key = ?", gone)
            if kept:
                db.executemany(
                    "INSERT INTO records (collection, key, body, version, seq, updated_at) "
                    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (collection, key) DO UPDATE SET "
                    "body = excluded.body, version = excluded.version, seq = excluded.seq, "
                    "updated_at = excluded.updated_at",
                    kept,
                )
            return versions

        return await self._file.write(write)

    async def add(
        self, collection: str, records: Sequence[tuple[str, bytes]], *, fence: tuple[str, int] | None = None
    ) -> int:
        rows = add_rows(collection, records)
        self._check_fence(check_fence(fence), "add records")
        if not rows:
            return 0
        now = time.time()

        def insert(db: sqlite3.Connection) -> int:
            seq = _take_seqs(db, len(rows))
            before = db.total_changes
            db.executemany(
                "INSERT OR IGNORE INTO records (collection, key, body, version, seq, updated_at) "
                "VALUES (?, ?, ?, 1, ?, ?)",
                [(collection, key, body, seq + n, now) for n, (key, body) in enumerate(rows)],
            )
            return db.total_changes - before

        return await self._file.write(insert)

    async def bump(self, collection: str, key: str, by: int = 1) -> int:
        check_bump(collection, key, by)
        now = time.time()

        def bump(db: sqlite3.Connection) -> int:
            row = db.execute(
                "SELECT body, version FROM records WHERE collection = ? AND key = ?", (collection, key)
            ).fetchone()
            value = counted(collection, key, None if row is None else bytes(row[0]), by)
            db.execute(
                "INSERT OR REPLACE INTO records (collection, key, body, version, seq, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (
                    collection,
                    key,
                    b"%d" % value,
                    1 if row is None else int(row[1]) + 1,
                    _take_seqs(db, 1),
                    now,
                ),
            )
            return value

        return await self._file.write(bump)

    async def drop(self, collection: str, prefix: str = "") -> int:
        check_collection(collection)
        where, args = prefix_range("key", check_key_prefix(prefix), "?")
        query = f"DELETE FROM records WHERE collection = ?{where}"
        return await self._file.write(lambda db: int(db.execute(query, (collection, *args)).rowcount))

    async def aclose(self) -> None:
        await self._file.aclose()

    # -- what an older greenroom kept apart ---------------------------------------------------------

    def _fold(self, db: sqlite3.Connection) -> None:
        """Fold the feature files an older greenroom wrote into the records, once (in the
        connection's first moments, before any caller's transaction)."""
        for name, table in FOLDED:
            old = self.path.with_name(name)
            if not old.exists():
                continue
            db.execute("ATTACH DATABASE ? AS old", (str(old),))
            try:
                db.execute("BEGIN IMMEDIATE")
                if table == "budgets":
                    rows = db.execute(
                        "SELECT name, json_object('tokens', tokens, 'cost', cost, 'calls', calls), "
                        "updated_at FROM old.budgets ORDER BY name"
                    ).fetchall()
                    batch = [("budgets", key, body.encode(), at) for key, body, at in rows]
                elif table == "chat":
                    batch = _chat_rows(db)
                else:
                    rows = db.execute("SELECT run, key, body FROM old.load_records ORDER BY seq").fetchall()
                    batch = [(f"load/{run}", key, bytes(body), 0.0) for run, key, body in rows]
                seq = _take_seqs(db, len(batch)) if batch else 0
                db.executemany(
                    "INSERT OR IGNORE INTO records (collection, key, body, version, seq, updated_at) "
                    "VALUES (?, ?, ?, 1, ?, ?)",
                    [(c, k, b, seq + n, at) for n, (c, k, b, at) in enumerate(batch)],
                )
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
            finally:
                db.execute("DETACH DATABASE old")
            old.rename(old.with_name(name + ".folded"))
            for suffix in ("-wal", "-shm"):
                old.with_name(name + suffix).unlink(missing_ok=True)


_SEP = "\x1f"
_json = msgspec.json.Encoder()


def _chat_rows(db: sqlite3.Connection) -> list[tuple[str, str, bytes, float]]:
    """An older ``chat.sqlite3``'s data (attached as ``old``) as the chat package keeps it
    on the records (``greenroom/chat/_kept.py``: collections ``chat/conversations`` — the
    messages beside their conversation — ``chat/idle`` and ``chat/todo``, keys joined by
    ``\\x1f``); the chat's own tests read a folded file back."""
    rows: list[tuple[str, str, bytes, float]] = []
    pending = {
        conversation: {"tool_name": tool, "parameters": msgspec.json.decode(parameters), "title": title,
                       "expires_at": expires}
        for conversation, tool, parameters, title, expires in db.execute(
            "SELECT conversation_id, tool_name, parameters, title, expires_at FROM old.pending_actions"
        )
    }  # fmt: skip
    counts = {
        conversation: (int(count), float(last))
        for conversation, count, last in db.execute(
            "SELECT conversation_id, max(seq), max(created_at) FROM old.messages GROUP BY conversation_id"
        )
    }
    for conversation, user, created in db.execute("SELECT id, user_id, created_at FROM old.conversations"):
        count, last = counts.get(conversation, (0, float(created)))
        record = {"user": user, "created_at": created, "last_at": last, "count": count}
        if conversation in pending:
            record["pending"] = pending[conversation]
        rows.append(("chat/conversations", conversation, _json.encode(record), last))
        rows.append(("chat/idle", f"{last // 60 * 60:017.6f}{_SEP}{conversation}", b"", last))
    for conversation, seq, role, content, calls, created in db.execute(
        "SELECT conversation_id, seq, role, content, tool_calls, created_at FROM old.messages"
    ):
        message = {"role": role, "content": content, "created_at": created}
        if calls is not None:
            message["tool_calls"] = msgspec.json.decode(calls)
        rows.append(
            ("chat/conversations", f"{conversation}{_SEP}{int(seq):010d}", _json.encode(message), created)
        )
    last_id = 0
    for user, todo_id, title, description, completed, created, updated in db.execute(
        "SELECT user_id, id, title, description, completed, created_at, updated_at FROM old.tasks"
    ):
        todo = {"title": title, "description": description, "completed": bool(completed),
                "created_at": created, "updated_at": updated}  # fmt: skip
        rows.append(("chat/todo", f"{user}{_SEP}i{int(todo_id):012d}", _json.encode(todo), updated))
        last_id = max(last_id, int(todo_id))
    if last_id:
        rows.append(("chat/todo", f"{_SEP}n", b"%d" % last_id, 0.0))
    return rows
