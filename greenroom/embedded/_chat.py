"""``SQLiteChatStore``: the chat assistant's data in one SQLite file under the data dir —
the embedded peer of the PostgreSQL chat store, behind ``greenroom.store.ChatStore``.

Stdlib ``sqlite3`` in WAL mode. Every call runs off the event loop (in a worker thread),
each as one transaction: a call either happens whole or not at all. Cancelling a caller
never leaves a half-written row; the call it started finishes in its thread.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from ..store import (
    ConversationHold,
    ConversationNotFound,
    StoredMessage,
    StoredPending,
    TaskRow,
    messages_from_rows,
    pending_from_row,
)
from ._sqlite import SQLiteFile

T = TypeVar("T")

CHAT_DB = "chat.sqlite3"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tasks (
    user_id TEXT NOT NULL,
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    title TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT '',
    completed INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS tasks_by_user ON tasks (user_id, id);
CREATE TABLE IF NOT EXISTS conversations (
    id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS messages (
    conversation_id TEXT NOT NULL REFERENCES conversations (id),
    seq INTEGER NOT NULL,
    role TEXT NOT NULL,
    content TEXT NOT NULL,
    tool_calls TEXT,
    created_at REAL NOT NULL,
    PRIMARY KEY (conversation_id, seq)
);
CREATE TABLE IF NOT EXISTS pending_actions (
    conversation_id TEXT PRIMARY KEY REFERENCES conversations (id),
    tool_name TEXT NOT NULL,
    parameters TEXT NOT NULL,
    title TEXT NOT NULL,
    expires_at REAL NOT NULL
);
"""


_encoder = msgspec.json.Encoder()


class SQLiteChatStore:
    """``ChatStore`` on one SQLite file (WAL), used from worker threads one call at a time.

    ``path``: the database file (``<data dir>/chat.sqlite3`` in the daemon). ``clock``:
    the wall clock rows are stamped with. Close it with :meth:`aclose`.
    """

    def __init__(self, path: str | Path, *, clock: Callable[[], float] = time.time) -> None:
        self.path = Path(path)
        self.clock = clock
        self._file = SQLiteFile(self.path, _SCHEMA, foreign_keys=True)
        self._held: dict[str, int] = {}

    async def _run(self, fn: Callable[[sqlite3.Connection], T], *, write: bool = True) -> T:
        return await self._file.run(fn, write=write)

    # -- tasks ------------------------------------------------------------------------

    @staticmethod
    def _row(row: tuple[Any, ...]) -> TaskRow:
        return TaskRow(
            id=row[0],
            title=row[1],
            description=row[2],
            completed=bool(row[3]),
            created_at=row[4],
            updated_at=row[5],
        )

    _COLUMNS = "id, title, description, completed, created_at, updated_at"

    async def add_task(
        self, user_id: str, title: str, description: str = "", *, hold: ConversationHold | None = None
    ) -> TaskRow:
        now = self.clock()

        def add(db: sqlite3.Connection) -> TaskRow:
            cursor = db.execute(
                "INSERT INTO tasks (user_id, title, description, created_at, updated_at) "
                "VALUES (?, ?, ?, ?, ?)",
                (user_id, title, description, now, now),
            )
            assert cursor.lastrowid is not None
            return TaskRow(
                id=cursor.lastrowid, title=title, description=description, created_at=now, updated_at=now
            )

        return await self._run(add)

    async def list_tasks(self, user_id: str, status: str = "all") -> list[TaskRow]:
        where = {"all": "", "pending": " AND completed = 0", "completed": " AND completed = 1"}[status]

        def fetch(db: sqlite3.Connection) -> list[TaskRow]:
            rows = db.execute(
                f"SELECT {self._COLUMNS} FROM tasks WHERE user_id = ?{where} ORDER BY id", (user_id,)
            ).fetchall()
            return [self._row(row) for row in rows]

        return await self._run(fetch, write=False)

    def _one(self, db: sqlite3.Connection, user_id: str, task_id: int) -> TaskRow | None:
        row = db.execute(
            f"SELECT {self._COLUMNS} FROM tasks WHERE user_id = ? AND id = ?", (user_id, task_id)
        ).fetchone()
        return None if row is None else self._row(row)

    async def update_task(
        self,
        user_id: str,
        task_id: int,
        *,
        title: str | None = None,
        description: str | None = None,
        hold: ConversationHold | None = None,
    ) -> TaskRow | None:
        now = self.clock()

        def update(db: sqlite3.Connection) -> TaskRow | None:
            task = self._one(db, user_id, task_id)
            if task is None:
                return None
            new_title = task.title if title is None else title
            new_description = task.description if description is None else description
            db.execute(
                "UPDATE tasks SET title = ?, description = ?, updated_at = ? WHERE user_id = ? AND id = ?",
                (new_title, new_description, now, user_id, task_id),
            )
            return self._one(db, user_id, task_id)

        return await self._run(update)

    async def complete_task(
        self, user_id: str, task_id: int, *, hold: ConversationHold | None = None
    ) -> TaskRow | None:
        now = self.clock()

        def complete(db: sqlite3.Connection) -> TaskRow | None:
            db.execute(
                "UPDATE tasks SET completed = 1, updated_at = ? WHERE user_id = ? AND id = ?",
                (now, user_id, task_id),
            )
            return self._one(db, user_id, task_id)

        return await self._run(complete)

    async def delete_task(
        self, user_id: str, task_id: int, *, hold: ConversationHold | None = None
    ) -> TaskRow | None:
        def delete(db: sqlite3.Connection) -> TaskRow | None:
            task = self._one(db, user_id, task_id)
            if task is not None:
                db.execute("DELETE FROM tasks WHERE user_id = ? AND id = ?", (user_id, task_id))
            return task

        return await self._run(delete)

    async def delete_tasks(
        self,
        user_id: str,
        task_ids: list[int],
        *,
        only_completed: bool = False,
        hold: ConversationHold | None = None,
    ) -> list[TaskRow]:
        ids = sorted(set(task_ids))

        def delete(db: sqlite3.Connection) -> list[TaskRow]:
            gone = []
            for task_id in ids:
                task = self._one(db, user_id, task_id)
                if task is not None and (task.completed or not only_completed):
                    db.execute("DELETE FROM tasks WHERE user_id = ? AND id = ?", (user_id, task_id))
                    gone.append(task)
            return gone

        return await self._run(delete)

    # -- conversations ----------------------------------------------------------------

    async def open_conversation(self, user_id: str, conversation_id: str, *, create: bool) -> None:
        """Make sure ``conversation_id`` is this user's: create it (``create``) or raise
        :class:`ConversationNotFound` (also for another user's conversation)."""
        now = self.clock()

        def open_(db: sqlite3.Connection) -> None:
            row = db.execute("SELECT user_id FROM conversations WHERE id = ?", (conversation_id,)).fetchone()
            if row is None and create:
                db.execute(
                    "INSERT INTO conversations (id, user_id, created_at) VALUES (?, ?, ?)",
                    (conversation_id, user_id, now),
                )
            elif row is None or row[0] != user_id:
                raise ConversationNotFound(conversation_id)

        def known(db: sqlite3.Connection) -> bool:
            row = db.execute("SELECT user_id FROM conversations WHERE id = ?", (conversation_id,)).fetchone()
            if row is not None and row[0] != user_id:
                raise ConversationNotFound(conversation_id)
            return row is not None

        # a conversation is created once and then read on every request: a read first,
        # the write lock only when it is not there yet
        if await self._run(known, write=False):
            return
        if not create:
            raise ConversationNotFound(conversation_id)
        await self._run(open_)

    @staticmethod
    def _history(
        db: sqlite3.Connection, user_id: str, conversation_id: str, limit: int
    ) -> list[StoredMessage]:
        rows = db.execute(
            "SELECT m.role, m.content, m.tool_calls, m.created_at FROM messages m "
            "JOIN conversations c ON c.id = m.conversation_id "
            "WHERE m.conversation_id = ? AND c.user_id = ? ORDER BY m.seq DESC LIMIT ?",
            (conversation_id, user_id, limit),
        ).fetchall()
        return messages_from_rows(rows)

    async def load_history(self, user_id: str, conversation_id: str, limit: int) -> list[StoredMessage]:
        return await self._run(lambda db: self._history(db, user_id, conversation_id, limit), write=False)

    async def save_turn(
        self,
        user_id: str,
        conversation_id: str,
        messages: list[StoredMessage],
        pending: StoredPending | None,
        *,
        hold: int | None = None,
    ) -> None:
        """Append a request's messages and set (or clear) its pending confirmation, in one
        transaction: a turn is stored whole or not at all."""

        def save(db: sqlite3.Connection) -> None:
            owner = db.execute(
                "SELECT user_id FROM conversations WHERE id = ?", (conversation_id,)
            ).fetchone()
            if owner is None or owner[0] != user_id:
                raise ConversationNotFound(conversation_id)
            (last,) = db.execute(
                "SELECT COALESCE(MAX(seq), 0) FROM messages WHERE conversation_id = ?", (conversation_id,)
            ).fetchone()
            for offset, message in enumerate(messages, 1):
                db.execute(
                    "INSERT INTO messages (conversation_id, seq, role, content, tool_calls, created_at) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        conversation_id,
                        last + offset,
                        message.role,
                        message.content,
                        None if message.tool_calls is None else _encoder.encode(message.tool_calls).decode(),
                        message.created_at,
                    ),
                )
            db.execute("DELETE FROM pending_actions WHERE conversation_id = ?", (conversation_id,))
            if pending is not None:
                db.execute(
                    "INSERT INTO pending_actions (conversation_id, tool_name, parameters, title, expires_at) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (
                        conversation_id,
                        pending.tool_name,
                        _encoder.encode(pending.parameters).decode(),
                        pending.title,
                        pending.expires_at,
                    ),
                )

        await self._run(save)

    async def load_conversation(
        self, user_id: str, conversation_id: str, limit: int
    ) -> tuple[StoredPending | None, list[StoredMessage]]:
        def load(db: sqlite3.Connection) -> tuple[StoredPending | None, list[StoredMessage]]:
            row = db.execute("SELECT user_id FROM conversations WHERE id = ?", (conversation_id,)).fetchone()
            if row is None or row[0] != user_id:
                raise ConversationNotFound(conversation_id)
            return self._pending(db, user_id, conversation_id), self._history(
                db, user_id, conversation_id, limit
            )

        return await self._run(load, write=False)

    @staticmethod
    def _pending(db: sqlite3.Connection, user_id: str, conversation_id: str) -> StoredPending | None:
        row = db.execute(
            "SELECT p.tool_name, p.parameters, p.title, p.expires_at FROM pending_actions p "
            "JOIN conversations c ON c.id = p.conversation_id "
            "WHERE p.conversation_id = ? AND c.user_id = ?",
            (conversation_id, user_id),
        ).fetchone()
        return pending_from_row(row)

    async def load_pending(self, user_id: str, conversation_id: str) -> StoredPending | None:
        return await self._run(lambda db: self._pending(db, user_id, conversation_id), write=False)

    async def take_pending(
        self, user_id: str, conversation_id: str, expected: StoredPending, *, hold: int | None = None
    ) -> bool:
        """Remove the pending confirmation if it is still exactly ``expected``: ``True``
        for the one caller that took it (a second "yes delete" finds nothing)."""

        def take(db: sqlite3.Connection) -> bool:
            cursor = db.execute(
                "DELETE FROM pending_actions WHERE conversation_id = ? AND tool_name = ? AND parameters = ? "
                "AND conversation_id IN (SELECT id FROM conversations WHERE user_id = ?)",
                (conversation_id, expected.tool_name, _encoder.encode(expected.parameters).decode(), user_id),
            )
            return cursor.rowcount == 1

        return await self._run(take)

    async def hold_conversation(self, conversation_id: str, holder: str, seconds: float) -> int | None:
        """Always token 1: one daemon owns a data dir, and its runner already serves a
        conversation one request at a time (no other holder can take it: a turn's ``hold``
        is never refused here). The hold only keeps :meth:`forget_idle` off it."""
        self._held[conversation_id] = self._held.get(conversation_id, 0) + 1
        return 1

    async def let_go_conversation(self, conversation_id: str, holder: str) -> None:
        count = self._held.pop(conversation_id, 0) - 1
        if count > 0:
            self._held[conversation_id] = count

    async def forget_idle(self, before: float, *, limit: int = 1000) -> int:
        held = set(self._held)

        def forget(db: sqlite3.Connection) -> int:
            rows = db.execute(
                "SELECT c.id FROM conversations c WHERE coalesce((SELECT max(m.created_at) FROM messages m "
                "WHERE m.conversation_id = c.id), c.created_at) < ? LIMIT ?",
                (before, limit + len(held)),
            ).fetchall()
            gone = [(row[0],) for row in rows if row[0] not in held][:limit]
            db.executemany("DELETE FROM messages WHERE conversation_id = ?", gone)
            db.executemany("DELETE FROM pending_actions WHERE conversation_id = ?", gone)
            db.executemany("DELETE FROM conversations WHERE id = ?", gone)
            return len(gone)

        return await self._run(forget)

    async def aclose(self) -> None:
        await self._file.aclose()
