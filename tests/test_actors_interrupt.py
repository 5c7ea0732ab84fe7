"""Interruptible actors: ``ref.interrupt()``, ``stop(now=True)``, and asks that give up."""

from __future__ import annotations

from typing import Any

import anyio
import anyio.lowlevel
import pytest
from _support import eventually

from greenroom import (
    Actor,
    ActorRef,
    ActorStopped,
    ActorSystem,
    AskTimeout,
    DeadLetter,
    Interrupted,
    Terminated,
)

pytestmark = pytest.mark.anyio


class Worker(Actor):
    """``("work", key)`` waits on ``gates[key]`` (forever when there is none) and records
    what happened to it in ``log``: started, finished, or cancelled."""

    interruptible = True

    def __init__(self, log: list[Any], gates: dict[Any, anyio.Event] | None = None) -> None:
        self.log = log
        self.gates = gates if gates is not None else {}

    async def on_stop(self) -> None:
        self.log.append("on_stop")

    async def receive(self, message: Any) -> Any:
        kind, key = message
        if kind == "quick":
            self.log.append(("quick", key))
            return key
        self.log.append(("started", key))
        try:
            gate = self.gates.get(key)
            if gate is None:
                await anyio.sleep_forever()
            else:
                await gate.wait()
        except anyio.get_cancelled_exc_class():
            self.log.append(("cancelled", key))
            raise
        self.log.append(("finished", key))
        return key


async def started(log: list[Any], key: Any) -> None:
    await eventually(lambda: ("started", key) in log)


async def test_interrupt_cancels_the_current_message_and_the_actor_takes_the_next() -> None:
    log: list[Any] = []
    async with ActorSystem() as system, anyio.create_task_group() as tg:
        ref = await system.spawn(lambda: Worker(log))
        outcome: list[BaseException] = []

        async def asker() -> None:
            try:
                await ref.ask(("work", 1), timeout=None)
            except Interrupted as error:
                outcome.append(error)

        tg.start_soon(asker)
        await started(log, 1)
        ref.tell(("quick", 2))
        assert ref.interrupt() is True
        await eventually(lambda: outcome)
        assert isinstance(outcome[0], Interrupted)
        assert "interrupted while handling a tuple message" in str(outcome[0])
        assert await ref.ask(("quick", 3)) == 3
        assert log == [("started", 1), ("cancelled", 1), ("quick", 2), ("quick", 3)]
        assert ref.is_alive


async def test_interrupt_of_an_idle_actor_does_nothing_and_is_not_kept() -> None:
    log: list[Any] = []
    async with ActorSystem() as system:
        ref = await system.spawn(lambda: Worker(log, {1: anyio.Event()}))
        assert ref.interrupt() is False
        gate = anyio.Event()
        ref2 = await system.spawn(lambda: Worker(log, {"x": gate}))
        assert ref2.interrupt() is False
        gate.set()
        assert await ref2.ask(("work", "x")) == "x"  # an earlier interrupt did not hit it
        assert ("cancelled", "x") not in log


async def test_interrupt_refuses_an_actor_that_did_not_opt_in() -> None:
    class Plain(Actor):
        async def receive(self, message: Any) -> Any:
            return message

    async with ActorSystem() as system:
        ref = await system.spawn(Plain)
        with pytest.raises(TypeError, match="not interruptible"):
            ref.interrupt()


async def test_an_interrupt_is_not_a_failure() -> None:
    log: list[Any] = []
    restarts: list[int] = []

    class Counting(Worker):
        async def on_start(self) -> None:
            restarts.append(1)

    async with ActorSystem() as system:
        ref = await system.spawn(lambda: Counting(log))
        ref.tell(("work", 1))
        await started(log, 1)
        ref.interrupt()
        await eventually(lambda: ("cancelled", 1) in log)
        assert await ref.ask(("quick", 2)) == 2
        assert restarts == [1]  # never restarted
        assert "on_stop" not in log


async def test_on_interrupted_answers_the_asker() -> None:
    class Partial(Actor):
        interruptible = True

        def __init__(self) -> None:
            self.done = 0

        def on_interrupted(self, message: Any) -> Any:
            return ("partial", self.done)

        async def receive(self, message: Any) -> Any:
            for _ in range(3):
                self.done += 1
                await anyio.lowlevel.checkpoint()
            await anyio.sleep_forever()

    async with ActorSystem() as system, anyio.create_task_group() as tg:
        ref = await system.spawn(Partial)
        answers: list[Any] = []

        async def asker() -> None:
            answers.append(await ref.ask("go", timeout=None))

        tg.start_soon(asker)
        actor_cell = ref._cell
        await eventually(lambda: actor_cell.actor is not None and actor_cell.actor.done == 3)  # type: ignore[attr-defined]
        ref.interrupt()
        await eventually(lambda: answers)
        assert answers == [("partial", 3)]


async def test_ask_timeout_interrupts_the_work_it_started() -> None:
    log: list[Any] = []
    async with ActorSystem() as system:
        ref = await system.spawn(lambda: Worker(log))
        with pytest.raises(AskTimeout):
            await ref.ask(("work", 1), timeout=0.05)
        await eventually(lambda: ("cancelled", 1) in log)
        assert await ref.ask(("quick", 2)) == 2


async def test_ask_timeout_with_interrupt_false_lets_the_work_run_on() -> None:
    log: list[Any] = []
    gate = anyio.Event()
    async with ActorSystem() as system:
        ref = await system.spawn(lambda: Worker(log, {1: gate}))
        with pytest.raises(AskTimeout):
            await ref.ask(("work", 1), timeout=0.05, interrupt=False)
        assert ("cancelled", 1) not in log
        gate.set()
        assert await ref.ask(("quick", 2)) == 2
        assert log == [("started", 1), ("finished", 1), ("quick", 2)]


async def test_a_cancelled_asker_interrupts_its_message() -> None:
    log: list[Any] = []
    async with ActorSystem() as system:
        ref = await system.spawn(lambda: Worker(log))
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: ref.ask(("work", 1), timeout=None))
            await started(log, 1)
            tg.cancel_scope.cancel()
        await eventually(lambda: ("cancelled", 1) in log)
        assert await ref.ask(("quick", 2)) == 2


async def test_a_queued_ask_whose_asker_gave_up_is_never_started() -> None:
    log: list[Any] = []
    gate = anyio.Event()
    async with ActorSystem() as system, anyio.create_task_group() as tg:
        ref = await system.spawn(lambda: Worker(log, {1: gate}))
        tg.start_soon(lambda: ref.ask(("work", 1), timeout=None))
        await started(log, 1)
        with pytest.raises(AskTimeout):
            await ref.ask(("work", 2), timeout=0.02)  # queued behind 1, gives up
        gate.set()
        assert await ref.ask(("quick", 3)) == 3
        assert ("started", 2) not in log
        assert DeadLetter(ref, ("work", 2), "abandoned") in system.dead_letters.recent()
        assert system.dead_letters.by_reason["abandoned"] == 1


async def test_interrupt_hits_only_the_ask_that_gave_up() -> None:
    """An asker whose deadline passes after its message finished must not interrupt
    the next message."""
    log: list[Any] = []
    gates = {1: anyio.Event()}
    async with ActorSystem() as system, anyio.create_task_group() as tg:
        ref = await system.spawn(lambda: Worker(log, gates))
        cell = ref._cell
        results: list[Any] = []

        async def first() -> None:
            results.append(await ref.ask(("work", 1), timeout=None))

        tg.start_soon(first)
        await started(log, 1)
        old_reply = cell.activation
        assert old_reply is not None
        gates[1].set()
        await eventually(lambda: results == [1])
        ref.tell(("work", 2))
        await started(log, 2)
        assert cell.interrupt(old_reply) is False  # the first ask's late give-up
        assert ("cancelled", 2) not in log
        assert cell.interrupt(cell.activation) is True
        await eventually(lambda: ("cancelled", 2) in log)


async def test_stop_now_interrupts_drops_the_queue_and_runs_on_stop() -> None:
    log: list[Any] = []
    async with ActorSystem() as system, anyio.create_task_group() as tg:
        ref = await system.spawn(lambda: Worker(log))
        watcher_log: list[Any] = []

        class Watcher(Actor):
            async def on_start(self) -> None:
                self.context.watch(ref)

            async def receive(self, message: Any) -> Any:
                watcher_log.append(message)

        await system.spawn(Watcher)
        errors: list[BaseException] = []

        async def ask(key: int) -> None:
            try:
                await ref.ask(("work", key), timeout=None)
            except (Interrupted, ActorStopped) as error:
                errors.append(error)

        tg.start_soon(ask, 1)
        await started(log, 1)
        tg.start_soon(ask, 2)
        await eventually(lambda: len(ref._cell.mailbox) == 1)
        ref.tell(("quick", 3))
        with anyio.fail_after(5):
            await ref.stop(now=True)
        assert not ref.is_alive
        assert log == [("started", 1), ("cancelled", 1), "on_stop"]
        await eventually(lambda: len(errors) == 2)
        assert sorted(type(e).__name__ for e in errors) == ["ActorStopped", "Interrupted"]
        reasons = [(d.message, d.reason) for d in system.dead_letters.recent()]
        assert (("work", 2), "dropped") in reasons and (("quick", 3), "dropped") in reasons
        await eventually(lambda: watcher_log == [Terminated(ref, None)])


async def test_stop_now_on_a_plain_actor_drops_the_queue_after_the_current_message() -> None:
    log: list[Any] = []
    gate = anyio.Event()

    class Plain(Actor):
        async def receive(self, message: Any) -> Any:
            if message == "slow":
                await gate.wait()
            log.append(message)

    async with ActorSystem() as system, anyio.create_task_group() as tg:
        ref = await system.spawn(Plain)
        ref.tell("slow")
        ref.tell("queued")
        await eventually(lambda: len(ref._cell.mailbox) == 1)
        tg.start_soon(lambda: ref.stop(now=True))
        await eventually(lambda: not ref._cell.accepting)
        gate.set()
        await eventually(lambda: not ref.is_alive)
        assert log == ["slow"]
        assert DeadLetter(ref, "queued", "dropped") in system.dead_letters.recent()


async def test_stop_now_cuts_a_draining_stop_short() -> None:
    log: list[Any] = []
    async with ActorSystem() as system, anyio.create_task_group() as tg:
        ref = await system.spawn(lambda: Worker(log))
        ref.tell(("work", 1))
        ref.tell(("work", 2))
        await started(log, 1)
        tg.start_soon(ref.stop)  # would wait for 1 and 2 forever
        await eventually(lambda: not ref._cell.accepting)
        with anyio.fail_after(5):
            await ref.stop(now=True)
        assert log == [("started", 1), ("cancelled", 1), "on_stop"]


async def test_context_stop_child_now_from_the_parent() -> None:
    log: list[Any] = []

    class Parent(Actor):
        async def on_start(self) -> None:
            self.child = await self.context.spawn(lambda: Worker(log), name="child")

        async def receive(self, message: Any) -> Any:
            if message == "child":
                return self.child
            if message == "stop-child-now":
                self.context.stop(self.child, now=True)
            if message == "stop-stranger":
                self.context.stop(message_ref[0])

    message_ref: list[ActorRef] = []
    async with ActorSystem() as system:
        stranger = await system.spawn(lambda: Worker([]))
        message_ref.append(stranger)
        parent = await system.spawn(Parent)
        child: ActorRef = await parent.ask("child")
        child.tell(("work", 1))
        await started(log, 1)
        await parent.ask("stop-child-now")
        await eventually(lambda: not child.is_alive)
        assert log == [("started", 1), ("cancelled", 1), "on_stop"]
        with pytest.raises(ValueError, match="can stop itself and its children"):
            await parent.ask("stop-stranger")
        assert stranger.is_alive


async def test_stopping_a_parent_now_stops_its_interruptible_children_now() -> None:
    log: list[Any] = []

    class Parent(Actor):
        async def on_start(self) -> None:
            self.child = await self.context.spawn(lambda: Worker(log), name="kid")

        async def receive(self, message: Any) -> Any:
            return self.child

    async with ActorSystem() as system:
        parent = await system.spawn(Parent)
        child: ActorRef = await parent.ask("child")
        child.tell(("work", 1))
        await started(log, 1)
        with anyio.fail_after(5):
            await parent.stop(now=True)
        assert not child.is_alive
        assert log == [("started", 1), ("cancelled", 1), "on_stop"]


async def test_a_cancelled_stop_now_still_stops() -> None:
    log: list[Any] = []
    async with ActorSystem() as system:
        ref = await system.spawn(lambda: Worker(log))
        ref.tell(("work", 1))
        await started(log, 1)
        with anyio.CancelScope() as scope:
            scope.cancel()
            await ref.stop(now=True)
        await eventually(lambda: not ref.is_alive)
        assert ("cancelled", 1) in log


async def test_a_failure_in_an_interruptible_actor_is_still_supervised() -> None:
    starts: list[int] = []

    class Fails(Actor):
        interruptible = True

        async def on_start(self) -> None:
            starts.append(1)

        async def receive(self, message: Any) -> Any:
            if message == "boom":
                raise RuntimeError("boom")
            return message

    async with ActorSystem() as system:
        ref = await system.spawn(Fails)
        with pytest.raises(RuntimeError, match="boom"):
            await ref.ask("boom")
        assert await ref.ask("ok") == "ok"
        assert starts == [1, 1]  # restarted by the default strategy
