"""Backpressure, cancellation of callers, ordering, and progress under blocking receives."""

from __future__ import annotations

import random
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from greenroom import Actor, ActorRef, ActorSystem, AskTimeout, MailboxFull

pytestmark = pytest.mark.anyio


class Tally(Actor):
    """Counts handled messages into a shared dict; optionally waits on a gate first."""

    def __init__(self, stats: dict[str, int], gate: anyio.Event | None = None) -> None:
        self.stats = stats
        self.gate = gate

    async def receive(self, message: Any) -> Any:
        if message == "count":
            return self.stats["handled"]
        if self.gate is not None:
            await self.gate.wait()
        await anyio.lowlevel.checkpoint()
        self.stats["handled"] += 1
        return self.stats["handled"]


async def test_bounded_mailbox_backpressure_with_send_and_mailbox_full_with_tell() -> None:
    stats = {"handled": 0}
    gate = anyio.Event()
    async with ActorSystem() as system:
        ref = await system.spawn(lambda: Tally(stats, gate), mailbox_size=10)
        ref.tell("first")  # taken off the mailbox at once; the actor waits on the gate with it
        await anyio.sleep(0.01)
        for _ in range(10):
            ref.tell("x")
        with pytest.raises(MailboxFull, match="full \\(10 messages\\)"):
            ref.tell("overflow")
        with anyio.move_on_after(0.05) as blocked:
            await ref.send("waits")
        assert blocked.cancelled_caught  # send waited for room instead of overfilling
        gate.set()

        worst = 0
        for sent in range(1, 1_001):  # a fast producer: every send returns only when there is room
            await ref.send("y")
            worst = max(worst, 11 + sent - stats["handled"])
        assert worst <= 10 + 1  # queued + the one being handled
        assert await ref.ask("count") == 1 + 10 + 1_000
        assert system.dead_letters.count == 0


async def test_a_cancelled_send_is_never_delivered() -> None:
    gate = anyio.Event()
    handled: list[Any] = []

    class Keeper(Actor):
        async def receive(self, message: Any) -> Any:
            await gate.wait()
            handled.append(message)
            return len(handled)

    async with ActorSystem() as system:
        ref = await system.spawn(Keeper, mailbox_size=2)
        for i in range(3):  # one in hand, two queued
            await ref.send(i)
        async with anyio.create_task_group() as group:
            with anyio.CancelScope() as scope:
                group.start_soon(ref.send, "queued-behind")
                await anyio.sleep(0.01)
                with anyio.move_on_after(0.01):
                    await ref.send("cancelled")
                scope.cancel()
            gate.set()
        assert await ref.ask("last") == 5
        assert handled == [0, 1, 2, "queued-behind", "last"]


async def test_cancelling_a_thousand_askers_mid_flight_leaves_the_actor_consistent() -> None:
    stats = {"handled": 0}
    async with ActorSystem() as system:
        ref = await system.spawn(lambda: Tally(stats), mailbox_size=None)
        replies: list[int] = []

        async def asker() -> None:
            replies.append(await ref.ask("inc", timeout=None))

        async with anyio.create_task_group() as group:
            for _ in range(1_000):
                group.start_soon(asker)
            await anyio.lowlevel.checkpoint()  # let the askers enqueue
            while stats["handled"] < 300:
                await anyio.lowlevel.checkpoint()
            group.cancel_scope.cancel()
        # every accepted message is still handled exactly once; answers to the cancelled are dropped
        assert await ref.ask("count") == 1_000
        assert replies == sorted(replies) and len(set(replies)) == len(replies) and len(replies) < 1_000
        assert await ref.ask("inc") == 1_001
        assert system.dead_letters.count == 0


async def test_ordering_per_sender_holds_under_a_hundred_concurrent_senders() -> None:
    class Ledger(Actor):
        def __init__(self) -> None:
            self.seen: dict[int, list[int]] = {}

        async def receive(self, message: Any) -> Any:
            if message == "report":
                return self.seen
            sender, seq = message
            self.seen.setdefault(sender, []).append(seq)
            if seq % 7 == 0:
                await anyio.lowlevel.checkpoint()
            return None

    per_sender = 200

    async def sender(ref: ActorRef, me: int) -> None:
        rng = random.Random(me)
        for seq in range(per_sender):
            how = rng.random()
            if how < 0.4:
                try:
                    ref.tell((me, seq))
                except MailboxFull:
                    await ref.send((me, seq))
            elif how < 0.8:
                await ref.send((me, seq))
            else:
                await ref.ask((me, seq))
            if rng.random() < 0.3:
                await anyio.lowlevel.checkpoint()

    async with ActorSystem() as system:
        ref = await system.spawn(Ledger, mailbox_size=64)
        async with anyio.create_task_group() as group:
            for me in range(100):
                group.start_soon(sender, ref, me)
        seen = await ref.ask("report")
        assert sorted(seen) == list(range(100))
        assert all(seqs == list(range(per_sender)) for seqs in seen.values())


async def test_a_blocked_receive_does_not_starve_other_actors() -> None:
    gate = anyio.Event()
    async with ActorSystem() as system:
        blocked = [await system.spawn(lambda: Tally({"handled": 0}, gate)) for _ in range(20)]
        for ref in blocked:
            ref.tell("wait")
        free = await system.spawn(lambda: Tally({"handled": 0}))
        with anyio.fail_after(5):
            assert await free.ask("inc") == 1
        gate.set()
        assert [await ref.ask("count") for ref in blocked] == [1] * 20


async def test_many_actors_make_progress_under_a_single_flood() -> None:
    stats_a = {"handled": 0}
    stats_b = {"handled": 0}
    async with ActorSystem(throughput=8) as system:
        flooded = await system.spawn(lambda: Tally(stats_a), mailbox_size=None)
        other = await system.spawn(lambda: Tally(stats_b))
        for _ in range(5_000):
            flooded.tell("x")
        assert await other.ask("inc") == 1
        assert stats_a["handled"] < 5_000  # the other actor did not wait for the whole flood
        assert await flooded.ask("count") == 5_000


async def test_a_flood_of_messages_does_not_starve_other_tasks() -> None:
    handled = [0]

    class Busy(Actor):
        async def receive(self, message: Any) -> Any:
            handled[0] += 1  # never yields by itself
            return handled[0]

    async with ActorSystem(throughput=16) as system:
        ref = await system.spawn(Busy, mailbox_size=None)
        for _ in range(5_000):
            ref.tell("x")
        for _ in range(3):
            await anyio.lowlevel.checkpoint()
        assert 0 < handled[0] < 5_000  # the host ran again while the flood was being drained
        assert await ref.ask("last") == 5_001


async def test_ask_on_a_full_mailbox_waits_for_room_within_its_timeout() -> None:
    stats = {"handled": 0}
    gate = anyio.Event()
    async with ActorSystem() as system:
        ref = await system.spawn(lambda: Tally(stats, gate), mailbox_size=1)
        ref.tell("in hand")
        await anyio.sleep(0.01)
        ref.tell("queued")
        with pytest.raises(AskTimeout, match=r"timed out after 0\.05s"):
            await ref.ask("no room", timeout=0.05)
        gate.set()  # the ask below waits for room, admitted once "in hand" is done
        assert await ref.ask("room made", timeout=5) == 3
        assert await ref.ask("count") == 3  # the timed-out ask was never enqueued
