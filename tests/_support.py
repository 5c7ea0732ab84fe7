"""Shared helpers: a node (log actor + supervisor actor) on a data dir, and polling."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from greenroom import ActorRef, ActorSystem
from greenroom.log import LogActor, NarratorCapability
from greenroom.supervisor import SupervisorActor


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
        log = await system.spawn(lambda: LogActor(data_dir, narrator=narrator), name="log")
        supervisor = await system.spawn(
            lambda: SupervisorActor(data_dir, log=log, **supervisor_options), name="sup"
        )
        node = Node(system, supervisor, log, Path(data_dir) if data_dir else Path(), narrator)
        yield node
        await supervisor.stop()
        await log.stop()


async def eventually(condition: Callable[[], Any], timeout: float = 10.0) -> None:
    with anyio.fail_after(timeout):
        while not await condition():
            await anyio.sleep(0.01)
