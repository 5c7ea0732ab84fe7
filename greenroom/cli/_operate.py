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
from collections.abc import Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

import anyio
import msgspec

from .._errors import InvalidInput
from .._files import resolve_data_dir
from ..messages import AgentTask, Cancel, Decide, ListTasks, Retry, Submit, TaskStatus
from ..service import ServiceClient, ServiceError, ServiceUnavailable, find_daemon
from ..store import listed
from . import _format as files

if TYPE_CHECKING:
    from ..actors import ActorRef
    from ..store import Store

TOKEN_ENV = "GREENROOM_TOKEN"
T = TypeVar("T")


@dataclass(frozen=True)
class Target:
    """Where a command goes: ``url`` + ``token`` (a daemon's API), or the backend (the
    PostgreSQL database ``store`` names, else the files of ``data_dir``)."""

    data_dir: str | None
    url: str | None = None
    token: str | None = None
    store: str | None = None
    """A PostgreSQL URL: with no daemon to ask, work on that database instead of the files."""

    @property
    def remote(self) -> bool:
        return self.url is not None

    def client(self) -> ServiceClient:
        assert self.url is not None
        return ServiceClient(self.url, self.token)

    def backend(self, *, create: bool = False) -> Store:
        """The backend to work on with no daemon (``create``: make a missing data dir)."""
        from ..daemon._backend import choose_store

        return choose_store(self.store, self.data_dir, pool_size=2, create=create)


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
        return Target(data_dir, store=store)  # the backend reports the missing data dir
    found = find_daemon(path)
    if found is None:
        return Target(data_dir, store=store)
    info, admin = found
    return Target(data_dir, info.url, token or admin)


def locate_blocking(
    data_dir: str | None, url: str | None = None, token: str | None = None, store: str | None = None
) -> Target:
    """:func:`locate` in the calling thread (a command that starts no event loop)."""
    return _locate(data_dir, url, token, store)


async def locate(
    data_dir: str | None, url: str | None = None, token: str | None = None, store: str | None = None
) -> Target:
    """Blocking file checks in a worker thread; cancellable."""
    return await anyio.to_thread.run_sync(_locate, data_dir, url, token, store)


async def _on_node(target: Target, fn: Callable[[ActorRef], Awaitable[T]]) -> T:
    """``fn(supervisor)`` with a short-lived log actor and supervisor on the backend (the
    same ones a daemon runs: every rule and event as there), stopped after."""
    from ..actors import ActorSystem
    from ..log import LogActor
    from ..supervisor import SupervisorActor

    async with target.backend(create=True) as store, ActorSystem() as system:
        log = await system.spawn(lambda: LogActor(store.event_store()), name="log")
        supervisor = await system.spawn(lambda: SupervisorActor(store.task_store()), name="supervisor")
        try:
            return await fn(supervisor)
        finally:
            await supervisor.stop()  # its lifecycle events reach the log before the log stops
            await log.stop()


def _refused(error: ServiceError) -> InvalidInput:
    """An API refusal as the one-line CLI error (the message is the server's)."""
    return InvalidInput(str(error) or f"the API refused the request (HTTP {error.status})", field=error.field)


# -- tasks ------------------------------------------------------------------------------


async def add_tasks(target: Target, tasks: list[AgentTask]) -> list[AgentTask]:
    """Submit, all or none, with the events logged."""
    if not target.remote:
        return await _on_node(target, lambda supervisor: supervisor.ask(Submit(tasks), timeout=None))
    async with target.client() as api:
        try:
            return await api.submit(tasks)
        except ServiceError as error:
            raise _refused(error) from None


def list_live_tasks_on_files(
    target: Target, status: str | None, agent_type: str | None, **filters: Any
) -> list[AgentTask]:
    """The live graph's tasks on the files of ``target`` (no daemon serves them), read in
    the calling thread; ``filters`` as :func:`list_tasks`'s."""
    from ..embedded import EmbeddedStore

    wanted = files.decode_status(status) if status is not None else None
    found = EmbeddedStore(target.data_dir, create=False).read_tasks_blocking(wanted, agent_type)
    return _filtered(found, **filters)


def _filtered(
    found: list[AgentTask],
    *,
    owner: str | None = None,
    text: str | None = None,
    updated_within: float | None = None,
    newest_first: bool = False,
) -> list[AgentTask]:
    """What the API's filters keep of ``found`` (read from a store, in submission order),
    by the same rule (``store.listed``)."""
    since = None if updated_within is None else time.time() - updated_within
    where = ListTasks(owner=owner, text=text, updated_since=since)
    kept = [task for task in found if listed(task, where)]
    return kept[::-1] if newest_first else kept


async def list_tasks(
    target: Target,
    status: str | None,
    agent_type: str | None,
    *,
    archived: bool = False,
    **filters: Any,
) -> list[AgentTask]:
    """The matching tasks, from the daemon's API or (no daemon) read from the store;
    ``filters``: ``owner``, ``text`` (in the id or a string of the input),
    ``updated_within`` (seconds), ``newest_first``."""
    wanted = files.decode_status(status) if status is not None else None
    if not target.remote:
        async with target.backend() as store:
            return _filtered(await store.read_tasks(wanted, agent_type, archived=archived), **filters)
    async with target.client() as api:
        try:
            return await api.list_tasks(
                wanted.value if wanted else None, agent_type, archived=archived, **filters
            )
        except ServiceError as error:
            raise _refused(error) from None


async def show_task(target: Target, task_id: str) -> AgentTask:
    if not target.remote:
        async with target.backend() as store:
            return await store.read_task(task_id)
    async with target.client() as api:
        try:
            return await api.get_task(task_id)
        except ServiceError as error:
            raise _refused(error) from None


async def cancel_task(target: Target, task_id: str, reason: str | None) -> AgentTask:
    why = reason or "cancelled from the command line"
    if not target.remote:
        return await _on_node(target, lambda supervisor: supervisor.ask(Cancel(task_id, why), timeout=None))
    async with target.client() as api:
        try:
            return await api.cancel(task_id, reason)
        except ServiceError as error:
            raise _refused(error) from None


async def retry_task(target: Target, task_id: str, reason: str | None) -> AgentTask:
    """Run a FAILED (or DEPENDENCY_FAILED) task again: through the daemon (as the token's
    user), or on the backend with no daemon (as this machine's user)."""
    if not target.remote:
        import getpass

        message = Retry(task_id, f"{getpass.getuser()} (command line)", reason or "")
        return await _on_node(target, lambda supervisor: supervisor.ask(message, timeout=None))
    async with target.client() as api:
        try:
            return await api.retry(task_id, reason or "")
        except ServiceError as error:
            raise _refused(error) from None


async def decide_task(
    target: Target, task_id: str, *, approved: bool, reason: str, step: str | None, as_done: bool = False
) -> AgentTask:
    """Approve or deny the call ``task_id`` waits on (``as_done``: approve it as already
    done, so it is not run): through the daemon (as the token's user), or on the backend
    with no daemon (as this machine's user)."""
    if not target.remote:
        import getpass

        by = f"{getpass.getuser()} (command line)"
        message = Decide(task_id, approved, by, reason, step, as_done)
        return await _on_node(target, lambda supervisor: supervisor.ask(message, timeout=None))
    async with target.client() as api:
        try:
            return await api.decide(task_id, approved=approved, reason=reason, step=step, as_done=as_done)
        except ServiceError as error:
            raise _refused(error) from None


async def decide_many(
    target: Target,
    where: dict[str, Any],
    *,
    approved: bool,
    reason: str,
    as_done: bool,
    apply: bool,
) -> dict[str, Any]:
    """The waiting calls ``where`` selects, decided each unless it is a dry run (not
    ``apply``): through the daemon (as the token's user) or on the backend (as this
    machine's user). The answer is ``BulkDecision``'s fields."""
    if not target.remote:
        import getpass

        from ..supervisor import WaitingFilter, decide_waiting

        by = f"{getpass.getuser()} (command line)"
        chosen = msgspec.convert(where, WaitingFilter)

        async def decide(supervisor: ActorRef) -> dict[str, Any]:
            decision = await decide_waiting(
                supervisor,
                chosen,
                approved=approved,
                by=by,
                reason=reason,
                as_done=as_done,
                dry_run=not apply,
            )
            return msgspec.to_builtins(decision)  # type: ignore[no-any-return]

        return await _on_node(target, decide)
    async with target.client() as api:
        try:
            return await api.decide_many(
                where, approved=approved, reason=reason, as_done=as_done, dry_run=not apply
            )
        except ServiceError as error:
            raise _refused(error) from None


# -- events -----------------------------------------------------------------------------


async def tail(
    target: Target, *, after: int, last: int | None, follow: bool, as_json: bool, out: TextIO = sys.stdout
) -> int:
    """Print events (``last``: only the newest ``last``); ``follow`` keeps printing until
    interrupted (Ctrl-C ends it; the CLI exits 130). Works while a daemon writes."""

    def show(event: Any) -> None:
        line = msgspec.json.encode(event).decode() if as_json else files.format_event(event)
        print(line, file=out, flush=True)

    if not target.remote:
        async with (
            target.backend() as store,
            aclosing(store.events(after=after, follow=follow, last=last)) as stored,
        ):
            async for event in stored:
                show(event)
        return 0
    async with target.client() as api:
        try:
            async with api.events(after=after, follow=follow, last=last) as events:
                async for event in events:
                    show(event)
        except ServiceError as error:
            raise _refused(error) from None
    return 0


# -- status and stop --------------------------------------------------------------------


async def status(target: Target) -> dict[str, Any]:
    """The daemon's status document; with no daemon, what the backend says."""
    if target.remote:
        async with target.client() as api:
            try:
                document = await api.status()
            except ServiceError as error:
                raise _refused(error) from None
        return {"running": True, "url": target.url, **document}
    async with target.backend() as store:
        stats = await store.read_stats()
        sizes = await store.sizes()
        where = store.where
    tasks = {"total": stats.total, "by_status": stats.by_status}
    return {"running": False, "data_dir": where, "tasks": tasks, "storage": msgspec.to_builtins(sizes)}


def status_on_files(target: Target) -> dict[str, Any]:
    """:func:`status` of the files of ``target`` (no daemon serves them), read in the
    calling thread."""
    from ..embedded import EmbeddedStore

    store = EmbeddedStore(target.data_dir, create=False)
    stats, sizes = store.read_stats_blocking(), store.sizes_blocking()
    tasks = {"total": stats.total, "by_status": stats.by_status}
    return {"running": False, "data_dir": store.where, "tasks": tasks, "storage": msgspec.to_builtins(sizes)}


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
            + (f" · cost {entry['cost']:g}" if entry.get("cost") else "")
            + _timing(entry.get("model_timing"))
        )
    chat = document.get("chat")
    if chat:
        limits = [
            f"{chat[key]:g} {unit}"
            for key, unit in (("budget_tokens", "tokens"), ("budget_cost", "cost"))
            if chat.get(key) is not None
        ]
        lines.append(
            f"chat: tokens {chat['total_tokens']} in {chat['llm_calls']} model call(s)"
            + (f" · cost {chat['cost']:g}" if chat.get("cost") else "")
            + (f" · budget {' / '.join(limits)}" if limits else "")
            + (" · budget used up" if chat.get("budget_exhausted") else "")
        )
    if document.get("mailboxes"):
        lines.append("mailboxes: " + " · ".join(f"{k} {v}" for k, v in document["mailboxes"].items()))
    storage = document.get("storage")
    if storage:
        lines.append(
            f"storage: {_bytes(storage['bytes'])} on disk · archived tasks {storage['archived_tasks']} "
            f"in {storage['archive_parts']} part(s) · live tasks {tasks['total']} · event segments "
            f"{storage.get('event_segments', 0)}"
            + (
                f" (dropped through seq {storage['events_dropped_through']})"
                if storage.get("events_dropped_through")
                else ""
            )
        )
    return "\n".join(lines)


def _timing(timing: dict[str, Any] | None) -> str:
    """A model's speed as status shows it: time to first token and tokens per second,
    p50 / p99 of the recent streamed calls (nothing before the first one)."""
    if not timing or timing["first_token_ms"]["p50"] is None:
        return ""
    first = timing["first_token_ms"]
    said = f" · first token p50 {first['p50']:.0f} ms / p99 {first['p99']:.0f} ms"
    rate = timing["tokens_per_second"]
    if rate["p50"] is not None:
        said += f" · {rate['p50']:.0f} / {rate['p99']:.0f} tokens/s (p50 / p99)"
    return said


def _bytes(count: int) -> str:
    size = float(count)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TB"


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
