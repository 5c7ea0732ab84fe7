"""The worker pool that runs actors' batches.

Cells with messages wait on a FIFO run queue; worker tasks, all in one task group the
system owns, take a cell, handle up to ``throughput`` of its messages, and put it back
at the end of the queue if more are waiting. Why not a task per actor: a task costs
several KB while idle and ~20 µs to start through a task group, which would miss both
the spawn and the idle-memory targets; an idle cell here has no task at all.

Progress guarantee: a ``receive`` may block for as long as it likes (an LLM call),
holding its worker. So whenever the queue is non-empty, at least one *other* worker
has been woken (or started) and will come for it: ``schedule`` wakes one if none is
on its way, and each woken worker that leaves work behind wakes the next. The pool
grows to the number of actors blocked at once; idle workers beyond ``max_idle``
exit. A worker that finishes a batch takes the next cell itself, without a task
switch, and checkpoints every ``throughput`` messages so others get to run.

Batch delivery: an activation drains what is ready in the mailbox (up to ``throughput``)
before the worker moves on — one ``receive`` call per message, or, for an actor that
defines ``receive_many``, one call for the run of messages between kernel signals.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskStatus

from .._tracing import Traced, isolate
from ._cell import CONTROL
from ._exceptions import ActorStopped

if TYPE_CHECKING:
    from ._cell import ActorCell


class Dispatcher:
    def __init__(self, event_class: Any, throughput: int, max_idle: int) -> None:
        self.event_class = event_class
        self.throughput = throughput
        self.max_idle = max_idle
        self.runq: deque[ActorCell] = deque()
        self.idle: list[Any] = []
        self.waking = 0
        self.task_group: anyio.abc.TaskGroup | None = None
        self.closed = False

    def schedule(self, cell: ActorCell) -> None:
        cell.scheduled = True
        self.runq.append(cell)
        if self.waking == 0:
            self.wake()

    def wake(self) -> None:
        if self.closed or self.task_group is None:
            return
        self.waking += 1
        if self.idle:
            self.idle.pop().set()
        else:
            self.task_group.start_soon(self._worker, name="greenroom-worker")

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Host the workers' task group until cancelled (at system shutdown)."""
        try:
            async with anyio.create_task_group() as task_group:
                self.task_group = task_group
                task_status.started()
                await anyio.sleep_forever()
        finally:
            self.closed = True
            self.task_group = None

    async def _worker(self) -> None:
        """Take cells off the run queue and handle their messages until idle for good.

        The batch loop is written out here rather than in a cell method because in the
        common one-message activation (an ask round trip) a coroutine per batch is a
        measurable share of the cost. Kernel signals and failures go to the cell.
        """
        me = anyio.get_current_task().id
        isolate()  # a worker serves every actor: it must not keep its spawner's trace context
        runq = self.runq
        budget = self.throughput
        checkpoint = anyio.lowlevel.checkpoint
        since_checkpoint = 0
        self.waking -= 1
        while True:
            if not runq:
                if len(self.idle) >= self.max_idle:
                    return
                event = self.event_class()
                self.idle.append(event)
                try:
                    await event.wait()
                except BaseException:
                    if event in self.idle:
                        self.idle.remove(event)
                    raise
                self.waking -= 1
                since_checkpoint = 0
                continue
            cell = runq.popleft()
            if runq and self.waking == 0:
                self.wake()
            cell.runner = me
            mailbox = cell.mailbox
            actor = cell.actor
            interruptible = cell.interruption is not None
            handled = 0
            try:
                while True:
                    if cell.stop_now:
                        await cell.terminate(cell.reason)
                        break
                    if not mailbox or handled == budget:
                        break
                    if cell.batching:  # receive_many: what is ready, up to the budget, at once
                        batch = []
                        while mailbox and handled < budget:
                            message, reply = mailbox[0]
                            if reply is CONTROL or type(message) is Traced:
                                break
                            mailbox.popleft()
                            batch.append((message, reply))
                            handled += 1
                        if batch:
                            if cell.send_waiters:
                                cell.admit_senders()
                            await cell.run_batch(batch)
                            if cell.dead:
                                break
                            actor = cell.actor
                            interruptible = cell.interruption is not None
                            continue
                    message, reply = mailbox.popleft()
                    handled += 1
                    if cell.send_waiters:
                        cell.admit_senders()
                    if type(message) is Traced:  # only while tracing is enabled
                        await cell.run_traced(message, reply)
                        if cell.dead:
                            break
                        actor = cell.actor
                    elif interruptible and reply is not CONTROL:
                        await cell.run_interruptible(message, reply)
                        if cell.dead:
                            break
                        actor = cell.actor
                    elif reply is None:
                        try:
                            await actor.receive(message)  # type: ignore[union-attr]
                        except Exception as error:
                            await cell.handle_failure(error, message)
                            if cell.dead:
                                break
                            actor = cell.actor
                    elif reply is CONTROL:
                        await cell.control(message)
                        if cell.dead:
                            break
                        actor = cell.actor
                        interruptible = cell.interruption is not None
                    else:
                        cell.current_reply = reply
                        try:
                            value = await actor.receive(message)  # type: ignore[union-attr]
                        except Exception as error:
                            cell.current_reply = None
                            reply.fail(error)  # no-op if a deferred reply was already filled
                            await cell.handle_failure(error, message)
                            if cell.dead:
                                break
                            actor = cell.actor
                        except BaseException:
                            cell.current_reply = None
                            reply.fail(ActorStopped(cell.ref, "was stopped while handling the message"))
                            raise
                        else:
                            if cell.current_reply is reply:  # not taken by context.reply_later()
                                cell.current_reply = None
                                reply.succeed(value)
            except BaseException:
                cell.interrupted = True
                raise
            finally:
                cell.runner = None
            if not cell.dead:
                if mailbox or cell.stop_now:
                    runq.append(cell)
                else:
                    cell.scheduled = False
            since_checkpoint += handled
            if since_checkpoint >= budget:
                since_checkpoint = 0
                await checkpoint()
