"""``context.reply_later()`` and ``context.queued``: answering asks after the batch."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from greenroom import Actor, ActorSystem, AskTimeout, PendingReply

pytestmark = pytest.mark.anyio


class Batcher(Actor):
    """Holds every asked reply until its mailbox is empty, then answers them all."""

    def __init__(self) -> None:
        self.waiting: list[tuple[PendingReply, Any]] = []
        self.batches: list[int] = []

    async def receive(self, message: Any) -> Any:
        if message == "batches":
            return self.batches
        pending = self.context.reply_later()
        assert pending is not None
        self.waiting.append((pending, message))
        if self.context.queued == 0:
            self.batches.append(len(self.waiting))
            for reply, value in self.waiting:
                reply.succeed(value * 2)
            self.waiting.clear()
        return "ignored: the reply was taken"


async def test_deferred_replies_are_answered_when_the_batch_is_done() -> None:
    async with ActorSystem() as system:
        ref = await system.spawn(Batcher)
        results: dict[int, Any] = {}

        async def ask(i: int) -> None:
            results[i] = await ref.ask(i)

        async with anyio.create_task_group() as tg:
            for i in range(50):
                tg.start_soon(ask, i)
        assert results == {i: i * 2 for i in range(50)}
        batches = await ref.ask("batches")
        assert sum(batches) == 50
        assert max(batches) > 1  # the asks queued up and were answered as one batch


class Keeper(Actor):
    def __init__(self) -> None:
        self.kept: list[PendingReply | None] = []

    async def receive(self, message: Any) -> Any:
        if message == "fill":
            pending = self.kept.pop()
            assert pending is not None
            wanted = pending.wanted
            pending.succeed("late")
            return wanted
        if message == "boom":
            self.context.reply_later()
            raise ValueError("failed after taking the reply")
        self.kept.append(self.context.reply_later())
        return None


async def test_told_message_has_no_reply_to_take() -> None:
    async with ActorSystem() as system:
        ref = await system.spawn(Keeper)
        ref.tell("told")
        with pytest.raises(AssertionError):  # what was kept for the told message is None
            await ref.ask("fill")


async def test_asker_that_timed_out_is_not_wanted() -> None:
    async with ActorSystem() as system:
        ref = await system.spawn(Keeper)
        with pytest.raises(AskTimeout):
            await ref.ask("hold", timeout=0.05)
        assert await ref.ask("fill") is False


async def test_raising_after_taking_the_reply_fails_the_asker() -> None:
    async with ActorSystem() as system:
        ref = await system.spawn(Keeper)
        with pytest.raises(ValueError, match="failed after taking the reply"):
            await ref.ask("boom")


async def test_reply_later_outside_receive_is_refused() -> None:
    async with ActorSystem() as system:
        ref = await system.spawn(Keeper)
        actor = ref._cell.actor
        assert actor is not None
        with pytest.raises(RuntimeError, match="only valid inside"):
            actor.context.reply_later()


class Holder(Actor):
    """Keeps every asked reply in ``held`` (filled by the test, from its own task)."""

    def __init__(self) -> None:
        self.held: list[PendingReply] = []

    async def receive(self, message: Any) -> Any:
        pending = self.context.reply_later()
        assert pending is not None
        self.held.append(pending)
        return None

    async def next_held(self) -> PendingReply:
        """The next reply this actor keeps, once an ask has arrived."""
        while not self.held:
            await anyio.sleep(0.001)
        return self.held.pop()


async def test_if_lost_reports_a_value_the_cancelled_asker_never_took() -> None:
    lost: list[str] = []
    holder = Holder()
    async with ActorSystem() as system:
        ref = await system.spawn(lambda: holder)
        got: list[Any] = []

        async def asker(scope: anyio.CancelScope) -> None:
            with scope:
                got.append(await ref.ask("hold", timeout=None))

        held_once = holder.next_held

        # delivered: if_lost is not called
        async with anyio.create_task_group() as tg:
            tg.start_soon(asker, anyio.CancelScope())
            (await held_once()).succeed("kept", if_lost=lambda: lost.append("kept"))
        assert got == ["kept"] and lost == []

        # cancelled, then filled before the asker resumed: reported lost, once
        scope = anyio.CancelScope()
        async with anyio.create_task_group() as tg:
            tg.start_soon(asker, scope)
            pending = await held_once()
            scope.cancel()
            assert pending.wanted  # the asker has not resumed to notice yet
            pending.succeed("late", if_lost=lambda: lost.append("late"))
        assert got == ["kept"] and scope.cancelled_caught
        assert lost == ["late"]

        # cancelled and noticed before the fill: the fill is dropped, nothing is lost
        scope = anyio.CancelScope()
        async with anyio.create_task_group() as tg:
            tg.start_soon(asker, scope)
            pending = await held_once()
            scope.cancel()
        assert not pending.wanted
        pending.succeed("dropped", if_lost=lambda: lost.append("dropped"))
        assert lost == ["late"]


async def test_a_non_callable_if_lost_is_refused_and_the_reply_still_unfilled() -> None:
    holder = Holder()
    async with ActorSystem() as system:
        ref = await system.spawn(lambda: holder)
        got: list[Any] = []

        async def asker() -> None:
            got.append(await ref.ask("hold", timeout=None))

        async with anyio.create_task_group() as tg:
            tg.start_soon(asker)
            pending = await holder.next_held()
            with pytest.raises(TypeError, match="if_lost must be callable or None, got 'tell the sup"):
                pending.succeed("value", if_lost="tell the supervisor")  # type: ignore[arg-type]
            assert pending.wanted  # nothing was filled by the refused call
            pending.succeed("value")
        assert got == ["value"]
