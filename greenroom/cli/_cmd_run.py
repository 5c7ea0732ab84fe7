"""``greenroom run`` (the daemon) and ``greenroom db upgrade`` (the PostgreSQL schema)."""

from __future__ import annotations

import argparse
from typing import Any

import anyio

from . import _args


def add_parsers(commands: Any) -> None:
    run = commands.add_parser("run", help="run the daemon: supervisor, event log and agents")
    _args.data_dir(run)
    run.add_argument("--config", help="TOML file naming the agent pools (default: the example agents)")
    run.add_argument("--until-idle", action="store_true", help="exit once no runnable task is left")
    run.add_argument(
        "--seed-example", nargs="?", type=_args.int_between(1, 10_000), const=40, metavar="TOPICS",
        help="first submit the example graph (TOPICS chains, default 40)",
    )  # fmt: skip
    run.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    run.add_argument(
        "--progress", type=_args.seconds, default=1.0, metavar="SECONDS", help="progress line interval"
    )
    run.add_argument("--quiet", action="store_true", help="no progress lines")
    run.add_argument(
        "--listen", metavar="HOST:PORT", help="the HTTP API's address (default: the config's, 127.0.0.1:0)"
    )
    run.add_argument("--no-api", action="store_true", help="serve no HTTP API")
    run.add_argument(
        "--workers", type=_args.int_between(1, 256), default=1, metavar="N",
        help="N daemon processes on this machine sharing one API address (PostgreSQL store only); "
        "agent pool sizes are per worker",
    )  # fmt: skip
    _args.store(run, "the task graph and event log in this PostgreSQL database, shared with other daemons")
    run.set_defaults(handler=run_daemon)

    db = commands.add_parser("db", help="the PostgreSQL schema (several daemons on one database)")
    upgrade = _args.actions(db).add_parser("upgrade", help="create or migrate greenroom's tables")
    _args.store(upgrade, "the database")
    upgrade.set_defaults(handler=db_upgrade)


def run_daemon(args: argparse.Namespace) -> int:
    from .._malloc import limit_arenas
    from ._run import run_daemon as run

    limit_arenas()  # before any worker thread: a daemon's RSS stays flat for months
    if args.workers > 1:
        from ._run import run_workers

        return run_workers(args)
    return anyio.run(
        lambda: run(
            data_dir=args.data_dir,
            config_path=args.config,
            until_idle=args.until_idle,
            seed_example=args.seed_example,
            progress_interval=None if args.quiet else args.progress,
            listen=args.listen,
            api=not args.no_api,
            store=args.store,
        ),
        backend=args.backend,
    )


def db_upgrade(args: argparse.Namespace) -> int:
    return anyio.run(_db_upgrade, args.store)


async def _db_upgrade(url: str | None) -> int:
    from .._errors import InvalidInput
    from ..postgres import Database, redact, upgrade

    if url is None:
        raise InvalidInput("db upgrade needs --store postgresql://... (or $GREENROOM_STORE)", field="--store")
    async with Database(url, max_size=2) as db:
        before, after = await db.run(upgrade)
    said = "is up to date" if before == after else f"upgraded from version {before}"
    print(f"greenroom: the schema of {redact(url)} {said} (version {after})")
    return 0
