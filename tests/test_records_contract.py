"""The records primitive's contract (``greenroom.store.RecordStore``), once for every
backend: the files (SQLite under the data dir), PostgreSQL, and memory
(``greenroom.testing.MemoryRecordStore``) — on both loops. Features built on it (budgets,
load records) have their own tests in ``test_store_contract.py``."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from _stores import make_store, open_node

from greenroom import InvalidInput
from greenroom.messages import AgentTask, Claim, Release, Submit, TaskStatus
from greenroom.store import Conflict, Fenced, Put, RecordStore, Store, prefix_end
from greenroom.testing import MemoryRecordStore

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["files", "postgresql", "memory"])
async def records(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[RecordStore]:
    if request.param == "memory":
        yield MemoryRecordStore()
        return
    url = None if request.param == "files" else str(request.getfixturevalue("pg_url"))
    async with await make_store(url, tmp_path / "data") as store:
        kept = store.records()
        try:
            yield kept
        finally:
            await kept.aclose()


async def test_a_put_writes_whole_and_each_write_bumps_the_version_and_the_seq(records: RecordStore) -> None:
    assert await records.put("c", [Put("a", b"1"), Put("b", b"2")]) == {"a": 1, "b": 1}
    assert await records.put("c", [Put("a", b"one")]) == {"a": 2}
    got = await records.get("c", ["a", "b", "missing"])
    assert sorted(got) == ["a", "b"]
    assert (got["a"].body, got["a"].version, got["b"].body, got["b"].version) == (b"one", 2, b"2", 1)
    assert got["a"].seq > got["b"].seq  # written after it
    assert got["a"].updated_at > 0
    assert await records.get("other", ["a"]) == {}  # collections are apart


async def test_a_put_expecting_another_version_is_a_conflict_and_writes_nothing(records: RecordStore) -> None:
    await records.put("c", [Put("a", b"1"), Put("b", b"1")])
    with pytest.raises(Conflict) as refused:
        await records.put("c", [Put("a", b"2", expect=1), Put("b", b"2", expect=7)])
    assert (refused.value.key, refused.value.expected, refused.value.found) == ("b", 7, 1)
    assert refused.value.field == "expect" and "'b'" in str(refused.value)
    with pytest.raises(Conflict) as absent:
        await records.put("c", [Put("new", b"x", expect=0), Put("a", b"x", expect=0)])
    assert (absent.value.key, absent.value.found) == ("a", 1)
    got = await records.get("c", ["a", "b", "new"])
    assert {key: (r.body, r.version) for key, r in got.items()} == {"a": (b"1", 1), "b": (b"1", 1)}
    assert await records.put("c", [Put("a", b"2", expect=1), Put("new", b"n", expect=0)]) == {
        "a": 2,
        "new": 1,
    }


async def test_compare_and_set_writers_at_once_never_lose_an_increment(records: RecordStore) -> None:
    """Ten writers adding one to a counter at once, each reading, writing at the version it
    read, and reading again on a conflict: the counter is the number of adds."""

    async def add_one() -> None:
        for _ in range(5):
            while True:
                had = (await records.get("n", ["count"])).get("count")
                value = 0 if had is None else int(had.body)
                try:
                    await records.put(
                        "n", [Put("count", b"%d" % (value + 1), 0 if had is None else had.version)]
                    )
                    break
                except Conflict:
                    continue

    async with anyio.create_task_group() as tg:
        for _ in range(10):
            tg.start_soon(add_one)
    final = (await records.get("n", ["count"]))["count"]
    assert (int(final.body), final.version) == (50, 50)


async def test_a_write_across_collections_is_whole_or_nothing(records: RecordStore) -> None:
    await records.put("a", [Put("k", b"1")])
    written = await records.write([("b", Put("k", b"x", expect=0)), ("a", Put("k", b"2", expect=1))])
    assert written == {("a", "k"): 2, ("b", "k"): 1}
    with pytest.raises(Conflict) as refused:
        await records.write([("c", Put("new", b"y")), ("a", Put("k", b"3", expect=1)), ("b", Put("k", None))])
    assert (refused.value.collection, refused.value.key, refused.value.found) == ("a", "k", 2)
    assert await records.get("c", ["new"]) == {}  # nothing of the refused write
    assert (await records.get("b", ["k"]))["k"].body == b"x"
    with pytest.raises(InvalidInput) as twice:
        await records.write([("a", Put("k", b"4")), ("a", Put("k", b"5"))])
    assert twice.value.field == "key"


async def test_a_counter_many_draw_from_at_once_gives_each_a_value_once(records: RecordStore) -> None:
    drawn: list[int] = []

    async def draw() -> None:
        for _ in range(10):
            drawn.append(await records.bump("ids", "next"))

    async with anyio.create_task_group() as tg:
        for _ in range(10):
            tg.start_soon(draw)
    assert sorted(drawn) == list(range(1, 101))
    assert await records.bump("ids", "next", 5) == 105
    await records.put("ids", [Put("text", b"not a number")])
    with pytest.raises(InvalidInput) as refused:
        await records.bump("ids", "text")
    assert refused.value.field == "key"
    with pytest.raises(InvalidInput) as bad:
        await records.bump("ids", "next", True)  # type: ignore[arg-type]
    assert bad.value.field == "by"
    assert (await records.get("ids", ["text"]))["text"].body == b"not a number"  # unchanged


async def test_a_delete_is_a_put_of_none_and_can_be_expected(records: RecordStore) -> None:
    await records.put("c", [Put("a", b"1"), Put("b", b"1")])
    with pytest.raises(Conflict):
        await records.put("c", [Put("a", None, expect=2)])
    assert await records.put("c", [Put("a", None, expect=1), Put("never", None)]) == {"a": 0, "never": 0}
    assert list(await records.get("c", ["a", "b"])) == ["b"]
    assert await records.put("c", [Put("a", b"again", expect=0)]) == {"a": 1}  # a new record


async def test_an_add_keeps_the_first_write_of_a_key_in_arrival_order(records: RecordStore) -> None:
    assert await records.add("log", [("s/2", b"first"), ("r/1", b"a"), ("s/2", b"dup")]) == 2
    assert await records.add("log", [("s/2", b"again"), ("r/0", b"b")]) == 1
    assert [(r.key, r.body) for r in await records.since("log")] == [
        ("s/2", b"first"), ("r/1", b"a"), ("r/0", b"b")
    ]  # fmt: skip
    assert [r.key for r in await records.since("log", "r/")] == ["r/1", "r/0"]
    first = (await records.since("log"))[0]
    assert [r.key for r in await records.since("log", after=first.seq)] == ["r/1", "r/0"]
    assert [r.key for r in await records.since("log", after=first.seq, limit=1)] == ["r/1"]
    assert await records.count("log") == 3 and await records.count("log", "r/") == 2


async def test_a_scan_reads_by_key_order_within_a_prefix_a_page_at_a_time(records: RecordStore) -> None:
    keys = ["a", "a/1", "a/2", "a/10", "a\uffff", "a\U0010ffff", "ab", "b", "é"]
    await records.put("c", [Put(key, key.encode()) for key in keys])
    assert [r.key for r in await records.scan("c")] == sorted(keys)
    assert [r.key for r in await records.scan("c", "a/")] == ["a/1", "a/10", "a/2"]
    assert [r.key for r in await records.scan("c", "a")] == sorted(k for k in keys if k.startswith("a"))
    page = await records.scan("c", "a", limit=2)
    assert [r.key for r in page] == ["a", "a/1"]
    assert [r.key for r in await records.scan("c", "a", after=page[-1].key, limit=2)] == ["a/10", "a/2"]
    assert [r.key for r in await records.scan("c", "a\U0010ffff")] == ["a\U0010ffff"]
    assert await records.count("c", "a/") == 3


def test_a_prefix_ends_at_the_next_string_by_code_point() -> None:
    assert prefix_end("a/") == "a0"
    assert prefix_end("a\U0010ffff") == "b"
    assert prefix_end("\U0010ffff") is None
    assert prefix_end("\ud7ff") == "\ue000"


async def test_collections_are_listed_by_prefix_and_dropped_by_key_prefix(records: RecordStore) -> None:
    await records.add("load/r1", [("s/1", b"{}"), ("r/1", b"{}")])
    await records.add("load/r2", [("s/1", b"{}")])
    await records.put("budgets", [Put("team", b"{}")])
    assert await records.collections("load/") == {"load/r1": 2, "load/r2": 1}
    assert await records.collections() == {"budgets": 1, "load/r1": 2, "load/r2": 1}
    assert await records.drop("load/r1", "r/") == 1
    assert await records.drop("load/r2") == 1
    assert await records.collections("load/") == {"load/r1": 1}


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda r: r.put("", [Put("a", b"")]), "collection"),
        (lambda r: r.put("a b", [Put("a", b"")]), "collection"),
        (lambda r: r.put("c", [Put("", b"")]), "key"),
        (lambda r: r.put("c", [Put("a\x00", b"")]), "key"),
        (lambda r: r.put("c", [Put("\ud800", b"")]), "key"),
        (lambda r: r.put("c", [Put("k" * 513, b"")]), "key"),
        (lambda r: r.put("c", [Put("a", "text")]), "body"),  # type: ignore[arg-type]
        (lambda r: r.put("c", [Put("a", b"x" * ((16 << 20) + 1))]), "body"),
        (lambda r: r.put("c", [Put("a", b"", expect=-1)]), "expect"),
        (lambda r: r.put("c", [Put("ok", b"1"), Put("ok", b"2")]), "key"),
        (lambda r: r.put("c", [("a", b"")]), "puts"),  # type: ignore[list-item]
        (lambda r: r.add("c", [("ok", b""), ("", b"")]), "key"),
        (lambda r: r.add("c", [Put("a", b"")]), "records"),  # type: ignore[list-item]
        (lambda r: r.put("c", [Put("a", b"")], fence=("t", "1")), "fence"),  # type: ignore[arg-type]
        (lambda r: r.scan("c", limit=0), "limit"),
        (lambda r: r.scan("c", "\x00"), "prefix"),
        (lambda r: r.since("c", after=-1), "after"),
    ],
)
async def test_a_bad_write_or_read_is_refused_naming_the_field_and_changes_nothing(
    records: RecordStore, call: object, field: str
) -> None:
    await records.put("c", [Put("a", b"kept")])
    with pytest.raises(InvalidInput) as refused:
        await call(records)  # type: ignore[operator]
    assert refused.value.field == field
    got = await records.get("c", ["a", "ok"])
    assert {key: (r.body, r.version) for key, r in got.items()} == {"a": (b"kept", 1)}


async def test_a_write_under_an_old_attempt_is_fenced_and_writes_nothing(backend: Store) -> None:
    """``fence=(task, token)``: checked against the task graph in the write's transaction."""
    async with open_node(backend) as node:
        sup = node.supervisor
        await sup.ask(Submit([AgentTask(id="t-1", type="w")]))
        assert (await sup.ask(Claim("a", "w"))).task.token == 1
        records = backend.records()
        try:
            assert await records.put("c", [Put("k", b"1")], fence=("t-1", 1)) == {"k": 1}
            await sup.ask(Release("t-1", "a", token=1))
            assert (await sup.ask(Claim("b", "w"))).task.token == 2
            for write in (
                records.put("c", [Put("k", b"stale")], fence=("t-1", 1)),
                records.add("c", [("new", b"stale")], fence=("t-1", 1)),
            ):
                with pytest.raises(Fenced) as refused:
                    await write
                assert (refused.value.token, refused.value.current) == (1, 2)
            assert await records.put("c", [Put("k", b"live")], fence=("t-1", 2)) == {"k": 2}
            got = await records.get("c", ["k", "new"])
            assert {key: r.body for key, r in got.items()} == {"k": b"live"}
        finally:
            await records.aclose()


async def test_memory_records_fence_writes_against_the_task_it_is_told_of() -> None:
    live = {"t-1": AgentTask(id="t-1", type="w", status=TaskStatus.IN_PROGRESS, owner="b", token=2)}
    records = MemoryRecordStore(live_task=live.get)
    with pytest.raises(Fenced) as refused:
        await records.put("c", [Put("k", b"stale")], fence=("t-1", 1))
    assert (refused.value.token, refused.value.current) == (1, 2)
    with pytest.raises(Fenced):
        await records.add("c", [("k", b"gone")], fence=("t-9", 1))  # not a live task
    assert await records.add("c", [("k", b"live")], fence=("t-1", 2)) == 1
    assert [r.body for r in await records.scan("c")] == [b"live"]


async def test_the_files_fold_in_the_budgets_and_load_runs_an_older_greenroom_kept(tmp_path: Path) -> None:
    """A data dir from before the records: its ``budgets.sqlite3`` and ``load.sqlite3`` are
    folded into ``records.sqlite3`` as it first opens — every total and every record, in
    the order written — and renamed, so nothing is lost or counted twice."""
    from greenroom.embedded import EmbeddedStore
    from greenroom.harness import BudgetStore
    from greenroom.load import LoadRecordStore

    data = tmp_path / "data"
    data.mkdir()
    with sqlite3.connect(data / "budgets.sqlite3") as db:
        db.execute(
            "CREATE TABLE budgets (name TEXT PRIMARY KEY, tokens INTEGER NOT NULL, cost REAL NOT NULL, "
            "calls INTEGER NOT NULL, updated_at REAL NOT NULL)"
        )
        db.execute("INSERT INTO budgets VALUES ('team', 1200, 0.75, 9, 1700000000.0)")
    with sqlite3.connect(data / "load.sqlite3") as db:
        db.execute(
            "CREATE TABLE load_records (seq INTEGER PRIMARY KEY AUTOINCREMENT, run TEXT NOT NULL, "
            "key TEXT NOT NULL, body BLOB NOT NULL, UNIQUE (run, key))"
        )
        db.executemany(
            "INSERT INTO load_records (run, key, body) VALUES (?, ?, ?)",
            [("r1", "s/9", b'{"n":1}'), ("r1", "r/0", b'{"n":2}'), ("r2", "s/0", b"{}")],
        )
    async with EmbeddedStore(data) as store:
        budgets, load = BudgetStore(store.records()), LoadRecordStore(store.records())
        try:
            team = (await budgets.read())["team"]
            assert (team.tokens, team.cost, team.calls, team.updated_at) == (1200, 0.75, 9, 1700000000.0)
            assert [(e.key, e.body) for e in await load.read("r1")] == [
                ("s/9", b'{"n":1}'),
                ("r/0", b'{"n":2}'),
            ]
            assert await load.runs() == {"r1": 2, "r2": 1}
        finally:
            await budgets.aclose()
            await load.aclose()
    assert not (data / "budgets.sqlite3").exists() and (data / "budgets.sqlite3.folded").exists()
    assert not (data / "load.sqlite3").exists() and (data / "load.sqlite3.folded").exists()
    async with EmbeddedStore(data) as store:  # opened again: nothing folded twice
        budgets = BudgetStore(store.records())
        try:
            assert (await budgets.read())["team"].tokens == 1200
        finally:
            await budgets.aclose()
