"""Spawning, naming, tell / send / ask, and validation of what callers pass in."""

from __future__ import annotations

import functools
import math
from typing import Any

import anyio
import pytest
from _support import eventually

from greenroom import Actor, ActorStopped, ActorSystem, AskTimeout, SupervisorStrategy
from greenroom.actors import DEFAULT_MAILBOX_SIZE

pytestmark = pytest.mark.anyio


class Counter(Actor):
    def __init__(self, start: int = 0) -> None:
        self.n = start

    async def receive(self, message: Any) -> Any:
        if message == "get":
            return self.n
        if message == "boom":
            raise ValueError("boom")
        self.n += message
        return None


class Gated(Actor):
    """Handles each message only once ``gate`` is set; records what it handled."""

    def __init__(self, gate: anyio.Event, handled: list[Any]) -> None:
        self.gate = gate
        self.handled = handled

    async def receive(self, message: Any) -> Any:
        await self.gate.wait()
        self.handled.append(message)
        return message


async def test_counter_example_from_the_issue() -> None:
    async with ActorSystem() as system:
        ref = await system.spawn(Counter, name="counter", mailbox_size=1000)
        ref.tell(5)
        await ref.send(5)
        assert await ref.ask("get", timeout=1.0) == 10
        await ref.stop()
        assert not ref.is_alive


async def test_factory_forms_class_partial_lambda() -> None:
    async with ActorSystem() as system:
        a = await system.spawn(Counter)
        b = await system.spawn(functools.partial(Counter, 7))
        c = await system.spawn(lambda: Counter(11))
        assert [await r.ask("get") for r in (a, b, c)] == [0, 7, 11]


async def test_ask_reraises_the_actors_exception_and_supervisor_restarts_it() -> None:
    async with ActorSystem() as system:
        ref = await system.spawn(Counter)
        ref.tell(3)
        with pytest.raises(ValueError, match="boom"):
            await ref.ask("boom")
        # default strategy restarts: a fresh instance from the factory
        assert await ref.ask("get") == 0


async def test_ask_timeout_is_a_timeout_error_and_message_stays_accepted() -> None:
    gate, handled = anyio.Event(), []
    async with ActorSystem() as system:
        ref = await system.spawn(lambda: Gated(gate, handled))
        with pytest.raises(AskTimeout) as caught:
            await ref.ask({"api_key": "sk-secret"}, timeout=0.05)
        assert isinstance(caught.value, TimeoutError)
        assert "dict" in str(caught.value) and "sk-secret" not in str(caught.value)
        gate.set()
        assert await ref.ask("after") == "after"
        assert handled == [{"api_key": "sk-secret"}, "after"]


@pytest.mark.parametrize("timeout", [0, -1, math.nan])
async def test_ask_rejects_bad_timeout(timeout: float) -> None:
    async with ActorSystem() as system:
        ref = await system.spawn(Counter)
        with pytest.raises(ValueError, match=r"ask timeout .* got " + repr(timeout)):
            await ref.ask("get", timeout=timeout)
        assert await ref.ask("get", timeout=None) == 0


async def test_messages_to_a_stopped_actor_raise_actor_stopped_and_are_dead_letters() -> None:
    async with ActorSystem() as system:
        ref = await system.spawn(Counter, name="gone")
        await ref.stop()
        with pytest.raises(ActorStopped, match="'gone' is stopped"):
            ref.tell(1)
        with pytest.raises(ActorStopped):
            await ref.send(1)
        with pytest.raises(ActorStopped):
            await ref.ask("get")
        assert system.dead_letters.count == 3
        assert [d.message for d in system.dead_letters.recent()] == [1, 1, "get"]
        assert {d.reason for d in system.dead_letters.recent()} == {"stopped"}


async def test_an_actor_asking_itself_gets_an_error_not_a_deadlock() -> None:
    class SelfAsker(Actor):
        async def receive(self, message: Any) -> Any:
            if message == "go":
                try:
                    await self.context.ref.ask("inner", timeout=None)
                except RuntimeError as error:
                    return str(error)
            return "inner"

    async with ActorSystem() as system:
        ref = await system.spawn(SelfAsker, name="narcissus")
        assert "'narcissus' asked itself" in await ref.ask("go")


async def test_spawn_rejects_bad_factories_and_keeps_nothing() -> None:
    class SyncReceive(Actor):
        def receive(self, message: Any) -> Any:  # type: ignore[override]
            return message

    async with ActorSystem() as system:
        with pytest.raises(TypeError, match=r"factory.*got <.*Counter object"):
            await system.spawn(Counter(), name="instance")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"returned int, expected an instance of greenroom.Actor"):
            await system.spawn(lambda: 42, name="int")  # type: ignore[arg-type, return-value]
        with pytest.raises(TypeError, match=r"factory.*got 'nope'"):
            await system.spawn("nope", name="str")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"SyncReceive.receive must be an 'async def'"):
            await system.spawn(SyncReceive, name="sync")
        assert system.actors == []
        assert [system.lookup(n) for n in ("instance", "int", "str", "sync")] == [None] * 4


@pytest.mark.parametrize("name", ["", "$reserved", "has space", "a/b", "x" * 201, 5])
async def test_spawn_rejects_bad_names(name: Any) -> None:
    async with ActorSystem() as system:
        with pytest.raises(ValueError, match=r"spawn name .* got " + repr(name)[:20].replace("$", r"\$")):
            await system.spawn(Counter, name=name)
        assert system.actors == []


@pytest.mark.parametrize("size", [0, -1, True, 1.5, "10"])
async def test_spawn_rejects_bad_mailbox_size(size: Any) -> None:
    async with ActorSystem() as system:
        with pytest.raises(ValueError, match=r"mailbox_size must be an int >= 1 or None, got " + repr(size)):
            await system.spawn(Counter, mailbox_size=size)
        assert system.actors == []


async def test_duplicate_name_is_refused_and_the_first_actor_is_untouched() -> None:
    async with ActorSystem() as system:
        first = await system.spawn(lambda: Counter(1), name="dup")
        with pytest.raises(ValueError, match="'dup' is already taken"):
            await system.spawn(lambda: Counter(2), name="dup")
        assert system.lookup("dup") is first
        assert await first.ask("get") == 1


async def test_lookup_and_name_reuse_after_stop() -> None:
    async with ActorSystem() as system:
        ref = await system.spawn(Counter, name="svc")
        assert system.lookup("svc") is ref
        assert system.lookup("missing") is None
        await ref.stop()
        assert system.lookup("svc") is None
        again = await system.spawn(lambda: Counter(9), name="svc")
        assert again is not ref and await again.ask("get") == 9


async def test_generated_names_are_unique_and_marked() -> None:
    async with ActorSystem() as system:
        refs = [await system.spawn(Counter) for _ in range(50)]
        names = [r.name for r in refs]
        assert len(set(names)) == 50
        assert all(n.startswith("$counter-") for n in names)


async def test_refs_are_hashable_and_identity_stable() -> None:
    async with ActorSystem() as system:
        ref = await system.spawn(Counter, name="k")
        table = {ref: "value"}
        assert table[system.lookup("k")] == "value"  # type: ignore[index]
        assert "'k'" in repr(ref)
        await ref.stop()
        assert table[ref] == "value" and "stopped" in repr(ref)


async def test_spawn_waits_for_on_start() -> None:
    class Warm(Actor):
        async def on_start(self) -> None:
            await anyio.sleep(0.01)
            self.ready = "warmed"

        async def receive(self, message: Any) -> Any:
            return self.ready

    async with ActorSystem() as system:
        ref = await system.spawn(Warm)
        assert await ref.ask("?") == "warmed"


async def test_spawn_reraises_on_start_error_and_registers_nothing() -> None:
    class Broken(Actor):
        async def on_start(self) -> None:
            raise OSError("cannot open the data dir")

    async with ActorSystem() as system:
        with pytest.raises(OSError, match="cannot open the data dir"):
            await system.spawn(Broken, name="broken")
        assert system.lookup("broken") is None
        assert system.actors == []


async def test_context_is_unavailable_before_spawn() -> None:
    with pytest.raises(RuntimeError, match="available from on_start on"):
        _ = Counter().context


async def test_spawn_needs_a_running_system_and_a_system_runs_once() -> None:
    system = ActorSystem()
    with pytest.raises(RuntimeError, match="needs a running ActorSystem"):
        await system.spawn(Counter)
    async with system:
        pass
    with pytest.raises(RuntimeError, match="is closed"):
        await system.spawn(Counter)
    with pytest.raises(RuntimeError, match="entered only once"):
        async with system:
            pass


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"shutdown_timeout": -1}, ValueError, "shutdown_timeout must be a number >= 0, got -1"),
        ({"throughput": 0}, ValueError, "throughput must be an int >= 1, got 0"),
        ({"max_idle_workers": "8"}, ValueError, "max_idle_workers must be an int >= 1, got '8'"),
        ({"supervisor_strategy": "restart"}, TypeError, "must be a SupervisorStrategy, got 'restart'"),
    ],
)
def test_system_rejects_bad_configuration(kwargs: dict[str, Any], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        ActorSystem(**kwargs)


def test_default_strategy_is_documented_restart_three_in_five_seconds() -> None:
    default = SupervisorStrategy()
    assert (default.max_restarts, default.within, default.backoff) == (3, 5.0, None)
    assert default.decide(ValueError()).value == "restart"


async def test_kernel_handles_have_no_public_constructor() -> None:
    """A ref, a context, a pending reply and a timer wrap kernel state: only the kernel
    makes them (calling the class is a TypeError naming the way to get one)."""
    from greenroom import ActorContext, ActorRef, PendingReply, Timer

    async with ActorSystem() as system:
        ref = await system.spawn(Counter)
        cell = ref._cell
        for cls, args in (
            (ActorRef, (cell,)),
            (ActorContext, (cell,)),
            (PendingReply, (None,)),
            (Timer, (cell, 1, None)),
        ):
            with pytest.raises(TypeError, match="has no public constructor"):
                cls(*args)
        assert await ref.ask("get") == 0  # the real ones still work


async def test_statistics_count_depth_restarts_and_dead_letters() -> None:
    gate = anyio.Event()
    handled: list[Any] = []
    async with ActorSystem() as system:
        counter = await system.spawn(Counter, name="counter", mailbox_size=10)
        with pytest.raises(ValueError):
            await counter.ask("boom")
        with pytest.raises(ValueError):
            await counter.ask("boom")
        gated = await system.spawn(lambda: Gated(gate, handled), name="gated")
        for n in range(4):
            gated.tell(n)
        stats = gated.statistics()
        assert (stats.name, stats.alive, stats.mailbox_limit) == ("gated", True, DEFAULT_MAILBOX_SIZE)
        assert stats.mailbox_depth >= 3  # one may be in hand, waiting for the gate
        assert counter.statistics().restarts == 2
        await counter.stop()
        with pytest.raises(ActorStopped):
            counter.tell(1)
        after = counter.statistics()
        assert (after.alive, after.dead_letters, after.restarts) == (False, 1, 2)
        whole = system.statistics()
        assert whole.actors == 1 and whole.restarts == 2
        assert whole.dead_letters == 1 and whole.dead_letters_by_reason == {"stopped": 1}
        assert whole.mailbox_depth == gated.statistics().mailbox_depth
        gate.set()
        assert await gated.ask("last") == "last"
        assert handled == [0, 1, 2, 3, "last"]
        assert gated.statistics().mailbox_depth == 0


async def test_send_is_a_checkpoint_even_with_room() -> None:
    """Like every anyio and trio async call: it yields (another task runs), and a
    cancellation delivered there means the message was not sent."""
    async with ActorSystem() as system:
        ref = await system.spawn(Counter, mailbox_size=1000)
        other_ran = anyio.Event()
        async with anyio.create_task_group() as tg:

            async def mark() -> None:
                other_ran.set()

            tg.start_soon(mark)  # runs only once this task yields
            sent = 0
            while sent < 100 and not other_ran.is_set():  # without a checkpoint: never
                await ref.send(1)
                sent += 1
            assert other_ran.is_set() and sent <= 5  # trio may run the other after a few
        with anyio.CancelScope() as scope:
            scope.cancel()
            await ref.send(100)
        assert scope.cancelled_caught
        assert await ref.ask("get") == sent


async def test_a_trimmed_idle_actor_takes_every_kind_of_message_as_before() -> None:
    """``ActorRef.trim`` gives back an idle actor's mailbox buffer: refused while it has
    a message or handles one; after it, tell, send, ask, a timer's tick, a ``Terminated``
    and a stop reach the actor as before (each enqueueing site makes a new mailbox)."""
    from greenroom.actors._mailbox import RELEASED

    class Watcher(Actor):
        def __init__(self) -> None:
            self.seen: list[Any] = []

        async def receive(self, message: Any) -> Any:
            if isinstance(message, tuple) and message[0] == "watch":
                self.context.watch(message[1])
            elif message == "tick-later":
                self.context.schedule_once(0.01, "tick")
            elif message == "seen":
                return list(self.seen)
            else:
                self.seen.append(type(message).__name__ if not isinstance(message, str) else message)
            return None

    gate = anyio.Event()
    async with ActorSystem() as system:
        busy = await system.spawn(lambda: Gated(gate, []))
        busy.tell("hold")
        assert busy.trim() is False  # a message in hand
        gate.set()
        ref = await system.spawn(Watcher)
        assert ref.trim() is True and ref._cell.mailbox is RELEASED
        ref.tell("told")
        assert ref._cell.mailbox is not RELEASED
        await ref.ask("seen")
        assert ref.trim() is True
        await ref.send("sent")
        assert ref.trim() is False  # queued, not handled yet
        await ref.ask("seen")
        assert ref.trim() is True
        other = await system.spawn(Counter)
        await ref.ask(("watch", other))
        assert ref.trim() is True
        await other.stop()  # its Terminated reaches the trimmed watcher
        await ref.ask("tick-later")
        assert ref.trim() is True

        async def all_arrived() -> bool:
            return {"told", "sent", "Terminated", "tick"} <= set(await ref.ask("seen"))

        await eventually(all_arrived)
        assert ref.trim() is True
        await ref.stop()  # a stop of a trimmed actor
        assert ref.trim() is False and not ref.is_alive
