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

import anyio
import pytest
from _support import eventually, open_node

import greenroom.embedded._events as log_actor
from greenroom.agents import AgentRuntime
from greenroom.embedded import FileEventStore, GraphFiles, read_events
from greenroom.embedded._outbox import Outbox, OutboxBatch, outbox_for
from greenroom.messages import (
    AGENT_RESULT,
    TASK_COMPLETED,
    TASK_SUBMITTED,
    AgentResult,
    AgentTask,
    Append,
    AppendMany,
    Claim,
    Event,
    Flush,
    GraphEvent,
    Submit,
)

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
            await node.log.ask(Flush())  # whatever it took is written

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
            await node.log.ask(Flush())

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
        await node.log.ask(Flush())
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
        await node.log.ask(Flush())
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
        await node.log.ask(Flush())
    assert failing.is_set()
    events = events_of(tmp_path)
    assert count(events, TASK_SUBMITTED) == {f"t{i}": 1 for i in range(20)}
    assert count(events, AGENT_RESULT) == {task.id: 1}


def journal_event(name: str, seq: int, index: int) -> Event:
    return Event(0, 1.0, name, origin=(seq, index))


async def test_a_journal_batch_after_a_lost_one_is_preceded_by_it_and_each_is_stored_once(
    tmp_path: Path,
) -> None:
    """The event store keeps the log whole: a write whose first journal event comes after
    events the log lacks (a batch lost in a failed write of the log's) writes those first,
    from the outbox; an event it has already is skipped (``seq`` 0) and stored once."""
    store = FileEventStore(tmp_path)
    await store.open(log="the log")  # type: ignore[arg-type]  # the store writes; nobody is told
    outbox = outbox_for(tmp_path)
    try:
        for seq, names in ((1, ["a", "b"]), (2, ["c"]), (4, ["d", "e"])):
            assert outbox.committed(seq, [ev(n) for n in names]) is not None
        written = await store.write([journal_event("d", 4, 0), journal_event("e", 4, 1)])
        assert [e.seq for e in written if isinstance(e, Event)] == [4, 5]  # after a, b, c
        again = await store.write([journal_event("c", 2, 0), journal_event("e", 4, 1)])
        assert [e.seq for e in again if isinstance(e, Event)] == [0, 0]  # the log had them
        assert outbox.unconfirmed() == [] and outbox.position == (4, 1)
    finally:
        await store.close()
    stored = events_of(tmp_path)
    assert [(e.type, e.origin, e.visibility) for e in stored] == [
        ("a", (1, 0), "internal"),
        ("b", (1, 1), "internal"),
        ("c", (2, 0), "internal"),
        ("d", (4, 0), "internal"),
        ("e", (4, 1), "internal"),
    ]


async def test_a_log_that_opens_writes_the_committed_events_it_lacks(tmp_path: Path) -> None:
    outbox = outbox_for(tmp_path)
    outbox.attach("an earlier log", None)  # type: ignore[arg-type]
    outbox.committed(7, [ev("x"), ev("y")])
    outbox.detach()  # it stopped before writing them
    store = FileEventStore(tmp_path)
    await store.open(log="the next log")  # type: ignore[arg-type]
    try:
        assert outbox.log == "the next log" and outbox.position == (7, 1)
    finally:
        await store.close()
    assert outbox.log is None
    assert [(e.type, e.origin) for e in events_of(tmp_path)] == [("x", (7, 0)), ("y", (7, 1))]


async def test_a_journal_batch_with_a_bad_origin_is_refused_naming_it(tmp_path: Path) -> None:
    async with open_node(tmp_path) as node:
        with pytest.raises(ValueError, match=r"origin.*must be \(seq, first\)"):
            await node.log.ask(AppendMany([Append("X")], origin=(1, -1)))
        await node.log.ask(Flush())
    assert not any(e.type == "X" for e in events_of(tmp_path))


async def test_a_journals_events_are_written_at_once_never_held_for_the_linger(tmp_path: Path) -> None:
    """Told, but not lingering: a reader right after a transition's answer sees its events
    (the API's submit, then its event stream), as on PostgreSQL."""
    from _support import file_log

    from greenroom import ActorSystem

    async with ActorSystem() as system:
        log = await system.spawn(lambda: file_log(tmp_path, linger=60.0))
        log.tell(AppendMany([Append("X", {"i": 1})], origin=(3, 0)))
        await eventually(lambda: any(e.type == "X" for e in events_of(tmp_path)))
        log.tell(Append("TOLD"))  # an ordinary told append does linger
        log.tell(AppendMany([Append("Y")], origin=(4, 0)))  # ... unless a journal's joins it
        await eventually(lambda: [e.type for e in events_of(tmp_path)] == ["X", "TOLD", "Y"])
        assert [e.origin for e in events_of(tmp_path)] == [(3, 0), None, (4, 0)]


# -- the outbox's bookkeeping, and compaction --------------------------------------------


def ev(name: str) -> GraphEvent:
    return GraphEvent(name)


def test_the_outbox_keeps_what_the_log_has_not_confirmed_and_nothing_before_a_log() -> None:
    outbox = Outbox()
    assert outbox.committed(1, [ev("a")]) is None and outbox.unconfirmed() == []  # no log yet
    outbox.attach("log", None)  # type: ignore[arg-type]
    first = outbox.committed(1, [ev("a"), ev("b")])
    second = outbox.committed(3, [ev("c")])
    assert first is not None and second is not None
    assert (first.origin, [a.type for a in first.appends], second.origin) == ((1, 0), ["a", "b"], (3, 0))
    outbox.delivered((1, 0))  # part of batch 1
    assert [(b.seq, b.first, len(b.events)) for b in outbox.unconfirmed()] == [(1, 1, 1), (3, 0, 1)]
    outbox.delivered((3, 0))
    assert outbox.unconfirmed() == []
    outbox.detach()  # the log restarts: what is committed meanwhile is kept for its open
    assert outbox.committed(5, [ev("d")]) is not None and len(outbox) == 1


def test_the_outbox_finds_what_comes_between_two_origins() -> None:
    outbox = Outbox()
    outbox.attach("log", None)  # type: ignore[arg-type]
    for seq in (1, 2, 3):
        outbox.committed(seq, [ev(f"{seq}x"), ev(f"{seq}y")])
    missing = outbox.between((1, 0), (3, 0))
    assert [(b.seq, b.first, [e.type for e in b.events]) for b in missing] == [
        (1, 1, ["1y"]),
        (2, 0, ["2x", "2y"]),
    ]
    assert outbox.between((2, 1), (3, 0)) == []  # the head is its own: nothing between
    assert [(b.seq, b.first) for b in outbox.between(None, (3, 1))][-1] == (3, 0)


def test_restore_sends_only_what_the_log_lacks() -> None:
    outbox = Outbox()
    assert outbox.restore([OutboxBatch(4, 0, [ev("a")])]) == []  # no log: it waits in the journal
    outbox.attach("log", (4, 1))  # type: ignore[arg-type]
    batches = [OutboxBatch(4, 0, [ev("a"), ev("b"), ev("c")]), OutboxBatch(6, 0, [ev("d")])]
    sends = outbox.restore(batches)
    assert [(b.seq, b.first, [e.type for e in b.events]) for b in sends] == [(4, 2, ["c"]), (6, 0, ["d"])]
    outbox.delivered((6, 0))
    assert outbox.restore(batches) == []


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
