"""``greenroom.testing``: the probe and virtual time, on both loops."""

from __future__ import annotations

import gc
import time
from typing import Any

import anyio
import pytest

from greenroom import Actor, ActorSystem, Terminated
from greenroom.actors import Backoff, Directive, SupervisorStrategy
from greenroom.testing import Probe, ProbeStopped, ProbeTimeout, VirtualTimeLoop, virtual_time

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_time(str(request.param))


async def test_an_hour_of_sleep_passes_in_virtual_time_and_timers_fire_in_order() -> None:
    woke: list[tuple[str, float]] = []
    start, real = anyio.current_time(), time.monotonic()

    async def sleeper(name: str, seconds: float) -> None:
        await anyio.sleep(seconds)
        woke.append((name, anyio.current_time() - start))

    async with anyio.create_task_group() as tg:
        tg.start_soon(sleeper, "hour", 3600)
        tg.start_soon(sleeper, "minute", 60)
    assert [name for name, _ in woke] == ["minute", "hour"]
    # each woke at its deadline (start + seconds, a float: minus start it can be an ulp short)
    assert woke[0][1] == pytest.approx(60, abs=1e-9) and woke[1][1] == pytest.approx(3600, abs=1e-9)
    assert time.monotonic() - real < 3600  # the hour was the loop's, not the machine's


async def test_a_deadline_expires_in_virtual_time() -> None:
    with anyio.move_on_after(30) as scope:
        await anyio.sleep_forever()
    assert scope.cancelled_caught


async def test_the_probe_takes_messages_in_order_and_checks_their_type() -> None:
    async with ActorSystem() as system:
        probe = await Probe.spawn(system)
        probe.ref.tell("one")
        probe.ref.tell(2)
        assert await probe.expect(str) == "one"
        with pytest.raises(AssertionError, match="expected a str, got 2"):
            await probe.expect(str)
        probe.ref.tell(3)
        assert await probe.expect((str, int), where=lambda n: n == 3) == 3
        assert probe.received == ["one", 2, 3]


async def test_expect_fails_when_nothing_arrives_within_the_time() -> None:
    async with ActorSystem() as system:
        probe = await Probe.spawn(system)
        with pytest.raises(ProbeTimeout, match="expected a str within 5 s, got nothing"):
            await probe.expect(str, within=5)


async def test_expect_on_a_stopped_probe_says_it_is_stopped_at_once() -> None:
    """What a stopped probe received stays readable; past that, ``expect`` says the probe
    is stopped — at once, not after ``within`` — and a probe stopped while a test waits
    wakes it with the same answer."""
    async with ActorSystem() as system:
        probe = await Probe.spawn(system)
        probe.ref.tell("kept")
        await probe.stop()
        assert await probe.expect(str) == "kept"
        started = anyio.current_time()
        with pytest.raises(ProbeStopped, match="expected a str, but the probe is stopped"):
            await probe.expect(str, within=3600)
        assert anyio.current_time() - started < 3600
        await probe.expect_no_message(within=5)  # nothing can come: that holds
        waiting = await Probe.spawn(system)
        async with anyio.create_task_group() as tg:

            async def stop_later() -> None:
                await anyio.sleep(1)
                await waiting.stop()

            tg.start_soon(stop_later)
            with pytest.raises(ProbeStopped):
                await waiting.expect(int, within=3600)


async def test_expect_takes_a_type_not_its_name() -> None:
    async with ActorSystem() as system:
        probe = await Probe.spawn(system)
        probe.ref.tell("Ping")
        for wrong in ("Ping", ("Ping",), (), None):
            with pytest.raises(TypeError, match="a message type or a tuple of types"):
                await probe.expect(wrong)  # type: ignore[call-overload]
        assert await probe.expect(str) == "Ping"  # nothing was taken by the refusals


async def test_expect_no_message_fails_naming_what_came() -> None:
    async with ActorSystem() as system:
        probe = await Probe.spawn(system)
        await probe.expect_no_message(within=10)
        async with anyio.create_task_group() as tg:

            async def later() -> None:
                await anyio.sleep(5)
                probe.ref.tell("late")

            tg.start_soon(later)
            with pytest.raises(AssertionError, match="expected no message for 10 s, got 'late'"):
                await probe.expect_no_message(within=10)


async def test_an_ask_to_the_probe_gets_its_answer() -> None:
    async with ActorSystem() as system:
        probe = await Probe.spawn(system, answer=lambda message: f"re: {message}")
        assert await probe.ref.ask("hello") == "re: hello"
        assert await probe.expect(str) == "hello"


class Flaky(Actor):
    """Fails on "fail" (its parent restarts it after a backoff), else reports to the probe."""

    def __init__(self, probe: Probe) -> None:
        self.probe = probe

    async def on_start(self) -> None:
        self.probe.ref.tell("started")

    async def receive(self, message: Any) -> Any:
        if message == "fail":
            raise RuntimeError("asked to fail")
        return message


class Parent(Actor):
    supervisor_strategy = SupervisorStrategy(
        decider=lambda error: Directive.RESTART, backoff=Backoff(initial=30.0, maximum=30.0)
    )

    def __init__(self, probe: Probe) -> None:
        self.probe = probe

    async def receive(self, message: Any) -> Any:
        return await self.context.spawn(lambda: Flaky(self.probe), name="flaky")


async def test_a_restart_after_a_30_second_backoff_and_death_watch() -> None:
    async with ActorSystem() as system:
        probe = await Probe.spawn(system)
        parent = await system.spawn(lambda: Parent(probe))
        child = await parent.ask("spawn")
        assert await probe.expect(str) == "started"
        child.tell("fail")
        await probe.expect_no_message(within=29)  # still in its backoff
        assert await probe.expect(str, within=2) == "started"  # restarted at 30 s
        probe.watch(child)
        await child.stop()
        terminated = await probe.expect_terminated(child)
        assert isinstance(terminated, Terminated) and terminated.reason is None


def test_bad_options_are_refused_by_name() -> None:
    from greenroom import InvalidInput

    with pytest.raises(InvalidInput, match="backend must be 'asyncio' or 'trio', not 'curio'") as refused:
        virtual_time("curio")
    assert refused.value.field == "backend"
    with pytest.raises(InvalidInput, match="autojump_threshold must be >= 0, not -1") as refused:
        virtual_time("trio", autojump_threshold=-1)
    assert refused.value.field == "autojump_threshold"
    with pytest.raises(ValueError, match="autojump_threshold must be a number >= 0, not -1"):
        VirtualTimeLoop(autojump_threshold=-1)  # refused before a loop exists: nothing left to collect
    gc.collect()  # under -W error an ignored exception in a half-made loop's __del__ would fail here
    loop = VirtualTimeLoop()
    try:
        with pytest.raises(ValueError, match="seconds must be >= 0, not -2"):
            loop.jump(-2)
    finally:
        loop.close()


class Reminder(Actor):
    """The README's example, run as it is written there."""

    def __init__(self, to: Any) -> None:
        self.to = to

    async def receive(self, message: Any) -> Any:
        if message.startswith("remember: "):
            self.to.tell(message)
        else:
            self.context.schedule_once(3600, f"remember: {message}")  # to itself


async def test_a_reminder_comes_an_hour_later_and_not_before() -> None:
    async with ActorSystem() as system:
        probe = await Probe.spawn(system)
        reminder = await system.spawn(lambda: Reminder(probe.ref))
        reminder.tell("milk")
        await probe.expect_no_message(within=3599)  # virtual seconds
        assert await probe.expect(str, within=2) == "remember: milk"
        probe.watch(reminder)
        await reminder.stop()
        await probe.expect_terminated(reminder)
