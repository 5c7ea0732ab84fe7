"""Savina-style actor workloads, greenroom against hand-written baselines in the same run.

Baselines do the same work without the actor layer: plain ``asyncio.Queue`` + tasks
(asyncio only), raw anyio memory object streams (both backends), raw trio memory
channels (trio only). This module imports ``asyncio`` and ``trio`` on purpose: they
*are* the baselines. Every run checks that every message was processed.
"""

from __future__ import annotations

import gc
import math
import statistics
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from greenroom import Actor, ActorRef, ActorSystem

PINGPONG = 20_000
COUNTING = 200_000
FANOUT_ACTORS, FANOUT_EACH = 100, 2_000
SPAWN = 10_000
RING_ACTORS, RING_HOPS = 500, 50_000
SENDING_MAILBOX = 1_000
WORKLOADS = ("pingpong", "counting", "sending", "fanout", "spawn", "ring")
TARGETS = {
    "asyncio": {"pingpong": 0.8, "counting": 1.0, "sending": 0.8, "fanout": 1.0, "spawn": 0.5, "ring": 0.8},
    "trio": {"pingpong": 0.8, "counting": 0.8, "sending": 0.8, "fanout": 0.8, "spawn": 0.8, "ring": 0.8},
}
BYTES_PER_IDLE_ACTOR_TARGET = 3072


class BenchmarkError(AssertionError):
    """A run lost or duplicated messages: its timing would be meaningless."""


def _check(label: str, got: object, expected: object) -> None:
    if got != expected:
        raise BenchmarkError(f"{label}: expected {expected!r}, got {got!r}")


# -- greenroom ---------------------------------------------------------------------------


class _Pong(Actor):
    async def receive(self, message: Any) -> Any:
        return message


class _Ping(Actor):
    def __init__(self, pong: ActorRef) -> None:
        self.pong = pong

    async def receive(self, message: Any) -> Any:
        ask = self.pong.ask
        total = 0
        for i in range(message):
            total += await ask(i)
        return total


class _Counter(Actor):
    def __init__(self) -> None:
        self.n = 0

    async def receive(self, message: Any) -> Any:
        if message is None:
            return self.n
        self.n += message
        return None


class _RingNode(Actor):
    def __init__(self, done: Callable[[], None]) -> None:
        self.next: ActorRef | None = None
        self.done = done

    async def receive(self, message: Any) -> None:
        if type(message) is int:
            if message == 0:
                self.done()
            else:
                self.next.tell(message - 1)  # type: ignore[union-attr]
        else:
            self.next = message


async def greenroom_pingpong() -> float:
    async with ActorSystem() as system:
        pong = await system.spawn(_Pong)
        ping = await system.spawn(lambda: _Ping(pong))
        start = time.perf_counter()
        total = await ping.ask(PINGPONG, timeout=None)
        elapsed = time.perf_counter() - start
    _check("pingpong sum", total, PINGPONG * (PINGPONG - 1) // 2)
    return elapsed


async def greenroom_counting() -> float:
    async with ActorSystem() as system:
        counter = await system.spawn(_Counter, mailbox_size=None)
        start = time.perf_counter()
        tell = counter.tell
        for _ in range(COUNTING):
            tell(1)
        count = await counter.ask(None, timeout=None)
        elapsed = time.perf_counter() - start
    _check("counting", count, COUNTING)
    return elapsed


async def greenroom_sending() -> float:
    """``await ref.send`` into a bounded mailbox: a checkpoint per message, backpressure
    when the counter falls behind (the baselines ``await`` a bounded channel's send)."""
    async with ActorSystem() as system:
        counter = await system.spawn(_Counter, mailbox_size=SENDING_MAILBOX)
        start = time.perf_counter()
        send = counter.send
        for _ in range(COUNTING):
            await send(1)
        count = await counter.ask(None, timeout=None)
        elapsed = time.perf_counter() - start
    _check("sending", count, COUNTING)
    return elapsed


async def greenroom_fanout() -> float:
    async with ActorSystem() as system:
        refs = [await system.spawn(_Counter, mailbox_size=None) for _ in range(FANOUT_ACTORS)]
        start = time.perf_counter()
        for _ in range(FANOUT_EACH):
            for ref in refs:
                ref.tell(1)
        counts = [await ref.ask(None, timeout=None) for ref in refs]
        elapsed = time.perf_counter() - start
    _check("fanout", counts, [FANOUT_EACH] * FANOUT_ACTORS)
    return elapsed


async def greenroom_spawn() -> float:
    async with ActorSystem() as system:
        start = time.perf_counter()
        refs = [await system.spawn(_Counter) for _ in range(SPAWN)]
        for ref in refs:
            ref.tell(1)
        for ref in refs:
            await ref.stop()
        elapsed = time.perf_counter() - start
        _check("spawn: actors left", len(system.actors), 0)
    _check("spawn: dead letters", system.dead_letters.count, 0)
    return elapsed


async def greenroom_ring() -> float:
    async with ActorSystem() as system:
        finished = anyio.Event()
        refs = [await system.spawn(lambda: _RingNode(finished.set)) for _ in range(RING_ACTORS)]
        for i, ref in enumerate(refs):
            ref.tell(refs[(i + 1) % RING_ACTORS])
        start = time.perf_counter()
        refs[0].tell(RING_HOPS)
        await finished.wait()
        elapsed = time.perf_counter() - start
    return elapsed


async def greenroom_idle_bytes() -> float:
    """Bytes of Python memory per live, idle actor (tracemalloc)."""
    async with ActorSystem() as system:
        await system.spawn(_Counter)
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            refs = [await system.spawn(_Counter) for _ in range(SPAWN)]
            for ref in refs:  # let each run once, then go idle
                ref.tell(1)
            await refs[-1].ask(None)
            gc.collect()
            after = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        _check("idle actors alive", sum(ref.is_alive for ref in refs), SPAWN)
    return (after - before) / SPAWN


GREENROOM: dict[str, Callable[[], Awaitable[float]]] = {
    "pingpong": greenroom_pingpong,
    "counting": greenroom_counting,
    "sending": greenroom_sending,
    "fanout": greenroom_fanout,
    "spawn": greenroom_spawn,
    "ring": greenroom_ring,
}


# -- baselines: the same workloads over plain queues --------------------------------------
#
# Each baseline is written once against a "kit": make a channel (put_nowait, get) and run
# tasks in a group. The kits bind the raw methods, so the hot loops call asyncio.Queue,
# anyio streams or trio channels directly.


class _Kit:
    name: str

    def channel(self) -> tuple[Callable[[Any], None], Callable[[], Awaitable[Any]]]:
        raise NotImplementedError

    def bounded(self, size: int) -> tuple[Callable[[Any], Awaitable[None]], Callable[[], Awaitable[Any]]]:
        """A channel whose put waits for room (and is a checkpoint)."""
        raise NotImplementedError

    def group(self) -> Any:
        raise NotImplementedError

    def event(self) -> Any:
        return anyio.Event()

    def close(self) -> None:
        """Release what the last run opened."""


class _AsyncioKit(_Kit):
    name = "asyncio-queue"

    def channel(self) -> tuple[Callable[[Any], None], Callable[[], Awaitable[Any]]]:
        import asyncio

        queue: asyncio.Queue[Any] = asyncio.Queue()
        return queue.put_nowait, queue.get

    def bounded(self, size: int) -> tuple[Callable[[Any], Awaitable[None]], Callable[[], Awaitable[Any]]]:
        import asyncio

        queue: asyncio.Queue[Any] = asyncio.Queue(size)

        async def put(item: Any) -> None:
            # asyncio's put never yields while there is room; anyio's and trio's sends (and
            # greenroom's) are checkpoints, so the baseline pays the same one yield
            await queue.put(item)
            await asyncio.sleep(0)

        return put, queue.get

    def group(self) -> Any:
        import asyncio

        class Group:
            async def __aenter__(self) -> Group:
                self._group = asyncio.TaskGroup()
                await self._group.__aenter__()
                return self

            async def __aexit__(self, *exc: Any) -> Any:
                return await self._group.__aexit__(*exc)

            def start_soon(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
                self._group.create_task(fn(*args))  # type: ignore[arg-type]

        return Group()

    def event(self) -> Any:
        import asyncio

        return asyncio.Event()


class _AnyioKit(_Kit):
    name = "anyio-stream"

    def __init__(self) -> None:
        self._open: list[Any] = []

    def channel(self) -> tuple[Callable[[Any], None], Callable[[], Awaitable[Any]]]:
        send, receive = anyio.create_memory_object_stream[Any](math.inf)
        self._open += (send, receive)
        return send.send_nowait, receive.receive

    def bounded(self, size: int) -> tuple[Callable[[Any], Awaitable[None]], Callable[[], Awaitable[Any]]]:
        send, receive = anyio.create_memory_object_stream[Any](size)
        self._open += (send, receive)
        return send.send, receive.receive

    def close(self) -> None:
        for stream in self._open:
            stream.close()
        self._open.clear()

    def group(self) -> Any:
        return anyio.create_task_group()


class _TrioKit(_Kit):
    name = "trio-channel"

    def channel(self) -> tuple[Callable[[Any], None], Callable[[], Awaitable[Any]]]:
        import trio

        send, receive = trio.open_memory_channel[Any](math.inf)
        return send.send_nowait, receive.receive

    def bounded(self, size: int) -> tuple[Callable[[Any], Awaitable[None]], Callable[[], Awaitable[Any]]]:
        import trio

        send, receive = trio.open_memory_channel[Any](size)
        return send.send, receive.receive

    def group(self) -> Any:
        import trio

        return trio.open_nursery()

    def event(self) -> Any:
        import trio

        return trio.Event()


async def _base_pingpong(kit: _Kit) -> float:
    put_request, get_request = kit.channel()
    put_reply, get_reply = kit.channel()

    async def pong() -> None:
        while (message := await get_request()) is not None:
            put_reply(message)

    async with kit.group() as group:
        group.start_soon(pong)
        start = time.perf_counter()
        total = 0
        for i in range(PINGPONG):
            put_request(i)
            total += await get_reply()
        elapsed = time.perf_counter() - start
        put_request(None)
    _check("pingpong sum", total, PINGPONG * (PINGPONG - 1) // 2)
    return elapsed


async def _counter_task(get: Callable[[], Awaitable[Any]], put_reply: Callable[[Any], None]) -> None:
    n = 0
    while True:
        message = await get()
        if message is None:
            put_reply(n)
        elif message == "stop":
            return
        else:
            n += message


async def _base_counting(kit: _Kit) -> float:
    put, get = kit.channel()
    put_reply, get_reply = kit.channel()
    async with kit.group() as group:
        group.start_soon(_counter_task, get, put_reply)
        start = time.perf_counter()
        for _ in range(COUNTING):
            put(1)
        put(None)
        count = await get_reply()
        elapsed = time.perf_counter() - start
        put("stop")
    _check("counting", count, COUNTING)
    return elapsed


async def _base_sending(kit: _Kit) -> float:
    put, get = kit.bounded(SENDING_MAILBOX)
    put_reply, get_reply = kit.channel()
    async with kit.group() as group:
        group.start_soon(_counter_task, get, put_reply)
        start = time.perf_counter()
        for _ in range(COUNTING):
            await put(1)
        await put(None)
        count = await get_reply()
        elapsed = time.perf_counter() - start
        await put("stop")
    _check("sending", count, COUNTING)
    return elapsed


async def _base_fanout(kit: _Kit) -> float:
    put_reply, get_reply = kit.channel()
    async with kit.group() as group:
        puts = []
        for _ in range(FANOUT_ACTORS):
            put, get = kit.channel()
            puts.append(put)
            group.start_soon(_counter_task, get, put_reply)
        start = time.perf_counter()
        for _ in range(FANOUT_EACH):
            for put in puts:
                put(1)
        counts = []
        for put in puts:
            put(None)
            counts.append(await get_reply())
        elapsed = time.perf_counter() - start
        for put in puts:
            put("stop")
    _check("fanout", counts, [FANOUT_EACH] * FANOUT_ACTORS)
    return elapsed


async def _base_spawn(kit: _Kit) -> float:
    handled = [0]

    async def one(get: Callable[[], Awaitable[Any]]) -> None:
        while (message := await get()) != "stop":
            handled[0] += message

    start = time.perf_counter()
    async with kit.group() as group:
        puts = []
        for _ in range(SPAWN):
            put, get = kit.channel()
            puts.append(put)
            group.start_soon(one, get)
        for put in puts:
            put(1)
        for put in puts:
            put("stop")
    elapsed = time.perf_counter() - start
    _check("spawn", handled[0], SPAWN)
    return elapsed


async def _base_ring(kit: _Kit) -> float:
    finished = kit.event()
    channels = [kit.channel() for _ in range(RING_ACTORS)]

    async def node(get: Callable[[], Awaitable[Any]], put_next: Callable[[Any], None]) -> None:
        while (hops := await get()) is not None:
            if hops == 0:
                finished.set()
            else:
                put_next(hops - 1)

    async with kit.group() as group:
        for i, (_, get) in enumerate(channels):
            group.start_soon(node, get, channels[(i + 1) % RING_ACTORS][0])
        start = time.perf_counter()
        channels[0][0](RING_HOPS)
        await finished.wait()
        elapsed = time.perf_counter() - start
        for put, _ in channels:
            put(None)
    return elapsed


BASELINES: dict[str, Callable[[_Kit], Awaitable[float]]] = {
    "pingpong": _base_pingpong,
    "counting": _base_counting,
    "sending": _base_sending,
    "fanout": _base_fanout,
    "spawn": _base_spawn,
    "ring": _base_ring,
}
OPERATIONS = {
    "pingpong": PINGPONG,
    "counting": COUNTING,
    "sending": COUNTING,
    "fanout": FANOUT_ACTORS * FANOUT_EACH,
    "spawn": SPAWN,
    "ring": RING_HOPS,
}


def _kits(backend: str) -> list[_Kit]:
    return [_AsyncioKit(), _AnyioKit()] if backend == "asyncio" else [_TrioKit(), _AnyioKit()]


async def _median_ops(run: Callable[[], Awaitable[float]], operations: int, runs: int) -> float:
    await run()  # warm-up
    times = []
    for _ in range(runs):
        gc.collect()
        times.append(await run())
    return operations / statistics.median(times)


async def measure(backend: str, runs: int = 5, workloads: tuple[str, ...] = WORKLOADS) -> dict[str, Any]:
    """``{workload: {"greenroom": ops/s, <baseline>: ops/s, ..., "ratio": ...}}`` for one backend."""
    results: dict[str, Any] = {}
    kits = _kits(backend)
    for workload in workloads:
        operations = OPERATIONS[workload]
        row: dict[str, Any] = {"greenroom": await _median_ops(GREENROOM[workload], operations, runs)}
        for kit in kits:
            base = BASELINES[workload]

            async def run_base(kit: _Kit = kit, base: Callable[[_Kit], Awaitable[float]] = base) -> float:
                try:
                    return await base(kit)
                finally:
                    kit.close()

            row[kit.name] = await _median_ops(run_base, operations, runs)
        row["ratio"] = row["greenroom"] / row[kits[0].name]
        if workload == "spawn":
            row["bytes_per_idle_actor"] = await greenroom_idle_bytes()
        results[workload] = row
    return results


def run(backend: str, runs: int = 5, workloads: tuple[str, ...] = WORKLOADS) -> dict[str, Any]:
    return anyio.run(measure, backend, runs, workloads, backend=backend)


def format_table(backend: str, results: dict[str, Any]) -> str:
    baseline = _kits(backend)[0].name
    lines = [
        f"greenroom actor benchmark on {backend} (ops/s, median of runs; ratio = greenroom / {baseline})",
        f"{'workload':<10} {'greenroom':>12} {baseline:>14} {'anyio-stream':>14} {'ratio':>7} {'target':>7}",
    ]
    for workload, row in results.items():
        target = TARGETS[backend][workload]
        mark = "ok" if row["ratio"] >= target else "below"
        lines.append(
            f"{workload:<10} {row['greenroom']:>12,.0f} {row[baseline]:>14,.0f} "
            f"{row['anyio-stream']:>14,.0f} {row['ratio']:>6.2f}x {target:>6.1f}x  {mark}"
        )
        if "bytes_per_idle_actor" in row:
            size = row["bytes_per_idle_actor"]
            mark = "ok" if size <= BYTES_PER_IDLE_ACTOR_TARGET else "above"
            lines.append(f"{'':<10} {size:,.0f} bytes per live idle actor (target <= 3 KB)  {mark}")
    return "\n".join(lines)
