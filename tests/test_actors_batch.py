"""Batch delivery: an actor that defines ``receive_many`` gets what is ready in its mailbox
at once, answers its asks through the replies it is handed, and fails them together."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from _support import eventually

from greenroom import Actor, ActorStopped, ActorSystem
from greenroom.actors import PendingReply

pytestmark = pytest.mark.anyio

Deliveries = list[tuple[Any, PendingReply | None]]


class Batcher(Actor):
    """Records each batch; answers an asked message with its text upper-cased, and
    fails the whole batch when a message says ``boom``."""

    def __init__(self, batches: list[list[Any]], gate: anyio.Event | None = None) -> None:
        self.batches = batches
        self.gate = gate

    async def receive_many(self, deliveries: Deliveries) -> None:
        self.batches.append([message for message, _ in deliveries])
        for message, reply in deliveries:
            if message == "hold" and self.gate is not None:
                await self.gate.wait()
            if message == "boom":
                raise RuntimeError("boom in a batch")
            if reply is not None:
                reply.succeed(message.upper())


async def test_what_is_ready_arrives_as_one_batch_in_order_with_a_reply_per_ask() -> None:
    batches: list[list[Any]] = []
    async with ActorSystem() as system:
        ref = await system.spawn(lambda: Batcher(batches))
        for text in ("a", "b", "c"):
            ref.tell(text)  # never yields: all three wait in the mailbox
        assert await ref.ask("d") == "D"
        assert await ref.ask("e") == "E"
    assert batches == [["a", "b", "c", "d"], ["e"]]


async def test_a_batch_that_raises_fails_its_unanswered_asks_and_the_actor_is_restarted_once() -> None:
    batches: list[list[Any]] = []
    gate = anyio.Event()
    async with ActorSystem() as system:
        ref = await system.spawn(lambda: Batcher(batches, gate))
        results: dict[str, Any] = {}

        async def ask(text: str) -> None:
            try:
                results[text] = await ref.ask(text)
            except RuntimeError as error:
                results[text] = error

        async with anyio.create_task_group() as tg:
            tg.start_soon(ask, "hold")  # the actor waits on the gate while the rest queue up
            await eventually(lambda: batches == [["hold"]])
            for queued, text in enumerate(("x", "boom", "y"), 1):
                tg.start_soon(ask, text)
                await eventually(lambda queued=queued: ref.queued == queued)  # in this order
            gate.set()
        assert results["x"] == "X"  # answered before the failure: it keeps its value
        assert isinstance(results["boom"], RuntimeError) and isinstance(results["y"], RuntimeError)
        assert str(results["y"]) == "boom in a batch"
        assert ref.statistics().restarts == 1  # one failure for the batch, not one per message
        assert await ref.ask("after") == "AFTER"  # the new instance serves
    assert batches == [["hold"], ["x", "boom", "y"], ["after"]]


async def test_messages_sent_before_stop_are_all_delivered_and_later_ones_refused() -> None:
    batches: list[list[Any]] = []
    async with ActorSystem() as system:
        ref = await system.spawn(lambda: Batcher(batches))
        for text in ("1", "2", "3"):
            ref.tell(text)
        await ref.stop()
        with pytest.raises(ActorStopped):
            ref.tell("4")
    assert batches == [["1", "2", "3"]]


async def test_a_batch_is_at_most_the_systems_throughput() -> None:
    batches: list[list[Any]] = []
    async with ActorSystem(throughput=4) as system:
        ref = await system.spawn(lambda: Batcher(batches), mailbox_size=None)
        for index in range(9):
            ref.tell(str(index))
        await ref.ask("last")
    assert [len(batch) for batch in batches] == [4, 4, 2]
    assert [m for batch in batches for m in batch] == [*map(str, range(9)), "last"]


async def test_receive_many_is_refused_on_an_interruptible_actor_or_when_not_async() -> None:
    class Interruptible(Batcher):
        interruptible = True

    class NotAsync(Actor):
        def receive_many(self, deliveries: Deliveries) -> None:  # type: ignore[override]
            pass

    async with ActorSystem() as system:
        with pytest.raises(TypeError, match="defines receive_many and is interruptible"):
            await system.spawn(lambda: Interruptible([]))
        with pytest.raises(TypeError, match=r"NotAsync.receive_many must be an 'async def' method"):
            await system.spawn(NotAsync)
