"""The outbox: a task-graph transition and its events are one durable fact.

The journal is the source of truth; the event log follows it. After any crash every
committed transition has exactly one event, an agent's ``AGENT_RESULT`` included, and no
producer drops an event on a full mailbox.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import pytest
from _support import eventually, open_node

import greenroom.embedded._events as log_actor
from greenroom import Actor
from greenroom.agents import AgentRuntime
from greenroom.embedded import GraphFiles, read_events
from greenroom.embedded._outbox import Outbox, OutboxBatch
from greenroom.messages import (
    AGENT_RESULT,
    TASK_COMPLETED,
    TASK_SUBMITTED,
    AgentResult,
    AgentTask,
    Claim,
    Event,
    Submit,
)
from greenroom.messages._events import OutboxEvent
from greenroom.messages._protocol import AppendBatch, OutboxPosition

pytestmark = pytest.mark.anyio

TESTS = Path(__file__).resolve().parent


def events_of(data_dir: Path) -> list[Event]:
    path = data_dir / "events.jsonl"
    return read_events(path) if path.exists() else []


def count(events: list[Event], kind: str) -> Counter[str | None]:
    return Counter(e.task_id for e in events if e.type == kind)


# -- crashes ------------------------------------------------------------------------------

_BLOCKED_LOG = """
import sys, time
sys.path.insert(0, {tests!r})
import anyio
import greenroom.embedded._events as log_actor
from greenroom import Actor
from _support import open_node
from greenroom.agents import AgentRuntime
from greenroom.messages import AgentResult, AgentTask, Submit

log_actor.append_durably = lambda fd, data: time.sleep(3600)  # the log never gets to write

async def main():
    async with open_node({data_dir!r}) as node:
        await node.supervisor.ask(Submit([AgentTask(id=f"t{{i}}", type="w") for i in range(50)]))
        runtime = AgentRuntime("a1", "w", supervisor=node.supervisor, log=node.log)
        for _ in range(10):
            task = await runtime.claim_task()
            await runtime.complete_task(task.id, AgentResult(task_id=task.id, outcome="done"))
        print("committed", flush=True)
        await anyio.sleep_forever()

anyio.run(main, backend=sys.argv[1])
"""


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_kill_between_the_journal_and_the_log_loses_no_event(tmp_path: Path, backend: str) -> None:
    """Before the outbox, the supervisor told the log the events after its commit, and
    the agent appended AGENT_RESULT after Complete was acknowledged: a SIGKILL in between
    lost them for good."""
    data_dir = tmp_path / "data"
    script = _BLOCKED_LOG.format(tests=str(TESTS), data_dir=str(data_dir))
    process = subprocess.Popen(
        [sys.executable, "-c", script, backend], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.strip() == "committed", process.stderr.read() if process.stderr else ""
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    process.stdout.close()
    assert process.stderr is not None
    process.stderr.close()
    assert events_of(data_dir) == []  # the log wrote nothing before the kill

    async def restart() -> None:
        async with open_node(data_dir) as node:
            await eventually(lambda: len(events_of(data_dir)) >= 50 + 10 * 3)
            await node.log.ask(OutboxPosition())  # whatever it took is written

    for _ in range(2):  # the second start finds nothing missing: nothing twice
        anyio.run(restart, backend=backend)
        events = events_of(data_dir)
        assert count(events, TASK_SUBMITTED) == {f"t{i}": 1 for i in range(50)}
        completed = count(events, TASK_COMPLETED)
        assert len(completed) == 10 and set(completed.values()) == {1}
        assert count(events, AGENT_RESULT) == completed  # each completion's result, once
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        assert all(e.origin is not None for e in events)


_ORIGIN_IN_PAYLOAD = """
import sys
sys.path.insert(0, {tests!r})
import anyio
from _support import open_node
from greenroom.agents import AgentRuntime
from greenroom.messages import AgentResult, AgentTask, Submit

async def main():
    async with open_node({data_dir!r}) as node:
        await node.supervisor.ask(Submit([AgentTask(id=f"t{{i}}", type="w") for i in range(32)]))
        runtime = AgentRuntime("a1", "w", supervisor=node.supervisor, log=node.log)
        for _ in range(32):
            task = await runtime.claim_task()
            await runtime.complete_task(task.id, AgentResult(task_id=task.id, outcome="done"))
        # an agent's own event, last in the log, whose payload has an "origin" key
        await runtime.emit("AGENT_UPDATE", "t0", {{"message": "hi", "origin": [1, 2]}})
        print("committed", flush=True)
        await anyio.sleep_forever()

anyio.run(main, backend=sys.argv[1])
"""


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_an_origin_key_in_a_payload_never_makes_recovery_send_events_twice(
    tmp_path: Path, backend: str
) -> None:
    """The log's position comes from its own field of each event, never from the bytes of
    a payload: an agent's event with an ``origin`` key, last before a SIGKILL, once made the
    restart send every journal batch again (every completion logged twice)."""
    data_dir = tmp_path / "data"
    script = _ORIGIN_IN_PAYLOAD.format(tests=str(TESTS), data_dir=str(data_dir))
    process = subprocess.Popen(
        [sys.executable, "-c", script, backend], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    out, err = "", ""
    try:
        assert process.stdout is not None
        out = process.stdout.readline()
    finally:
        process.send_signal(signal.SIGKILL)
        _, err = process.communicate(timeout=30)
    assert out.strip() == "committed", err
    before = events_of(data_dir)
    assert before[-1].payload == {"message": "hi", "origin": [1, 2]} and before[-1].origin is None

    async def restart() -> None:
        async with open_node(data_dir) as node:
            await node.log.ask(OutboxPosition())

    anyio.run(restart, backend=backend)
    events = events_of(data_dir)
    assert count(events, TASK_COMPLETED) == {f"t{i}": 1 for i in range(32)}
    assert count(events, AGENT_RESULT) == {f"t{i}": 1 for i in range(32)}
    assert len(events) == len(before)  # the log had everything: nothing was sent again


async def test_tasks_requeued_after_a_dead_process_are_logged(tmp_path: Path) -> None:
    async with open_node(tmp_path) as node:
        await node.supervisor.ask(Submit([AgentTask(id="t1", type="w")]))
        await node.supervisor.ask(Claim("gone", "w"))  # then the "process" stops mid-task
    async with open_node(tmp_path) as node:
        await node.log.ask(OutboxPosition())
    requeued = [e for e in events_of(tmp_path) if e.task_id == "t1" and e.payload.get("status") == "PENDING"]
    assert len(requeued) == 2  # submitted, and queued again at the second start
    assert requeued[-1].origin is not None


async def test_no_event_is_dropped_when_the_log_mailbox_is_full(tmp_path: Path) -> None:
    """A submission of 12,000 tasks used to log only 10,000 of them: the supervisor told
    the log each event, and a full 10,000-slot mailbox refused the rest."""
    async with open_node(tmp_path) as node:
        assert node.log._cell.limit == 10_000
        await node.supervisor.ask(
            Submit([AgentTask(id=f"t{i}", type="w") for i in range(12_000)]), timeout=60
        )
        await node.log.ask(OutboxPosition())
    assert len(count(events_of(tmp_path), TASK_SUBMITTED)) == 12_000


async def test_a_failed_log_write_is_sent_again_and_stored_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = log_actor.append_durably
    failing = threading.Event()

    def fails_once(fd: int, data: bytes) -> None:
        if b"TASK_SUBMITTED" in data and not failing.is_set():
            failing.set()
            raise OSError(5, "Input/output error")
        real(fd, data)

    monkeypatch.setattr(log_actor, "append_durably", fails_once)
    async with open_node(tmp_path) as node:
        for i in range(20):
            await node.supervisor.ask(Submit([AgentTask(id=f"t{i}", type="w")]))
        runtime = AgentRuntime("a1", "w", supervisor=node.supervisor, log=node.log)
        task = await runtime.claim_task()
        assert task is not None
        await runtime.complete_task(task.id, AgentResult(task_id=task.id, outcome="done"))
        await eventually(lambda: count(events_of(tmp_path), AGENT_RESULT))
        await node.log.ask(OutboxPosition())
    assert failing.is_set()
    events = events_of(tmp_path)
    assert count(events, TASK_SUBMITTED) == {f"t{i}": 1 for i in range(20)}
    assert count(events, AGENT_RESULT) == {task.id: 1}


async def test_a_batch_that_does_not_follow_what_the_log_has_is_refused(tmp_path: Path) -> None:
    async with open_node(tmp_path) as node:
        told: list[Any] = []

        class Recorder(Actor):
            async def receive(self, message: Any) -> None:
                told.append(message)

        recorder = await node.system.spawn(Recorder)
        event = OutboxEvent("X", "t", None, {})
        node.log.tell(AppendBatch(900, (event,), 0, recorder, after=(899, 0)))  # a gap
        await eventually(lambda: told)
        position = told[0].position
        assert type(told[0]).__name__ == "OutboxLost"
        assert not any(e.origin == (900, 0) for e in events_of(tmp_path))
        node.log.tell(AppendBatch(900, (event, event), 0, recorder, after=position))
        await eventually(lambda: len(told) == 2)
        node.log.tell(AppendBatch(900, (event, event), 0, recorder, after=position))  # again: a resend
        await eventually(lambda: len(told) == 3)
    mine = [e.origin for e in events_of(tmp_path) if e.type == "X"]
    assert mine == [(900, 0), (900, 1)]  # stored once each
    assert [type(m).__name__ for m in told[1:]] == ["OutboxDelivered", "OutboxDelivered"]


# -- the outbox's bookkeeping, and compaction --------------------------------------------


def ev(name: str) -> OutboxEvent:
    return OutboxEvent(name)


def test_the_outbox_chains_batches_and_drops_what_the_log_confirmed() -> None:
    outbox = Outbox(ack="me")
    first = outbox.send(1, [ev("a"), ev("b")])
    second = outbox.send(3, [ev("c")])
    assert (first.after, second.after) == (None, (1, 1))
    outbox.confirmed((1, 0))  # part of batch 1
    assert [(b.seq, b.first, len(b.events)) for b in outbox.unconfirmed()] == [(1, 1, 1), (3, 0, 1)]
    outbox.confirmed((3, 0))
    assert outbox.unconfirmed() == []


def test_the_outbox_resends_after_a_gap_once_per_gap() -> None:
    outbox = Outbox(ack="me")
    for seq in (1, 2, 3):
        outbox.send(seq, [ev("x"), ev("y")])
    resend = outbox.lost((1, 1))
    assert [(m.seq, m.first_index, m.after) for m in resend] == [(2, 0, (1, 1)), (3, 0, (2, 1))]
    assert outbox.lost((1, 1)) == []  # the same gap reported by the next dropped batch
    outbox.confirmed((3, 1))
    assert outbox.lost((3, 1)) == []  # nothing left to send


def test_restore_sends_only_what_the_log_lacks() -> None:
    outbox = Outbox(ack="me")
    batches = [OutboxBatch(4, 0, [ev("a"), ev("b"), ev("c")]), OutboxBatch(6, 0, [ev("d")])]
    sends = outbox.restore((4, 1), batches)
    assert [(m.seq, m.first_index, [e.type for e in m.events], m.after) for m in sends] == [
        (4, 2, ["c"], (4, 1)),
        (6, 0, ["d"], (4, 2)),
    ]
    assert outbox.restore((6, 0), batches) == []


def test_compaction_keeps_the_events_the_log_has_not_confirmed(tmp_path: Path) -> None:
    store = GraphFiles(tmp_path)
    store.load()
    seq = store.append([AgentTask(id="t", type="w")], [ev("a"), ev("b")])
    store.compact([AgentTask(id="t", type="w")], [OutboxBatch(seq, 1, [ev("b")])])
    assert store.journal_bytes == 0
    again = GraphFiles(tmp_path)
    again.load()
    assert [(b.seq, b.first, [e.type for e in b.events]) for b in again.outbox] == [(seq, 1, ["b"])]
    again.close()
    store.close()
