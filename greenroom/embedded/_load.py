"""``SQLiteLoadRecordStore``: a load run's records on one SQLite file under the data dir
(``load.sqlite3``, WAL, ``synchronous=FULL``: an ``add`` returned is on disk)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path

from ..store import LoadEntry, check_entries, check_prefix, check_run, fenced
from ._sqlite import SQLiteFile
from ._steps import LiveTask

LOAD_DB = "load.sqlite3"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS load_records (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    run TEXT NOT NULL,
    key TEXT NOT NULL,
    body BLOB NOT NULL,
    UNIQUE (run, key)
);
"""

_SELECT = "FROM load_records WHERE run = ? AND substr(key, 1, ?) = ?"


class SQLiteLoadRecordStore:
    """``LoadRecordStore`` on one SQLite file. Close it with :meth:`aclose`."""

    def __init__(self, path: str | Path, *, live_task: LiveTask | None = None) -> None:
        self.path = Path(path)
        self._file = SQLiteFile(self.path, _SCHEMA)
        self._live_task = live_task

    async def add(
        self, run: str, entries: Sequence[LoadEntry], *, fence: tuple[str, int] | None = None
    ) -> int:
        check_entries(run, entries)
        if fence is not None and self._live_task is not None:  # the one graph of the data dir
            owned, task, _ = self._live_task(fence[0])
            refusal = fenced(task, fence[0], None, fence[1], "record load") if owned else None
            if refusal is not None:
                raise refusal
        if not entries:
            return 0
        rows = [(run, entry.key, entry.body) for entry in entries]

        def insert(db: sqlite3.Connection) -> int:
            before = db.total_changes
            db.executemany("INSERT OR IGNORE INTO load_records (run, key, body) VALUES (?, ?, ?)", rows)
            return db.total_changes - before

        return await self._file.write(insert)

    async def read(self, run: str, prefix: str = "") -> list[LoadEntry]:
        check_run(run)
        check_prefix(prefix)

        def select(db: sqlite3.Connection) -> list[LoadEntry]:
            rows = db.execute(f"SELECT key, body {_SELECT} ORDER BY seq", (run, len(prefix), prefix))
            return [LoadEntry(key, bytes(body)) for key, body in rows]

        return await self._file.run(select, write=False)

    async def count(self, run: str, prefix: str = "") -> int:
        check_run(run)
        check_prefix(prefix)

        def select(db: sqlite3.Connection) -> int:
            return int(db.execute(f"SELECT count(*) {_SELECT}", (run, len(prefix), prefix)).fetchone()[0])

        return await self._file.run(select, write=False)

    async def runs(self) -> dict[str, int]:
        def select(db: sqlite3.Connection) -> dict[str, int]:
            rows = db.execute("SELECT run, count(*) FROM load_records GROUP BY run ORDER BY run")
            return {run: int(n) for run, n in rows}

        return await self._file.run(select, write=False)

    async def drop(self, run: str) -> int:
        check_run(run)
        return await self._file.run(
            lambda db: db.execute("DELETE FROM load_records WHERE run = ?", (run,)).rowcount, write=True
        )

    async def aclose(self) -> None:
        await self._file.aclose()
