"""The ``greenroom`` command.

greenroom --version                       greenroom --debug COMMAND ...   (tracebacks of bugs)
greenroom run [--data-dir D] [--config F] [--until-idle] [--seed-example [N]] [--backend B]
greenroom tasks add (--file F | --type T [--id ID] [--priority N] [--input JSON] [--depends-on ID ...])
greenroom tasks list [--status S] [--type T] [--json]      greenroom tasks show ID [--json]
greenroom events tail [--follow] [--after SEQ] [--last N] [--json]
greenroom chat [--user U] [--conversation ID] [--message TEXT ...] [--base-url URL --model M]
greenroom mcp serve                                         (the task tools, MCP over stdio)
greenroom pipeline run (PIPELINE.toml | --example) (--input TEXT ... | --inputs FILE) [--json]
greenroom bench actors|graph|log|harness ...

The data dir defaults to $STREAMING_LLM_DATA_DIR, else ~/.local/share/greenroom.

Exit codes: 0 done; 1 an error the user can act on (bad input, a busy or damaged data
dir, an OS error such as a read-only or full disk), said in one line; 2 a bad flag;
70 a bug in greenroom (one line; the traceback with --debug); 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from collections.abc import Sequence
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


def _parser() -> argparse.ArgumentParser:
    from .bench import SUITES
    from .bench.actors import WORKLOADS

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

    tasks = commands.add_parser("tasks", help="add, list and show tasks (not while a daemon runs)")
    task_commands = tasks.add_subparsers(dest="action", metavar="ACTION")
    add = task_commands.add_parser("add", help="submit tasks (all or none)")
    data_dir(add)
    add.add_argument("--file", help="a JSON list of tasks")
    add.add_argument("--type", dest="task_type", help="agent type of a single task")
    add.add_argument("--id", dest="task_id")
    add.add_argument("--priority", type=_int_between(-1_000_000, 1_000_000), default=0)
    add.add_argument("--input", dest="input_json", metavar="JSON")
    add.add_argument("--depends-on", action="append", default=[], metavar="ID")
    add.add_argument("--max-attempts", type=_int_between(1, 1000), default=3)
    add.add_argument("--json", action="store_true")
    listing = task_commands.add_parser("list", help="tasks in submission order")
    data_dir(listing)
    listing.add_argument("--status")
    listing.add_argument("--type", dest="task_type")
    listing.add_argument("--json", action="store_true")
    show = task_commands.add_parser("show", help="one task, whole")
    data_dir(show)
    show.add_argument("task_id", metavar="ID")
    show.add_argument("--json", action="store_true")

    events = commands.add_parser("events", help="read the event log")
    event_commands = events.add_subparsers(dest="action", metavar="ACTION")
    tail = event_commands.add_parser(
        "tail", help="print events; --follow for new ones (works beside a daemon)"
    )
    data_dir(tail)
    tail.add_argument("--follow", "-f", action="store_true")
    tail.add_argument("--after", type=_int_between(0, 2**62), default=0, metavar="SEQ")
    tail.add_argument("--last", "-n", type=_int_between(0, 10_000_000), metavar="N")
    tail.add_argument("--json", action="store_true")

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

    mcp = commands.add_parser("mcp", help="serve the task tools to MCP clients")
    mcp_commands = mcp.add_subparsers(dest="action", metavar="ACTION")
    serve = mcp_commands.add_parser("serve", help="MCP over stdio; the user id comes in each request's _meta")
    data_dir(serve)
    serve.add_argument("--http", metavar="HOST:PORT", help="serve over streamable HTTP at /mcp instead")
    serve.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")

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

    bench = commands.add_parser("bench", help="run a benchmark against in-run baselines")
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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return _dispatch(parser, args)
    except KeyboardInterrupt:
        return 130
    except Exception as error:  # the one place an error becomes an exit code (nothing awaits here)
        return report_error(error, debug=args.debug or bool(os.environ.get("GREENROOM_DEBUG")))


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
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
        stored = anyio.run(commands.add_tasks, args.data_dir, new)
        print(commands.to_json(stored) if args.json else "\n".join(f"added {task.id}" for task in stored))
        return 0
    if args.command == "tasks" and args.action in ("list", "show"):
        found = commands.read_tasks(args.data_dir)
        if args.action == "show":
            match = [task for task in found if task.id == args.task_id]
            if not match:
                raise commands.CommandError(f"no task with id {args.task_id!r}")
            print(commands.to_json(match[0]))
            return 0
        if args.status is not None:
            status = commands.decode_status(args.status)
            found = [task for task in found if task.status is status]
        if args.task_type is not None:
            found = [task for task in found if task.type == args.task_type]
        print(
            commands.to_json(sorted(found, key=lambda t: t.order))
            if args.json
            else commands.task_table(found)
        )
        return 0
    if args.command == "events" and args.action == "tail":
        return anyio.run(
            lambda: commands.tail(
                args.data_dir, after=args.after, last=args.last, follow=args.follow, as_json=args.json
            )
        )
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
            )
        )
    if args.command == "mcp" and args.action == "serve":
        from .daemon import _chat

        return anyio.run(_chat.serve_mcp, args.data_dir, args.http, backend=args.backend)
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
