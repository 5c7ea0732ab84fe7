"""The files' archive beside its code (``greenroom/embedded/_archive.py``): what a crash in
the middle of an archiving pass leaves, and damage. What every store does with archived
tasks is in the contract suite (``test_store_contract.py``)."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from _stores import open_node
from _support import eventually

from greenroom._errors import DataError
from greenroom.embedded import EmbeddedStore
from greenroom.embedded._archive import TaskArchive
from greenroom.messages import (
    AgentResult,
    AgentTask,
    Claim,
    Complete,
    GetTask,
    Granted,
    ListTasks,
    Submit,
    TaskStatus,
)
from greenroom.store import DuplicateTask
from greenroom.store._retention import Retention

pytestmark = pytest.mark.anyio


async def test_a_pass_cut_short_between_the_archive_and_the_graph_archives_again(tmp_path: Path) -> None:
    """The archive has the tasks, the graph's journal does not say they left (a crash
    between the two writes): after the restart the tasks are live and archived at once —
    found once, their ids taken — and the next pass archives them again, counted once."""
    store = EmbeddedStore(tmp_path)
    now = [1_000_000.0]
    async with store, open_node(store, clock=lambda: now[0]) as node:
        await node.supervisor.ask(Submit([AgentTask(id="a", type="w"), AgentTask(id="b", type="w")]))
        for _ in range(2):
            granted = await node.supervisor.ask(Claim("x", "w"))
            assert isinstance(granted, Granted)
            await node.supervisor.ask(Complete(granted.task.id, "x", AgentResult(task_id=granted.task.id)))
        finished = await node.supervisor.ask(ListTasks())
    archive = TaskArchive(tmp_path)
    await archive.add(finished)  # the first half of a pass; then the process died
    await archive.aclose()
    retention = Retention(archive_after=60, keep_finished=None, check_every=0.01)
    now[0] += 120
    async with (
        store,
        open_node(store, clock=lambda: now[0], retention=retention, lease_check_interval=0.01) as node,
    ):
        sup = node.supervisor
        with pytest.raises(DuplicateTask):
            await sup.ask(Submit([AgentTask(id="a", type="w")]))

        async def left() -> bool:
            return await sup.ask(ListTasks()) == []

        await eventually(left, timeout=10)
        assert (await sup.ask(GetTask("b"))).id == "b"
        assert [t.id for t in await sup.ask(ListTasks(archived=True))] == ["a", "b"]
    sizes = await store.sizes()
    assert (sizes.archived_tasks, sizes.archive_parts) == (2, 2)  # two segments, each task once


async def test_a_damaged_segment_is_named_and_nothing_is_changed(tmp_path: Path) -> None:
    archive = TaskArchive(tmp_path)
    task = AgentTask(id="a", type="w", status=TaskStatus.COMPLETED)
    seq = await archive.add([task])
    path = archive.segment_path(seq)
    path.write_bytes(gzip.compress(b'{"id": "a", "type": 7}\n'))
    fresh = TaskArchive(tmp_path)
    with pytest.raises(DataError, match=r"tasks-00000001\.jsonl\.gz, line 1: not a task"):
        await fresh.get("a")
    await archive.aclose()
    await fresh.aclose()
    assert path.exists()


async def test_the_disk_budget_counts_the_archive_index_which_shrinks_with_what_it_holds(
    tmp_path: Path,
) -> None:
    """The budget holds for everything it names: the archive's ``index.sqlite3`` (its WAL
    too) counts against it, and gives back the space of the rows its dropped segments
    took (the index is often larger than the gzipped segments it points into)."""
    archive = TaskArchive(tmp_path)
    for segment in range(12):
        tasks = [AgentTask(id=f"s{segment:02d}-task-{n:04d}", type="w", status=TaskStatus.COMPLETED)
                 for n in range(300)]  # fmt: skip
        await archive.add(tasks)
    folder = tmp_path / "archive"

    def on_disk() -> tuple[int, int]:
        index = sum(p.stat().st_size for p in folder.glob("index.sqlite3*"))
        return index, sum(p.stat().st_size for p in folder.iterdir())

    index_before, total_before = on_disk()
    assert index_before > total_before - index_before  # the index is most of it
    budget = total_before // 3
    dropped = await archive.drop_over_budget(budget)
    index_after, total_after = on_disk()
    await archive.aclose()
    assert dropped > 0 and total_after <= budget, (total_after, budget)
    assert index_after < index_before
