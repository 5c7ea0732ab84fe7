"""``ServiceClient``: the HTTP API from Python (what the CLI uses against a running daemon).

``find_daemon(data_dir)`` finds the daemon serving a data dir on this machine: its
address in ``daemon.json`` and a local admin token in ``admin.token`` (both written by
the daemon, readable by the owner only, removed when it stops). From elsewhere, give
the URL and a token yourself.
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio
import msgspec

from .._errors import DataError, GreenroomError, InvalidInput
from .._files import DaemonLock, DataDirBusy, OwnerLock
from .._process import alive
from ..messages import AgentTask, Event

if TYPE_CHECKING:  # imported when a client is made: finding no daemon costs nothing
    import httpx2
    from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

DAEMON_FILE = "daemon.json"
ADMIN_TOKEN_FILE = "admin.token"
DAEMON_LOCK_FILE = "daemon.lock"


class DaemonInfo(msgspec.Struct, frozen=True):
    url: str
    pid: int
    started_at: float
    version: str = ""
    store: str = ""
    """Where the daemon keeps things, fit to print (its data dir, or a database URL with
    no password): what a command run beside it must use too (``greenroom tokens``)."""
    shared: bool = False
    """Its store is one several daemons share (PostgreSQL)."""


class ServiceError(GreenroomError):
    """The API refused a request: ``status`` (HTTP), ``code``, the message, and the
    ``field`` it names, if any."""

    def __init__(self, status: int, code: str, message: str, field: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.field = field


class ServiceUnavailable(DataError):
    """Nothing answers at the daemon's address."""


def find_daemon(data_dir: Path, *, wait: float = 15.0) -> tuple[DaemonInfo, str] | None:
    """The running daemon of ``data_dir`` and its local admin token, or ``None`` when no
    daemon serves an API there. Blocking.

    A daemon holds ``daemon.lock`` from its start to its exit (the kernel drops it when
    the process dies): files left by a killed daemon are ignored, on every store. A
    daemon still starting is waited for, up to ``wait`` seconds, until its API answers
    (``DataError`` saying so past that); one that serves no API (``--no-api``) is
    ``None`` at once. A service with no lock (an app serving the API in-process) is
    found by its ``daemon.json`` while its process lives."""
    deadline = time.monotonic() + wait
    while True:
        holder = DaemonLock.holder(data_dir / DAEMON_LOCK_FILE)
        found = _read_daemon_files(data_dir)
        if holder is None:
            return found if found is not None and _unlocked_but_alive(data_dir, found[0]) else None
        pid, state = holder
        if state == "no-api":
            return None
        if found is not None and found[0].pid == pid and state == "serving":
            return found
        if time.monotonic() >= deadline:
            raise DataError(
                f"a greenroom daemon (pid {pid}) is starting on {data_dir} and its API did not answer "
                f"within {wait:g} s; try again, or see its log"
            )
        time.sleep(0.05)  # a bounded wait for another process's start: no event to wait on


def _read_daemon_files(data_dir: Path) -> tuple[DaemonInfo, str] | None:
    try:
        info = msgspec.json.decode((data_dir / DAEMON_FILE).read_bytes(), type=DaemonInfo)
        token = (data_dir / ADMIN_TOKEN_FILE).read_text().strip()
    except FileNotFoundError:
        return None
    except (OSError, msgspec.DecodeError) as error:
        raise DataError(f"cannot read the daemon's address in {data_dir}: {error}") from None
    return info, token


def _unlocked_but_alive(data_dir: Path, info: DaemonInfo) -> bool:
    """A ``daemon.json`` with no daemon lock held: this process's own service, or one
    whose files' owner still holds the task graph, or whose process still lives;
    otherwise one left behind by a killed daemon."""
    if info.pid == os.getpid():
        return True
    lock = OwnerLock(data_dir / "tasks.graph.lock", "the task graph")
    try:
        if lock.acquire_shared():
            lock.release()
            return False  # nobody holds the files: its owner is gone
    except DataDirBusy:
        return True
    return alive(info.pid)


class ServiceClient:
    """``async with ServiceClient(url, token) as api:``; one keep-alive connection pool.
    Every method raises :class:`ServiceError` for a refusal (4xx/5xx) and
    :class:`ServiceUnavailable` when nothing answers. Cancelling a call closes its
    request; ``timeout`` (seconds) bounds each request except the event stream."""

    def __init__(self, url: str, token: str | None, *, timeout: float = 60.0) -> None:
        if not url.startswith(("http://", "https://")):
            raise InvalidInput(f"--url must be an http(s) URL (got {url!r:.80})", field="url", value=url)
        self.url = url.rstrip("/")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        import httpx2

        self._transport_error = httpx2.TransportError
        self._client = httpx2.AsyncClient(base_url=self.url, headers=headers, timeout=timeout)

    async def __aenter__(self) -> ServiceClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._client.aclose()

    async def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = await self._client.request(method, path, **kwargs)
        except self._transport_error as error:
            raise ServiceUnavailable(f"the greenroom API at {self.url} does not answer ({error})") from None
        return _decoded(response)

    async def _call_object(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        """``_call`` for an answer that must be a JSON object (a ``ServiceError`` if not)."""
        answer = await self._call(method, path, **kwargs)
        if not isinstance(answer, dict):
            raise ServiceError(
                200, "protocol", f"{method} {path} answered {type(answer).__name__}, not an object"
            )
        return answer

    async def health(self) -> dict[str, Any]:
        return await self._call_object("GET", "/v1/health")

    async def status(self) -> dict[str, Any]:
        return await self._call_object("GET", "/v1/status")

    async def submit(self, tasks: list[AgentTask]) -> list[AgentTask]:
        body = msgspec.json.encode({"tasks": tasks})
        answer = await self._call("POST", "/v1/tasks", content=body, headers=_JSON)
        return msgspec.convert(answer["tasks"], list[AgentTask])

    async def list_tasks(
        self,
        status: str | None = None,
        agent_type: str | None = None,
        *,
        archived: bool = False,
        owner: str | None = None,
        text: str | None = None,
        updated_within: float | None = None,
        newest_first: bool = False,
    ) -> list[AgentTask]:
        """Every matching task (``archived``: of the archive), page by page, in submission
        order or newest first; the filters are ``GET /v1/tasks``'s."""
        found: list[AgentTask] = []
        params: dict[str, Any] = {"limit": 1000, "order": "newest" if newest_first else "oldest"}
        for name, value in (("status", status), ("type", agent_type), ("owner", owner), ("q", text)):
            if value:
                params[name] = value
        if archived:
            params["archived"] = "1"
        if updated_within is not None:
            params["updated_within"] = repr(float(updated_within))
        while True:
            page = await self._call("GET", "/v1/tasks", params=params)
            found.extend(msgspec.convert(page["tasks"], list[AgentTask]))
            if page["next"] is None:
                return found
            params["before" if newest_first else "after"] = page["next"]

    async def get_task(self, task_id: str) -> AgentTask:
        return (await self.task_and_actions(task_id))[0]

    async def task_and_actions(self, task_id: str) -> tuple[AgentTask, dict[str, dict[str, Any]]]:
        """The task, and what a person may do to it now: ``{"retry": {"allowed": bool,
        "why": str | None}, "cancel": ..., "approve": ..., "deny": ...}``."""
        shown = await self._call("GET", f"/v1/tasks/{_segment(task_id)}")
        actions = shown.pop("actions", {}) if isinstance(shown, dict) else {}
        return msgspec.convert(shown, AgentTask), actions

    async def cancel(self, task_id: str, reason: str | None = None) -> AgentTask:
        body = msgspec.json.encode({"reason": reason} if reason else {})
        answer = await self._call(
            "POST", f"/v1/tasks/{_segment(task_id)}/cancel", content=body, headers=_JSON
        )
        return msgspec.convert(answer, AgentTask)

    async def retry(self, task_id: str, reason: str = "") -> AgentTask:
        """Run a FAILED (or DEPENDENCY_FAILED) task again, as the token's user (see
        ``messages.Retry``)."""
        body = msgspec.json.encode({"reason": reason} if reason else {})
        answer = await self._call("POST", f"/v1/tasks/{_segment(task_id)}/retry", content=body, headers=_JSON)
        return msgspec.convert(answer, AgentTask)

    async def decide(
        self,
        task_id: str,
        *,
        approved: bool,
        reason: str = "",
        step: str | None = None,
        as_done: bool = False,
    ) -> AgentTask:
        """Approve or deny the call a WAITING task waits on (as the token's user);
        ``as_done``: approve it as already done (recorded, not run)."""
        fields: dict[str, Any] = {"reason": reason}
        if step is not None:
            fields["step"] = step
        if as_done:
            fields["as_done"] = True
        action = "approve" if approved else "deny"
        answer = await self._call(
            "POST",
            f"/v1/tasks/{_segment(task_id)}/{action}",
            content=msgspec.json.encode(fields),
            headers=_JSON,
        )
        return msgspec.convert(answer, AgentTask)

    async def decide_many(
        self,
        where: dict[str, Any],
        *,
        approved: bool,
        reason: str = "",
        as_done: bool = False,
        dry_run: bool = True,
    ) -> dict[str, Any]:
        """``POST /v1/tasks/decide``: the waiting calls ``where`` selects (``type``,
        ``tool``, ``may_have_run``), decided each as the token's user unless ``dry_run``;
        the answer says what matched, what was decided and what was refused."""
        body = {
            "filter": where,
            "approve": approved,
            "reason": reason,
            "as_done": as_done,
            "dry_run": dry_run,
        }
        return await self._call_object(
            "POST", "/v1/tasks/decide", content=msgspec.json.encode(body), headers=_JSON
        )

    async def chat(self, message: str, conversation_id: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"message": message}
        if conversation_id is not None:
            body["conversation_id"] = conversation_id
        return await self._call_object("POST", "/v1/chat", content=msgspec.json.encode(body), headers=_JSON)

    async def conversation(self, conversation_id: str) -> dict[str, Any]:
        return await self._call_object("GET", f"/v1/chat/conversations/{_segment(conversation_id)}")

    async def stop(self) -> None:
        await self._call("POST", "/v1/stop")

    @asynccontextmanager
    async def events(
        self, *, after: int = 0, follow: bool = True, last: int | None = None
    ) -> AsyncIterator[MemoryObjectReceiveStream[Event]]:
        """``async with api.events(after=SEQ) as events: async for event in events:`` —
        the event stream (Server-Sent Events) after ``after`` (``last``: only the newest
        ``last`` already stored, then new ones). Without ``follow`` it ends at the current
        end; with it, it runs until the block is left, and after a dropped connection
        resumes from the last event it got. A reader task feeds the stream; leaving the
        block cancels it, which closes the HTTP response at once. A refusal (``EventsGone``
        when retention dropped events after ``after``; ``ServiceError``) is raised as itself
        when the stream ends."""
        send, receive = anyio.create_memory_object_stream[Event](256)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._read_events, send, after, follow, last)
                try:
                    yield receive
                finally:
                    tg.cancel_scope.cancel()
                    receive.close()
        except BaseExceptionGroup as group:  # the reader's refusal, as itself (EventsGone, ...)
            if len(group.exceptions) == 1 and isinstance(group.exceptions[0], GreenroomError):
                raise group.exceptions[0] from None
            raise

    async def _read_events(
        self, send: MemoryObjectSendStream[Event], after: int, follow: bool, last: int | None
    ) -> None:
        newest = last
        seen = after
        async with send:
            while True:
                params: dict[str, Any] = {"after": seen, "follow": "1" if follow else "0"}
                if newest is not None:
                    params["last"] = newest
                try:
                    async with self._client.stream(
                        "GET", "/v1/events", params=params, timeout=None
                    ) as response:
                        if response.status_code != 200:
                            await response.aread()
                            if response.status_code == 410:
                                _gone(msgspec.json.decode(response.content).get("error", {}), seen)
                            _decoded(response)
                        data: list[str] = []
                        kind = ""
                        async for line in response.aiter_lines():
                            if line.startswith("data:"):
                                data.append(line[5:].strip())
                            elif line.startswith("event:"):
                                kind = line[6:].strip()
                            elif not line and data and kind == "gone":
                                _gone(msgspec.json.decode("\n".join(data)), seen)
                            elif not line and data:
                                event = msgspec.json.decode("\n".join(data), type=Event)
                                data = []
                                seen = event.seq
                                newest = None  # a resumed stream takes everything after `seen`
                                await send.send(event)
                    if not follow:
                        return
                except self._transport_error as error:
                    if not follow:
                        raise ServiceUnavailable(
                            f"the greenroom API at {self.url} does not answer ({error})"
                        ) from None
                    await anyio.sleep(0.5)  # the daemon restarts or the network blinked: resume


_JSON = {"Content-Type": "application/json"}


def _gone(document: Any, after: int) -> None:
    """Raise the ``EventsGone`` the daemon answered (a 410, or a stream's ``gone`` event)."""
    from ..store import EventsGone

    oldest = document.get("oldest") if isinstance(document, dict) else None
    raise EventsGone(after, oldest if isinstance(oldest, int) else after + 1)


def _segment(value: str) -> str:
    from urllib.parse import quote

    return quote(value, safe="")


def _decoded(response: httpx2.Response) -> Any:
    try:
        body = msgspec.json.decode(response.content) if response.content else None
    except msgspec.DecodeError:
        body = None
    if response.status_code < 400:
        return body
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        raise ServiceError(
            response.status_code,
            str(error.get("code", "")),
            str(error.get("message", "")),
            str(error.get("field", "")),
        )
    raise ServiceError(response.status_code, "http", f"HTTP {response.status_code} from {response.url}")
