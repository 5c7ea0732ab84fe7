"""``PostgresBudgetStore``: the named budgets' totals in PostgreSQL (``gr_budgets``),
shared by every daemon of a fleet — the peer of the embedded SQLite totals behind
``greenroom.store.BudgetStore``. Increments are added in the database (``tokens =
tokens + %s``), so daemons adding at once never lose one another's spend."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..store import Spent, check_budget_name, spend_rows
from ._db import Database

_COLUMNS = "name, tokens, cost, calls, updated_at"


def _totals(rows: Any) -> dict[str, Spent]:
    return {
        name: Spent(tokens=int(tokens), cost=float(cost), calls=int(calls), updated_at=float(at))
        for name, tokens, cost, calls, at in rows
    }


class PostgresBudgetStore:
    """``BudgetStore`` on the backend's database (the pool is the backend's)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def add(self, spends: Mapping[str, Spent]) -> dict[str, Spent]:
        rows = spend_rows(spends)
        if not rows:
            return {}
        names = [row[0] for row in rows]

        def upsert(connection: Any) -> dict[str, Spent]:
            with connection.cursor() as cursor:  # in name order: two daemons never deadlock
                cursor.executemany(
                    f"INSERT INTO gr_budgets ({_COLUMNS}) VALUES (%s, %s, %s, %s, %s) "
                    "ON CONFLICT (name) DO UPDATE SET tokens = gr_budgets.tokens + excluded.tokens, "
                    "cost = gr_budgets.cost + excluded.cost, calls = gr_budgets.calls + excluded.calls, "
                    "updated_at = excluded.updated_at",
                    rows,
                )
            return _totals(
                connection.execute(f"SELECT {_COLUMNS} FROM gr_budgets WHERE name = ANY(%s)", (names,))
            )

        return await self.db.run(upsert)

    async def read(self, names: Sequence[str] | None = None) -> dict[str, Spent]:
        def fetch(connection: Any) -> dict[str, Spent]:
            if names is None:
                return _totals(connection.execute(f"SELECT {_COLUMNS} FROM gr_budgets ORDER BY name"))
            return _totals(
                connection.execute(f"SELECT {_COLUMNS} FROM gr_budgets WHERE name = ANY(%s)", (list(names),))
            )

        return await self.db.run(fetch)

    async def reset(self, name: str) -> Spent | None:
        check_budget_name(name)

        def delete(connection: Any) -> Spent | None:
            rows = connection.execute(f"DELETE FROM gr_budgets WHERE name = %s RETURNING {_COLUMNS}", (name,))
            return _totals(rows).get(name)

        return await self.db.run(delete)

    async def aclose(self) -> None:
        pass
