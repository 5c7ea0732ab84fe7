"""The embedded task store: what only the files do — the journal and its compaction, the
lock on the data dir, torn and damaged files, a grant given up while it is fsynced. Every
behaviour the stores share is in ``test_store_contract.py``."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from _support import file_supervisor, open_node, wait_for_status

from greenroom import ActorSystem
from greenroom._files import DataDirBusy
from greenroom.embedded import GraphFileError, GraphFiles
from greenroom.messages import (
    AgentTask,
    Claim,
    GetTask,
    Granted,
    ListTasks,
    Stats,
    Submit,
    TaskLimits,
    TaskStatus,
)
from greenroom.supervisor import (
    SupervisorActor,
)

pytestmark = pytest.mark.anyio


def task(task_id: str, type_: str = "w", **fields: object) -> AgentTask:
    return AgentTask(id=task_id, type=type_, **fields)  # type: ignore[arg-type]


async def test_a_grant_whose_asker_gives_up_while_it_is_written_is_handed_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The asker is cancelled while the batch that grants it a task is being fsynced:
    the task must not sit IN_PROGRESS under an owner who never heard of it."""
    writing, release = threading.Event(), threading.Event()
    real_append = GraphFiles.append

    def append_held_while_granting(store: GraphFiles, changed: list[AgentTask], events: Any = None) -> int:
        if not release.is_set() and any(t.status is TaskStatus.IN_PROGRESS for t in changed):
            writing.set()
            release.wait(10)
        return real_append(store, changed, events)

    monkeypatch.setattr(GraphFiles, "append", append_held_while_granting)
    async with open_node(tmp_path) as node:
        await node.supervisor.ask(Submit([task("t1")]))
        async with anyio.create_task_group() as tg:
            tg.start_soon(node.supervisor.ask, Claim("quitter", "w", wait=True), 30)
            await anyio.to_thread.run_sync(writing.wait, 10)  # the grant is being written
            tg.cancel_scope.cancel()  # ... and its asker gives up
        release.set()
        back = await wait_for_status(node.supervisor, "t1", TaskStatus.PENDING)
        assert (back.owner, back.attempt) == (None, 0)
        granted = await node.supervisor.ask(Claim("keeper", "w"))
        assert isinstance(granted, Granted) and (granted.task.id, granted.task.attempt) == ("t1", 1)
        await node.supervisor.ask(Submit([task("t2")]))
        node.supervisor.tell(Claim("teller", "w"))  # told: a grant nobody would hear
        assert (await node.supervisor.ask(GetTask("t2"))).status is TaskStatus.PENDING
    assert "refused a told Claim: a Claim must be asked, not told (agent 'teller')" in caplog.text


async def test_second_owner_of_a_data_dir_gets_a_clear_error(tmp_path: Path) -> None:
    async with open_node(tmp_path) as node:
        await node.supervisor.ask(Submit([task("kept")]))
        async with ActorSystem() as other:
            with pytest.raises(DataDirBusy, match=f"in use by another process \\(pid {os.getpid()}"):
                await other.spawn(lambda: file_supervisor(tmp_path))
        assert (await node.supervisor.ask(GetTask("kept"))).id == "kept"


async def test_compaction_folds_the_journal_into_the_snapshot(tmp_path: Path) -> None:
    async with open_node(tmp_path, compact_min_bytes=2000) as node:
        for i in range(60):
            await node.supervisor.ask(Submit([task(f"t{i}", input={"pad": "x" * 50})]))
        journal = (tmp_path / "tasks.graph.journal").stat().st_size
        snapshot = (tmp_path / "tasks.graph.json").stat().st_size
        assert snapshot > 2000 and journal < snapshot  # compacted at least once while running
    tasks, report = GraphFiles(tmp_path).load()
    assert sorted(t.id for t in tasks) == sorted(f"t{i}" for i in range(60))
    assert report.journal_batches == 0  # a clean stop folds the rest in too


# -- bad files on disk ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"{not json", "is not valid JSON"),
        (b'{"format": "greenroom.tasks/1", "seq": 1, '
         b'"tasks": [{"id": "a", "type": "w", "priority": "high"}]}',
         "field 'tasks[0].priority' expected `int`, got `str` (got 'high')"),
        (b'{"format": "greenroom.tasks/9", "seq": 1, "tasks": []}', "unsupported format 'greenroom.tasks/9'"),
        (b'{"format": "greenroom.tasks/1", "seq": 1, '
         b'"tasks": [{"id": "a", "type": "w"}, {"id": "a", "type": "w"}]}',
         "task id 'a' appears twice"),
    ],
)  # fmt: skip
async def test_corrupt_graph_file_is_a_clear_error_and_never_overwritten(
    tmp_path: Path, content: bytes, problem: str
) -> None:
    graph = tmp_path / "tasks.graph.json"
    graph.write_bytes(content)
    journal = tmp_path / "tasks.graph.journal"
    journal.write_bytes(b'{"seq": 2, "tasks": []}\n{"seq": 3, "tas')  # even a torn tail is left alone
    async with ActorSystem() as system:
        with pytest.raises(GraphFileError) as failed:
            await system.spawn(lambda: file_supervisor(tmp_path))
    assert str(graph) in str(failed.value) and problem in str(failed.value)
    assert graph.read_bytes() == content
    assert journal.read_bytes() == b'{"seq": 2, "tasks": []}\n{"seq": 3, "tas'
    # and the lock was released: a fixed file loads
    graph.write_bytes(b'{"format": "greenroom.tasks/1", "seq": 1, "tasks": []}')
    async with open_node(tmp_path) as node:
        assert (await node.supervisor.ask(Stats())).total == 0


async def test_torn_journal_tail_is_cut_and_reported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with open_node(tmp_path) as node:
        await node.supervisor.ask(Submit([task("acked")]))
    journal = tmp_path / "tasks.graph.journal"
    good = b'{"seq": 2, "tasks": [{"id": "b", "type": "w", "order": 2}]}\n'
    journal.write_bytes(good + b'{"seq": 3, "tasks": [{"id": "torn", "ty')
    async with open_node(tmp_path) as node:
        ids = sorted(t.id for t in await node.supervisor.ask(ListTasks()))
    assert ids == ["acked", "b"]
    assert "cut 39 bytes of a torn last batch" in caplog.text


async def test_corrupt_line_inside_the_journal_stops_the_load(tmp_path: Path) -> None:
    journal = tmp_path / "tasks.graph.journal"
    content = b'{"seq": 1, "tasks": []}\ngarbage\n{"seq": 2, "tasks": []}\n'
    journal.write_bytes(content)
    async with ActorSystem() as system:
        with pytest.raises(GraphFileError, match=r"tasks\.graph\.journal, line 2: bad journal batch"):
            await system.spawn(lambda: file_supervisor(tmp_path))
    assert journal.read_bytes() == content


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"lease_seconds": 0}, "FileTaskStore lease_seconds must be a positive number of seconds, got 0"),
        ({"lease_seconds": float("nan")}, "lease_seconds must be a positive number of seconds, got nan"),
        ({"lease_check_interval": -1}, "lease_check_interval must be a positive number of seconds, got -1"),
        ({"max_batch": "10"}, "FileTaskStore max_batch must be an int >= 1, got '10'"),
    ],
)
async def test_bad_supervisor_arguments_are_named(options: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        file_supervisor(**options)


def test_a_supervisor_needs_a_task_store() -> None:
    with pytest.raises(TypeError, match="SupervisorActor store must be a TaskStore, got '/tmp'"):
        SupervisorActor("/tmp")  # type: ignore[arg-type]


async def test_bad_limits_are_named() -> None:
    with pytest.raises(msgspec.ValidationError, match="max_error_chars"):
        msgspec.convert({"max_error_chars": 3}, TaskLimits)


class _LateClaims:
    """A task store that answers claims later (as PostgreSQL's does, from its workers):
    the test says when, and with what."""

    lease_seconds = 30.0

    def __init__(self) -> None:
        from greenroom.messages import TaskLimits

        self.limits = TaskLimits()
        self.claims: list[Any] = []  # (claim, reply) not answered yet

    async def open(self, owner: Any) -> None:
        self.owner = owner

    def request(self, message: Any, reply: Any) -> None:
        from greenroom.messages import Claim

        if isinstance(message, Claim):
            self.claims.append((message, reply))
        else:  # anything else: answered at once, with nothing
            reply.succeed(None)

    unflushed = False
    batch_full = False

    async def flush(self) -> None:
        return None

    async def close(self) -> None:
        for _, reply in self.claims:
            reply.succeed(None)


async def test_a_claim_answered_none_after_work_became_ready_looks_again_instead_of_parking() -> None:
    """A claim whose store looked before a submission committed, and answered "none" after
    the submission's "tasks became ready" reached the supervisor, must not park (nobody
    would wake it until the next lease check): it asks the store again (issue 48, point 11,
    found by the PostgreSQL tests under load)."""
    from greenroom.messages import Claim, Granted
    from greenroom.store import TasksRunnable

    store = _LateClaims()
    async with ActorSystem() as system:
        supervisor = await system.spawn(
            lambda: SupervisorActor(store, lease_check_interval=60.0)  # type: ignore[arg-type]
        )
        async with anyio.create_task_group() as tg:
            granted: list[Any] = []

            async def claim() -> None:
                granted.append(await supervisor.ask(Claim("a", "w", wait=True), timeout=None))

            tg.start_soon(claim)
            with anyio.fail_after(5):
                while not store.claims:
                    await anyio.sleep(0.005)
            supervisor.tell(TasksRunnable(frozenset({"w"})))  # the work committed meanwhile
            await supervisor.ask(Stats())  # (after the tell: the mailbox is in order)
            store.claims.pop(0)[1].succeed(None)  # the store's look, from before the work was there
            with anyio.fail_after(5):
                while not store.claims:  # looked again, at once
                    await anyio.sleep(0.005)
            task = AgentTask(id="t", type="w", status=TaskStatus.IN_PROGRESS, owner="a", attempt=1, token=1)
            store.claims.pop(0)[1].succeed(task)
        assert isinstance(granted[0], Granted) and granted[0].task.id == "t"
