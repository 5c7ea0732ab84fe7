"""``greenroom tokens add|list|revoke``: the API's bearer tokens, in the data dir."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from . import _args


def add_parsers(commands: Any) -> None:
    tokens = commands.add_parser("tokens", help="the API's bearer tokens (stored hashed in the data dir)")
    token_commands = _args.actions(tokens)
    token_add = token_commands.add_parser("add", help="make a token; it is printed once")
    _args.data_dir(token_add)
    token_add.add_argument("--user", required=True, help="the user id the token acts as")
    token_add.add_argument("--scope", required=True, choices=["chat", "tasks", "metrics", "admin"])
    token_add.add_argument("--note", default="", help="what it is for")
    token_add.set_defaults(handler=add)
    token_list = token_commands.add_parser("list", help="the tokens (ids, users, scopes; never the tokens)")
    _args.data_dir(token_list)
    token_list.set_defaults(handler=listing)
    token_revoke = token_commands.add_parser("revoke", help="revoke a token by its id")
    _args.data_dir(token_revoke)
    token_revoke.add_argument("token_id", metavar="ID")
    token_revoke.set_defaults(handler=revoke)


def _store(args: argparse.Namespace, *, create: bool) -> Any:
    from .._files import resolve_data_dir
    from ..service import TokenStore

    return TokenStore(resolve_data_dir(args.data_dir, create=create))


def listing(args: argparse.Namespace) -> int:
    rows = [("ID", "USER", "SCOPE", "CREATED", "NOTE")]
    for record in _store(args, create=False).load():
        created = time.strftime("%Y-%m-%d %H:%M", time.localtime(record.created_at))
        rows.append((record.id, record.user, record.scope, created, record.note))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return 0


def add(args: argparse.Namespace) -> int:
    token, record = _store(args, create=True).add(args.user, args.scope, note=args.note)
    print(token)
    print(
        f"greenroom: token {record.id} for user {record.user!r} ({record.scope}); it is shown only "
        "now, store it safely",
        file=sys.stderr,
    )
    return 0


def revoke(args: argparse.Namespace) -> int:
    record = _store(args, create=True).revoke(args.token_id)
    print(f"revoked {record.id} (user {record.user!r}, {record.scope})")
    return 0
