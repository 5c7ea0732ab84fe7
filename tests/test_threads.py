"""``run_blocking``: the worker-thread hop of the durable writes, on both backends.

Its contract is ``anyio.to_thread.run_sync``'s with ``abandon_on_cancel=False``: the
value or the exception comes back, a call cancelled before it starts never runs, and
a call cancelled while it runs is waited for before the cancellation goes through.
"""

from __future__ import annotations

import os
import threading
import time
import warnings
from concurrent.futures import Future
from typing import Any

import anyio
import pytest

from greenroom import _threads
from greenroom._threads import run_blocking

pytestmark = pytest.mark.anyio


async def test_returns_the_value_computed_in_another_thread() -> None:
    here = threading.get_ident()
    ident, total = await run_blocking(lambda a, b: (threading.get_ident(), a + b), 2, 3)
    assert total == 5
    assert ident != here


async def test_raises_the_callables_exception() -> None:
    def broken(path: str) -> None:
        raise FileNotFoundError(2, "No such file", path)

    with pytest.raises(FileNotFoundError) as caught:
        await run_blocking(broken, "/nowhere/events.jsonl")
    assert caught.value.filename == "/nowhere/events.jsonl"


async def test_a_call_cancelled_before_it_starts_never_runs() -> None:
    ran: list[int] = []
    with anyio.CancelScope() as scope:
        scope.cancel()
        await run_blocking(ran.append, 1)
    assert scope.cancelled_caught
    assert ran == []


async def test_cancellation_while_running_waits_for_the_call_and_keeps_its_value() -> None:
    """The write is never abandoned half-way: the caller leaves only after it is done,
    gets its value (a finished write is reported as done), and the cancellation is
    raised at its next checkpoint."""
    started = threading.Event()
    release = threading.Event()

    def slow_write() -> str:
        started.set()
        assert release.wait(10)
        return "written"

    seen: list[str] = []

    async def caller(scope: anyio.CancelScope) -> None:
        with scope:
            seen.append(await run_blocking(slow_write))
            await anyio.lowlevel.checkpoint()
            seen.append("past the checkpoint")  # never: the cancellation is raised there

    scope = anyio.CancelScope()
    async with anyio.create_task_group() as tg:
        tg.start_soon(caller, scope)
        await anyio.to_thread.run_sync(started.wait, 10)
        scope.cancel()
        for _ in range(20):  # the caller must still be waiting for the thread
            await anyio.sleep(0.005)
        assert seen == []
        release.set()
    assert seen == ["written"]
    assert scope.cancelled_caught


async def test_concurrent_calls_run_in_parallel_threads() -> None:
    """Two callers at once each get a thread: neither waits behind the other."""
    barrier = threading.Barrier(2, timeout=10)
    idents: list[int] = []

    def meet() -> None:
        barrier.wait()  # only returns once both calls run at the same time
        idents.append(threading.get_ident())

    async with anyio.create_task_group() as tg:
        tg.start_soon(run_blocking, meet)
        tg.start_soon(run_blocking, meet)
    assert len(set(idents)) == 2


# --- the asyncio worker cache, driven without an event loop ---------------------------


class _InlineLoop:
    """Stands in for a loop: futures are concurrent ones, callbacks run in the caller's thread."""

    def create_future(self) -> Future[Any]:
        return Future()

    def call_soon_threadsafe(self, callback: Any, *args: Any) -> None:
        callback(*args)


def test_an_idle_asyncio_worker_exits_after_the_idle_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_threads, "IDLE_SECONDS", 0.05)
    monkeypatch.setattr(_threads, "_idle", [])
    job = _threads._Job(_InlineLoop(), threading.current_thread, ())
    _threads._submit(job)
    worker_thread = job.future.result(timeout=10)
    assert worker_thread is not threading.current_thread()
    assert len(_threads._idle) == 1  # idle, waiting for the next job
    worker_thread.join(timeout=10)
    assert not worker_thread.is_alive()
    assert _threads._idle == []


def test_an_asyncio_worker_reports_the_error_and_stays_usable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_threads, "_idle", [])
    failing = _threads._Job(_InlineLoop(), int, ("not a number",))
    _threads._submit(failing)
    with pytest.raises(ValueError, match="not a number"):
        failing.future.result(timeout=10)
    assert failing.finished
    again = _threads._Job(_InlineLoop(), threading.get_ident, ())
    deadline = time.monotonic() + 10
    while not _threads._idle and time.monotonic() < deadline:
        time.sleep(0.001)
    worker = _threads._idle[0]
    _threads._submit(again)
    assert again.future.result(timeout=10) != threading.get_ident()
    assert _threads._idle == [worker]  # the same worker took it and went back to idle


def test_a_bare_asyncio_task_cancel_still_waits_for_the_call() -> None:
    """The asyncio fast path's own branch: a ``task.cancel()`` from outside anyio (no
    cancel scope to defer it) is raised once ``fn`` has returned, never before."""
    import asyncio  # this branch exists on asyncio only

    started = threading.Event()
    release = threading.Event()
    finished: list[str] = []

    def slow_write() -> None:
        started.set()
        assert release.wait(10)
        finished.append("written")

    async def main() -> None:
        task = asyncio.ensure_future(run_blocking(slow_write))
        await anyio.to_thread.run_sync(started.wait, 10)
        task.cancel()
        await asyncio.sleep(0.05)
        assert not task.done()  # still waiting for the thread
        task.cancel()  # a second cancel changes nothing
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert finished == ["written"]

    asyncio.run(main())


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX-only")
def test_a_forked_child_starts_with_no_workers_and_a_free_lock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_threads, "_idle", [])
    job = _threads._Job(_InlineLoop(), int, ("7",))
    _threads._submit(job)
    assert job.future.result(timeout=10) == 7 and len(_threads._idle) == 1
    with _threads._lock, warnings.catch_warnings():  # held across the fork, as a worker might
        warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: fork() with threads running
        pid = os.fork()
        if pid == 0:  # the child: its lock is free and no worker is listed
            ok = _threads._idle == [] and _threads._lock.acquire(timeout=5)
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert len(_threads._idle) == 1  # the parent's worker is still there


_FIRST_USE_IN_THREADS = """
import sys, threading
import msgspec
from greenroom.messages import AgentTask, Event

sys.setswitchinterval(1e-6)  # pass the GIL between threads as often as it can be
barrier = threading.Barrier(16)
task = {"id": "t1", "type": "w", "status": "IN_PROGRESS", "owner": "a@n:1", "attempt": 1,
        "result": {"task_id": "t1", "outcome": "ok"}, "error": {"reason": "r"}, "depends_on": ["t0"]}
event = {"seq": 1, "ts": 1.0, "type": "TASK_CLAIMED", "payload": {"status": "IN_PROGRESS"}}

def work():
    barrier.wait()  # every thread's first conversion at once, like a pool's first rows
    for _ in range(100):
        msgspec.convert(dict(task), AgentTask)
        msgspec.convert(dict(event), Event)

threads = [threading.Thread(target=work) for _ in range(16)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print("ok")
"""


def test_message_types_are_ready_before_many_threads_convert_them_at_once() -> None:
    """msgspec builds a type's decoding information on first use, not thread-safely: 16
    threads converting their first ``AgentTask`` at once crashed the process (SIGSEGV) —
    what killed PostgreSQL daemons whose pool threads converted their first rows together.
    Importing ``greenroom.messages`` builds every message type's information first."""
    import subprocess
    import sys

    for _ in range(5):
        done = subprocess.run(
            [sys.executable, "-X", "faulthandler", "-c", _FIRST_USE_IN_THREADS],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert (done.returncode, done.stdout.strip()) == (0, "ok"), done.stderr[-3000:]
