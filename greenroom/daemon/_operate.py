"""The operator's commands — ``tasks add|list|show|cancel``, ``events tail``, ``status``,
``stop`` — through the running daemon's API when one serves the data dir, on the files
when none does; the output is the same either way.

The daemon is found through the data dir (``daemon.json`` and a local admin token, both
readable by the owner only); ``--url`` (with ``--token`` or ``$GREENROOM_TOKEN``) names
one elsewhere. A daemon that holds the data dir but serves no API (``--no-api``) leaves the
commands that write refused, as before: the files have one owner at a time.
"""

from __future__ import annotations

import os
import sys
import time
from contextlib import aclosing
from dataclasses import dataclass
from functools import partial
from typing import Any, TextIO

import anyio
import msgspec

from .._errors import InvalidInput
from .._files import resolve_data_dir
from ..actors import ActorSystem
from ..log import LogActor
from ..messages import AgentTask, Cancel, TaskStatus
from ..service import ServiceClient, ServiceError, ServiceUnavailable, find_daemon
from ..supervisor import SupervisorActor
from . import _commands as files

TOKEN_ENV = "GREENROOM_TOKEN"


@dataclass(frozen=True)
class Target:
    """Where a command goes: ``url`` + ``token`` (the API), or the files of ``data_dir``."""

    data_dir: str | None
    url: str | None = None
    token: str | None = None
    store: str | None = None
    """A PostgreSQL URL: with no daemon to ask, work on that database instead of the files."""

    @property
    def store_shown(self) -> str:
        from ..postgres import redact

        return redact(self.store or "")

    @property
    def remote(self) -> bool:
        return self.url is not None

    def client(self) -> ServiceClient:
        assert self.url is not None
        return ServiceClient(self.url, self.token)


def _locate(data_dir: str | None, url: str | None, token: str | None, store: str | None = None) -> Target:
    """Where a command goes: ``--url``; else the daemon serving the data dir (whatever
    store it runs on: it is the one to ask, and the only one that can stop); else, with
    no daemon, the database ``store`` names, or the data dir's files."""
    if store is not None:
        from ..postgres import check_url

        check_url(store)
    if url is not None:
        return Target(data_dir, url, token or os.environ.get(TOKEN_ENV))
    try:
        path = resolve_data_dir(data_dir, create=False)
    except InvalidInput:
        return Target(data_dir, store=store)  # the file path reports the missing data dir
    found = find_daemon(path)
    if found is None:
        return Target(data_dir, store=store)
    info, admin = found
    return Target(data_dir, info.url, token or admin)


async def locate(
    data_dir: str | None, url: str | None = None, token: str | None = None, store: str | None = None
) -> Target:
    """Blocking file checks in a worker thread; cancellable."""
    return await anyio.to_thread.run_sync(_locate, data_dir, url, token, store)


async def _on_database(store: str, fn: Any) -> Any:
    """``fn(graph, connection)`` in one transaction on the ``store`` database."""
    from ..postgres import Database, PostgresGraph, check

    async with Database(store, max_size=2) as db:
        await db.run(check)
        graph = PostgresGraph()
        return await db.run(lambda connection: fn(graph, connection))


def _refused(error: ServiceError) -> InvalidInput:
    """An API refusal as the one-line CLI error (the message is the server's)."""
    return InvalidInput(str(error) or f"the API refused the request (HTTP {error.status})", field=error.field)


# -- tasks ------------------------------------------------------------------------------


async def add_tasks(target: Target, tasks: list[AgentTask]) -> list[AgentTask]:
    if target.store is not None and not target.remote:
        return await _on_database(target.store, lambda graph, c: graph.submit(c, tasks))  # type: ignore[no-any-return]
    if not target.remote:
        return await files.add_tasks(target.data_dir, tasks)
    async with target.client() as api:
        try:
            return await api.submit(tasks)
        except ServiceError as error:
            raise _refused(error) from None


async def list_tasks(target: Target, status: str | None, agent_type: str | None) -> list[AgentTask]:
    wanted = files.decode_status(status) if status is not None else None
    if target.store is not None and not target.remote:
        return await _on_database(  # type: ignore[no-any-return]
            target.store, lambda graph, c: graph.list_tasks(c, wanted, agent_type)
        )
    if not target.remote:
        found = await anyio.to_thread.run_sync(files.read_tasks, target.data_dir)
        return sorted(
            (
                t
                for t in found
                if (wanted is None or t.status is wanted) and (agent_type is None or t.type == agent_type)
            ),
            key=lambda t: t.order,
        )
    async with target.client() as api:
        try:
            return await api.list_tasks(wanted.value if wanted else None, agent_type)
        except ServiceError as error:
            raise _refused(error) from None


async def show_task(target: Target, task_id: str) -> AgentTask:
    if target.store is not None and not target.remote:
        return await _on_database(target.store, lambda graph, c: graph.get(c, task_id))  # type: ignore[no-any-return]
    if not target.remote:
        found = await anyio.to_thread.run_sync(files.read_tasks, target.data_dir)
        for task in found:
            if task.id == task_id:
                return task
        raise files.CommandError(f"no task with id {task_id!r}")
    async with target.client() as api:
        try:
            return await api.get_task(task_id)
        except ServiceError as error:
            raise _refused(error) from None


async def cancel_task(target: Target, task_id: str, reason: str | None) -> AgentTask:
    if target.store is not None and not target.remote:
        why = reason or "cancelled from the command line"
        return await _on_database(target.store, lambda graph, c: graph.cancel(c, task_id, why))  # type: ignore[no-any-return]
    if target.remote:
        async with target.client() as api:
            try:
                return await api.cancel(task_id, reason)
            except ServiceError as error:
                raise _refused(error) from None
    async with ActorSystem() as system:
        log = await system.spawn(lambda: LogActor(target.data_dir), name="log")
        supervisor = await system.spawn(lambda: SupervisorActor(target.data_dir, log=log), name="supervisor")
        try:
            task: AgentTask = await supervisor.ask(
                Cancel(task_id, reason or "cancelled from the command line"), timeout=None
            )
        finally:
            await supervisor.stop()
            await log.stop()
        return task


# -- events -----------------------------------------------------------------------------


async def tail(
    target: Target, *, after: int, last: int | None, follow: bool, as_json: bool, out: TextIO = sys.stdout
) -> int:
    if target.store is not None and not target.remote:
        from ..postgres import Database, tail_events

        async with (
            Database(target.store, max_size=2) as db,
            aclosing(tail_events(db, after=after, follow=follow, last=last)) as stream,
        ):
            async for event in stream:
                line = msgspec.json.encode(event).decode() if as_json else files.format_event(event)
                print(line, file=out, flush=True)
        return 0
    if not target.remote:
        return await files.tail(
            target.data_dir, after=after, last=last, follow=follow, as_json=as_json, out=out
        )
    async with target.client() as api:
        try:
            async with api.events(after=after, follow=follow, last=last) as events:
                async for event in events:
                    line = msgspec.json.encode(event).decode() if as_json else files.format_event(event)
                    print(line, file=out, flush=True)
        except ServiceError as error:
            raise _refused(error) from None
    return 0


# -- status and stop --------------------------------------------------------------------


async def status(target: Target) -> dict[str, Any]:
    """The daemon's status document; with no daemon, what the files say."""
    if target.remote:
        async with target.client() as api:
            try:
                document = await api.status()
            except ServiceError as error:
                raise _refused(error) from None
        return {"running": True, "url": target.url, **document}
    if target.store is not None:
        counts, _, total = await _on_database(target.store, lambda graph, c: graph.stats(c))
        return {
            "running": False,
            "data_dir": target.store_shown,
            "tasks": {"total": total, "by_status": counts},
        }
    path = await anyio.to_thread.run_sync(partial(resolve_data_dir, target.data_dir, create=False))
    found = await anyio.to_thread.run_sync(files.read_tasks, target.data_dir)
    by_status: dict[str, int] = {}
    for task in found:
        by_status[task.status.value] = by_status.get(task.status.value, 0) + 1
    return {"running": False, "data_dir": str(path), "tasks": {"total": len(found), "by_status": by_status}}


def format_status(document: dict[str, Any]) -> str:
    tasks = document["tasks"]
    counts = " · ".join(
        f"{name.lower()} {tasks['by_status'].get(name, 0)}"
        for name in (s.value for s in TaskStatus)
        if tasks["by_status"].get(name, 0)
    )
    lines = []
    if document["running"]:
        lines.append(
            f"daemon: running · pid {document['pid']} · up {document['uptime']:.0f}s · API {document['url']}"
            + (" · stopping" if document.get("stopping") else "")
        )
    else:
        lines.append(f"daemon: not running on {document['data_dir']}")
    lines.append(f"tasks: {tasks['total']} total" + (f" · {counts}" if counts else ""))
    for agent_type, entry in sorted(document.get("agents", {}).items()):
        lines.append(
            f"agents {agent_type}: {entry['alive']}/{entry['configured']} alive · queued {entry['queued']}"
            f" · tokens {entry['tokens_spent']} in {entry['model_calls']} model call(s)"
        )
    if document.get("mailboxes"):
        lines.append("mailboxes: " + " · ".join(f"{k} {v}" for k, v in document["mailboxes"].items()))
    return "\n".join(lines)


async def stop(target: Target, *, wait: float, out: TextIO = sys.stderr) -> int:
    """Ask the daemon to stop gracefully; wait up to ``wait`` seconds for it to be gone."""
    if not target.remote:
        path = await anyio.to_thread.run_sync(partial(resolve_data_dir, target.data_dir, create=False))
        raise files.CommandError(f"no greenroom daemon is running on {str(path)!r}")
    async with target.client() as api:
        try:
            await api.stop()
        except ServiceError as error:
            raise _refused(error) from None
        print(f"greenroom: asked the daemon at {target.url} to stop", file=out, flush=True)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                await api.health()
            except (ServiceUnavailable, ServiceError):  # gone: what we wait for
                print("greenroom: the daemon has stopped", file=out, flush=True)
                return 0
            await anyio.sleep(0.1)
    raise files.CommandError(f"the daemon at {target.url} is still stopping after {wait:g}s")
