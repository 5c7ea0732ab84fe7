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


class _EntityNode:
    """A real daemon process hosting ``Ledger`` and ``Tape`` entities
    (``benchmarks._entity_node``), started and ``ready``; what it printed in ``said``."""

    def __init__(self, process: Any) -> None:
        self.process = process
        self.said = bytearray()

    async def read_until(self, text: bytes, timeout: float = 30) -> None:
        assert self.process.stdout is not None
        with anyio.fail_after(timeout):
            while text not in self.said:
                self.said.extend(await self.process.stdout.receive())


@asynccontextmanager
async def entity_node(pg_url: str, name: str, backend: str, lease: float = 1.0) -> AsyncIterator[_EntityNode]:
    """Start the node and wait for its ``ready``; on the way out it is killed (resumed
    first, if it was stopped) and reaped."""
    import signal
    import subprocess
    import sys

    process = await anyio.open_process(
        [sys.executable, "-m", "benchmarks._entity_node", pg_url, name, str(lease), backend],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    node = _EntityNode(process)
    try:
        await node.read_until(b"ready")
        yield node
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGCONT)
            process.send_signal(signal.SIGKILL)
        with anyio.CancelScope(shield=True):
            await process.aclose()


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
        a._host._active.clear()  # and had gone: nothing of it answers any more
        assert await b.ref(Tallied, "k").ask("moved") == 2  # claimed by b, from the last save
        assert b.is_active(Tallied, "k")


async def test_a_daemon_killed_with_sigkill_gives_its_entities_up_and_they_move_losing_nothing(
    pg_url: str, tmp_path: Path, anyio_backend_name: str
) -> None:
    """A real daemon process holds an entity (it answered through the database); it is
    SIGKILLed; an ask from this daemon, posted while the dead one's lease still holds, is
    answered once the lease lapses — the entity claimed here, from its last save."""
    import signal

    import msgspec

    from benchmarks._entity_node import Ledger

    async with (
        entity_node(pg_url, "doomed", anyio_backend_name) as node,
        await make_store(pg_url, tmp_path / "here") as store,
    ):
        client, states = store.entity_store(), store.entity_store()
        try:
            await client.wait("client", 0.0)
            await ask_through_store(client, "Ledger", "acct", 1)  # the node claimed it (unheld mail)
            assert (await client.claim("Ledger", ["acct"], "peek", 30)).elsewhere == {"acct": "doomed"}
            node.process.send_signal(signal.SIGKILL)
            await node.process.wait()
            async with (
                ActorSystem() as system,
                Entities(system, states, [Ledger], node="here", lease=1.0) as here,
            ):
                with anyio.fail_after(20):
                    assert await here.ref(Ledger, "acct").ask(2, timeout=None) == 2
                assert here.is_active(Ledger, "acct")
                assert (
                    await here.ref(Ledger, "acct").ask(1, timeout=None) == 1
                )  # a repeat: not recorded twice
            saved = (await states.load("Ledger", ["acct"]))["acct"]
            assert msgspec.json.decode(saved.state) == {"ids": [1, 2]}
        finally:
            await client.aclose()
            await states.aclose()


async def ask_through_store(client: Any, kind: str, key: str, ask_id: int) -> None:
    """Post an ask of ``ask_id`` (a ``Ledger``'s answer is the id) as node ``client`` and
    wait until its answer came back through the store."""
    import msgspec

    await client.post([(kind, key, msgspec.json.encode(ask_id), "client", ask_id)])

    async def answered() -> bool:
        return any(a.ask_id == ask_id for a in await client.take_answers("client"))

    await eventually(answered, timeout=20)


async def test_a_daemon_paused_past_its_leases_writes_nothing_over_their_new_holder(
    pg_url: str, tmp_path: Path, anyio_backend_name: str
) -> None:
    """Issue 49: a real daemon process holds five entities and is frozen (SIGSTOP) past its
    leases; this daemon takes them over and records new ids in each. The frozen one is
    resumed (SIGCONT): it gives the five up without writing — still alive, it answers an
    entity new to it — and when it closes (SIGTERM, every entity it still has passivated
    and saved) nothing it held overwrites the new holder's saves: each entity has every
    id either daemon answered."""
    import signal

    import msgspec

    from benchmarks._entity_node import Ledger

    keys = [f"acct{i}" for i in range(5)]
    async with (
        entity_node(pg_url, "paused", anyio_backend_name) as node,
        await make_store(pg_url, tmp_path / "here") as store,
    ):
        client, states = store.entity_store(), store.entity_store()
        try:
            await client.wait("client", 0.0)
            for n, key in enumerate(keys, start=1):
                await ask_through_store(client, "Ledger", key, n)  # claimed and answered by the node
            held = await client.claim("Ledger", keys, "peek", 30)
            assert held.elsewhere == dict.fromkeys(keys, "paused")
            node.process.send_signal(signal.SIGSTOP)  # frozen, holding the five
            async with (
                ActorSystem() as system,
                Entities(system, states, [Ledger], node="here", lease=1.0) as here,
            ):
                with anyio.fail_after(30):  # each claimed here once the frozen one's lease lapsed
                    for n, key in enumerate(keys, start=10):
                        assert await here.ref(Ledger, key).ask(n, timeout=None) == n
                node.process.send_signal(signal.SIGCONT)
                await ask_through_store(client, "Ledger", "fresh", 99)  # the resumed daemon is alive
                for n, key in enumerate(keys, start=20):  # the new holder goes on
                    assert await here.ref(Ledger, key).ask(n, timeout=None) == n
                node.process.send_signal(signal.SIGTERM)  # it closes: its entities passivated, saved
                await node.read_until(b"given up")
                with anyio.fail_after(30):
                    assert await node.process.wait() == 0
                saved = await client.load("Ledger", [*keys, "fresh"])  # as its closing left them
                for i, key in enumerate(keys):
                    assert msgspec.json.decode(saved[key].state) == {"ids": [1 + i, 10 + i, 20 + i]}
                assert msgspec.json.decode(saved["fresh"].state) == {"ids": [99]}
        finally:
            await client.aclose()
            await states.aclose()
        given_up = int(bytes(node.said).split(b"given up ")[1].split()[0])
        assert given_up == len(keys), bytes(node.said)  # each noticed by the paused daemon itself


async def test_mail_handled_by_a_daemon_killed_right_after_counts_exactly_once_where_the_entity_moves(
    pg_url: str, tmp_path: Path, anyio_backend_name: str
) -> None:
    """Issue 49's exactly once: a ``Tape`` records every id it is sent (repeats too) and
    never saves on its own. A real daemon handles 40 asks through the store and is
    SIGKILLed with no passivation; where the entity moves, it has each answered id once —
    every answer was written with the state it left and its mail's ``done``."""
    import signal

    import msgspec

    from benchmarks._entity_node import Tape

    async with (
        entity_node(pg_url, "killed", anyio_backend_name) as node,
        await make_store(pg_url, tmp_path / "here") as store,
    ):
        client, states = store.entity_store(), store.entity_store()
        try:
            await client.wait("client", 0.0)
            ids = list(range(1, 41))
            await client.post([("Tape", "t", msgspec.json.encode(i), "client", i) for i in ids])
            answered: set[int] = set()

            async def all_answered() -> bool:
                answered.update(a.ask_id for a in await client.take_answers("client"))
                return answered == set(ids)

            await eventually(all_answered, timeout=30)
            node.process.send_signal(signal.SIGKILL)
            await node.process.wait()
            async with (
                ActorSystem() as system,
                Entities(system, states, [Tape], node="here", lease=1.0) as here,
            ):
                with anyio.fail_after(30):
                    assert await here.ref(Tape, "t").ask(0, timeout=None) == ids
        finally:
            await client.aclose()
            await states.aclose()


async def test_mail_for_another_node_is_bounded_a_full_tell_is_refused_and_a_send_waits(
    pg_url: str, tmp_path: Path
) -> None:
    """Messages for an entity on another node wait to be posted through the store, at
    most ``max_outgoing`` of them (beside the batch being posted): past it ``tell`` raises
    ``OutgoingMailFull`` (a ``MailboxFull``, nothing kept) and ``send`` waits for room —
    here while b's store holds its posts until released. Nothing accepted is lost."""
    from greenroom.actors import MailboxFull
    from greenroom.entities import OutgoingMailFull

    async with two_daemons(pg_url, tmp_path, lease=5.0, max_outgoing=5) as (a, b):
        assert await a.ref(Tallied, "k").ask("one") == 1  # active on a
        assert await b.ref(Tallied, "k").ask("get") == 1  # b knows it is on a
        store_b = b.store
        real_post = store_b.post
        taken, released = anyio.Event(), anyio.Event()

        async def slow_post(mail: Any) -> None:
            taken.set()
            await released.wait()
            await real_post(mail)

        store_b.post = slow_post  # type: ignore[method-assign]
        ref = b.ref(Tallied, "k")
        for batch in range(2):  # the first five are taken to be posted (and held); five more wait
            for n in range(5):
                ref.tell(f"t{batch}{n}")
            with pytest.raises(OutgoingMailFull) as refused:
                ref.tell("one too many")
            assert isinstance(refused.value, MailboxFull) and refused.value.size == 5
            await taken.wait()
        sent_before_release: list[bool] = []

        async def send_one() -> None:
            await ref.send("sent")  # room only once the held batch went and the next was taken
            sent_before_release.append(not released.is_set())

        async with anyio.create_task_group() as tg:
            tg.start_soon(send_one)
            await anyio.wait_all_tasks_blocked()  # the send had its chance: it waits for room
            assert sent_before_release == []
            released.set()
        assert sent_before_release == [False]
        await eventually(lambda: _count(a, 12), timeout=20)  # one, ten tells, the send


async def _count(host: Entities, expected: int) -> bool:
    return bool(await host.ref(Tallied, "k").ask("get") == expected)
