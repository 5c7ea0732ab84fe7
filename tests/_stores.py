"""Every backend, as ``anyio_backend`` gives every event loop: the ``backend`` fixture is an
open :class:`Store` — the embedded one on a fresh data dir, then PostgreSQL on a fresh
database (schema created) — so a contract test written once runs on both, on both loops.

``open_node(store)`` spawns what a daemon runs on it: the log actor and the supervisor.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from greenroom import ActorRef, ActorSystem
from greenroom.embedded import EmbeddedStore
from greenroom.log import LogActor, NarratorCapability
from greenroom.postgres import Database, PostgresStore, upgrade
from greenroom.store import Store
from greenroom.supervisor import SupervisorActor
from greenroom.testing import MemoryStore

BACKENDS = ["files", "postgresql"]
EVERY_STORE = [*BACKENDS, "memory"]
"""The contract suites' stores: the two backends and ``greenroom.testing.MemoryStore``."""
MEMORY = "memory"
_memory: dict[Path, MemoryStore] = {}
"""One memory store per data dir a test names, so opening it again finds what it kept."""


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest) -> str | None:
    """``None`` for the files; a fresh database's URL for PostgreSQL."""
    return store_url_of(request)


def store_url_of(request: pytest.FixtureRequest) -> str | None:
    """The ``store_url`` of ``request.param``: a contract suite's own fixture (its params
    ``EVERY_STORE``) adds ``"memory"``."""
    if request.param == "files":
        return None
    if request.param == MEMORY:
        return MEMORY
    return str(request.getfixturevalue("pg_url"))


async def make_store(url: str | None, data_dir: Path) -> Store:
    """A backend on ``url`` (``None``: the files of ``data_dir``; ``"memory"``: the memory
    store of ``data_dir``, the same each time), not opened yet; on PostgreSQL the schema is
    created first."""
    if url is None:
        return EmbeddedStore(data_dir)
    if url == MEMORY:
        return _memory.setdefault(data_dir, MemoryStore())
    async with Database(url, max_size=2) as db:
        await db.run(upgrade)
    return PostgresStore(url, data_dir=data_dir, pool_size=16)


@pytest.fixture
async def backend(store_url: str | None, tmp_path: Path) -> AsyncIterator[Store]:
    async with await make_store(store_url, tmp_path / "data") as store:
        yield store


@dataclass
class Node:
    system: ActorSystem
    supervisor: ActorRef
    log: ActorRef
    store: Store
    narrator: NarratorCapability


@asynccontextmanager
async def open_node(
    store: Store, *, lease_check_interval: float | None = None, **task_options: Any
) -> AsyncIterator[Node]:
    """The log actor and the supervisor on ``store`` (``task_options`` go to
    ``store.task_store``, a ``retention`` to the event store too); both stopped on the way
    out, the supervisor first."""
    narrator = NarratorCapability()
    retention = task_options.get("retention")
    async with ActorSystem() as system:
        log = await system.spawn(
            lambda: LogActor(store.event_store(retention=retention), narrator=narrator), name="log"
        )
        supervisor = await system.spawn(
            lambda: SupervisorActor(
                store.task_store(**task_options), lease_check_interval=lease_check_interval
            ),
            name="supervisor",
        )
        yield Node(system, supervisor, log, store, narrator)
        await supervisor.stop()
        await log.stop()
