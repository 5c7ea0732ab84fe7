"""Stop, death watch, dead letters, timers and system shutdown."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from _support import eventually

from greenroom import Actor, ActorRef, ActorStopped, ActorSystem, DeadLetter, Terminated
from greenroom.testing import Probe

pytestmark = pytest.mark.anyio


class Recorder(Actor):
    """Appends every message to ``log``; ``on_stop`` appends ``("stopped", name)``."""

    def __init__(self, log: list[Any], gate: anyio.Event | None = None) -> None:
        self.log = log
        self.gate = gate

    async def on_stop(self) -> None:
        self.log.append(("stopped", self.context.ref.name))

    async def receive(self, message: Any) -> Any:
        if self.gate is not None:
            await self.gate.wait()
        if message == "stop-self":
            self.context.stop()
        elif message == "stop-own-ref":
            await self.context.ref.stop()
        self.log.append(message)
        return message


async def wait_until_dead(ref: ActorRef) -> None:
    await eventually(lambda: not ref.is_alive)


async def test_stop_handles_what_was_accepted_then_runs_on_stop() -> None:
    log: list[Any] = []
    async with ActorSystem() as system:
        ref = await system.spawn(lambda: Recorder(log), name="r")
        for i in range(100):
            ref.tell(i)
        await ref.stop()
        assert log == [*range(100), ("stopped", "r")]
        with pytest.raises(ActorStopped):
            ref.tell("late")
        await ref.stop()  # idempotent
        assert log.count(("stopped", "r")) == 1
        assert system.dead_letters.recent()[-1] == DeadLetter(ref, "late", "stopped")


async def test_messages_sent_after_stop_was_requested_are_refused() -> None:
    log: list[Any] = []
    gate = anyio.Event()
    async with ActorSystem() as system, anyio.create_task_group() as group:
        ref = await system.spawn(lambda: Recorder(log, gate))
        ref.tell("before")
        group.start_soon(ref.stop)
        await anyio.sleep(0.01)
        with pytest.raises(ActorStopped, match="is stopping"):
            ref.tell("after")
        gate.set()
    assert log[0] == "before" and "after" not in log


async def test_context_stop_drops_queued_messages_as_dead_letters_and_fails_their_asks() -> None:
    log: list[Any] = []
    gate = anyio.Event()
    outcomes: list[Any] = []

    async def ask(ref: ActorRef, message: Any) -> None:
        try:
            outcomes.append(await ref.ask(message))
        except ActorStopped as error:
            outcomes.append(error)

    async with ActorSystem() as system:
        ref = await system.spawn(lambda: Recorder(log, gate))
        async with anyio.create_task_group() as group:
            ref.tell("stop-self")
            ref.tell("queued")
            group.start_soon(ask, ref, "queued-ask")
            await anyio.sleep(0.01)
            gate.set()
        await wait_until_dead(ref)
        assert log == ["stop-self", ("stopped", ref.name)]
        assert len(outcomes) == 1 and isinstance(outcomes[0], ActorStopped)
        assert [(d.message, d.reason) for d in system.dead_letters.recent()] == [
            ("queued", "dropped"),
            ("queued-ask", "dropped"),
        ]


async def test_an_actor_awaiting_its_own_stop_does_not_deadlock() -> None:
    log: list[Any] = []
    async with ActorSystem() as system:
        ref = await system.spawn(lambda: Recorder(log))
        ref.tell("stop-own-ref")
        await wait_until_dead(ref)
        assert log == ["stop-own-ref", ("stopped", ref.name)]


class Watcher(Actor):
    def __init__(self, seen: list[Terminated]) -> None:
        self.seen = seen

    async def receive(self, message: Any) -> Any:
        if isinstance(message, Terminated):
            self.seen.append(message)
        elif message[0] == "watch":
            self.context.watch(message[1])
        elif message[0] == "unwatch":
            self.context.unwatch(message[1])
        return None


async def test_death_watch_reports_normal_stop_and_failure() -> None:
    class Crash(Actor):
        async def receive(self, message: Any) -> Any:
            raise KeyError(message)

    seen: list[Terminated] = []
    from greenroom import Directive, SupervisorStrategy

    async with ActorSystem(supervisor_strategy=SupervisorStrategy.of(Directive.STOP)) as system:
        watcher = await system.spawn(lambda: Watcher(seen))
        calm = await system.spawn(lambda: Recorder([]))
        crash = await system.spawn(Crash)
        await watcher.ask(("watch", calm))
        await watcher.ask(("watch", crash))
        await calm.stop()
        crash.tell("x")
        await eventually(lambda: not (len(seen) < 2))
    by_ref = {t.ref: t.reason for t in seen}
    assert by_ref[calm] is None
    assert isinstance(by_ref[crash], KeyError)


async def test_watching_a_dead_actor_delivers_terminated_at_once() -> None:
    seen: list[Terminated] = []
    async with ActorSystem() as system:
        watcher = await system.spawn(lambda: Watcher(seen))
        gone = await system.spawn(lambda: Recorder([]))
        await gone.stop()
        await watcher.ask(("watch", gone))
        await eventually(lambda: seen)
        assert seen == [Terminated(gone, None)]


async def test_unwatch_means_no_terminated() -> None:
    seen: list[Terminated] = []
    async with ActorSystem() as system:
        watcher = await system.spawn(lambda: Watcher(seen))
        target = await system.spawn(lambda: Recorder([]))
        await watcher.ask(("watch", target))
        await watcher.ask(("unwatch", target))
        await target.stop()
        other = await system.spawn(lambda: Recorder([]))
        await watcher.ask(("watch", other))
        await other.stop()
        await eventually(lambda: seen)
        assert [t.ref for t in seen] == [other]


async def test_dead_letters_are_published_to_subscribers() -> None:
    class Listener(Actor):
        def __init__(self, got: list[DeadLetter]) -> None:
            self.got = got

        async def receive(self, message: Any) -> Any:
            self.got.append(message)

    got: list[DeadLetter] = []
    async with ActorSystem() as system:
        listener = await system.spawn(lambda: Listener(got))
        system.dead_letters.subscribe(listener)
        target = await system.spawn(lambda: Recorder([]), name="t")
        await target.stop()
        with pytest.raises(ActorStopped):
            target.tell({"text": "hello"})
        await eventually(lambda: got)
        assert got == [DeadLetter(target, {"text": "hello"}, "stopped")]
        system.dead_letters.unsubscribe(listener)
        with pytest.raises(ActorStopped):
            target.tell("unheard")
        await listener.stop()
        assert len(got) == 1 and system.dead_letters.count == 2


async def test_shutdown_stops_children_before_parents() -> None:
    log: list[Any] = []

    class Node(Recorder):
        def __init__(self, depth: int) -> None:
            super().__init__(log)
            self.depth = depth

        async def on_start(self) -> None:
            if self.depth < 2:
                for i in range(2):
                    await self.context.spawn(
                        lambda: Node(self.depth + 1), name=f"{self.context.ref.name}.{i}"
                    )

    async with ActorSystem() as system:
        await system.spawn(lambda: Node(0), name="root")
        assert len(system.actors) == 7
    order = [name for _, name in log]
    assert order[-1] == "root"
    for name in order:
        children = [n for n in order if n.rsplit(".", 1)[0] == name and n != name]
        assert all(order.index(child) < order.index(name) for child in children)
    assert len(order) == 7


async def test_ten_thousand_asks_in_flight_at_shutdown_all_resolve() -> None:
    class Slow(Actor):
        async def receive(self, message: Any) -> Any:
            await anyio.lowlevel.checkpoint()
            return message

    results: dict[int, Any] = {}
    enqueued = [0]

    async def ask(ref: ActorRef, i: int) -> None:
        enqueued[0] += 1  # ask enqueues before its first await (unbounded mailbox)
        results[i] = await ref.ask(i, timeout=None)

    async with anyio.create_task_group() as group, ActorSystem() as system:
        ref = await system.spawn(Slow, mailbox_size=None)
        for i in range(10_000):
            group.start_soon(ask, ref, i)
        await eventually(lambda: enqueued[0] == 10_000)
        assert len(results) < 10_000  # shutdown starts with asks still in flight
    # shutdown drains what was accepted: every ask got its own answer, none was lost
    assert results == {i: i for i in range(10_000)}


@pytest.mark.virtual_time
async def test_shutdown_timeout_cancels_a_stuck_actor_and_fails_its_asks() -> None:
    class Stuck(Actor):
        def __init__(self, probe: Probe) -> None:
            self.probe = probe

        async def receive(self, message: Any) -> Any:
            self.probe.ref.tell(message)
            await anyio.sleep_forever()

    outcomes: list[BaseException] = []

    async def ask(ref: ActorRef, message: str) -> None:
        try:
            await ref.ask(message, timeout=None)
        except ActorStopped as error:
            outcomes.append(error)

    log: list[Any] = []
    async with anyio.create_task_group() as group, ActorSystem(shutdown_timeout=30) as system:
        probe = await Probe.spawn(system)
        stuck = await system.spawn(lambda: Stuck(probe))
        idle = await system.spawn(lambda: Recorder(log), name="idle")
        group.start_soon(ask, stuck, "in-flight")
        assert await probe.expect(str) == "in-flight"  # being handled (and stuck)
        group.start_soon(ask, stuck, "queued")
        await eventually(lambda: stuck.queued == 1)
    assert len(outcomes) == 2 and all(isinstance(o, ActorStopped) for o in outcomes)
    assert not stuck.is_alive and not idle.is_alive
    assert log == [("stopped", "idle")]  # the idle actor stopped cleanly within the deadline
    assert system.dead_letters.by_reason["dropped"] == 1


@pytest.mark.virtual_time
async def test_idle_children_of_a_stuck_parent_still_get_on_stop_after_the_deadline() -> None:
    log: list[Any] = []

    class StuckParent(Actor):
        def __init__(self, probe: Probe) -> None:
            self.probe = probe

        async def on_start(self) -> None:
            await self.context.spawn(lambda: Recorder(log), name="kid")

        async def receive(self, message: Any) -> Any:
            self.probe.ref.tell(message)
            await anyio.sleep_forever()

    async with ActorSystem(shutdown_timeout=30) as system:
        probe = await Probe.spawn(system)
        parent = await system.spawn(lambda: StuckParent(probe))
        parent.tell("hang")
        assert await probe.expect(str) == "hang"  # stuck in receive
    assert log == [("stopped", "kid")]
    assert not parent.is_alive and system.actors == []


async def test_cancelling_the_host_shuts_down_without_draining_and_resolves_asks() -> None:
    class Slow(Actor):
        async def receive(self, message: Any) -> Any:
            await anyio.sleep(60)

    outcomes: list[BaseException] = []

    async def ask(ref: ActorRef) -> None:
        try:
            await ref.ask("work", timeout=None)
        except ActorStopped as error:
            outcomes.append(error)

    log: list[Any] = []
    async with anyio.create_task_group() as group:
        with anyio.move_on_after(0.1) as scope:
            async with ActorSystem() as system:
                slow = await system.spawn(Slow)
                await system.spawn(lambda: Recorder(log), name="bystander")
                for _ in range(3):
                    group.start_soon(ask, slow)
                await anyio.sleep_forever()
    assert scope.cancelled_caught
    assert len(outcomes) == 3
    assert log == [("stopped", "bystander")]  # idle actors still get on_stop
    assert system.actors == []


async def test_an_exception_in_the_body_propagates_as_itself_after_shutdown() -> None:
    log: list[Any] = []
    with pytest.raises(LookupError, match="from the body"):
        async with ActorSystem() as system:
            await system.spawn(lambda: Recorder(log), name="a")
            raise LookupError("from the body")
    assert log == [("stopped", "a")]


async def test_no_task_outlives_the_system() -> None:
    before = len(anyio.get_running_tasks())
    async with ActorSystem() as system:
        refs = [await system.spawn(lambda: Recorder([])) for _ in range(100)]
        for ref in refs:
            ref.tell("x")
        await refs[-1].ask("y")
        assert len(anyio.get_running_tasks()) > before
    assert len(anyio.get_running_tasks()) == before


class Ticker(Actor):
    """Sets timers on request; the ticks they deliver go on to ``report``."""

    def __init__(self, report: ActorRef | None = None) -> None:
        self.report = report
        self.timer: Any = None

    async def receive(self, message: Any) -> Any:
        match message:
            case ("once", delay, payload):
                self.timer = self.context.schedule_once(delay, payload)
            case ("every", interval, payload):
                self.timer = self.context.schedule_repeatedly(interval, payload)
            case "cancel":
                self.timer.cancel()
            case "active":
                return self.timer.active
            case _:
                if self.report is not None:
                    self.report.tell(message)
        return None


@pytest.mark.virtual_time
async def test_schedule_once_delivers_and_cancel_prevents_delivery() -> None:
    async with ActorSystem() as system:
        probe = await Probe.spawn(system)
        ref = await system.spawn(lambda: Ticker(probe.ref))
        await ref.ask(("once", 10, "fired"))
        await probe.expect_no_message(within=9.9)
        assert await probe.expect(str, within=0.2) == "fired"
        assert await ref.ask("active") is False
        await ref.ask(("once", 10, "never"))
        await ref.ask("cancel")
        await probe.expect_no_message(within=60)


@pytest.mark.virtual_time
async def test_schedule_repeatedly_until_cancelled() -> None:
    async with ActorSystem() as system:
        probe = await Probe.spawn(system)
        ref = await system.spawn(lambda: Ticker(probe.ref))
        started = anyio.current_time()
        await ref.ask(("every", 10, "tick"))
        for n in (1, 2, 3):
            assert await probe.expect(str, within=10.1) == "tick"
            assert anyio.current_time() - started >= 10 * n
        await ref.ask("cancel")
        await probe.expect_no_message(within=60)


@pytest.mark.virtual_time
async def test_timers_die_with_their_actor() -> None:
    async with ActorSystem() as system:
        probe = await Probe.spawn(system)
        ref = await system.spawn(lambda: Ticker(probe.ref))
        await ref.ask(("every", 10, "tick"))
        await ref.stop()
        await probe.expect_no_message(within=60)
        assert system.dead_letters.count == 0  # cancelled, not fired into a dead mailbox


@pytest.mark.parametrize(
    ("message", "match"),
    [
        (("once", -1, "x"), "timer delay must be a finite number of seconds >= 0, got -1"),
        (("every", 0, "x"), "timer interval must be a finite number of seconds > 0, got 0"),
        (("once", float("inf"), "x"), "timer delay .* got inf"),
    ],
)
async def test_timers_reject_bad_delays(message: Any, match: str) -> None:
    async with ActorSystem() as system:
        ref = await system.spawn(Ticker)
        with pytest.raises(ValueError, match=match):
            await ref.ask(message)


async def test_context_exposes_parent_children_and_system() -> None:
    class Parent(Actor):
        async def receive(self, message: Any) -> Any:
            child = await self.context.spawn(lambda: Child(), name="kid")
            return (child, self.context.children, self.context.parent, self.context.system)

    class Child(Actor):
        async def receive(self, message: Any) -> Any:
            return self.context.parent

    async with ActorSystem() as system:
        parent = await system.spawn(Parent, name="mum")
        child, children, grand, seen_system = await parent.ask("go")
        assert children == [child] and grand is None and seen_system is system
        assert await child.ask("?") is parent
        await parent.stop()
        assert not child.is_alive


class Waiter(Actor):
    """Waits inside ``receive`` until ``on_stop_requested`` cancels the wait."""

    def __init__(self, log: list[Any], busy: anyio.Event | None = None, fail_hook: bool = False) -> None:
        self.log = log
        self.busy = busy
        self.fail_hook = fail_hook
        self.scope: anyio.CancelScope | None = None

    def on_stop_requested(self) -> None:
        self.log.append("stop requested")
        if self.fail_hook:
            raise RuntimeError("hook broke")
        if self.scope is not None:
            self.scope.cancel()

    async def receive(self, message: Any) -> Any:
        with anyio.CancelScope() as self.scope:
            if self.busy is not None:
                self.busy.set()
            await anyio.sleep_forever()
        self.log.append(f"{message} ended")


async def test_on_stop_requested_lets_a_busy_receive_end_its_wait() -> None:
    log: list[Any] = []
    async with ActorSystem() as system:
        busy = anyio.Event()
        ref = await system.spawn(lambda: Waiter(log, busy))
        ref.tell("wait")
        await busy.wait()
        with anyio.fail_after(10):  # a hang guard: without the hook the stop never returns
            await ref.stop()
        await ref.stop()  # a second request does not call the hook again
    assert log == ["stop requested", "wait ended"]


async def test_on_stop_requested_is_called_on_system_shutdown() -> None:
    log: list[Any] = []
    busy = anyio.Event()
    async with ActorSystem() as system:
        ref = await system.spawn(lambda: Waiter(log, busy), name="by-shutdown")
        ref.tell("wait")
        await busy.wait()
    assert log == ["stop requested", "wait ended"]


async def test_a_failing_on_stop_requested_is_logged_and_the_stop_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    import logging

    log: list[Any] = []
    with caplog.at_level(logging.ERROR, logger="greenroom.actors"):
        async with ActorSystem() as system:
            ref = await system.spawn(lambda: Waiter(log, fail_hook=True), name="broken-hook")
            await ref.stop()  # idle: nothing to cut short, and the hook's error does not escape
            assert not ref.is_alive
    assert log == ["stop requested"]
    assert any("'broken-hook': on_stop_requested failed" in r.getMessage() for r in caplog.records)
