"""The supervisor actor: claims, dependencies, leases, refusals, durability, bad files."""

from __future__ import annotations

import gc
import os
import threading
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from _support import file_supervisor, open_node, wait_for_status

from greenroom import ActorRef, ActorSystem
from greenroom._files import DataDirBusy
from greenroom.actors import PendingReply
from greenroom.embedded import GraphFileError, GraphFiles
from greenroom.messages import (
    AgentError,
    AgentResult,
    AgentTask,
    Cancel,
    Claim,
    Complete,
    Fail,
    GetTask,
    Granted,
    Heartbeat,
    ListTasks,
    NoWork,
    Stats,
    StopGranting,
    Submit,
    TaskLimits,
    TaskStatus,
)
from greenroom.supervisor import (
    InvalidSubmission,
    InvalidTransition,
    NotOwner,
    SupervisorActor,
    TaskGraphError,
    UnknownTask,
)

pytestmark = pytest.mark.anyio


def task(task_id: str, type_: str = "w", **fields: object) -> AgentTask:
    return AgentTask(id=task_id, type=type_, **fields)  # type: ignore[arg-type]


async def test_200_agents_racing_for_2000_tasks_never_share_one(tmp_path: Path) -> None:
    claims: dict[str, list[str]] = {}
    async with open_node(tmp_path) as node:
        await node.supervisor.ask(Submit([task(f"t{i}") for i in range(2000)]))

        async def agent(agent_id: str) -> None:
            while True:
                reply = await node.supervisor.ask(Claim(agent_id, "w"))
                if isinstance(reply, NoWork):
                    return
                claims.setdefault(reply.task.id, []).append(agent_id)
                await node.supervisor.ask(
                    Complete(reply.task.id, agent_id, AgentResult(task_id=reply.task.id))
                )

        async with anyio.create_task_group() as tg:
            for i in range(200):
                tg.start_soon(agent, f"a{i}")
    assert sorted(claims) == sorted(f"t{i}" for i in range(2000))
    assert all(len(owners) == 1 for owners in claims.values())
    assert len({owner for owners in claims.values() for owner in owners}) > 1
    tasks, _ = GraphFiles(tmp_path).load()  # what is on disk agrees
    assert len(tasks) == 2000
    assert all(
        t.status is TaskStatus.COMPLETED and t.owner == claims[t.id][0] and t.attempt == 1 for t in tasks
    )


async def test_dependencies_release_in_order(tmp_path: Path) -> None:
    order: list[str] = []
    async with open_node(tmp_path) as node:
        # a diamond: top -> (left, right) -> bottom; listed out of order on purpose
        await node.supervisor.ask(
            Submit(
                [
                    task("bottom", depends_on=["left", "right"]),
                    task("left", depends_on=["top"]),
                    task("right", depends_on=["top"]),
                    task("top"),
                ]
            )
        )
        sup = node.supervisor
        while True:
            ready = []
            while isinstance(reply := await sup.ask(Claim("a", "w")), Granted):
                ready.append(reply.task.id)
            if not ready:
                break
            for task_id in sorted(ready):
                # while a task is claimed, nothing depending on it is runnable
                order.append(task_id)
                await sup.ask(Complete(task_id, "a", AgentResult(task_id=task_id)))
        assert order == ["top", "left", "right", "bottom"]
        assert (await sup.ask(Stats())).by_status["COMPLETED"] == 4


async def test_priority_first_then_submission_order(tmp_path: Path) -> None:
    async with open_node(tmp_path) as node:
        await node.supervisor.ask(
            Submit(
                [task("a"), task("b", priority=2), task("c"), task("d", priority=2), task("e", type_="other")]
            )
        )
        got = []
        while isinstance(reply := await node.supervisor.ask(Claim("x", "w")), Granted):
            got.append(reply.task.id)
    assert got == ["b", "d", "a", "c"]


async def test_expired_lease_is_reclaimed_and_completes_on_the_second_attempt(tmp_path: Path) -> None:
    async with open_node(tmp_path, lease_seconds=0.1, lease_check_interval=0.02) as node:
        sup = node.supervisor
        await sup.ask(Submit([task("job")]))
        first = await sup.ask(Claim("crashed-agent", "w"))
        assert isinstance(first, Granted) and first.task.attempt == 1
        # the first agent never heartbeats again; the lease runs out and the task comes back
        second = await sup.ask(Claim("rescuer", "w", wait=True), timeout=5)
        assert isinstance(second, Granted)
        assert (second.task.id, second.task.attempt, second.task.owner) == ("job", 2, "rescuer")
        assert second.task.error is not None and "lease expired" in second.task.error.reason
        with pytest.raises(NotOwner):  # the first owner lost it for good
            await sup.ask(Complete("job", "crashed-agent", AgentResult(task_id="job")))
        done = await sup.ask(Complete("job", "rescuer", AgentResult(task_id="job")))
    assert (done.status, done.attempt) == (TaskStatus.COMPLETED, 2)


async def test_lease_expiry_with_no_attempts_left_fails_the_task(tmp_path: Path) -> None:
    async with open_node(tmp_path, lease_seconds=0.05, lease_check_interval=0.01) as node:
        await node.supervisor.ask(Submit([task("once", max_attempts=1), task("after", depends_on=["once"])]))
        await node.supervisor.ask(Claim("a", "w"))
        await wait_for_status(node.supervisor, "once", TaskStatus.FAILED)
        after = await node.supervisor.ask(GetTask("after"))
    assert after.status is TaskStatus.DEPENDENCY_FAILED


async def test_parked_claim_is_granted_when_work_arrives(tmp_path: Path) -> None:
    async with open_node(tmp_path) as node:
        granted: list[Granted | NoWork] = []

        async def wait_for_work() -> None:
            granted.append(await node.supervisor.ask(Claim("idle", "w", wait=True), timeout=5))

        async with anyio.create_task_group() as tg:
            tg.start_soon(wait_for_work)
            await anyio.sleep(0.05)
            assert granted == []  # parked, not answered
            await node.supervisor.ask(Submit([task("new")]))
        assert isinstance(granted[0], Granted) and granted[0].task.owner == "idle"

        async def parked_until_closing() -> None:
            granted.append(await node.supervisor.ask(Claim("idle", "w", wait=True), timeout=5))

        async with anyio.create_task_group() as tg:
            tg.start_soon(parked_until_closing)
            await anyio.sleep(0.05)
            await node.supervisor.ask(StopGranting())
        assert granted[1] == NoWork(closing=True)
        assert await node.supervisor.ask(Claim("late", "w")) == NoWork(closing=True)


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


async def test_a_grant_filled_in_as_its_asker_is_cancelled_is_handed_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The asker is cancelled, and its grant is filled in before the asker resumed to
    notice: the value can never reach it. The supervisor is told (``if_lost``) and hands
    the task back at once, instead of leaving it IN_PROGRESS under an owner who does not
    have it until the lease runs out."""
    scope = anyio.CancelScope()
    real_succeed = PendingReply.succeed

    def cancel_the_asker_then_succeed(self: PendingReply, value: object, **kwargs: object) -> None:
        if isinstance(value, Granted):
            scope.cancel()  # the asker is cancelled but has not resumed yet
        real_succeed(self, value, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(PendingReply, "succeed", cancel_the_asker_then_succeed)
    got: list[object] = []

    async def asker(sup: ActorRef) -> None:
        with scope:
            got.append(await sup.ask(Claim("quitter", "w", wait=True), timeout=30))

    async with open_node(tmp_path, lease_seconds=300) as node:  # a lease far beyond the test
        await node.supervisor.ask(Submit([task("t1")]))
        await asker(node.supervisor)
        assert got == [] and scope.cancelled_caught
        back = await wait_for_status(node.supervisor, "t1", TaskStatus.PENDING)
        assert (back.owner, back.attempt) == (None, 0)
        granted = await node.supervisor.ask(Claim("keeper", "w"))
        assert isinstance(granted, Granted) and (granted.task.id, granted.task.attempt) == ("t1", 1)


async def test_owner_rules_and_retries(tmp_path: Path) -> None:
    async with open_node(tmp_path) as node:
        sup = node.supervisor
        await sup.ask(
            Submit(
                [
                    task("r", max_attempts=2),
                    task("child", depends_on=["r"]),
                    task("grand", depends_on=["child"]),
                ]
            )
        )
        await sup.ask(Claim("a", "w"))
        with pytest.raises(NotOwner):
            await sup.ask(Heartbeat("r", "b"))
        with pytest.raises(UnknownTask, match="no task with id 'nope'"):
            await sup.ask(Heartbeat("nope", "a"))
        retried = await sup.ask(Fail("r", "a", AgentError(reason="timeout", retryable=True)))
        assert (retried.status, retried.owner) == (TaskStatus.PENDING, None)
        with pytest.raises(InvalidTransition, match="cannot complete task 'r': it is PENDING"):
            await sup.ask(Complete("r", "a", AgentResult(task_id="r")))
        await sup.ask(Claim("a", "w"))
        final = await sup.ask(Fail("r", "a", AgentError(reason="timeout again", retryable=True)))
        assert (final.status, final.attempt) == (TaskStatus.FAILED, 2)  # attempts spent
        child = await sup.ask(GetTask("child"))
        grand = await sup.ask(GetTask("grand"))
        assert child.status is grand.status is TaskStatus.DEPENDENCY_FAILED
        assert child.error is not None and child.error.reason == "dependency 'r' is FAILED"
        # a task submitted later on a failed dependency can never run either
        late = await sup.ask(Submit([task("late", depends_on=["r"])]))
        assert late[0].status is TaskStatus.DEPENDENCY_FAILED
        assert await sup.ask(Claim("a", "w")) == NoWork()


async def test_cancel_marks_dependents(tmp_path: Path) -> None:
    async with open_node(tmp_path) as node:
        await node.supervisor.ask(Submit([task("p"), task("q", depends_on=["p"])]))
        cancelled = await node.supervisor.ask(Cancel("p", reason="not needed"))
        assert cancelled.status is TaskStatus.CANCELLED
        assert (await node.supervisor.ask(GetTask("q"))).status is TaskStatus.DEPENDENCY_FAILED
        with pytest.raises(InvalidTransition):
            await node.supervisor.ask(Cancel("p"))
        assert await node.supervisor.ask(Claim("a", "w")) == NoWork()


@pytest.mark.parametrize(
    ("batch", "message"),
    [
        ([task("dup"), task("dup")], "task 'dup': field 'id' appears twice in the batch"),
        ([task("x", depends_on=["ghost"])], "task 'x': field 'depends_on' is not a known task (got 'ghost')"),
        ([task("x", depends_on=["x"])], "field 'depends_on' names the task itself"),
        (
            [task("c1", depends_on=["c3"]), task("c2", depends_on=["c1"]), task("c3", depends_on=["c2"])],
            "closes a dependency cycle",
        ),
        ([task("s", status=TaskStatus.COMPLETED)], "task 's': field 'status' must be"),
        ([task("o", owner="me")], "task 'o': field 'owner' must be None on submit (got 'me')"),
    ],
)
async def test_bad_submissions_are_refused_and_change_nothing(
    tmp_path: Path, batch: list[AgentTask], message: str
) -> None:
    async with open_node(tmp_path) as node:
        await node.supervisor.ask(Submit([task("existing")]))
        with pytest.raises(InvalidSubmission, match=message.replace("(", r"\(").replace(")", r"\)")):
            await node.supervisor.ask(Submit([task("ok-one"), *batch]))
        listed = await node.supervisor.ask(ListTasks())
    assert [t.id for t in listed] == ["existing"]  # all or none: "ok-one" was not added
    assert [t.id for t in GraphFiles(tmp_path).load()[0]] == ["existing"]


async def test_duplicate_of_an_existing_task_is_refused(tmp_path: Path) -> None:
    async with open_node(tmp_path) as node:
        await node.supervisor.ask(Submit([task("one", input={"v": 1})]))
        with pytest.raises(InvalidSubmission, match="'one': field 'id' is already taken"):
            await node.supervisor.ask(Submit([task("one", input={"v": 2})]))
        assert (await node.supervisor.ask(GetTask("one"))).input == {"v": 1}


async def test_second_owner_of_a_data_dir_gets_a_clear_error(tmp_path: Path) -> None:
    async with open_node(tmp_path) as node:
        await node.supervisor.ask(Submit([task("kept")]))
        async with ActorSystem() as other:
            with pytest.raises(DataDirBusy, match=f"in use by another process \\(pid {os.getpid()}"):
                await other.spawn(lambda: file_supervisor(tmp_path))
        assert (await node.supervisor.ask(GetTask("kept"))).id == "kept"


async def test_restart_reloads_and_recovers_orphaned_claims(tmp_path: Path) -> None:
    async with open_node(tmp_path) as node:
        await node.supervisor.ask(Submit([task("orphan"), task("done")]))
        await node.supervisor.ask(Claim("a", "w"))
        await node.supervisor.ask(Claim("a", "w"))
        await node.supervisor.ask(Complete("done", "a", AgentResult(task_id="done")))
    async with open_node(tmp_path) as node:
        orphan = await node.supervisor.ask(GetTask("orphan"))
        done = await node.supervisor.ask(GetTask("done"))
    # the process's death is not the task's fault: no attempt charged, one crash counted
    assert (orphan.status, orphan.attempt, orphan.owner, orphan.crashes) == (TaskStatus.PENDING, 0, None, 1)
    assert orphan.error is not None and "owner's process stopped" in orphan.error.reason
    assert done.status is TaskStatus.COMPLETED


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


async def test_unknown_message_is_refused_and_the_supervisor_keeps_running(tmp_path: Path) -> None:
    async with open_node(tmp_path) as node:
        await node.supervisor.ask(Submit([task("kept")]))
        with pytest.raises(TaskGraphError, match="does not handle str messages"):
            await node.supervisor.ask("claim please")
        assert (await node.supervisor.ask(GetTask("kept"))).id == "kept"
        assert node.supervisor.is_alive


async def test_tasks_are_not_walked_by_the_cycle_collector(tmp_path: Path) -> None:
    """A big graph must not make every full garbage collection walk each task."""
    async with open_node(tmp_path) as node:
        await node.supervisor.ask(Submit([task("a", input={"nested": {"k": [1, 2]}})]))
        stored = await node.supervisor.ask(GetTask("a"))
    assert not gc.is_tracked(stored)
    assert not gc.is_tracked(task("b"))


async def test_sizes_are_bounded_by_the_limits(tmp_path: Path) -> None:
    """A task input above max_task_bytes is refused (the batch with it); a long failure
    reason is cut before it is stored or logged, in every event; an oversized result
    fails the attempt, saying why."""
    limits = TaskLimits(max_task_bytes=2048, max_result_bytes=2048, max_error_chars=200)
    async with open_node(tmp_path, limits=limits) as node:
        sup = node.supervisor
        with pytest.raises(InvalidSubmission, match=r"task 'big'.*field 'input'.*larger than max_task_bytes"):
            await sup.ask(Submit([task("ok"), task("big", input={"text": "x" * 5000})]))
        assert await sup.ask(ListTasks()) == []  # all or none
        await sup.ask(Submit([task("r", max_attempts=2), task("huge")]))
        statuses = []
        for _ in range(2):
            assert isinstance(await sup.ask(Claim("a", "w")), Granted)
            failed = await sup.ask(Fail("r", "a", AgentError(reason="y" * 100_000, retryable=True)))
            assert failed.error is not None and len(failed.error.reason) <= 200
            assert failed.error.reason.endswith("more characters cut: max_error_chars]")
            statuses.append(failed.status)
        assert statuses == [TaskStatus.PENDING, TaskStatus.FAILED]
        await sup.ask(Claim("b", "w"))
        done = await sup.ask(Complete("huge", "b", AgentResult(task_id="huge", notes="z" * 5000)))
        assert done.status is TaskStatus.FAILED and done.result is None
        assert done.error is not None and "larger than max_result_bytes (2048)" in done.error.reason
    events = (tmp_path / "events.jsonl").read_bytes().splitlines()
    assert events and max(len(line) for line in events) < 1000  # no event holds the long texts


async def test_bad_limits_are_named() -> None:
    with pytest.raises(msgspec.ValidationError, match="max_error_chars"):
        msgspec.convert({"max_error_chars": 3}, TaskLimits)


async def test_a_poison_task_is_failed_and_its_innocent_neighbours_are_not(tmp_path: Path) -> None:
    """A task running every time its process dies is failed at max_crashes, with the
    reason; tasks that merely ran beside it are re-queued uncharged, and suspects run one
    at a time, so an innocent is never in progress beside the poison once both are suspects."""
    limits = TaskLimits(max_crashes=3)
    async with open_node(tmp_path, limits=limits) as node:
        await node.supervisor.ask(Submit([task("poison"), *(task(f"i{n}") for n in range(5))]))
        for _ in range(6):
            assert isinstance(await node.supervisor.ask(Claim("a", "w")), Granted)
    # a "crash" is a restart with tasks in progress; after one, every claimed task is a suspect
    for _crash in range(2):
        async with open_node(tmp_path, limits=limits) as node:
            sup = node.supervisor
            while True:  # suspects run one at a time, in a random order, until the poison "crashes" it
                granted = await sup.ask(Claim("a", "w"))
                assert isinstance(granted, Granted)
                assert await sup.ask(Claim("b", "w")) == NoWork()
                if granted.task.id == "poison":
                    break
                await sup.ask(Complete(granted.task.id, "a", AgentResult(task_id=granted.task.id)))
    async with open_node(tmp_path, limits=limits) as node:  # the poison is failed at this start
        sup = node.supervisor
        assert (await sup.ask(GetTask("poison"))).status is TaskStatus.FAILED
        while True:
            granted = await sup.ask(Claim("a", "w"))
            if not isinstance(granted, Granted):
                break
            assert await sup.ask(Claim("b", "w")) == NoWork()
            await sup.ask(Complete(granted.task.id, "a", AgentResult(task_id=granted.task.id)))
        tasks = {t.id: t for t in await sup.ask(ListTasks())}
    poison = tasks.pop("poison")
    assert poison.status is TaskStatus.FAILED and poison.crashes == 3
    assert poison.error is not None and "died while running it 3 times (max_crashes)" in poison.error.reason
    assert all(t.status is TaskStatus.COMPLETED and t.crashes == 1 for t in tasks.values())
    assert all(t.attempt == 1 for t in tasks.values())  # the crash did not cost them an attempt
