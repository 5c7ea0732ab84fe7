"""``SQLiteEntityStore``: entities' saved states on one SQLite file under the data dir
(``entities.sqlite3``, WAL, ``synchronous=FULL``: a ``save`` returned is on disk)."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path

from ..store import StoredState, check_key, check_kind, save_rows
from ._sqlite import SQLiteFile

ENTITIES_DB = "entities.sqlite3"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS entities (
    kind TEXT NOT NULL,
    key TEXT NOT NULL,
    state BLOB NOT NULL,
    version INTEGER NOT NULL,
    saved_at REAL NOT NULL,
    PRIMARY KEY (kind, key)
) WITHOUT ROWID;
"""
_CHUNK = 500


class SQLiteEntityStore:
    """``EntityStore`` on one SQLite file. Close it with :meth:`aclose`."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._file = SQLiteFile(self.path, _SCHEMA)
        self._reads = SQLiteFile(self.path, _SCHEMA)
        """A connection of its own for loads: in WAL mode they read while a save's write
        and fsync run (an activation never waits behind a passivation's save)."""

    async def load(self, kind: str, keys: Sequence[str]) -> dict[str, StoredState]:
        check_kind(kind)
        wanted = [check_key(key) for key in keys]
        if not wanted:
            return {}

        def select(db: sqlite3.Connection) -> dict[str, StoredState]:
            found: dict[str, StoredState] = {}
            for start in range(0, len(wanted), _CHUNK):
                chunk = wanted[start : start + _CHUNK]
                rows = db.execute(
                    "SELECT key, state, version, saved_at FROM entities WHERE kind = ? "
                    f"AND key IN ({','.join('?' * len(chunk))})",
                    [kind, *chunk],
                )
                for key, state, version, saved_at in rows:
                    found[key] = StoredState(key, bytes(state), int(version), float(saved_at))
            return found

        return await self._reads.run(select, write=False)

    async def save(self, kind: str, states: Sequence[tuple[str, bytes]]) -> dict[str, int]:
        rows = save_rows(kind, states)
        if not rows:
            return {}
        now = time.time()

        def upsert(db: sqlite3.Connection) -> dict[str, int]:
            versions: dict[str, int] = {}
            for key, state in rows:
                (version,) = db.execute(
                    "INSERT INTO entities (kind, key, state, version, saved_at) VALUES (?, ?, ?, 1, ?) "
                    "ON CONFLICT (kind, key) DO UPDATE SET state = excluded.state, "
                    "version = entities.version + 1, saved_at = excluded.saved_at RETURNING version",
                    (kind, key, state, now),
                ).fetchone()
                versions[key] = int(version)
            return versions

        return await self._file.write(upsert)

    async def delete(self, kind: str, keys: Sequence[str]) -> int:
        check_kind(kind)
        wanted = [check_key(key) for key in keys]

        def remove(db: sqlite3.Connection) -> int:
            gone = 0
            for start in range(0, len(wanted), _CHUNK):
                chunk = wanted[start : start + _CHUNK]
                gone += db.execute(
                    f"DELETE FROM entities WHERE kind = ? AND key IN ({','.join('?' * len(chunk))})",
                    [kind, *chunk],
                ).rowcount
            return gone

        return await self._file.write(remove) if wanted else 0

    async def count(self, kind: str) -> int:
        check_kind(kind)
        return await self._reads.run(
            lambda db: int(db.execute("SELECT count(*) FROM entities WHERE kind = ?", (kind,)).fetchone()[0]),
            write=False,
        )

    async def aclose(self) -> None:
        try:
            await self._reads.aclose()
        finally:
            await self._file.aclose()
