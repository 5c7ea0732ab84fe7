"""``run_blocking(fn, *args)``: a blocking call in a worker thread — a backend fast path.

The hot durable writes (the log actor's group commit, the supervisor's journal append)
hand one ``pwritev``/``fsync`` to a thread per batch, and the round trip to that thread
is a fixed cost every batch pays. ``anyio.to_thread.run_sync`` spends a checkpoint, a
capacity-limiter token, a cancel scope and a context copy on each call; without them the
event-log benchmark runs 7-10 % faster on trio and 4-6 % on asyncio (interleaved A/B).
This module is the clearly marked exception to "import anyio only", like
``actors/_backend.py`` (whose ``fast_path()`` tells which backend runs the caller):

- **trio**: ``trio.lowlevel.start_thread_soon`` (trio's thread cache), the outcome sent
  back with ``TrioToken.run_sync_soon`` to ``reschedule`` the waiting task.
- **asyncio**: a small cache of daemon worker threads, each idle one waiting on its own
  queue (and exiting after ``IDLE_SECONDS``); the result set on a bare future with
  ``call_soon_threadsafe``.
- **any other backend**: ``anyio.to_thread.run_sync``.

The contract is ``anyio.to_thread.run_sync(fn, *args)`` with its default
``abandon_on_cancel=False``, and the whole test suite runs on both backends:

- Cancelled before the call: raises at once and ``fn`` never runs.
- Cancelled or timed out while ``fn`` runs: the thread is not abandoned. The caller
  waits until ``fn`` returns and gets its value or exception as usual; the
  cancellation is raised at the caller's next checkpoint. (So a write that finished
  is reported as done even if the caller was cancelled meanwhile.) Only a bare
  ``task.cancel()`` from outside anyio, on asyncio, is raised at once, after ``fn``
  returned, dropping its result.
- ``fn``'s exception is raised in the caller.

Differences, on purpose: no limiter token is taken (each caller runs one call at a
time, so these calls cannot pile up), and ``fn`` must not call back into the event
loop (``anyio.from_thread``): it is meant for plain system calls.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import anyio

from .actors._backend import fast_path

T = TypeVar("T")

IDLE_SECONDS = 10.0  # an asyncio worker thread idle this long exits


async def run_blocking(fn: Callable[..., T], *args: Any) -> T:
    """Run ``fn(*args)`` in a worker thread and return its result (see the module
    docstring for cancellation: ``fn`` always runs to the end once started). While it
    runs, :func:`working` says so (a virtual clock does not jump past it)."""
    began()
    try:
        path = fast_path()
        if path is None:
            return await anyio.to_thread.run_sync(fn, *args)
        kind, handle = path
        result: T = await (_asyncio_run if kind == "asyncio" else _trio_run)(handle, fn, args)
        return result
    finally:
        ended()


# --- work in threads, as a virtual clock sees it ---------------------------------------

_working: dict[int, int] = {}
"""Per event loop thread: greenroom's calls running in worker threads for it now."""
hooks: list[Callable[[bool], None]] = []
"""Told (on the loop's thread) when a loop's first call in a thread begins (``True``) and
when its last one ends (``False``): ``greenroom.testing``'s virtual clocks hold still
meanwhile — a database write slower than the jump threshold is work, not idleness."""


def began() -> None:
    """A call of greenroom's own work (a write, a query: never a long poll) went to a
    worker thread for the calling loop's thread; :func:`ended` when it is back."""
    thread = threading.get_ident()
    count = _working.get(thread, 0)
    _working[thread] = count + 1
    if not count:
        for hook in hooks:
            hook(True)


def ended() -> None:
    thread = threading.get_ident()
    count = _working.get(thread, 1) - 1
    if count:
        _working[thread] = count
        return
    _working.pop(thread, None)
    for hook in hooks:
        hook(False)


def working(thread: int | None = None) -> bool:
    """Whether greenroom work runs in worker threads for that loop thread (the caller's)."""
    return (threading.get_ident() if thread is None else thread) in _working


# --- trio ---------------------------------------------------------------------------


def _refuse_abort(_: Any) -> Any:
    return sys.modules["trio"].lowlevel.Abort.FAILED  # fn is running: wait for it


async def _trio_run(lowlevel: Any, fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    await lowlevel.checkpoint_if_cancelled()
    task = lowlevel.current_task()
    token = lowlevel.current_trio_token()
    reschedule = lowlevel.reschedule

    def deliver(outcome: Any) -> None:  # in the worker thread
        token.run_sync_soon(reschedule, task, outcome)

    lowlevel.start_thread_soon(lambda: fn(*args), deliver, "greenroom-blocking")
    # Abort.FAILED: a cancellation waits for fn and is delivered at the next checkpoint
    return await lowlevel.wait_task_rescheduled(_refuse_abort)


# --- asyncio ------------------------------------------------------------------------


class _Job:
    __slots__ = ("args", "finished", "fn", "future", "loop")

    def __init__(self, loop: Any, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.loop = loop
        self.fn = fn
        self.args = args
        self.future = loop.create_future()
        self.finished = False

    def settle(self, value: Any, error: BaseException | None) -> None:
        """On the loop: hand the outcome to whichever future the caller waits on now."""
        self.finished = True
        future = self.future
        if future.done():  # the caller's wait was cancelled; it waits on a new one
            return
        if error is None:
            future.set_result(value)
        else:
            future.set_exception(error)


class _Worker:
    __slots__ = ("jobs",)

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()

    def run(self) -> None:
        while True:
            try:
                job = self.jobs.get(timeout=IDLE_SECONDS)
            except queue.Empty:
                with _lock:
                    if self in _idle:
                        _idle.remove(self)
                        return
                job = self.jobs.get()  # taken off the idle list just as it timed out
            value: Any = None
            error: BaseException | None = None
            try:
                value = job.fn(*job.args)
            except BaseException as caught:  # delivered to the caller, who re-raises it
                error = caught
            with _lock:
                _idle.append(self)  # before the reply, so the caller's next call reuses us
            try:
                job.loop.call_soon_threadsafe(job.settle, value, error)
            except RuntimeError:  # the loop is closed: nobody is waiting any more
                pass
            del job, value, error


_lock = threading.Lock()
_idle: list[_Worker] = []


def _forget_workers() -> None:
    """In a forked child: none of the parent's threads exist, and the lock may have been
    held by one of them at the fork."""
    global _lock
    _lock = threading.Lock()
    _idle.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_workers)


def _submit(job: _Job) -> None:
    with _lock:
        worker = _idle.pop() if _idle else None
    if worker is None:
        worker = _Worker()
        threading.Thread(target=worker.run, name="greenroom-blocking", daemon=True).start()
    worker.jobs.put(job)


async def _asyncio_run(loop: Any, fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    import asyncio

    await anyio.lowlevel.checkpoint_if_cancelled()  # cheap when not cancelled: walks the scopes
    job = _Job(loop, fn, args)
    _submit(job)
    with anyio.CancelScope(shield=True):  # as anyio.to_thread: a cancel scope's cancellation waits
        try:
            return await job.future
        except asyncio.CancelledError:  # task.cancel() from outside anyio: still wait for fn
            while not job.finished:
                job.future = loop.create_future()
                try:
                    await job.future
                except asyncio.CancelledError:
                    continue  # the first cancellation is the one re-raised below
                except Exception:  # fn's own error; the cancellation wins
                    pass
            raise
