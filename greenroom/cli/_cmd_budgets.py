"""``greenroom budgets list|reset``: what each named budget spent, kept in the store.

A named budget (a team's, the chat assistant's ``chat``) continues from its total after a
restart, on every daemon sharing the store; ``reset`` starts it from zero (a new period).
Both work beside a running daemon: it takes a reset at its next write or refresh.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import anyio

from . import _args


def add_parsers(commands: Any) -> None:
    budgets = commands.add_parser("budgets", help="what each named budget spent (kept across restarts)")
    budget_commands = _args.actions(budgets)
    listing = budget_commands.add_parser("list", help="every named budget's total")
    _args.data_dir(listing)
    _args.store(listing, "read this PostgreSQL database's budgets")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(handler=lambda args: anyio.run(_list, args))
    reset = budget_commands.add_parser("reset", help="start a budget from zero again")
    _args.data_dir(reset)
    _args.store(reset, "reset on this PostgreSQL database")
    reset.add_argument("name", metavar="NAME")
    reset.set_defaults(handler=lambda args: anyio.run(_reset, args))


def _backend(args: argparse.Namespace) -> Any:
    from ..daemon._backend import choose_store

    return choose_store(args.store, args.data_dir, pool_size=1)


async def _list(args: argparse.Namespace) -> int:
    from ..harness import BudgetStore
    from . import _format

    async with _backend(args) as store:
        budgets = BudgetStore(store.records())
        try:
            totals = await budgets.read()
        finally:
            await budgets.aclose()
    if args.json:
        print(_format.to_json(totals))
        return 0
    rows = [("NAME", "TOKENS", "COST", "CALLS", "UPDATED")]
    for name, spent in totals.items():
        updated = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(spent.updated_at))
        rows.append((name, str(spent.tokens), f"{spent.cost:.4f}", str(spent.calls), updated))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return 0


async def _reset(args: argparse.Namespace) -> int:
    from ..harness import BudgetStore, check_budget_name

    name = check_budget_name(args.name)
    async with _backend(args) as store:
        budgets = BudgetStore(store.records())
        try:
            had = await budgets.reset(name)
        finally:
            await budgets.aclose()
    if had is None:
        print(f"budget {name!r} had spent nothing")
    else:
        print(f"budget {name!r} starts from zero (it had spent {had.tokens} tokens, cost {had.cost:.4f})")
    return 0
