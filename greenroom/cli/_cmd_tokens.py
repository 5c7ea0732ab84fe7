"""``greenroom tokens add|list|revoke``: the API's bearer tokens, kept hashed in the store
(the data dir's records, or ``--store``'s database: every daemon of a fleet knows them).

Each works beside a running daemon: it reads the tokens again within a second."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio

from . import _args


def add_parsers(commands: Any) -> None:
    tokens = commands.add_parser("tokens", help="the API's bearer tokens (stored hashed in the store)")
    token_commands = _args.actions(tokens)
    token_add = token_commands.add_parser("add", help="make a token; it is printed once")
    _args.data_dir(token_add)
    _args.store(token_add, "keep it in this PostgreSQL database (every daemon on it knows it)")
    token_add.add_argument("--user", required=True, help="the user id the token acts as")
    token_add.add_argument("--scope", required=True, choices=["chat", "tasks", "metrics", "admin"])
    token_add.add_argument("--note", default="", help="what it is for")
    token_add.set_defaults(handler=lambda args: anyio.run(add, args))
    token_list = token_commands.add_parser("list", help="the tokens (ids, users, scopes; never the tokens)")
    _args.data_dir(token_list)
    _args.store(token_list, "this PostgreSQL database's tokens")
    token_list.set_defaults(handler=lambda args: anyio.run(listing, args))
    token_revoke = token_commands.add_parser("revoke", help="revoke a token by its id")
    _args.data_dir(token_revoke)
    _args.store(token_revoke, "revoke it in this PostgreSQL database")
    token_revoke.add_argument("token_id", metavar="ID")
    token_revoke.set_defaults(handler=lambda args: anyio.run(revoke, args))


@asynccontextmanager
async def _tokens(args: argparse.Namespace) -> AsyncIterator[Any]:
    from .._files import resolve_data_dir
    from ..daemon._backend import choose_store
    from ..service import TokenStore

    data_dir = resolve_data_dir(args.data_dir, create=True)
    if args.store is None:
        await anyio.to_thread.run_sync(_same_store_as_the_daemon, data_dir)
    async with choose_store(args.store, args.data_dir, pool_size=1) as store:
        records = store.records()
        try:
            yield TokenStore(records, folded_from=data_dir)
        finally:
            await records.aclose()


def _same_store_as_the_daemon(data_dir: Path) -> None:
    """Refuse to keep tokens in the data dir's files when the daemon running on it keeps
    them in a database: a token made there would never be accepted."""
    from .._errors import DataError, InvalidInput
    from ..service import find_daemon

    try:
        found = find_daemon(data_dir, wait=5.0)
    except DataError:
        return  # a daemon still starting: nothing known of its store yet
    if found is not None and found[0].shared:
        raise InvalidInput(
            f"the daemon on {data_dir} keeps its tokens in {found[0].store}: pass --store with that "
            "database (or set GREENROOM_STORE), or the token would be kept where it never looks",
            field="--store",
        )


async def listing(args: argparse.Namespace) -> int:
    rows = [("ID", "USER", "SCOPE", "CREATED", "NOTE")]
    async with _tokens(args) as tokens:
        for record in await tokens.load():
            created = time.strftime("%Y-%m-%d %H:%M", time.localtime(record.created_at))
            rows.append((record.id, record.user, record.scope, created, record.note))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return 0


async def add(args: argparse.Namespace) -> int:
    async with _tokens(args) as tokens:
        token, record = await tokens.add(args.user, args.scope, note=args.note)
    print(token)
    print(
        f"greenroom: token {record.id} for user {record.user!r} ({record.scope}); it is shown only "
        "now, store it safely",
        file=sys.stderr,
    )
    return 0


async def revoke(args: argparse.Namespace) -> int:
    async with _tokens(args) as tokens:
        record = await tokens.revoke(args.token_id)
    print(f"revoked {record.id} (user {record.user!r}, {record.scope})")
    return 0
