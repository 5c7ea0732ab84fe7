"""``SQLiteBudgetStore``: the named budgets' totals on one SQLite file under the data dir
(``budgets.sqlite3``, WAL, ``synchronous=FULL``: an ``add`` returned is on disk)."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..store import Spent, check_budget_name, spend_rows
from ._sqlite import SQLiteFile

BUDGETS_DB = "budgets.sqlite3"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS budgets (
    name TEXT PRIMARY KEY,
    tokens INTEGER NOT NULL,
    cost REAL NOT NULL,
    calls INTEGER NOT NULL,
    updated_at REAL NOT NULL
);
"""


def _spent(row: tuple[Any, ...]) -> Spent:
    return Spent(tokens=int(row[0]), cost=float(row[1]), calls=int(row[2]), updated_at=float(row[3]))


class SQLiteBudgetStore:
    """``BudgetStore`` on one SQLite file. Close it with :meth:`aclose`."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._file = SQLiteFile(self.path, _SCHEMA)

    async def add(self, spends: Mapping[str, Spent]) -> dict[str, Spent]:
        rows = spend_rows(spends)
        if not rows:
            return {}

        def upsert(db: sqlite3.Connection) -> dict[str, Spent]:
            db.executemany(
                "INSERT INTO budgets (name, tokens, cost, calls, updated_at) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (name) DO UPDATE SET tokens = tokens + excluded.tokens, cost = cost + "
                "excluded.cost, calls = calls + excluded.calls, updated_at = excluded.updated_at",
                rows,
            )
            return _select(db, list(spends))

        return await self._file.write(upsert)

    async def read(self, names: Sequence[str] | None = None) -> dict[str, Spent]:
        wanted = None if names is None else list(names)
        return await self._file.run(lambda db: _select(db, wanted), write=False)

    async def reset(self, name: str) -> Spent | None:
        check_budget_name(name)

        def delete(db: sqlite3.Connection) -> Spent | None:
            had = _select(db, [name]).get(name)
            db.execute("DELETE FROM budgets WHERE name = ?", (name,))
            return had

        return await self._file.run(delete, write=True)

    async def aclose(self) -> None:
        await self._file.aclose()


def _select(db: sqlite3.Connection, names: list[str] | None) -> dict[str, Spent]:
    query = "SELECT name, tokens, cost, calls, updated_at FROM budgets"
    if names is None:
        rows = db.execute(query + " ORDER BY name").fetchall()
    else:
        rows = []
        for start in range(0, len(names), 500):
            chunk = names[start : start + 500]
            rows += db.execute(query + f" WHERE name IN ({','.join('?' * len(chunk))})", chunk).fetchall()
    return {row[0]: _spent(row[1:]) for row in rows}
