"""The operator's commands: ``tasks add|list|show|cancel|retry``, ``events tail``, ``status``,
``stop`` — through the daemon serving the data dir, else on the backend (``_operate``)."""

from __future__ import annotations

import argparse
from typing import Any

import anyio

from . import _args


def add_parsers(commands: Any) -> None:
    tasks = commands.add_parser(
        "tasks", help="add, list, show, cancel and retry tasks (through a running daemon)"
    )
    task_commands = _args.actions(tasks)
    add = task_commands.add_parser("add", help="submit tasks (all or none)")
    _args.remote(add)
    add.add_argument("--file", help="a JSON list of tasks")
    add.add_argument("--type", dest="task_type", help="agent type of a single task")
    add.add_argument("--id", dest="task_id")
    add.add_argument("--priority", type=_args.int_between(-1_000_000, 1_000_000), default=0)
    add.add_argument("--input", dest="input_json", metavar="JSON")
    add.add_argument("--depends-on", action="append", default=[], metavar="ID")
    add.add_argument("--max-attempts", type=_args.int_between(1, 1000), default=3)
    add.add_argument("--json", action="store_true")
    add.set_defaults(handler=tasks_add)
    listing = task_commands.add_parser("list", help="tasks in submission order (--newest: the other way)")
    _args.remote(listing)
    listing.add_argument("--status")
    listing.add_argument("--type", dest="task_type")
    listing.add_argument("--owner", help="only the tasks this agent holds or last held")
    listing.add_argument("--text", help="only the tasks with this text in their id or input (case ignored)")
    listing.add_argument(
        "--within",
        type=_args.duration,
        metavar="DURATION",
        help="only the tasks changed in the last 90s, 15m, 1h, 2d",
    )
    listing.add_argument("--newest", action="store_true", help="newest first")
    listing.add_argument("--json", action="store_true")
    listing.add_argument(
        "--archived", action="store_true", help="the finished tasks that left the live graph for the archive"
    )
    listing.set_defaults(handler=tasks_list)
    show = task_commands.add_parser("show", help="one task, whole")
    _args.remote(show)
    show.add_argument("task_id", metavar="ID")
    show.add_argument("--json", action="store_true")
    show.set_defaults(handler=_async(_tasks_show))
    cancel = task_commands.add_parser("cancel", help="cancel a task that is not final (its dependents too)")
    _args.remote(cancel)
    cancel.add_argument("task_id", metavar="ID")
    cancel.add_argument("--reason")
    cancel.add_argument("--json", action="store_true")
    cancel.set_defaults(handler=_async(_tasks_cancel))
    retry = task_commands.add_parser(
        "retry", help="run a FAILED task again: a fresh attempt budget, its dependents waiting for it again"
    )
    _args.remote(retry)
    retry.add_argument("task_id", metavar="ID")
    retry.add_argument("--reason", default="")
    retry.add_argument("--json", action="store_true")
    retry.set_defaults(handler=_async(_tasks_retry))
    for action, help_text in (
        ("approve", "approve the tool call a WAITING task waits on (it runs once, then the task goes on)"),
        ("deny", "deny the tool call a WAITING task waits on (the agent is told why)"),
    ):
        decide = task_commands.add_parser(action, help=help_text)
        _args.remote(decide)
        decide.add_argument("task_id", metavar="ID")
        decide.add_argument(
            "--reason", required=action == "deny", default="", help="why (kept with the task)"
        )
        decide.add_argument("--step", help="only if this is the call waiting (as `tasks show` gives it)")
        if action == "approve":
            decide.add_argument(
                "--as-done",
                action="store_true",
                help="the call already happened (by hand, or before a crash): record it done, not run",
            )
        decide.add_argument("--json", action="store_true")
        decide.set_defaults(handler=_async(_tasks_decide))

    bulk = task_commands.add_parser(
        "decide",
        help="decide many waiting calls at once (after a crash): a dry run unless --apply",
        description="Choose waiting calls by --type, --tool and --may-have-run; without --apply, "
        "list what would be decided; with it, decide each (recorded as a single decision is).",
    )
    _args.remote(bulk)
    verdict = bulk.add_mutually_exclusive_group(required=True)
    verdict.add_argument("--approve", action="store_true", help="approve them (they run)")
    verdict.add_argument("--deny", action="store_true", help="deny them (needs --reason)")
    bulk.add_argument(
        "--as-done", action="store_true", help="with --approve: they happened, record them done"
    )
    bulk.add_argument("--type", dest="task_type", help="only tasks of this agent type")
    bulk.add_argument("--tool", help="only calls of this tool")
    bulk.add_argument(
        "--may-have-run", action="store_true", help='only the calls a crash cut short ("it may have run")'
    )
    bulk.add_argument("--reason", default="", help="why (kept with each task)")
    bulk.add_argument("--apply", action="store_true", help="decide them (default: only show them)")
    bulk.add_argument("--json", action="store_true")
    bulk.set_defaults(handler=_async(_tasks_decide_many))

    events = commands.add_parser("events", help="read the event log")
    tail = _args.actions(events).add_parser(
        "tail", help="print events; --follow for new ones (works beside a daemon)"
    )
    _args.remote(tail)
    tail.add_argument("--follow", "-f", action="store_true")
    tail.add_argument("--after", type=_args.int_between(0, 2**62), default=0, metavar="SEQ")
    tail.add_argument("--last", "-n", type=_args.int_between(0, 10_000_000), metavar="N")
    tail.add_argument("--json", action="store_true")
    tail.set_defaults(handler=_async(_events_tail))

    status = commands.add_parser("status", help="the daemon: agents, tasks per state, mailboxes, budgets")
    _args.remote(status)
    status.add_argument("--json", action="store_true")
    status.set_defaults(handler=status_command)
    stop = commands.add_parser("stop", help="stop the running daemon gracefully (an admin token)")
    _args.remote(stop)
    stop.add_argument("--wait", type=_args.seconds, default=60.0, metavar="SECONDS", help="how long to wait")
    stop.set_defaults(handler=_async(_stop))


def _async(command: Any) -> _args.Handler:
    def handler(args: argparse.Namespace) -> int:
        code: int = anyio.run(command, args)
        return code

    return handler


async def _target(args: argparse.Namespace) -> Any:
    from . import _operate

    return await _operate.locate(args.data_dir, args.url, args.token, args.store)


def tasks_add(args: argparse.Namespace) -> int:
    """The tasks are parsed (and refused) before anything is looked up."""
    from . import _format

    if args.file is not None and args.task_type is not None:
        raise _format.CommandError("give either --file or --type, not both")
    if args.file is not None:
        new = _format.parse_task_file(args.file)
    elif args.task_type is not None:
        new = [
            _format.parse_task_flags(
                task_type=args.task_type,
                task_id=args.task_id,
                priority=args.priority,
                input_json=args.input_json,
                depends_on=args.depends_on,
                max_attempts=args.max_attempts,
            )
        ]
    else:
        raise _format.CommandError("tasks add needs --file or --type")
    return anyio.run(_tasks_add, args, new)


async def _tasks_add(args: argparse.Namespace, new: list[Any]) -> int:
    from . import _format, _operate

    stored = await _operate.add_tasks(await _target(args), new)
    print(_format.to_json(stored) if args.json else "\n".join(f"added {task.id}" for task in stored))
    return 0


def tasks_list(args: argparse.Namespace) -> int:
    """On the files with no daemon (the live graph), read in this thread: a read starts no
    event loop. Anywhere else (a daemon's API, PostgreSQL, the archive), as every command."""
    from . import _format, _operate

    target = _operate.locate_blocking(args.data_dir, args.url, args.token, args.store)
    if target.remote or target.store is not None or args.archived:
        code: int = anyio.run(_tasks_list, args)
        return code
    found = _operate.list_live_tasks_on_files(target, args.status, args.task_type, **_filters(args))
    print(_format.to_json(found) if args.json else _format.task_table(found))
    return 0


def _filters(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "owner": args.owner,
        "text": args.text,
        "updated_within": args.within,
        "newest_first": args.newest,
    }


async def _tasks_list(args: argparse.Namespace) -> int:
    from . import _format, _operate

    found = await _operate.list_tasks(
        await _target(args), args.status, args.task_type, archived=args.archived, **_filters(args)
    )
    print(_format.to_json(found) if args.json else _format.task_table(found))
    return 0


async def _tasks_show(args: argparse.Namespace) -> int:
    from . import _format, _operate

    print(_format.to_json(await _operate.show_task(await _target(args), args.task_id)))
    return 0


async def _tasks_retry(args: argparse.Namespace) -> int:
    from . import _format, _operate

    task = await _operate.retry_task(await _target(args), args.task_id, args.reason)
    print(_format.to_json(task) if args.json else f"retried {task.id}: {task.status.value}")
    return 0


async def _tasks_cancel(args: argparse.Namespace) -> int:
    from . import _format, _operate

    task = await _operate.cancel_task(await _target(args), args.task_id, args.reason)
    print(_format.to_json(task) if args.json else f"cancelled {task.id}")
    return 0


async def _tasks_decide(args: argparse.Namespace) -> int:
    from . import _format, _operate

    approved = args.action == "approve"
    as_done = approved and args.as_done
    task = await _operate.decide_task(
        await _target(args),
        args.task_id,
        approved=approved,
        reason=args.reason,
        step=args.step,
        as_done=as_done,
    )
    said = "recorded as done" if as_done else "approved" if approved else "denied"
    print(_format.to_json(task) if args.json else f"{said} {task.id}")
    return 0


async def _tasks_decide_many(args: argparse.Namespace) -> int:
    import json

    from .._errors import InvalidInput
    from . import _operate

    if args.as_done and not args.approve:
        raise InvalidInput("--as-done goes with --approve", field="as_done")
    if args.deny and not args.reason.strip():
        raise InvalidInput("--deny needs --reason (the agents are told it)", field="reason")
    where: dict[str, Any] = {}
    if args.task_type is not None:
        where["type"] = args.task_type
    if args.tool is not None:
        where["tool"] = args.tool
    if args.may_have_run:
        where["may_have_run"] = True
    answer = await _operate.decide_many(
        await _target(args), where, approved=args.approve, reason=args.reason, as_done=args.as_done,
        apply=args.apply,
    )  # fmt: skip
    if args.json:
        print(json.dumps(answer, indent=2))
        return 0
    said = "recorded as done" if args.as_done else "approved" if args.approve else "denied"
    for call in answer["matched"]:
        arguments = json.dumps(call["arguments"], sort_keys=True)
        question = " (may have run)" if "question" in call else ""
        print(f"{call['id']}  {call['tool']} {arguments:.120}{question}")
    matched = len(answer["matched"])
    if answer["dry_run"]:
        print(f"dry run: {matched} call(s) would be {said}; run again with --apply to decide them")
        return 0
    print(f"{said} {len(answer['decided'])} of {matched} call(s)")
    for refusal in answer["refused"]:
        print(f"refused {refusal['id']}: {refusal['error']}")
    return 0 if not answer["refused"] else 1


async def _events_tail(args: argparse.Namespace) -> int:
    from . import _operate

    target = await _target(args)
    return await _operate.tail(
        target, after=args.after, last=args.last, follow=args.follow, as_json=args.json
    )


def status_command(args: argparse.Namespace) -> int:
    """On the files with no daemon, read in this thread (no event loop); else as every command."""
    from . import _format, _operate

    target = _operate.locate_blocking(args.data_dir, args.url, args.token, args.store)
    if target.remote or target.store is not None:
        code: int = anyio.run(_status, args)
        return code
    document = _operate.status_on_files(target)
    print(_format.to_json(document) if args.json else _operate.format_status(document))
    return 0


async def _status(args: argparse.Namespace) -> int:
    from . import _format, _operate

    document = await _operate.status(await _target(args))
    print(_format.to_json(document) if args.json else _operate.format_status(document))
    return 0


async def _stop(args: argparse.Namespace) -> int:
    from . import _operate

    return await _operate.stop(await _target(args), wait=args.wait)
