"""Issue 41's placement: two daemons (two hosts, each its own actor system and store
connections) on one PostgreSQL database — an entity active on at most one of them, the
other's messages reaching it through the database, a released or lapsed entity moving.
Real time (the stores' threads wait on PostgreSQL's notifications)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from _stores import make_store
from _support import eventually
from test_entities import Tally

from greenroom import ActorSystem, InvalidInput
from greenroom.entities import Entities, Entity, RemoteEntityError

pytestmark = pytest.mark.anyio


class Tallied(Entity[Tally]):
    """Counts and saves each message: what it answers is durable."""

    state_type = Tally

    async def receive(self, message: Any) -> Any:
        if message == "get":
            return self.state.count
        if message == "boom":
            raise ValueError("no such thing")
        self.state.count += 1
        self.state.seen.append(str(message))
        await self.save()
        return self.state.count


@asynccontextmanager
async def two_daemons(
    pg_url: str, tmp_path: Path, **options: Any
) -> AsyncIterator[tuple[Entities, Entities]]:
    """Two hosts on one PostgreSQL database, as two daemons would be (each its own store
    connections, its own actor system)."""
    async with (
        await make_store(pg_url, tmp_path / "a") as store_a,
        await make_store(pg_url, tmp_path / "b") as store_b,
        ActorSystem() as system_a,
        ActorSystem() as system_b,
    ):
        states_a, states_b = store_a.entity_store(), store_b.entity_store()
        try:
            async with (
                Entities(system_a, states_a, [Tallied], node="node-a", **options) as a,
                Entities(system_b, states_b, [Tallied], node="node-b", **options) as b,
            ):
                yield a, b
        finally:
            await states_a.aclose()
            await states_b.aclose()


async def test_two_daemons_hold_each_entity_once_and_reach_it_through_the_database(
    pg_url: str, tmp_path: Path
) -> None:
    """Placement: the entity is active on the daemon that claimed it; the other's asks and
    tells reach it through PostgreSQL (answers come back the same way), and it is never
    active on both. Released by a passivation, it comes back where it is next needed,
    with its saved state."""
    async with two_daemons(pg_url, tmp_path, lease=5.0) as (a, b):
        assert await a.ref(Tallied, "k").ask("one") == 1
        assert await b.ref(Tallied, "k").ask("two") == 2  # handled on a
        assert a.is_active(Tallied, "k") and not b.is_active(Tallied, "k")
        with pytest.raises(RemoteEntityError, match="ValueError: no such thing"):
            await b.ref(Tallied, "k").ask("boom")  # raised on a, named on b
        with pytest.raises(InvalidInput, match="msgspec type"):
            await b.ref(Tallied, "k").ask(object())  # cannot cross to another daemon
        b.ref(Tallied, "k").tell("three")
        assert await b.ref(Tallied, "k").ask("get") == 3  # behind the tell: one sender's order holds
        assert not b.is_active(Tallied, "k")
        await a.passivate(a.ref(Tallied, "k"))  # saved, and its lease released
        assert await b.ref(Tallied, "k").ask("four") == 4  # wherever it came back: one of them
        assert [a.is_active(Tallied, "k"), b.is_active(Tallied, "k")].count(True) == 1
        assert await a.ref(Tallied, "k").ask("get") == 4 == await b.ref(Tallied, "k").ask("get")


async def test_an_entity_whose_daemon_stopped_renewing_moves_once_its_lease_lapses(
    pg_url: str, tmp_path: Path
) -> None:
    """A daemon that dies stops renewing: once its lease lapses the entity is claimed by the
    next daemon that needs it, from its last save, and mail left for it is taken there."""
    async with two_daemons(pg_url, tmp_path, lease=2.0) as (a, b):
        assert await a.ref(Tallied, "k").ask("saved") == 1
        await a.store.claim("Tallied", ["k"], "node-a", -1)  # as if node-a had stopped renewing long ago
        a._active.clear()  # and had gone: nothing of it answers any more
        assert await b.ref(Tallied, "k").ask("moved") == 2  # claimed by b, from the last save
        assert b.is_active(Tallied, "k")


async def test_a_daemon_killed_with_sigkill_gives_its_entities_up_and_they_move_losing_nothing(
    pg_url: str, tmp_path: Path, anyio_backend_name: str
) -> None:
    """A real daemon process holds an entity (it answered through the database); it is
    SIGKILLed; an ask from this daemon, posted while the dead one's lease still holds, is
    answered once the lease lapses — the entity claimed here, from its last save."""
    import signal
    import subprocess
    import sys

    import msgspec

    from benchmarks._entity_node import Ledger

    node = await anyio.open_process(
        [sys.executable, "-m", "benchmarks._entity_node", pg_url, "doomed", "1.0", anyio_backend_name],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        assert node.stdout is not None
        with anyio.fail_after(30):
            said = b""
            while b"\n" not in said:
                said += await node.stdout.receive()
        assert said.startswith(b"ready"), said
        async with await make_store(pg_url, tmp_path / "client") as store:
            client = store.entity_store()
            try:
                await client.wait("client", 0.0)
                await client.post([("Ledger", "acct", msgspec.json.encode(1), "client", 1)])

                async def answered() -> bool:
                    return bool(await client.take_answers("client"))

                await eventually(answered, timeout=20)  # the process claimed it (unheld mail) and answered
                assert (await client.claim("Ledger", ["acct"], "peek", 30)).elsewhere == {"acct": "doomed"}
            finally:
                await client.aclose()
        node.send_signal(signal.SIGKILL)
        await node.wait()
        async with (
            await make_store(pg_url, tmp_path / "here") as store,
            ActorSystem() as system,
        ):
            states = store.entity_store()
            try:
                async with Entities(system, states, [Ledger], node="here", lease=1.0) as here:
                    with anyio.fail_after(20):
                        assert await here.ref(Ledger, "acct").ask(2, timeout=None) == 2
                    assert here.is_active(Ledger, "acct")
                    assert (
                        await here.ref(Ledger, "acct").ask(1, timeout=None) == 1
                    )  # a repeat: not recorded twice
                saved = (await states.load("Ledger", ["acct"]))["acct"]
                assert msgspec.json.decode(saved.state) == {"ids": [1, 2]}
            finally:
                await states.aclose()
    finally:
        if node.returncode is None:
            node.send_signal(signal.SIGKILL)
        with anyio.CancelScope(shield=True):
            await node.aclose()
