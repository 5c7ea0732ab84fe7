"""What a parent's strategy does with a failure: restart, resume, stop, escalate."""

from __future__ import annotations

import logging
from typing import Any

import anyio
import pytest

from greenroom import (
    Actor,
    ActorRef,
    ActorStopped,
    ActorSystem,
    Backoff,
    ChildFailed,
    Directive,
    SupervisorStrategy,
    Terminated,
)
from greenroom.testing import Probe

pytestmark = pytest.mark.anyio


class Fragile(Actor):
    """Counts messages; raises on "boom"; logs its lifecycle into ``journal``."""

    def __init__(self, journal: list[str], instance: int = 0) -> None:
        self.journal = journal
        self.instance = instance
        self.n = 0

    async def on_start(self) -> None:
        self.journal.append(f"start {self.instance}")

    async def on_stop(self) -> None:
        self.journal.append(f"stop {self.instance}")

    async def receive(self, message: Any) -> Any:
        if message == "boom":
            raise RuntimeError(f"boom in {self.instance}")
        if message == "get":
            return (self.instance, self.n)
        self.n += 1
        return None


def counting_factory(journal: list[str]) -> tuple[list[int], Any]:
    made: list[int] = []

    def factory() -> Fragile:
        made.append(len(made))
        return Fragile(journal, made[-1])

    return made, factory


class Watcher(Actor):
    def __init__(self, seen: list[Terminated], arrived: anyio.Event) -> None:
        self.seen = seen
        self.arrived = arrived

    async def receive(self, message: Any) -> Any:
        if isinstance(message, Terminated):
            self.seen.append(message)
            self.arrived.set()
        else:
            self.context.watch(message)
        return None


async def spawn_watcher(system: ActorSystem, target: ActorRef) -> tuple[list[Terminated], anyio.Event]:
    seen: list[Terminated] = []
    arrived = anyio.Event()
    watcher = await system.spawn(lambda: Watcher(seen, arrived))
    await watcher.ask(target)  # watch is set up once this returns
    return seen, arrived


async def test_actor_crashing_ten_times_under_limit_of_three_ends_stopped_and_watchers_hear() -> None:
    journal: list[str] = []
    made, factory = counting_factory(journal)
    strategy = SupervisorStrategy(max_restarts=3, within=1.0)
    async with ActorSystem(supervisor_strategy=strategy) as system:
        ref = await system.spawn(factory, name="fragile")
        seen, arrived = await spawn_watcher(system, ref)
        for _ in range(10):
            ref.tell("boom")
        with anyio.fail_after(5):
            await arrived.wait()
        assert not ref.is_alive
        assert len(made) == 4  # the first instance and three restarts
        assert len(seen) == 1 and seen[0].ref is ref
        assert isinstance(seen[0].reason, RuntimeError) and str(seen[0].reason) == "boom in 3"
        # the six crashes still queued at the fourth failure are dead letters, never lost silently
        assert system.dead_letters.by_reason["dropped"] == 6
        assert system.lookup("fragile") is None


async def test_restart_gives_a_fresh_instance_and_keeps_the_mailbox() -> None:
    journal: list[str] = []
    _, factory = counting_factory(journal)
    async with ActorSystem() as system:
        ref = await system.spawn(factory)
        for message in ("tick", "tick", "boom", "tick"):
            ref.tell(message)
        assert await ref.ask("get") == (1, 1)  # new instance; it saw the tick queued after the failure
        assert journal == ["start 0", "stop 0", "start 1"]


async def test_resume_keeps_the_instance_and_its_state() -> None:
    journal: list[str] = []

    class Parent(Actor):
        supervisor_strategy = SupervisorStrategy.of(Directive.RESUME)

        async def receive(self, message: Any) -> Any:
            return await self.context.spawn(lambda: Fragile(journal))

    async with ActorSystem() as system:
        parent = await system.spawn(Parent)
        child = await parent.ask("spawn")
        for message in ("tick", "boom", "tick"):
            child.tell(message)
        assert await child.ask("get") == (0, 2)
        assert journal == ["start 0"]


async def test_stop_directive_stops_without_draining() -> None:
    journal: list[str] = []
    async with ActorSystem(supervisor_strategy=SupervisorStrategy.of(Directive.STOP)) as system:
        ref = await system.spawn(lambda: Fragile(journal))
        seen, arrived = await spawn_watcher(system, ref)
        ref.tell("boom")
        ref.tell("tick")
        with anyio.fail_after(5):
            await arrived.wait()
        assert isinstance(seen[0].reason, RuntimeError)
        assert journal == ["start 0", "stop 0"]
        assert [d.message for d in system.dead_letters.recent()] == ["tick"]


async def test_escalate_fails_the_parent_which_its_own_supervisor_restarts() -> None:
    journal: list[str] = []
    parents: list[int] = []

    class Parent(Actor):
        supervisor_strategy = SupervisorStrategy.of(Directive.ESCALATE)

        def __init__(self) -> None:
            parents.append(len(parents))

        async def receive(self, message: Any) -> Any:
            if message == "spawn":
                return await self.context.spawn(lambda: Fragile(journal))
            return len(self.context.children)

    async with ActorSystem() as system:
        parent = await system.spawn(Parent)
        child = await parent.ask("spawn")
        child.tell("boom")
        with anyio.fail_after(5):
            while len(parents) < 2:
                await anyio.sleep(0.01)
        assert not child.is_alive
        assert await parent.ask("children") == 0  # the parent was restarted, fresh
        assert journal == ["start 0", "stop 0"]


async def test_escalation_past_the_top_fails_the_system_and_cancels_its_body() -> None:
    journal: list[str] = []
    body_cancelled = False
    with pytest.raises(ChildFailed) as caught:
        async with ActorSystem(supervisor_strategy=SupervisorStrategy.of(Directive.ESCALATE)) as system:
            ref = await system.spawn(lambda: Fragile(journal), name="top")
            ref.tell("boom")
            try:
                await anyio.sleep_forever()
            finally:
                body_cancelled = True
    assert body_cancelled
    assert caught.value.child is ref
    assert isinstance(caught.value.__cause__, RuntimeError)


async def test_a_failure_while_handling_a_tell_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    journal: list[str] = []
    with caplog.at_level(logging.ERROR, logger="greenroom.actors"):
        async with ActorSystem() as system:
            ref = await system.spawn(lambda: Fragile(journal), name="loud")
            ref.tell("boom")
            assert await ref.ask("get") == (0, 0)
    failures = [r for r in caplog.records if "'loud' failed handling a str message" in r.getMessage()]
    assert len(failures) == 1
    assert failures[0].exc_info is not None and "boom in 0" in str(failures[0].exc_info[1])
    assert "directive: restart" in failures[0].getMessage()


class Crashy(Actor):
    """Tells ``probe`` when it starts and when it is about to fail (on any message)."""

    def __init__(self, probe: Probe) -> None:
        self.probe = probe

    async def on_start(self) -> None:
        self.probe.ref.tell(("started", anyio.current_time()))

    async def receive(self, message: Any) -> Any:
        self.probe.ref.tell(("failing", anyio.current_time()))
        raise RuntimeError("again")


@pytest.mark.virtual_time
async def test_backoff_spaces_restarts_exponentially() -> None:
    strategy = SupervisorStrategy(
        max_restarts=3, within=600, backoff=Backoff(initial=5, multiplier=2, maximum=60)
    )
    async with ActorSystem(supervisor_strategy=strategy) as system:
        probe = await Probe.spawn(system)
        ref = await system.spawn(lambda: Crashy(probe))
        await probe.expect(tuple)
        gaps = []
        for _ in range(3):
            ref.tell("x")
            _, failed = await probe.expect(tuple, where=lambda m: m[0] == "failing")
            _, started = await probe.expect(tuple, within=60, where=lambda m: m[0] == "started")
            gaps.append(started - failed)
    assert [round(gap) for gap in gaps] == [5, 10, 20]


@pytest.mark.virtual_time
async def test_stop_interrupts_a_backoff() -> None:
    strategy = SupervisorStrategy(backoff=Backoff(initial=30, maximum=30))
    async with ActorSystem(supervisor_strategy=strategy) as system:
        probe = await Probe.spawn(system)
        ref = await system.spawn(lambda: Crashy(probe))
        await probe.expect(tuple)
        ref.tell("x")
        await probe.expect(tuple, where=lambda m: m[0] == "failing")
        await probe.expect_no_message(within=1)  # now 1 s into a 30 s backoff
        with anyio.fail_after(5):  # (virtual seconds: the backoff's 29 left would fail it)
            await ref.stop()
        assert not ref.is_alive
        await probe.expect_no_message(within=60)  # and it never started again


async def test_restart_stops_the_failed_actors_children() -> None:
    journal: list[str] = []

    class Parent(Actor):
        async def receive(self, message: Any) -> Any:
            if message == "spawn":
                return await self.context.spawn(lambda: Fragile(journal))
            raise RuntimeError("parent fails")

    async with ActorSystem() as system:
        parent = await system.spawn(Parent)
        child = await parent.ask("spawn")
        with pytest.raises(RuntimeError):
            await parent.ask("fail")  # the asker hears of the failure before the restart
        with anyio.fail_after(5):
            while child.is_alive:
                await anyio.sleep(0.01)
        with pytest.raises(ActorStopped):
            await child.ask("get")
        assert journal == ["start 0", "stop 0"]
        assert await parent.ask("spawn") != child  # the restarted parent works


async def test_a_failing_restart_counts_toward_the_limit() -> None:
    attempts: list[int] = []

    class FailsAfterFirst(Actor):
        def __init__(self) -> None:
            attempts.append(1)
            if len(attempts) > 1:
                raise OSError("resource gone")

        async def receive(self, message: Any) -> Any:
            raise RuntimeError("first failure")

    strategy = SupervisorStrategy(max_restarts=2, within=60)
    async with ActorSystem(supervisor_strategy=strategy) as system:
        ref = await system.spawn(FailsAfterFirst)
        seen, arrived = await spawn_watcher(system, ref)
        ref.tell("x")
        with anyio.fail_after(5):
            await arrived.wait()
        assert len(attempts) == 3
        assert isinstance(seen[0].reason, OSError)


async def test_a_decider_returning_garbage_stops_the_actor(caplog: pytest.LogCaptureFixture) -> None:
    journal: list[str] = []
    strategy = SupervisorStrategy(decider=lambda error: "restart")  # type: ignore[arg-type,return-value]
    async with ActorSystem(supervisor_strategy=strategy) as system:
        ref = await system.spawn(lambda: Fragile(journal))
        with pytest.raises(RuntimeError):
            await ref.ask("boom")
        with anyio.fail_after(5):
            while ref.is_alive:
                await anyio.sleep(0.01)
    assert "decider returned 'restart'" in caplog.text


@pytest.mark.parametrize(
    ("build", "error", "match"),
    [
        (
            lambda: SupervisorStrategy(max_restarts=-1),
            ValueError,
            "max_restarts must be an int >= 0 or None, got -1",
        ),
        (lambda: SupervisorStrategy(within=0), ValueError, "within must be > 0, got 0"),
        (lambda: SupervisorStrategy(decider=3), TypeError, "decider must be callable, got 3"),  # type: ignore[arg-type]
        (lambda: Backoff(multiplier=0.5), ValueError, "multiplier must be >= 1, got 0.5"),
        (
            lambda: Backoff(initial=2, maximum=1),
            ValueError,
            r"maximum must be >= Backoff.initial \(2\), got 1",
        ),
        (lambda: SupervisorStrategy.of("stop"), TypeError, "directive must be a Directive, got 'stop'"),  # type: ignore[arg-type]
    ],
)
def test_strategy_rejects_bad_parameters(build: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        build()


@pytest.mark.virtual_time
async def test_a_draining_stop_in_a_backoff_restarts_to_handle_what_was_sent_before_it() -> None:
    class FailsOnce(Actor):
        def __init__(self, probe: Probe) -> None:
            self.probe = probe

        async def on_start(self) -> None:
            self.probe.ref.tell("started")

        async def receive(self, message: Any) -> Any:
            if message == "fail":
                raise RuntimeError("once")
            self.probe.ref.tell(message)

    strategy = SupervisorStrategy(backoff=Backoff(initial=30, maximum=30))
    async with ActorSystem(supervisor_strategy=strategy) as system:
        probe = await Probe.spawn(system)
        ref = await system.spawn(lambda: FailsOnce(probe))
        assert await probe.expect(str) == "started"
        ref.tell("fail")
        ref.tell("sent before the stop")
        await probe.expect_no_message(within=1)  # in its backoff
        with anyio.fail_after(5):
            await ref.stop()
        assert [await probe.expect(str), await probe.expect(str)] == ["started", "sent before the stop"]
        assert not ref.is_alive


class Remembering(Fragile):
    """Records, in ``on_stop``, what ``context.failure`` says it is stopped for."""

    async def on_stop(self) -> None:
        failure = self.context.failure
        self.journal.append(
            f"stop {self.instance}: {failure!r}" if failure else f"stop {self.instance}: asked"
        )


async def test_on_stop_knows_whether_a_failure_or_a_request_stops_the_instance() -> None:
    """``context.failure``: the error a restart (or a stop for good) is for; ``None`` for a
    requested stop — what an entity reads before saving its state (issue 48, point 5)."""
    journal: list[str] = []
    made: list[int] = []

    def factory() -> Remembering:
        made.append(len(made))
        return Remembering(journal, made[-1])

    strategy = SupervisorStrategy(max_restarts=1, within=60.0)
    async with ActorSystem(supervisor_strategy=strategy) as system:
        ref = await system.spawn(factory)
        ref.tell("boom")  # restarted: instance 0 stops for the failure
        assert await ref.ask("get") == (1, 0)
        await ref.stop()  # asked: instance 1 stops for nobody's failure
        again = await system.spawn(factory)
        again.tell("boom")
        again.tell("boom")  # the second failure within the window stops it for good
        with anyio.fail_after(5):
            while again.is_alive:
                await anyio.sleep(0.01)
    assert journal == [
        "start 0",
        "stop 0: RuntimeError('boom in 0')",
        "start 1",
        "stop 1: asked",
        "start 2",
        "stop 2: RuntimeError('boom in 2')",
        "start 3",
        "stop 3: RuntimeError('boom in 3')",
    ]
