"""The ``greenroom`` command.

greenroom --version                       greenroom --debug COMMAND ...   (tracebacks of bugs)
greenroom run [--data-dir D] [--config F] [--until-idle] [--seed-example [N]] [--backend B]
              [--listen HOST:PORT | --no-api]
greenroom tasks add (--file F | --type T [--id ID] [--priority N] [--input JSON] [--depends-on ID ...])
greenroom tasks list [--status S] [--type T] [--json]      greenroom tasks show ID [--json]
greenroom tasks cancel ID [--reason TEXT]                  greenroom status [--json]    greenroom stop
greenroom events tail [--follow] [--after SEQ] [--last N] [--json]
greenroom tokens add --user U --scope chat|tasks|admin     greenroom tokens list | revoke ID
greenroom chat [--user U] [--conversation ID] [--message TEXT ...] [--base-url URL --model M] [--store URL]
               [--max-tokens N] [--temperature T] [--context-window N] [--backend B]
greenroom mcp serve                                         (the task tools, MCP over stdio)
greenroom pipeline run (PIPELINE.toml | --example) (--input TEXT ... | --inputs FILE) [--json]
greenroom bench actors|graph|log|harness ...

The data dir defaults to $STREAMING_LLM_DATA_DIR, else ~/.local/share/greenroom. The
tasks, events, status and stop commands go through the API of the daemon serving the data
dir when one runs, and work on the files when none does (same output); --url and --token
(or $GREENROOM_TOKEN) reach a daemon elsewhere.

Exit codes: 0 done; 1 an error the user can act on (bad input, a busy or damaged data
dir, an OS error such as a read-only or full disk), said in one line; 2 a bad flag;
70 a bug in greenroom (one line; the traceback with --debug); 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, TextIO

import anyio

from . import __version__
from ._errors import GreenroomError, InternalError


def _int_between(minimum: int, maximum: int) -> Any:
    def parse(text: str) -> int:
        wanted = f"must be a whole number from {minimum} to {maximum}, got {text!r:.40}"
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(wanted) from None
        if not minimum <= value <= maximum:
            raise argparse.ArgumentTypeError(wanted)
        return value

    return parse


_positive_int = _int_between(1, 1_000_000)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {text!r}") from None
    if not (0 < value < 1e6):
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {text!r}")
    return value


def _count(low: int, high: int) -> Callable[[str], int]:
    def whole(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = low - 1
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be a whole number from {low} to {high}, got {text!r}")
        return value

    return whole


def _temperature(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 2:
        raise argparse.ArgumentTypeError(f"must be a number from 0 to 2, got {text!r}")
    return value


def _parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The command line's parser. The benchmark suites (which import every layer, the
    openai SDK among them) are only described when the command is ``bench``: every other
    command starts without importing them."""
    parser = argparse.ArgumentParser(
        prog="greenroom", description=__doc__.split("\n")[0] if __doc__ else None
    )
    parser.add_argument("--version", action="version", version=f"greenroom {__version__}")
    parser.add_argument(
        "--debug", action="store_true", help="show the traceback when greenroom fails with a bug"
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    def data_dir(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--data-dir", help="default: $STREAMING_LLM_DATA_DIR or ~/.local/share/greenroom")

    def store(sub: argparse.ArgumentParser, what: str) -> None:
        sub.add_argument(
            "--store", metavar="postgresql://...", default=os.environ.get("GREENROOM_STORE"),
            help=f"{what} (default: $GREENROOM_STORE; the password from $PGPASSWORD)",
        )  # fmt: skip

    def remote(sub: argparse.ArgumentParser) -> None:
        data_dir(sub)
        sub.add_argument("--url", help="a daemon's API elsewhere (default: the one serving the data dir)")
        sub.add_argument("--token", help="the API token for --url (default: $GREENROOM_TOKEN)")
        store(sub, "with no daemon to ask, work on this PostgreSQL database")

    run = commands.add_parser("run", help="run the daemon: supervisor, event log and agents")
    data_dir(run)
    run.add_argument("--config", help="TOML file naming the agent pools (default: the example agents)")
    run.add_argument("--until-idle", action="store_true", help="exit once no runnable task is left")
    run.add_argument(
        "--seed-example", nargs="?", type=_int_between(1, 10_000), const=40, metavar="TOPICS",
        help="first submit the example graph (TOPICS chains, default 40)",
    )  # fmt: skip
    run.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    run.add_argument(
        "--progress", type=_seconds, default=1.0, metavar="SECONDS", help="progress line interval"
    )
    run.add_argument("--quiet", action="store_true", help="no progress lines")
    run.add_argument(
        "--listen", metavar="HOST:PORT", help="the HTTP API's address (default: the config's, 127.0.0.1:0)"
    )
    run.add_argument("--no-api", action="store_true", help="serve no HTTP API")
    store(run, "the task graph and event log in this PostgreSQL database, shared with other daemons")

    db = commands.add_parser("db", help="the PostgreSQL schema (several daemons on one database)")
    db_commands = db.add_subparsers(dest="action", metavar="ACTION")
    upgrade = db_commands.add_parser("upgrade", help="create or migrate greenroom's tables")
    store(upgrade, "the database")

    tasks = commands.add_parser("tasks", help="add, list, show and cancel tasks (through a running daemon)")
    task_commands = tasks.add_subparsers(dest="action", metavar="ACTION")
    add = task_commands.add_parser("add", help="submit tasks (all or none)")
    remote(add)
    add.add_argument("--file", help="a JSON list of tasks")
    add.add_argument("--type", dest="task_type", help="agent type of a single task")
    add.add_argument("--id", dest="task_id")
    add.add_argument("--priority", type=_int_between(-1_000_000, 1_000_000), default=0)
    add.add_argument("--input", dest="input_json", metavar="JSON")
    add.add_argument("--depends-on", action="append", default=[], metavar="ID")
    add.add_argument("--max-attempts", type=_int_between(1, 1000), default=3)
    add.add_argument("--json", action="store_true")
    listing = task_commands.add_parser("list", help="tasks in submission order")
    remote(listing)
    listing.add_argument("--status")
    listing.add_argument("--type", dest="task_type")
    listing.add_argument("--json", action="store_true")
    show = task_commands.add_parser("show", help="one task, whole")
    remote(show)
    show.add_argument("task_id", metavar="ID")
    show.add_argument("--json", action="store_true")
    cancel = task_commands.add_parser("cancel", help="cancel a task that is not final (its dependents too)")
    remote(cancel)
    cancel.add_argument("task_id", metavar="ID")
    cancel.add_argument("--reason")
    cancel.add_argument("--json", action="store_true")

    events = commands.add_parser("events", help="read the event log")
    event_commands = events.add_subparsers(dest="action", metavar="ACTION")
    tail = event_commands.add_parser(
        "tail", help="print events; --follow for new ones (works beside a daemon)"
    )
    remote(tail)
    tail.add_argument("--follow", "-f", action="store_true")
    tail.add_argument("--after", type=_int_between(0, 2**62), default=0, metavar="SEQ")
    tail.add_argument("--last", "-n", type=_int_between(0, 10_000_000), metavar="N")
    tail.add_argument("--json", action="store_true")

    status = commands.add_parser("status", help="the daemon: agents, tasks per state, mailboxes, budgets")
    remote(status)
    status.add_argument("--json", action="store_true")
    stop = commands.add_parser("stop", help="stop the running daemon gracefully (an admin token)")
    remote(stop)
    stop.add_argument("--wait", type=_seconds, default=60.0, metavar="SECONDS", help="how long to wait")

    tokens = commands.add_parser("tokens", help="the API's bearer tokens (stored hashed in the data dir)")
    token_commands = tokens.add_subparsers(dest="action", metavar="ACTION")
    token_add = token_commands.add_parser("add", help="make a token; it is printed once")
    data_dir(token_add)
    token_add.add_argument("--user", required=True, help="the user id the token acts as")
    token_add.add_argument("--scope", required=True, choices=["chat", "tasks", "admin"])
    token_add.add_argument("--note", default="", help="what it is for")
    token_list = token_commands.add_parser("list", help="the tokens (ids, users, scopes; never the tokens)")
    data_dir(token_list)
    token_revoke = token_commands.add_parser("revoke", help="revoke a token by its id")
    data_dir(token_revoke)
    token_revoke.add_argument("token_id", metavar="ID")

    chat = commands.add_parser("chat", help="talk to the task assistant (offline by default)")
    data_dir(chat)
    chat.add_argument("--user", default="me", help="whose tasks and conversations (default: me)")
    chat.add_argument("--conversation", help="resume this conversation (its id is printed when it starts)")
    chat.add_argument(
        "--message", "-m", action="append", dest="messages", metavar="TEXT",
        help="say this instead of reading standard input (repeatable)",
    )  # fmt: skip
    chat.add_argument(
        "--base-url", help="an OpenAI-compatible server (default: $OPENAI_BASE_URL, else offline)"
    )
    chat.add_argument("--model", dest="model_name", help="the model name there (default: $OPENAI_MODEL)")
    chat.add_argument("--mcp-url", help="take the tools from this MCP server (streamable HTTP)")
    chat.add_argument("--mcp-command", help="take the tools from this MCP server command (stdio)")
    chat.add_argument("--timeout", type=_seconds, help="seconds per request (default 30)")
    chat.add_argument(
        "--max-tokens", type=_count(1, 1_000_000), help="the longest reply a model call may generate (1024)"
    )
    chat.add_argument("--temperature", type=_temperature, help="sampling temperature, 0-2 (default 0)")
    chat.add_argument(
        "--context-window", type=_count(16, 100_000_000), help="the model's context window in tokens"
    )
    chat.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    store(chat, "the tasks and conversations in this PostgreSQL database")

    mcp = commands.add_parser("mcp", help="serve the task tools to MCP clients")
    mcp_commands = mcp.add_subparsers(dest="action", metavar="ACTION")
    serve = mcp_commands.add_parser("serve", help="MCP over stdio; the user id comes in each request's _meta")
    data_dir(serve)
    serve.add_argument("--http", metavar="HOST:PORT", help="serve over streamable HTTP at /mcp instead")
    serve.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    store(serve, "the tasks in this PostgreSQL database")

    pipeline = commands.add_parser("pipeline", help="run inputs through a configured pipeline of stages")
    pipeline_commands = pipeline.add_subparsers(dest="action", metavar="ACTION")
    prun = pipeline_commands.add_parser("run", help="each input is an envelope; each stage is shown")
    data_dir(prun)
    prun.add_argument("path", nargs="?", metavar="PIPELINE.toml")
    prun.add_argument(
        "--example", action="store_true", help="the shipped planner -> executor -> critic example"
    )
    prun.add_argument("--input", action="append", dest="inputs", metavar="TEXT", help="repeatable")
    prun.add_argument("--inputs", dest="inputs_file", metavar="FILE", help="one input per line")
    prun.add_argument("--json", action="store_true", help="one JSON object per envelope")
    store(prun, "the events in this PostgreSQL database")

    bench = commands.add_parser("bench", help="run a benchmark against in-run baselines")
    if _command_of(argv) == "bench":
        _bench_parsers(bench)
    return parser


def _command_of(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names: its first word that is not an option (the global
    options take no value)."""
    return next((word for word in argv if not word.startswith("-")), None)


def _bench_parsers(bench: argparse.ArgumentParser) -> None:
    from .bench import SUITES
    from .bench.actors import WORKLOADS

    suites = bench.add_subparsers(dest="suite", metavar="SUITE")
    actors = suites.add_parser("actors", help="Savina-style actor workloads vs plain queues")
    actors.add_argument("--backend", choices=["asyncio", "trio", "both"], default="both")
    actors.add_argument("--runs", type=_positive_int, default=5, help="timed runs per figure (median)")
    actors.add_argument(
        "--workload", action="append", choices=WORKLOADS, dest="workloads", help="only these (repeatable)"
    )
    actors.add_argument("--json", action="store_true", help="print the figures as JSON")
    for name, module in SUITES.items():
        suite = suites.add_parser(name, help=module.HELP)
        suite.add_argument("--backend", choices=["asyncio", "trio", "both"], default="both")
        module.add_arguments(suite, _positive_int)
        suite.add_argument("--json", action="store_true", help="print the figures as JSON")


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    parser = _parser(words)
    args = parser.parse_args(words)
    try:
        return _dispatch(parser, args)
    except KeyboardInterrupt:
        return 130
    except Exception as error:  # the one place an error becomes an exit code (nothing awaits here)
        return report_error(error, debug=args.debug or bool(os.environ.get("GREENROOM_DEBUG")))


def _leaves(error: BaseException) -> list[BaseException]:
    from .actors import ChildFailed

    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    if isinstance(error, ChildFailed):  # an actor escalated it: what the user needs is its cause
        return _leaves(error.error)
    return [error]


def _describe(error: BaseException) -> str:
    if isinstance(error, OSError) and not isinstance(error, GreenroomError):
        what = error.strerror or str(error) or type(error).__name__
        where = error.filename if error.filename is not None else None
        return f"{where}: {what}" if where is not None else what
    return str(error) or type(error).__name__


def report_error(error: BaseException, *, debug: bool = False, err: TextIO | None = None) -> int:
    """One line for an error a user can act on (exit 1); for anything else, one line
    saying it is a bug, and the traceback only with ``debug`` (exit 70)."""
    out = err if err is not None else sys.stderr
    leaves = _leaves(error)
    if all(isinstance(e, (GreenroomError, OSError)) and not isinstance(e, InternalError) for e in leaves):
        seen: set[str] = set()
        for leaf in leaves:
            line = _describe(leaf)
            if line not in seen:
                seen.add(line)
                print(f"greenroom: error: {line}", file=out)
        return 1
    bug = next(
        e for e in leaves if not isinstance(e, (GreenroomError, OSError)) or isinstance(e, InternalError)
    )
    print(
        f"greenroom: internal error ({type(bug).__name__}: {_describe(bug)[:200]}): this is a bug in "
        "greenroom; nothing you typed caused it. Please report it.",
        file=out,
    )
    if debug:
        traceback.print_exception(error, file=out)
    else:
        print("greenroom: run it again with --debug (or GREENROOM_DEBUG=1) to see the traceback", file=out)
    return 70


async def _target(args: argparse.Namespace) -> Any:
    from .daemon import _operate

    return await _operate.locate(args.data_dir, args.url, args.token, args.store)


async def _tasks_add(args: argparse.Namespace, new: list[Any]) -> int:
    from .daemon import _commands as commands
    from .daemon import _operate

    stored = await _operate.add_tasks(await _target(args), new)
    print(commands.to_json(stored) if args.json else "\n".join(f"added {task.id}" for task in stored))
    return 0


async def _tasks_read(args: argparse.Namespace) -> int:
    from .daemon import _commands as commands
    from .daemon import _operate

    target = await _target(args)
    if args.action == "show":
        print(commands.to_json(await _operate.show_task(target, args.task_id)))
        return 0
    if args.action == "cancel":
        task = await _operate.cancel_task(target, args.task_id, args.reason)
        print(commands.to_json(task) if args.json else f"cancelled {task.id}")
        return 0
    found = await _operate.list_tasks(target, args.status, args.task_type)
    print(commands.to_json(found) if args.json else commands.task_table(found))
    return 0


async def _events_tail(args: argparse.Namespace) -> int:
    from .daemon import _operate

    target = await _target(args)
    return await _operate.tail(
        target, after=args.after, last=args.last, follow=args.follow, as_json=args.json
    )


async def _status_or_stop(args: argparse.Namespace) -> int:
    from .daemon import _commands as commands
    from .daemon import _operate

    target = await _target(args)
    if args.command == "stop":
        return await _operate.stop(target, wait=args.wait)
    document = await _operate.status(target)
    print(commands.to_json(document) if args.json else _operate.format_status(document))
    return 0


async def _db_upgrade(url: str | None) -> int:
    from ._errors import InvalidInput
    from .postgres import Database, redact, upgrade

    if url is None:
        raise InvalidInput("db upgrade needs --store postgresql://... (or $GREENROOM_STORE)", field="--store")
    async with Database(url, max_size=2) as db:
        before, after = await db.run(upgrade)
    said = "is up to date" if before == after else f"upgraded from version {before}"
    print(f"greenroom: the schema of {redact(url)} {said} (version {after})")
    return 0


def _tokens(args: argparse.Namespace) -> int:
    from ._files import resolve_data_dir
    from .service import TokenStore

    if args.action == "list":
        store = TokenStore(resolve_data_dir(args.data_dir, create=False))
        rows = [("ID", "USER", "SCOPE", "CREATED", "NOTE")]
        for record in store.load():
            created = time.strftime("%Y-%m-%d %H:%M", time.localtime(record.created_at))
            rows.append((record.id, record.user, record.scope, created, record.note))
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        for row in rows:
            print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
        return 0
    store = TokenStore(resolve_data_dir(args.data_dir))
    if args.action == "add":
        token, record = store.add(args.user, args.scope, note=args.note)
        print(token)
        print(
            f"greenroom: token {record.id} for user {record.user!r} ({record.scope}); it is shown only "
            "now, store it safely",
            file=sys.stderr,
        )
        return 0
    record = store.revoke(args.token_id)
    print(f"revoked {record.id} (user {record.user!r}, {record.scope})")
    return 0


def _dispatch(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from .daemon import _commands as commands

    if args.command == "run":
        return anyio.run(
            lambda: commands.run_daemon(
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
    if args.command == "tasks" and args.action == "add":
        if args.file is not None and args.task_type is not None:
            raise commands.CommandError("give either --file or --type, not both")
        if args.file is not None:
            new = commands.parse_task_file(args.file)
        elif args.task_type is not None:
            new = [
                commands.parse_task_flags(
                    task_type=args.task_type,
                    task_id=args.task_id,
                    priority=args.priority,
                    input_json=args.input_json,
                    depends_on=args.depends_on,
                    max_attempts=args.max_attempts,
                )
            ]
        else:
            raise commands.CommandError("tasks add needs --file or --type")
        return anyio.run(partial(_tasks_add, args, new))
    if args.command == "tasks" and args.action in ("list", "show", "cancel"):
        return anyio.run(partial(_tasks_read, args))
    if args.command == "events" and args.action == "tail":
        return anyio.run(partial(_events_tail, args))
    if args.command in ("status", "stop"):
        return anyio.run(partial(_status_or_stop, args))
    if args.command == "db" and args.action == "upgrade":
        return anyio.run(_db_upgrade, args.store)
    if args.command == "tokens" and args.action is not None:
        return _tokens(args)
    if args.command == "chat":
        from .daemon import _chat

        return anyio.run(
            lambda: _chat.run_chat(
                data_dir=args.data_dir,
                user=args.user,
                conversation=args.conversation,
                messages=args.messages,
                base_url=args.base_url,
                model_name=args.model_name,
                mcp_url=args.mcp_url,
                mcp_command=args.mcp_command,
                timeout=args.timeout,
                max_tokens=args.max_tokens,
                temperature=args.temperature,
                context_window=args.context_window,
                store=args.store,
            ),
            backend=args.backend,
        )
    if args.command == "mcp" and args.action == "serve":
        from .daemon import _chat

        return anyio.run(
            lambda: _chat.serve_mcp(args.data_dir, args.http, store=args.store), backend=args.backend
        )
    if args.command == "pipeline" and args.action == "run":
        from .daemon import _pipeline

        return anyio.run(
            lambda: _pipeline.run_pipeline(
                path=args.path,
                example=args.example,
                inputs=args.inputs,
                inputs_file=args.inputs_file,
                data_dir=args.data_dir,
                as_json=args.json,
                store=args.store,
            )
        )
    if args.command == "bench" and args.suite == "actors":
        from .bench import actors

        backends = ["asyncio", "trio"] if args.backend == "both" else [args.backend]
        workloads = tuple(args.workloads) if args.workloads else actors.WORKLOADS
        results = {}
        for backend in backends:
            results[backend] = actors.run(backend, args.runs, workloads)
            if not args.json:
                print(actors.format_table(backend, results[backend]), flush=True)
                print(flush=True)
        if args.json:
            print(json.dumps(results[backends[0]] if len(backends) == 1 else results, indent=2))
        return 0
    if args.command == "bench" and args.suite is not None:
        from .bench import SUITES

        code: int = SUITES[args.suite].main(args)
        return code
    parser.print_help(sys.stderr)
    return 2
