"""Shared helpers: the embedded store's actors on a data dir (a node: log actor +
supervisor actor), and polling."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from greenroom import ActorRef, ActorSystem
from greenroom.embedded import FileEventStore, FileTaskStore
from greenroom.log import LogActor, NarratorCapability
from greenroom.messages import AgentTask, GetTask, TaskStatus
from greenroom.supervisor import SupervisorActor


def file_log(data_dir: Path | str | None = None, **options: Any) -> LogActor:
    """A log actor on ``<data_dir>/events.jsonl``."""
    return LogActor(FileEventStore(data_dir), **options)


def file_supervisor(data_dir: Path | str | None = None, **options: Any) -> SupervisorActor:
    """A supervisor on ``<data_dir>``'s task graph (``lease_check_interval`` for the
    actor, the rest for the :class:`FileTaskStore`)."""
    interval = options.pop("lease_check_interval", None)
    return SupervisorActor(FileTaskStore(data_dir, **options), lease_check_interval=interval)


@dataclass
class Node:
    system: ActorSystem
    supervisor: ActorRef
    log: ActorRef
    data_dir: Path
    narrator: NarratorCapability


@asynccontextmanager
async def open_node(data_dir: Path | None = None, **supervisor_options: Any) -> AsyncIterator[Node]:
    narrator = NarratorCapability()
    async with ActorSystem() as system:
        log = await system.spawn(lambda: file_log(data_dir, narrator=narrator), name="log")
        supervisor = await system.spawn(lambda: file_supervisor(data_dir, **supervisor_options), name="sup")
        node = Node(system, supervisor, log, Path(data_dir) if data_dir else Path(), narrator)
        yield node
        await supervisor.stop()
        await log.stop()


async def eventually(condition: Callable[[], Any], timeout: float = 5.0) -> None:
    """Wait until ``condition()`` (a value or an awaitable) is true; fail after ``timeout`` s."""
    with anyio.fail_after(timeout):
        while True:
            result = condition()
            if inspect.isawaitable(result):
                result = await result
            if result:
                return
            await anyio.sleep(0.005)


async def wait_for_status(supervisor: ActorRef, task_id: str, status: TaskStatus) -> AgentTask:
    """Poll the supervisor until ``task_id`` has ``status``; return it."""
    found: list[AgentTask] = []

    async def reached() -> bool:
        found[:] = [await supervisor.ask(GetTask(task_id))]
        return found[0].status is status

    await eventually(reached)
    return found[0]


class RetentionAtTheWorstMoment:
    """A chat store mixin (before the store class in the bases): a retention pass that
    forgets every conversation lands right after a request opened its conversation, and
    another while the model answers (``forget_now``) — what ``[retention] chat_for`` at
    tiny settings does on a loaded machine. ``forgotten``: what each pass deleted."""

    forgotten: list[int]

    async def open_conversation(self, user_id: str, conversation_id: str, *, create: bool) -> None:
        await super().open_conversation(user_id, conversation_id, create=create)  # type: ignore[misc]
        if not self.forgotten:  # once: between the request's open and its hold
            await self.forget_now()

    async def forget_now(self) -> None:
        now = self.clock()  # type: ignore[attr-defined]
        self.forgotten.append(await self.forget_idle(now + 3600))  # type: ignore[attr-defined]


def forgetting_model(store: Callable[[], RetentionAtTheWorstMoment]) -> Any:
    """The offline rule-based model, with a retention pass on ``store()`` at each call:
    mid-request."""
    from greenroom.llm import RuleBasedModel

    class Forgetting(RuleBasedModel):
        async def chat(self, request: Any, *, timeout: float | None = None) -> Any:
            await store().forget_now()
            return await super().chat(request, timeout=timeout)

    return Forgetting()


MODEL_CLIENTS = ("greenroom", "greenroom/streams", "openai")
"""The ways an ``OpenAIChatModel`` reaches its server, for tests that run on each:
greenroom's client on the asyncio protocol fast path (on trio: its streams path),
greenroom's client on anyio's streams (asyncio; on trio the same as the first: skipped),
and the openai SDK."""


def use_model_client(name: str, backend: object, monkeypatch: Any) -> str:
    """The ``client`` option for ``name`` (one of :data:`MODEL_CLIENTS`), the path set."""
    import pytest

    import greenroom.llm._http as http

    if name == "greenroom/streams":
        if "trio" in str(backend):
            pytest.skip("on trio greenroom's client has one path, anyio's streams: run as 'greenroom'")
        monkeypatch.setattr(http, "ASYNCIO_FAST_PATH", False)
        return "greenroom"
    monkeypatch.setattr(http, "ASYNCIO_FAST_PATH", True)
    return name
