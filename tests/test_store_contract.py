"""The store contract: every behaviour of the task graph, the event log and the chat store,
written once and run on every backend (the files, PostgreSQL) and both event loops.

A backend that passes this file keeps greenroom's promises; backend-specific matters
(the files' torn tails and locks, PostgreSQL's schema, pool and parallel writers) are
tested beside their code (``test_supervisor.py``, ``test_log.py``, ``test_postgres.py``).
"""

from __future__ import annotations

import gc
from contextlib import aclosing
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from _stores import EVERY_STORE, MEMORY, make_store, open_node, store_url_of
from _support import eventually, wait_for_status

from greenroom import Actor, ActorRef, InvalidInput
from greenroom.actors import ActorStopped, PendingReply
from greenroom.chat import ChatStore, ConversationHold, ConversationNotFound, StoredPending
from greenroom.log import PolicyError
from greenroom.messages import (
    AGENT_RESULT,
    AGENT_UPDATE,
    NARRATION,
    TASK_CLAIMED,
    TASK_COMPLETED,
    TASK_SUBMITTED,
    AgentError,
    AgentResult,
    AgentTask,
    Append,
    AppendMany,
    Cancel,
    ChatMessage,
    Claim,
    Complete,
    Decide,
    Dependents,
    Event,
    Fail,
    GetTask,
    Granted,
    Heartbeat,
    ListTasks,
    NoWork,
    Park,
    RecordError,
    Release,
    Retry,
    Stats,
    StopGranting,
    Submit,
    Subscribe,
    TaskLimits,
    TaskStatus,
    ToolOutcome,
)
from greenroom.store import (
    DuplicateTask,
    Fenced,
    InvalidSubmission,
    InvalidTransition,
    NotOwner,
    Store,
    TaskGraphError,
    UnknownTask,
)

pytestmark = pytest.mark.anyio


@pytest.fixture(params=EVERY_STORE)
def store_url(request: pytest.FixtureRequest) -> str | None:
    """Every store: the files, PostgreSQL, and ``greenroom.testing.MemoryStore``."""
    return store_url_of(request)


def needs_a_process(store_url: str | None) -> None:
    """A test that kills a process and reads what it left: not for a memory store, which
    dies with its process (nothing is there to find)."""
    if store_url == MEMORY:
        pytest.skip("a memory store dies with its process: nothing is left to find after a kill")


def task(task_id: str, type_: str = "w", **fields: Any) -> AgentTask:
    return AgentTask(id=task_id, type=type_, **fields)


def done(task_id: str, **fields: Any) -> AgentResult:
    return AgentResult(task_id=task_id, **fields)


async def stored_events(store: Store, after: int = 0) -> list[Event]:
    async with aclosing(store.events(after=after)) as events:
        return [event async for event in events]


CALL = {"step": "p0/main/m0/t0", "tool": "wire_money", "arguments": {"amount": 5}, "risk": "EXECUTES"}


async def test_a_parked_task_waits_for_a_person_and_is_decided_once(backend: Store) -> None:
    """Park: WAITING with the exact call, no owner, the attempt not counted, not runnable.
    Approve: PENDING again with the decision kept by step; a second decision is refused;
    a decision about another step is refused; a deny is kept as such."""
    async with open_node(backend) as node:
        sup = node.supervisor
        await sup.ask(Submit([task("t"), task("u"), task("after", depends_on=["t"])]))
        assert (await sup.ask(Claim("a", "w"))).task.id == "t"
        with pytest.raises(NotOwner):
            await sup.ask(Park("t", "b", CALL))
        with pytest.raises(InvalidSubmission, match=r"field 'call\.tool'"):
            await sup.ask(Park("t", "a", {**CALL, "tool": ""}))
        waiting = await sup.ask(Park("t", "a", {**CALL, "expires_in": 60}))
        assert (waiting.status, waiting.owner, waiting.attempt) == (TaskStatus.WAITING, None, 0)
        assert waiting.waiting is not None and waiting.waiting["arguments"] == {"amount": 5}
        assert waiting.waiting["expires_at"] - waiting.waiting["since"] == 60
        assert waiting.lease_expires_at == waiting.waiting["expires_at"]  # the lease check denies it then
        assert (await sup.ask(Claim("b", "w"))).task.id == "u"  # a waiting task is not handed out
        assert await sup.ask(Claim("c", "w")) == NoWork()
        stats = await sup.ask(Stats())
        assert stats.by_status["WAITING"] == 1
        assert [t.id for t in await sup.ask(ListTasks(status=TaskStatus.WAITING))] == ["t"]
        with pytest.raises(InvalidSubmission, match="field 'step'"):
            await sup.ask(Decide("t", approved=True, by="ops", step="p9/main/m0/t0"))
        approved = await sup.ask(Decide("t", approved=True, by="ops", reason="fine", step=CALL["step"]))
        assert (approved.status, approved.waiting) == (TaskStatus.PENDING, None)
        decision = approved.decisions[CALL["step"]]
        assert (decision["approved"], decision["by"], decision["reason"], decision["tool"]) == (
            True, "ops", "fine", "wire_money"
        )  # fmt: skip
        with pytest.raises(InvalidTransition, match="cannot approve task 't': it is PENDING"):
            await sup.ask(Decide("t", approved=True, by="someone else"))
        again = (await sup.ask(Claim("c", "w"))).task
        assert (again.id, again.attempt, again.decisions) == ("t", 1, approved.decisions)
        await sup.ask(Park("t", "c", {**CALL, "step": "p0/main/m1/t0"}))
        denied = await sup.ask(Decide("t", approved=False, by="ops", reason="too much"))
        assert denied.decisions["p0/main/m1/t0"]["approved"] is False
        assert denied.decisions[CALL["step"]]["approved"] is True  # the earlier one is kept
        cancelled = await sup.ask(Cancel("t", "no longer wanted"))
        assert cancelled.status is TaskStatus.CANCELLED
        assert (await sup.ask(GetTask("after"))).status is TaskStatus.DEPENDENCY_FAILED


async def test_waiting_and_decisions_have_their_events(backend: Store) -> None:
    async with open_node(backend) as node:
        sup = node.supervisor
        await sup.ask(Submit([task("t")]))
        await sup.ask(Claim("a", "w"))
        await sup.ask(Park("t", "a", CALL))
        await sup.ask(Decide("t", approved=False, by="ops", reason="no"))
        await eventually(lambda: _denied(backend))
        events = [e for e in await stored_events(backend) if e.task_id == "t"]
        kinds = [e.type for e in events]
        assert kinds[-2:] == ["TASK_WAITING", "TASK_DENIED"]
        waiting, denied = events[-2:]
        assert waiting.payload["call"]["tool"] == "wire_money" and waiting.payload["status"] == "WAITING"
        assert (denied.payload["by"], denied.payload["reason"], denied.payload["approved"]) == (
            "ops",
            "no",
            False,
        )
        assert denied.payload["step"] == CALL["step"]


async def test_a_call_nobody_decides_in_time_is_denied_by_the_lease_check(backend: Store) -> None:
    """A call parked with an expiry: the lease check denies it (``by`` ``expiry``) and the
    task is PENDING again, runnable, the model to be told; one decided in time is not
    touched; a waiting task without an expiry waits on."""
    async with open_node(backend, lease_seconds=30, lease_check_interval=0.05) as node:
        sup = node.supervisor
        await sup.ask(Submit([task("soon"), task("decided"), task("forever")]))
        for agent, expires in (("a", 0.2), ("b", 0.2), ("c", None)):
            claimed = (await sup.ask(Claim(agent, "w"))).task
            call = CALL if expires is None else {**CALL, "expires_in": expires}
            parked = await sup.ask(Park(claimed.id, agent, call))
            assert parked.status is TaskStatus.WAITING
        await sup.ask(Decide("decided", approved=True, by="ops"))
        again = await sup.ask(Claim("d", "w"))  # "decided" is runnable at once
        assert again.task.id == "decided"
        back = await sup.ask(Claim("e", "w", wait=True), timeout=20)  # the expiry makes "soon" runnable
        assert back.task.id == "soon"
        decision = back.task.decisions[CALL["step"]]
        assert (decision["approved"], decision["by"]) == (False, "expiry")
        assert decision["reason"].startswith("no one decided within")
        assert (await sup.ask(GetTask("decided"))).decisions[CALL["step"]]["by"] == "ops"
        assert (await sup.ask(GetTask("forever"))).status is TaskStatus.WAITING


async def test_a_call_whose_expiry_passed_while_no_daemon_ran_is_denied_as_the_store_opens(
    backend: Store,
) -> None:
    """Expire first, on every path: the next opening (a daemon, ``run --until-idle``, an
    offline ``tasks approve``) denies it before anything else — no lease check needed
    (the interval here is an hour) — and an approval then is refused, not taken."""
    now = [1_000_000.0]
    options: dict[str, Any] = {"lease_seconds": 30, "lease_check_interval": 3600, "clock": lambda: now[0]}
    async with open_node(backend, **options) as node:
        sup = node.supervisor
        await sup.ask(Submit([task("lapsed"), task("open")]))
        for agent, expires in (("a", 60), ("b", None)):
            claimed = (await sup.ask(Claim(agent, "w"))).task
            call = CALL if expires is None else {**CALL, "expires_in": expires}
            await sup.ask(Park(claimed.id, agent, call))
    now[0] += 120  # two minutes pass with no daemon running
    async with open_node(backend, **options) as node:
        sup = node.supervisor
        lapsed = await sup.ask(GetTask("lapsed"))
        assert lapsed.status is TaskStatus.PENDING
        assert lapsed.decisions[CALL["step"]]["by"] == "expiry"
        with pytest.raises(InvalidTransition):
            await sup.ask(Decide("lapsed", approved=True, by="ops"))
        assert (await sup.ask(GetTask("open"))).status is TaskStatus.WAITING


async def test_many_waiting_calls_are_decided_together_after_a_dry_run(backend: Store) -> None:
    """After a crash, an operator decides the "it may have run" questions together: a
    filter (type, tool, may have run) shown first as a dry run (nothing changes), then
    applied — each task decided as a single decision is (its step, who, an event each); a
    task decided meanwhile is refused by name while the rest are decided; bad input
    decides nothing."""
    from greenroom.supervisor import WaitingFilter, decide_waiting

    rerun = {**CALL, "step": "p0/main/m0/t0#rerun", "tool": "append", "question": "it may have run"}
    async with open_node(backend) as node:
        sup = node.supervisor
        await sup.ask(Submit([task("q1"), task("q2"), task("ask"), task("other", "v")]))
        for agent, agent_type, call in (("a", "w", rerun), ("b", "w", rerun), ("c", "w", CALL),
                                        ("d", "v", rerun)):  # fmt: skip
            claimed = (await sup.ask(Claim(agent, agent_type))).task
            await sup.ask(Park(claimed.id, agent, call))
        where = WaitingFilter(type="w", may_have_run=True)
        shown = await decide_waiting(sup, where, approved=True, by="ops", as_done=True)
        assert shown.dry_run and sorted(c["id"] for c in shown.matched) == ["q1", "q2"]
        assert shown.matched[0]["step"] == rerun["step"] and shown.decided == []
        for still in ("q1", "q2"):
            assert (await sup.ask(GetTask(still))).status is TaskStatus.WAITING
        for bad, field in ((dict(approved=False, as_done=True, reason="x"), "as_done"),
                           (dict(approved=False), "reason")):  # fmt: skip
            with pytest.raises(InvalidInput) as refused:
                await decide_waiting(sup, where, by="ops", dry_run=False, **bad)  # type: ignore[arg-type]
            assert refused.value.field == field
        await sup.ask(Decide("q2", approved=False, by="someone else", reason="no", step=rerun["step"]))
        applied = await decide_waiting(sup, where, approved=True, by="ops", as_done=True, dry_run=False)
        assert applied.decided == ["q1"] and applied.refused == []  # q2 no longer waits: not matched
        q1 = await sup.ask(GetTask("q1"))
        assert q1.status is TaskStatus.PENDING
        assert (q1.decisions[rerun["step"]]["by"], q1.decisions[rerun["step"]]["as_done"]) == ("ops", True)
        for untouched in ("ask", "other"):
            assert (await sup.ask(GetTask(untouched))).status is TaskStatus.WAITING
        by_tool = await decide_waiting(sup, WaitingFilter(tool=CALL["tool"]), approved=False, by="ops",
                                       reason="not today", dry_run=False)  # fmt: skip
        assert by_tool.decided == ["ask"]
        await eventually(lambda: _approvals(backend, {"q1", "ask"}))


async def _approvals(store: Store, ids: set[str]) -> bool:
    decided = {e.task_id for e in await stored_events(store) if e.type in ("TASK_APPROVED", "TASK_DENIED")}
    return ids <= decided


async def _denied(store: Store) -> bool:
    return any(e.type == "TASK_DENIED" for e in await stored_events(store))


# -- submitting -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("batch", "field", "message"),
    [
        ([task("dup"), task("dup")], "id", "task 'dup': field 'id' appears twice in the batch"),
        ([task("x", depends_on=["ghost"])], "depends_on",
         "field 'depends_on' is not a known task (got 'ghost')"),
        ([task("x", depends_on=["x"])], "depends_on", "field 'depends_on' names the task itself"),
        ([task("c1", depends_on=["c2"]), task("c2", depends_on=["c1"])], "depends_on",
         "closes a dependency cycle"),
        ([task("s", status=TaskStatus.COMPLETED)], "status", "task 's': field 'status' must be"),
        ([task("o", owner="me")], "owner", "task 'o': field 'owner' must be None on submit (got 'me')"),
        ([task("d", decisions={"p0/main/m0/t0": {"approved": True}})], "decisions",
         "task 'd': field 'decisions' must be {} on submit"),
        ([task("big", input={"x": "y" * 5000})], "input",
         "field 'input' is larger than max_task_bytes (4096)"),
        ([task("existing")], "id", "task 'existing': field 'id' is already taken"),
    ],
)  # fmt: skip
async def test_a_bad_submission_is_refused_whole_naming_the_field(
    backend: Store, batch: list[AgentTask], field: str, message: str
) -> None:
    async with open_node(backend, limits=TaskLimits(max_task_bytes=4096)) as node:
        await node.supervisor.ask(Submit([task("existing", input={"v": 1})]))
        with pytest.raises(InvalidSubmission) as refused:
            await node.supervisor.ask(Submit([task("ok-one"), *batch]))
        assert refused.value.field == field and message in str(refused.value)
        listed = await node.supervisor.ask(ListTasks())
    assert [(t.id, t.input) for t in listed] == [("existing", {"v": 1})]  # all or none, nothing overwritten
    assert [t.id for t in await backend.read_tasks()] == ["existing"]


async def test_the_same_id_submitted_at_once_is_added_once_and_the_other_is_a_conflict(
    backend: Store,
) -> None:
    """Two submitters (two API requests, two daemons) race with one id, twenty times: one
    wins, the other is told the id is taken (``DuplicateTask``), and the graph keeps
    serving — a failure mid-request must never leave an ask unanswered or a worker lost."""
    async with open_node(backend) as node:
        for round_ in range(20):
            outcomes: list[Any] = []

            async def submit(n: int, round_: int = round_, outcomes: list[Any] = outcomes) -> None:
                try:
                    stored = await node.supervisor.ask(
                        Submit([task(f"same{round_}", input={"n": n})]), timeout=20
                    )
                    outcomes.append(stored[0].input["n"])
                except DuplicateTask as taken:
                    outcomes.append(taken)

            async with anyio.create_task_group() as tg:
                tg.start_soon(submit, 1)
                tg.start_soon(submit, 2)
            winners = [o for o in outcomes if isinstance(o, int)]
            losers = [o for o in outcomes if isinstance(o, DuplicateTask)]
            assert len(winners) == len(losers) == 1, outcomes
            assert losers[0].field == "id" and f"same{round_}" in str(losers[0])
            assert (await node.supervisor.ask(GetTask(f"same{round_}"), timeout=20)).input == {
                "n": winners[0]
            }
        assert (await node.supervisor.ask(Stats(), timeout=20)).total == 20


async def test_tasks_are_listed_a_page_at_a_time_in_submission_order(backend: Store) -> None:
    """``ListTasks(after=, limit=)`` pages inside the store: the tasks after a position,
    in submission order (within a batch too, whatever its dependency order), filtered."""
    async with open_node(backend) as node:
        sup = node.supervisor
        await sup.ask(Submit([task("x", depends_on=["y"]), task("y")]))  # y is stored first
        await sup.ask(Submit([task(f"t{i}", type_="v" if i % 2 else "w") for i in range(7)]))
        everything = await sup.ask(ListTasks())
        assert [t.id for t in everything] == ["x", "y"] + [f"t{i}" for i in range(7)]
        pages, after = [], 0
        while page := await sup.ask(ListTasks(after=after, limit=4)):
            pages.append([t.id for t in page])
            after = page[-1].order
        assert pages == [["x", "y", "t0", "t1"], ["t2", "t3", "t4", "t5"], ["t6"]]
        odd = await sup.ask(ListTasks(type="v", after=everything[3].order, limit=2))
        assert [t.id for t in odd] == ["t3", "t5"]
        assert await sup.ask(ListTasks(status=TaskStatus.COMPLETED, limit=3)) == []


async def test_a_listing_filters_by_owner_time_and_text_and_pages_newest_first(backend: Store) -> None:
    """Issue 40's filters, one meaning on every backend (``store.listed``): the owner (who
    holds or last held it), changed since a time, a text in the id or in a string anywhere
    in the input (case ignored, keys and numbers not searched, quotes and backslashes taken
    as they are); newest first, paged with ``before``; the same on the archived listing."""
    from greenroom.store._retention import Retention

    now = [1_000_000.0]
    options: dict[str, Any] = {
        "retention": Retention(archive_after=60, keep_finished=None, check_every=0.01),
        "clock": lambda: now[0],
    }
    async with open_node(backend, **options) as node:
        sup = node.supervisor
        await sup.ask(Submit([
            task("alpha", input={"prompt": "Summarise the Quarterly report"}),
            task("beta", input={"notes": [{"deep": 'a "quoted" back\\slash'}], "count": 42}),
            task("gamma", input={"report": "nothing here"}),
            task("delta-report"),
        ]))  # fmt: skip
        assert (await sup.ask(Claim("agent-1", "w"))).task.id == "alpha"
        now[0] += 10
        assert (await sup.ask(Claim("agent-2", "w"))).task.id == "beta"

        async def ids(**filters: Any) -> list[str]:
            return [t.id for t in await sup.ask(ListTasks(**filters))]

        assert await ids(owner="agent-2") == ["beta"]
        assert await ids(owner="nobody") == []
        assert await ids(updated_since=now[0]) == ["beta"]
        assert await ids(text="REPORT") == ["alpha", "delta-report"]  # a key ("report") is not searched
        assert await ids(text='"quoted" back\\') == ["beta"]
        assert await ids(text="42") == []  # a number is not text
        assert await ids(text="report", owner="agent-1") == ["alpha"]
        assert await ids(newest_first=True) == ["delta-report", "gamma", "beta", "alpha"]
        first = await sup.ask(ListTasks(newest_first=True, limit=3))
        assert [t.id for t in first] == ["delta-report", "gamma", "beta"]
        assert await ids(newest_first=True, before=first[-1].order) == ["alpha"]
        assert await ids(newest_first=True, status=TaskStatus.PENDING, limit=1) == ["delta-report"]
        for task_id, agent in (("alpha", "agent-1"), ("beta", "agent-2")):
            await sup.ask(Complete(task_id, agent, done(task_id)))
        await sup.ask(Cancel("delta-report"))
        now[0] += 120

        async def archived() -> bool:
            return await ids(archived=True) == ["alpha", "beta", "delta-report"]

        await eventually(archived, timeout=10)
        assert await ids(archived=True, owner="agent-2") == ["beta"]
        assert await ids(archived=True, text="report") == ["alpha", "delta-report"]
        assert await ids(archived=True, newest_first=True, limit=2) == ["delta-report", "beta"]
        assert await ids(archived=True, updated_since=now[0]) == []
        assert await ids(text="report") == []  # gamma's "report" is a key
        assert (await sup.ask(Stats())).by_type == {"w": {"PENDING": 1}}  # the archived are not counted


async def test_tasks_are_listed_and_counted_in_submission_order(backend: Store) -> None:
    async with open_node(backend) as node:
        await node.supervisor.ask(Submit([task("b"), task("a", type_="v"), task("c", depends_on=["b"])]))
        await node.supervisor.ask(Submit([task("d", priority=5)]))
        listed = await node.supervisor.ask(ListTasks())
        assert [t.id for t in listed] == ["b", "a", "c", "d"]
        assert [t.order for t in listed] == sorted(t.order for t in listed)
        assert [t.id for t in await node.supervisor.ask(ListTasks(type="v"))] == ["a"]
        stats = await node.supervisor.ask(Stats())
        assert (stats.total, stats.by_status["PENDING"], stats.runnable_types) == (4, 4, ["v", "w"])
        assert stats.by_type == {"v": {"PENDING": 1}, "w": {"PENDING": 3}}
        await node.supervisor.ask(Claim("agent", "v"))
        await node.supervisor.ask(Cancel("b"))  # and c, which depends on it
        assert (await node.supervisor.ask(Stats())).by_type == {
            "v": {"IN_PROGRESS": 1}, "w": {"CANCELLED": 1, "DEPENDENCY_FAILED": 1, "PENDING": 1}
        }  # fmt: skip
        with pytest.raises(UnknownTask, match="no task with id 'nope'"):
            await node.supervisor.ask(GetTask("nope"))
    assert [t.id for t in await backend.read_tasks(agent_type="w")] == ["b", "c", "d"]
    assert (await backend.read_task("c")).depends_on == ["b"]
    read = await backend.read_stats()  # no daemon
    assert read.total == 4 and read.by_type["w"] == {"CANCELLED": 1, "DEPENDENCY_FAILED": 1, "PENDING": 1}
    with pytest.raises(UnknownTask):
        await backend.read_task("nope")


# -- claiming -------------------------------------------------------------------------------


async def test_claims_go_by_type_then_priority_then_submission_order(backend: Store) -> None:
    async with open_node(backend) as node:
        await node.supervisor.ask(
            Submit([task("a"), task("b", priority=2), task("c"), task("d", priority=2), task("e", type_="v")])
        )
        got = []
        while isinstance(reply := await node.supervisor.ask(Claim("x", "w")), Granted):
            got.append(reply.task.id)
            assert (reply.task.owner, reply.task.attempt, reply.task.status) == (
                "x",
                1,
                TaskStatus.IN_PROGRESS,
            )
        assert got == ["b", "d", "a", "c"]
        assert (await node.supervisor.ask(Claim("y", "v"))).task.id == "e"
        assert await node.supervisor.ask(Claim("y", "v")) == NoWork()


async def test_many_agents_racing_never_share_a_task(backend: Store) -> None:
    claims: dict[str, list[str]] = {}
    async with open_node(backend) as node:
        await node.supervisor.ask(Submit([task(f"t{i}") for i in range(300)]))

        async def agent(agent_id: str) -> None:
            while isinstance(reply := await node.supervisor.ask(Claim(agent_id, "w")), Granted):
                claims.setdefault(reply.task.id, []).append(agent_id)
                await node.supervisor.ask(Complete(reply.task.id, agent_id, done(reply.task.id)))

        async with anyio.create_task_group() as tg:
            for i in range(30):
                tg.start_soon(agent, f"a{i}")
    assert sorted(claims) == sorted(f"t{i}" for i in range(300))
    assert all(len(owners) == 1 for owners in claims.values())
    stored = await backend.read_tasks()
    assert all(t.status is TaskStatus.COMPLETED and t.owner == claims[t.id][0] for t in stored)


async def test_a_waiting_claim_is_parked_until_work_of_its_type_arrives(backend: Store) -> None:
    async with open_node(backend) as node:
        answers: list[Any] = []
        sent = anyio.Event()

        async def wait_for_work(agent: str) -> None:
            sent.set()  # an ask is in the mailbox before its first checkpoint
            answers.append(await node.supervisor.ask(Claim(agent, "w", wait=True), timeout=20))

        async with anyio.create_task_group() as tg:
            tg.start_soon(wait_for_work, "idle")
            await sent.wait()  # what is sent from now on is handled after the claim
            await node.supervisor.ask(Submit([task("other", type_="v")]))  # not its type
            assert answers == []
            await node.supervisor.ask(Submit([task("new")]))
        assert isinstance(answers[0], Granted) and (answers[0].task.id, answers[0].task.owner) == (
            "new",
            "idle",
        )


async def test_stop_granting_answers_parked_and_later_claims_with_no_work(backend: Store) -> None:
    async with open_node(backend) as node:
        answers: list[Any] = []
        sent = anyio.Event()

        async def parked() -> None:
            sent.set()
            answers.append(await node.supervisor.ask(Claim("idle", "w", wait=True), timeout=20))

        async with anyio.create_task_group() as tg:
            tg.start_soon(parked)
            await sent.wait()
            await node.supervisor.ask(StopGranting())
        assert answers == [NoWork(closing=True)]
        await node.supervisor.ask(Submit([task("late")]))
        assert await node.supervisor.ask(Claim("late", "w")) == NoWork(closing=True)
        node.supervisor.tell(Claim("teller", "w"))  # told: refused (a grant nobody would hear)
        assert (await node.supervisor.ask(GetTask("late"))).status is TaskStatus.PENDING


async def test_requests_sent_before_stop_are_answered_and_a_parked_claim_is_told(backend: Store) -> None:
    async with open_node(backend) as node:
        sup = node.supervisor
        await sup.ask(Submit([task(f"t{i}") for i in range(20)]))
        for i in range(20):
            assert isinstance(await sup.ask(Claim(f"a{i}", "w")), Granted)
        answers: dict[str, Any] = {}
        sent = 0

        async def parked() -> None:
            nonlocal sent
            sent += 1  # an ask is in the mailbox before its first checkpoint
            try:
                answers["parked"] = await sup.ask(Claim("late", "nothing", wait=True), timeout=20)
            except ActorStopped as stopped:
                answers["parked"] = stopped

        async def complete(i: int) -> None:
            nonlocal sent
            sent += 1
            answers[f"t{i}"] = await sup.ask(Complete(f"t{i}", f"a{i}", done(f"t{i}")), timeout=20)

        async with anyio.create_task_group() as tg:
            tg.start_soon(parked)
            for i in range(20):
                tg.start_soon(complete, i)
            await eventually(lambda: sent == 21)
            await sup.stop()
    # parked by then: ActorStopped; still being tried on a pool when the stop came: NoWork(closing)
    told = answers.pop("parked")
    assert isinstance(told, ActorStopped) or told == NoWork(closing=True)
    assert {key: t.status for key, t in answers.items()} == {f"t{i}": TaskStatus.COMPLETED for i in range(20)}
    assert (await backend.read_stats()).by_status["COMPLETED"] == 20


async def test_a_grant_whose_asker_was_cancelled_as_it_arrived_is_handed_back(
    backend: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The asker is cancelled and its grant filled in before it resumed to notice: the
    supervisor is told (``if_lost``) and hands the task back at once (the attempt
    refunded), instead of leaving it IN_PROGRESS under an owner who never had it."""
    scope = anyio.CancelScope()
    real_succeed = PendingReply.succeed

    def cancel_the_asker_then_succeed(self: PendingReply, value: object, **kwargs: Any) -> None:
        if isinstance(value, Granted):
            scope.cancel()
        real_succeed(self, value, **kwargs)

    monkeypatch.setattr(PendingReply, "succeed", cancel_the_asker_then_succeed)
    got: list[object] = []
    async with open_node(backend, lease_seconds=300) as node:  # a lease far beyond the test
        await node.supervisor.ask(Submit([task("t1")]))
        with scope:
            got.append(await node.supervisor.ask(Claim("quitter", "w", wait=True), timeout=30))
        assert got == [] and scope.cancelled_caught
        back = await wait_for_status(node.supervisor, "t1", TaskStatus.PENDING)
        assert (back.owner, back.attempt) == (None, 0)
        monkeypatch.setattr(PendingReply, "succeed", real_succeed)
        granted = await node.supervisor.ask(Claim("keeper", "w"))
        assert isinstance(granted, Granted) and (granted.task.id, granted.task.attempt) == ("t1", 1)


# -- owners, leases, failures ---------------------------------------------------------------


async def test_only_the_owner_may_report_and_failures_retry_until_attempts_are_spent(backend: Store) -> None:
    async with open_node(backend) as node:
        sup = node.supervisor
        await sup.ask(Submit([task("r", max_attempts=2), task("child", depends_on=["r"]),
                              task("grand", depends_on=["child"])]))  # fmt: skip
        assert (await sup.ask(Claim("a", "w"))).task.id == "r"  # only r is ready
        assert await sup.ask(Claim("b", "w")) == NoWork()
        with pytest.raises(NotOwner, match="agent 'b' does not own task 'r'"):
            await sup.ask(Heartbeat("r", "b"))
        with pytest.raises(UnknownTask):
            await sup.ask(Heartbeat("nope", "a"))
        beat = await sup.ask(Heartbeat("r", "a"))
        assert beat.owner == "a" and beat.lease_expires_at is not None
        retried = await sup.ask(Fail("r", "a", AgentError(reason="flaky", retryable=True)))
        assert (retried.status, retried.owner, retried.attempt) == (TaskStatus.PENDING, None, 1)
        with pytest.raises(InvalidTransition, match="cannot complete task 'r': it is PENDING"):
            await sup.ask(Complete("r", "a", done("r")))
        assert (await sup.ask(Claim("a", "w"))).task.attempt == 2
        final = await sup.ask(Fail("r", "a", AgentError(reason="again", retryable=True)))
        assert (final.status, final.attempt) == (TaskStatus.FAILED, 2)  # attempts spent
        child, grand = await sup.ask(GetTask("child")), await sup.ask(GetTask("grand"))
        assert child.status is grand.status is TaskStatus.DEPENDENCY_FAILED
        assert child.error is not None and child.error.reason == "dependency 'r' is FAILED"
        assert grand.error is not None and grand.error.reason == "dependency 'child' is DEPENDENCY_FAILED"
        late = await sup.ask(Submit([task("late", depends_on=["r"])]))  # can never run either
        assert late[0].status is TaskStatus.DEPENDENCY_FAILED
        assert await sup.ask(Claim("a", "w")) == NoWork()


async def test_a_report_under_an_old_attempt_token_is_fenced_and_changes_nothing(backend: Store) -> None:
    """Issue 49: every grant gives the attempt the next token; a report naming an older
    one — even from the same agent, in what is again attempt 1 (a release refunded it) —
    is refused (``Fenced``, both tokens named) and nothing changes; the live attempt's
    reports go through; once it ended, its own token is refused too."""
    async with open_node(backend) as node:
        sup = node.supervisor
        await sup.ask(Submit([task("t", max_attempts=3)]))
        first = (await sup.ask(Claim("a", "w"))).task
        assert (first.attempt, first.token) == (1, 1)
        await sup.ask(Release("t", "a", token=1))  # handed back: the attempt refunded...
        second = (await sup.ask(Claim("a", "w"))).task
        assert (second.owner, second.attempt, second.token) == ("a", 1, 2)  # ...the token not
        for stale in (
            Heartbeat("t", "a", token=1),
            Complete("t", "a", done("t"), token=1),
            Fail("t", "a", AgentError(reason="late"), token=1),
            Release("t", "a", token=1),
            Park("t", "a", {"step": "p0/main/m0/t0", "tool": "x", "arguments": {}}, token=1),
        ):
            with pytest.raises(Fenced) as refused:
                await sup.ask(stale)
            assert (refused.value.token, refused.value.current) == (1, 2), type(stale).__name__
            assert "fencing token 1" in str(refused.value) and "newest token is 2" in str(refused.value)
        now = await sup.ask(GetTask("t"))
        assert (now.status, now.owner, now.attempt, now.token) == (TaskStatus.IN_PROGRESS, "a", 1, 2)
        assert (await sup.ask(Heartbeat("t", "a", token=2))).token == 2
        completed = await sup.ask(Complete("t", "a", done("t"), token=2))
        assert completed.status is TaskStatus.COMPLETED and completed.token == 2
        with pytest.raises(Fenced, match="its attempt ended: the task is COMPLETED"):
            await sup.ask(Fail("t", "a", AgentError(reason="twice"), token=2))
    assert [e.type for e in await stored_events(backend) if e.task_id == "t"].count("TASK_COMPLETED") == 1


async def test_a_release_hands_the_task_back_uncharged_only_for_its_attempt(backend: Store) -> None:
    async with open_node(backend) as node:
        sup = node.supervisor
        await sup.ask(Submit([task("t")]))
        await sup.ask(Claim("a", "w"))
        with pytest.raises(InvalidTransition):  # a hand-back of an older attempt ends nothing
            await sup.ask(Release("t", "a", attempt=7))
        back = await sup.ask(Release("t", "a", attempt=1))
        assert (back.status, back.owner, back.attempt) == (TaskStatus.PENDING, None, 0)
        assert (await sup.ask(Claim("b", "w"))).task.attempt == 1


async def test_an_expired_lease_is_reclaimed_and_the_old_owner_refused(backend: Store) -> None:
    async with open_node(backend, lease_seconds=0.2, lease_check_interval=0.05) as node:
        sup = node.supervisor
        await sup.ask(Submit([task("job"), task("once", max_attempts=1), task("after", depends_on=["once"])]))
        first = await sup.ask(Claim("crashed", "w"))
        assert (first.task.id, first.task.attempt) == ("job", 1)
        await sup.ask(Claim("crashed", "w"))  # "once", never to be heard of again
        # the first agent never heartbeats again: the lease runs out and the task comes back
        second = await sup.ask(Claim("rescuer", "w", wait=True), timeout=20)
        assert (second.task.id, second.task.attempt, second.task.owner) == ("job", 2, "rescuer")
        assert (
            second.task.error is not None
            and "lease expired (owner 'crashed', attempt 1)" in second.task.error.reason
        )
        with pytest.raises((NotOwner, InvalidTransition)):  # the first owner lost it for good
            await sup.ask(Complete("job", "crashed", done("job")))
        finished = await sup.ask(Complete("job", "rescuer", done("job")))
        assert (finished.status, finished.attempt) == (TaskStatus.COMPLETED, 2)
        await wait_for_status(sup, "once", TaskStatus.FAILED)  # no attempt left
        assert (await sup.ask(GetTask("after"))).status is TaskStatus.DEPENDENCY_FAILED


async def test_dependencies_release_dependents_in_order(backend: Store) -> None:
    order: list[str] = []
    async with open_node(backend) as node:
        sup = node.supervisor
        # a diamond: top -> (left, right) -> bottom; listed out of order on purpose
        await sup.ask(Submit([task("bottom", depends_on=["left", "right"]), task("left", depends_on=["top"]),
                              task("right", depends_on=["top"]), task("top")]))  # fmt: skip
        while True:
            ready = []
            while isinstance(reply := await sup.ask(Claim("a", "w")), Granted):
                ready.append(reply.task.id)
            if not ready:
                break
            for task_id in sorted(ready):
                order.append(task_id)
                await sup.ask(Complete(task_id, "a", done(task_id)))
        await sup.ask(Submit([task("on-done", depends_on=["top"])]))  # on a completed one: ready at once
        assert (await sup.ask(Claim("a", "w"))).task.id == "on-done"
    assert order == ["top", "left", "right", "bottom"]


async def test_cancel_cascades_to_dependents_and_a_final_task_cannot_be_cancelled(backend: Store) -> None:
    async with open_node(backend) as node:
        sup = node.supervisor
        await sup.ask(Submit([task("p"), task("q", depends_on=["p"]), task("r", depends_on=["q"])]))
        cancelled = await sup.ask(Cancel("p", reason="not needed"))
        assert cancelled.status is TaskStatus.CANCELLED and cancelled.error is not None
        assert cancelled.error.reason == "not needed"
        q, r = await sup.ask(GetTask("q")), await sup.ask(GetTask("r"))
        assert (q.status, r.status) == (TaskStatus.DEPENDENCY_FAILED, TaskStatus.DEPENDENCY_FAILED)
        assert q.error is not None and q.error.reason == "dependency 'p' is CANCELLED"
        with pytest.raises(InvalidTransition, match="cannot cancel task 'p': it is CANCELLED"):
            await sup.ask(Cancel("p"))
        assert await sup.ask(Claim("a", "w")) == NoWork()


async def test_a_retry_runs_a_failed_task_again_with_a_fresh_budget_and_revives_its_dependents(
    backend: Store,
) -> None:
    """Issue 40: a person retries a FAILED task — PENDING, attempt 0, the retry kept on it
    (who, when, why, what it was) — and the dependents that failed because of it wait for
    it again; one that also depends on a CANCELLED task stays failed."""
    async with open_node(backend) as node:
        sup = node.supervisor
        await sup.ask(Submit([task("a", max_attempts=1), task("x"), task("b", depends_on=["a"]),
                              task("c", depends_on=["b"]), task("d", depends_on=["a", "x"])]))  # fmt: skip
        await sup.ask(Cancel("x"))
        assert (await sup.ask(Claim("w1", "w"))).task.id == "a"
        failed = await sup.ask(Fail("a", "w1", AgentError(reason="the API was down")))
        assert failed.status is TaskStatus.FAILED
        again = await sup.ask(Retry("a", by="alice", reason="the API is back"))
        assert (again.status, again.attempt, again.owner, again.error) == (TaskStatus.PENDING, 0, None, None)
        (kept,) = again.retries
        assert (kept["by"], kept["reason"], kept["status"], kept["attempt"]) == (
            "alice",
            "the API is back",
            "FAILED",
            1,
        )
        assert kept["error"] == "the API was down" and kept["at"] > 0
        b, c, d = [await sup.ask(GetTask(t)) for t in "bcd"]
        assert (b.status, c.status, b.error) == (TaskStatus.PENDING, TaskStatus.PENDING, None)
        assert d.status is TaskStatus.DEPENDENCY_FAILED  # x is still CANCELLED
        assert (await sup.ask(Claim("w2", "w"))).task.id == "a"  # b and c wait for it
        assert await sup.ask(Claim("w3", "w")) == NoWork()
        await sup.ask(Complete("a", "w2", done("a")))
        assert (await sup.ask(Claim("w3", "w"))).task.id == "b"
        with pytest.raises(InvalidTransition, match="cannot retry task 'a': it is COMPLETED"):
            await sup.ask(Retry("a", by="alice"))
    retried_events = [e.task_id for e in await stored_events(backend) if e.type == "TASK_RETRIED"]
    assert sorted(retried_events) == ["a", "b", "c"]


async def test_a_dependency_failed_task_is_retried_through_the_failed_task_it_failed_because_of(
    backend: Store,
) -> None:
    async with open_node(backend) as node:
        sup = node.supervisor
        await sup.ask(Submit([task("root", max_attempts=1), task("mid", depends_on=["root"]),
                              task("leaf", depends_on=["mid"])]))  # fmt: skip
        await sup.ask(Claim("w1", "w"))
        await sup.ask(Fail("root", "w1", AgentError(reason="boom")))
        leaf = await sup.ask(Retry("leaf", by="bob"))
        assert leaf.status is TaskStatus.PENDING and leaf.retries == []  # revived, not retried itself
        root = await sup.ask(GetTask("root"))
        assert root.status is TaskStatus.PENDING and root.retries[0]["by"] == "bob"
        assert (await sup.ask(GetTask("mid"))).status is TaskStatus.PENDING


async def test_a_dry_run_retry_says_what_a_retry_would_meet_and_changes_nothing(backend: Store) -> None:
    """``Retry(dry_run=True)``: the refusal a retry would meet (a cause upstream CANCELLED),
    or the task as it is — never a change or an event (what the API's ``actions`` use)."""
    async with open_node(backend) as node:
        sup = node.supervisor
        await sup.ask(Submit([task("gone"), task("after-gone", depends_on=["gone"]),
                              task("f", max_attempts=1), task("after-f", depends_on=["f"])]))  # fmt: skip
        await sup.ask(Cancel("gone"))
        with pytest.raises(InvalidTransition, match=r"its dependency 'gone' is CANCELLED"):
            await sup.ask(Retry("after-gone", by="page", dry_run=True))
        await sup.ask(Claim("w", "w"))
        await sup.ask(Fail("f", "w", AgentError(reason="no")))
        for task_id in ("f", "after-f"):
            unchanged = await sup.ask(Retry(task_id, by="page", dry_run=True))
            assert unchanged == await sup.ask(GetTask(task_id))
        f, after = await sup.ask(GetTask("f")), await sup.ask(GetTask("after-f"))
        assert (f.status, f.retries, after.status) == (TaskStatus.FAILED, [], TaskStatus.DEPENDENCY_FAILED)
        with pytest.raises(InvalidTransition, match="it is FAILED"):
            await sup.ask(Cancel("f"))
    assert [e for e in await stored_events(backend) if e.type == "TASK_RETRIED"] == []


async def test_a_tasks_dependents_are_the_live_tasks_that_depend_on_it_in_submission_order(
    backend: Store,
) -> None:
    async with open_node(backend) as node:
        sup = node.supervisor
        await sup.ask(Submit([task("a"), task("c", depends_on=["a"]), task("b", depends_on=["a"]),
                              task("d", depends_on=["b", "c"])]))  # fmt: skip
        assert await sup.ask(Dependents("a")) == ["c", "b"]
        assert await sup.ask(Dependents("b")) == ["d"]
        assert await sup.ask(Dependents("d")) == []
        with pytest.raises(UnknownTask):
            await sup.ask(Dependents("nope"))


async def test_a_retry_is_refused_by_name_and_changes_nothing(backend: Store) -> None:
    async with open_node(backend) as node:
        sup = node.supervisor
        await sup.ask(Submit([task("gone"), task("after", depends_on=["gone"]), task("f", max_attempts=1),
                              task("open")]))  # fmt: skip
        await sup.ask(Cancel("gone"))
        with pytest.raises(InvalidTransition, match=r"its dependency 'gone' is CANCELLED"):
            await sup.ask(Retry("after", by="alice"))
        with pytest.raises(InvalidTransition, match="cannot retry task 'open': it is PENDING"):
            await sup.ask(Retry("open", by="alice"))
        with pytest.raises(UnknownTask):
            await sup.ask(Retry("nope", by="alice"))
        await sup.ask(Claim("w", "w"))
        await sup.ask(Fail("f", "w", AgentError(reason="no")))
        for bad, field in (("", "by"), ("x" * 201, "by")):
            with pytest.raises(InvalidSubmission) as refused:
                await sup.ask(Retry("f", by=bad))
            assert refused.value.field == field
        with pytest.raises(InvalidSubmission) as refused:
            await sup.ask(Retry("f", by="alice", reason="r" * 2001))
        assert refused.value.field == "reason"
        f, after = await sup.ask(GetTask("f")), await sup.ask(GetTask("after"))
        assert (f.status, f.retries, after.status) == (TaskStatus.FAILED, [], TaskStatus.DEPENDENCY_FAILED)


async def test_reports_are_bounded_by_the_limits(backend: Store) -> None:
    """A long failure reason is cut before it is stored or logged; an oversized result
    fails the attempt, saying why."""
    limits = TaskLimits(max_result_bytes=2048, max_error_chars=200)
    async with open_node(backend, limits=limits) as node:
        sup = node.supervisor
        await sup.ask(Submit([task("r", max_attempts=2), task("huge")]))
        await sup.ask(Claim("a", "w"))
        failed = await sup.ask(Fail("r", "a", AgentError(reason="y" * 100_000, retryable=True)))
        assert failed.error is not None and len(failed.error.reason) <= 200
        assert failed.error.reason.endswith("more characters cut: max_error_chars]")
        await sup.ask(Claim("b", "w"))
        await sup.ask(Claim("b", "w"))
        huge = await sup.ask(Complete("huge", "b", done("huge", notes="z" * 5000)))
        assert huge.status is TaskStatus.FAILED and huge.result is None
        assert huge.error is not None and "larger than max_result_bytes (2048)" in huge.error.reason
        await eventually(lambda: _has(backend, AGENT_RESULT, "huge"))
    results = [e for e in await stored_events(backend) if e.type == AGENT_RESULT]
    assert all(len(e.payload.get("reason", "")) <= 200 for e in results)


async def _has(store: Store, kind: str, task_id: str) -> bool:
    return any(e.type == kind and e.task_id == task_id for e in await stored_events(store))


async def test_a_message_it_does_not_know_is_refused_and_it_keeps_serving(backend: Store) -> None:
    async with open_node(backend) as node:
        await node.supervisor.ask(Submit([task("kept")]))
        with pytest.raises(TaskGraphError, match="does not handle str messages"):
            await node.supervisor.ask("claim please")
        assert (await node.supervisor.ask(GetTask("kept"))).id == "kept"
        stored = await node.supervisor.ask(GetTask("kept"))
    assert not gc.is_tracked(stored)  # a big graph is not walked by every full collection


# -- a process that died --------------------------------------------------------------------


async def test_a_dead_process_s_task_is_requeued_uncharged_and_a_poison_task_is_failed(
    backend: Store,
) -> None:
    """A restart recognises what its previous process was running: the task is PENDING
    again, the attempt refunded and the death counted in ``crashes``; a task running each
    time its process died (``max_crashes``) is FAILED as a poison task, with the reason.
    ("Processes" here are instances of one node: ``node-1:<n>``.)"""
    limits = TaskLimits(max_crashes=3, isolate_after_crashes=1)
    async with open_node(backend, limits=limits, instance="node-1:1") as node:
        await node.supervisor.ask(Submit([task("poison"), task("done"), task("innocent")]))
        for agent in ("a@node-1:1", "b@node-1:1", "c@node-1:1"):
            await node.supervisor.ask(Claim(agent, "w"))
        await node.supervisor.ask(Complete("done", "b@node-1:1", done("done")))
    for process in (2, 3):  # the poison task is running each time its process dies
        async with open_node(backend, limits=limits, instance=f"node-1:{process}") as node:
            sup = node.supervisor
            poison = await sup.ask(GetTask("poison"))
            assert (poison.status, poison.attempt, poison.owner, poison.crashes) == (
                TaskStatus.PENDING, 0, None, process - 1
            )  # fmt: skip
            assert poison.error is not None and "owner's process stopped" in poison.error.reason
            while (await sup.ask(GetTask("poison"))).status is TaskStatus.PENDING:
                granted = await sup.ask(Claim(f"a@node-1:{process}", "w"))
                assert isinstance(granted, Granted)
                # suspects run one at a time: an innocent never runs beside the poison
                assert await sup.ask(Claim(f"b@node-1:{process}", "w")) == NoWork()
                if granted.task.id != "poison":
                    await sup.ask(Complete(granted.task.id, f"a@node-1:{process}", done(granted.task.id)))
    async with open_node(backend, limits=limits, instance="node-1:4") as node:
        sup = node.supervisor
        poison = await sup.ask(GetTask("poison"))  # failed at this start
        while isinstance(granted := await sup.ask(Claim("a@node-1:4", "w")), Granted):
            await sup.ask(Complete(granted.task.id, "a@node-1:4", done(granted.task.id)))
        finished, innocent = await sup.ask(GetTask("done")), await sup.ask(GetTask("innocent"))
    assert (poison.status, poison.crashes) == (TaskStatus.FAILED, 3)
    assert poison.error is not None and "died while running it 3 times (max_crashes)" in poison.error.reason
    assert finished.status is TaskStatus.COMPLETED and finished.crashes == 0
    assert (innocent.status, innocent.attempt, innocent.crashes) == (TaskStatus.COMPLETED, 1, 1)


async def test_after_one_death_its_tasks_run_side_by_side_and_after_two_one_at_a_time(
    backend: Store,
) -> None:
    """One death does not say which task in flight caused it (a restart, a host's OOM
    kill): those tasks run again at full concurrency. A task running at a second death
    (``isolate_after_crashes``, default 2) is a suspect: one at a time."""
    async with open_node(backend, instance="node-1:1") as node:
        await node.supervisor.ask(Submit([task("a"), task("b"), task("c")]))
        for agent in ("x@node-1:1", "y@node-1:1"):
            await node.supervisor.ask(Claim(agent, "w"))
    async with open_node(backend, instance="node-1:2") as node:
        granted = [await node.supervisor.ask(Claim(f"{agent}@node-1:2", "w")) for agent in "xyz"]
        assert sorted(g.task.id for g in granted if isinstance(g, Granted)) == ["a", "b", "c"]
        assert {g.task.id: g.task.crashes for g in granted if isinstance(g, Granted)} == {
            "a": 1,
            "b": 1,
            "c": 0,
        }
        await node.supervisor.ask(Complete("c", "z@node-1:2", done("c")))
    async with open_node(backend, instance="node-1:3") as node:
        first = await node.supervisor.ask(Claim("x@node-1:3", "w"))
        assert isinstance(first, Granted) and first.task.crashes == 2
        assert await node.supervisor.ask(Claim("y@node-1:3", "w")) == NoWork()  # one suspect at a time
        await node.supervisor.ask(Complete(first.task.id, "x@node-1:3", done(first.task.id)))
        second = await node.supervisor.ask(Claim("y@node-1:3", "w"))
        assert isinstance(second, Granted) and {first.task.id, second.task.id} == {"a", "b"}


async def test_a_suspect_runs_alone_and_only_deaths_alone_fail_it(backend: Store) -> None:
    """Kills from outside must not fail innocent tasks: deaths shared with other tasks only
    make a task a suspect (``isolate_after_crashes``, 2); a suspect then runs alone — not
    while anything else of its process is in progress, and nothing else is granted while
    it runs — and is failed at ``max_crashes`` (4) only by deaths while alone. Fresh work
    goes first, so the others keep completing meanwhile."""

    def agent(name: str, process: int) -> str:
        return f"{name}@node-1:{process}"

    async with open_node(backend, instance="node-1:1") as node:
        await node.supervisor.ask(Submit([task("a"), task("b"), task("c")]))
        for name in "xy":
            await node.supervisor.ask(Claim(agent(name, 1), "w"))
    async with open_node(backend, instance="node-1:2") as node:  # a and b: one shared death
        granted = [await node.supervisor.ask(Claim(agent(name, 2), "w")) for name in "xyz"]
        assert sorted(g.task.id for g in granted if isinstance(g, Granted)) == ["a", "b", "c"]
        await node.supervisor.ask(Complete("c", agent("z", 2), done("c")))
    crashed: list[str] = []
    async with open_node(backend, instance="node-1:3") as node:  # two shared deaths: suspects
        sup = node.supervisor
        await sup.ask(Submit([task("fresh")]))
        first = await sup.ask(Claim(agent("x", 3), "w"))
        assert isinstance(first, Granted) and first.task.id == "fresh"  # fresh work first
        assert await sup.ask(Claim(agent("y", 3), "w")) == NoWork()  # no suspect beside it
        await sup.ask(Complete("fresh", agent("x", 3), done("fresh")))
        suspect = await sup.ask(Claim(agent("x", 3), "w"))
        assert isinstance(suspect, Granted) and suspect.task.id in ("a", "b") and suspect.task.crashes == 2
        await sup.ask(Submit([task("later")]))
        assert await sup.ask(Claim(agent("y", 3), "w")) == NoWork()  # nothing beside a suspect
        crashed.append(suspect.task.id)  # dies alone: 3
    async with open_node(backend, instance="node-1:4") as node:
        sup = node.supervisor
        while True:
            granted_now = await sup.ask(Claim(agent("x", 4), "w"))
            assert isinstance(granted_now, Granted)
            if granted_now.task.id == crashed[0]:
                assert granted_now.task.crashes == 3
                break  # the one that died alone dies alone again: 4
            await sup.ask(Complete(granted_now.task.id, agent("x", 4), done(granted_now.task.id)))
        assert await sup.ask(Claim(agent("y", 4), "w")) == NoWork()
    async with open_node(backend, instance="node-1:5") as node:
        sup = node.supervisor
        while isinstance(granted_now := await sup.ask(Claim(agent("x", 5), "w")), Granted):
            await sup.ask(Complete(granted_now.task.id, agent("x", 5), done(granted_now.task.id)))
        poison = await sup.ask(GetTask(crashed[0]))
        other = await sup.ask(GetTask("b" if crashed[0] == "a" else "a"))
        later = await sup.ask(GetTask("later"))
    assert (poison.status, poison.crashes) == (TaskStatus.FAILED, 4)
    assert poison.error is not None and "died while running it 4 times" in poison.error.reason
    assert (other.status, other.attempt, other.crashes) == (TaskStatus.COMPLETED, 1, 2)
    assert later.status is TaskStatus.COMPLETED


def test_a_death_shared_with_other_tasks_counts_only_up_to_isolation() -> None:
    from greenroom.store._rules import death_counted

    limits = TaskLimits(max_crashes=4, isolate_after_crashes=2)
    for crashes, alone, counted in ((0, False, 1), (1, False, 2), (2, False, 2), (3, False, 3),
                                    (2, True, 3), (3, True, 4), (0, True, 1)):  # fmt: skip
        suspect = msgspec.structs.replace(task("t"), crashes=crashes)
        assert death_counted(suspect, alone=alone, limits=limits) == counted, (crashes, alone)


# -- events of the task graph ---------------------------------------------------------------


async def test_every_transition_has_its_events_once_in_order(backend: Store) -> None:
    async with open_node(backend) as node:
        sup = node.supervisor
        await sup.ask(Submit([task("a"), task("b")]))
        await sup.ask(Claim("x", "w"))
        await sup.ask(Complete("a", "x", done("a", outcome="fine", notes="n")))
        await eventually(lambda: _has(backend, AGENT_RESULT, "a"))
    events = await stored_events(backend)
    assert [e.seq for e in events] == sorted(e.seq for e in events) and len({e.seq for e in events}) == len(
        events
    )
    kinds = [(e.type, e.task_id) for e in events]
    assert kinds == [(TASK_SUBMITTED, "a"), (TASK_SUBMITTED, "b"), (TASK_CLAIMED, "a"),
                     (TASK_COMPLETED, "a"), (AGENT_RESULT, "a")]  # fmt: skip
    claimed, result = events[2], events[4]
    assert claimed.payload == {"status": "IN_PROGRESS", "attempt": 1} and claimed.agent_id == "x"
    assert result.payload == {"outcome": "fine", "artifacts": {}, "notes": "n", "next_actions": []}
    assert all(e.visibility == "internal" for e in events)


# -- the event log ----------------------------------------------------------------------------


async def test_appends_are_numbered_in_order_and_read_back_from_any_point(backend: Store) -> None:
    async with open_node(backend) as node:
        replies: list[Event] = []

        async def agent(n: int) -> None:
            for i in range(20):
                replies.append(await node.log.ask(Append(AGENT_UPDATE, {"n": n, "i": i}, f"t{n}", f"a{n}")))

        async with anyio.create_task_group() as tg:
            for n in range(5):
                tg.start_soon(agent, n)
    events = await stored_events(backend)
    assert sorted(e.seq for e in replies) == [e.seq for e in events]  # each acknowledged one is stored
    for n in range(5):  # each agent's events in the order it sent them
        assert [e.payload["i"] for e in events if e.agent_id == f"a{n}"] == list(range(20))
    middle = events[49].seq
    assert [e.seq for e in await stored_events(backend, after=middle)] == [e.seq for e in events[50:]]
    async with aclosing(backend.events(after=0, last=3)) as last:
        assert [e.seq for e in [e async for e in last]] == [e.seq for e in events[-3:]]


async def test_the_visibility_policy_holds_on_every_store(backend: Store) -> None:
    async with open_node(backend) as node:
        forced = await node.log.ask(Append(AGENT_UPDATE, {"message": "hi"}, "t", "a", visibility="user"))
        assert forced.visibility == "internal"  # agent events are always internal
        with pytest.raises(PolicyError) as refused:
            await node.log.ask(Append(NARRATION, {"text": "hello"}, visibility="user"))
        assert refused.value.policy_error == "narrator_only"
        with pytest.raises(PolicyError) as refused:
            await node.log.ask(Append(AGENT_UPDATE, {"show_to_user": True}, "t", "a"))
        assert refused.value.policy_error == "user_visible_payload"
        with pytest.raises(ValueError, match="cannot be stored as JSON"):
            await node.log.ask(Append(AGENT_UPDATE, {"bad": object()}, "t", "a"))
        shown = await node.log.ask(
            Append(NARRATION, {"text": "hello"}, visibility="user", capability=node.narrator)
        )
        assert shown.visibility == "user"
    assert [(e.type, e.visibility) for e in await stored_events(backend)] == [
        (AGENT_UPDATE, "internal"), (NARRATION, "user")
    ]  # fmt: skip


async def test_many_events_from_one_source_are_stored_together_or_not_at_all(backend: Store) -> None:
    """``AppendMany``: one reply with every event stored, in order, after each was checked;
    one refused (its shape, the policy, a payload that is not JSON) refuses them all, by
    index, and nothing of it is stored; the log keeps serving."""
    async with open_node(backend) as node:
        lifecycle = [
            Append(AGENT_UPDATE, {"step": "started"}, "t1", "a1"),
            Append(AGENT_UPDATE, {"step": "working", "progress": 0.5}, "t1", "a1"),
            Append(NARRATION, {"text": "done soon"}, "t1", visibility="user", capability=node.narrator),
        ]
        stored = await node.log.ask(AppendMany(lifecycle))
        assert [e.payload for e in stored] == [a.payload for a in lifecycle]
        assert [e.visibility for e in stored] == ["internal", "internal", "user"]
        assert stored[0].seq < stored[1].seq < stored[2].seq
        ok, flag = Append(AGENT_UPDATE, {"i": 0}), Append(AGENT_UPDATE, {"show_to_user": True}, "t", "a")
        refusals: list[tuple[list[Any], type[Exception], str, str]] = [
            ([ok, Append("has space")], RecordError, "appends[1]", "appends[1].type"),
            ([flag], PolicyError, "appends[0]", "appends[0]"),
            (
                [ok, Append(AGENT_UPDATE, {"bad": object()})],
                ValueError,
                "appends[1]: event payload cannot",
                "",
            ),
            ([ok, "not an append"], RecordError, "must be an Append message", "appends[1]"),
        ]
        for appends, error, says, field in refusals:
            with pytest.raises(error) as refused:
                await node.log.ask(AppendMany(appends))
            assert says in str(refused.value)
            if field:
                assert refused.value.field == field  # type: ignore[attr-defined]
        with pytest.raises(RecordError, match="at most 4096 per message"):
            await node.log.ask(AppendMany([Append(AGENT_UPDATE)] * 4097))
        assert await node.log.ask(AppendMany([])) == []
        after = await node.log.ask(Append(AGENT_UPDATE, {"after": True}, "t1", "a1"))
    events = await stored_events(backend)
    assert [e.payload for e in events] == [*(a.payload for a in lifecycle), {"after": True}]
    assert events[-1].seq == after.seq


async def test_a_payload_encoded_once_is_stored_as_those_bytes(backend: Store) -> None:
    """``EventStore.write(events, encoded)``: the store writes the JSON it is given for
    each payload (the log encodes once, as it admits) and answers the events numbered."""
    store = backend.event_store()
    await store.open()
    try:
        events = [
            Event(seq=0, ts=1.0, type=AGENT_UPDATE, task_id="t", agent_id="a", payload={"i": i, "s": "é"})
            for i in range(3)
        ]
        encoded = [msgspec.json.encode(e.payload) for e in events]
        written = await store.write(events, encoded)
    finally:
        await store.close()
    assert all(isinstance(e, Event) for e in written)
    stored = await stored_events(backend)
    assert [e.payload for e in stored] == [{"i": i, "s": "é"} for i in range(3)]
    assert [e.seq for e in stored] == [e.seq for e in written if isinstance(e, Event)]


class _Collector(Actor):
    def __init__(self, seen: list[Event]) -> None:
        self.seen = seen

    async def receive(self, message: Any) -> None:
        self.seen.append(message)


async def test_a_subscriber_gets_each_event_once_it_is_durable_and_a_stopped_one_is_dropped(
    backend: Store,
) -> None:
    async with open_node(backend) as node:
        seen: list[Event] = []
        watcher: ActorRef = await node.system.spawn(lambda: _Collector(seen))
        gone: ActorRef = await node.system.spawn(lambda: _Collector([]))
        await node.log.ask(Subscribe(watcher))
        await node.log.ask(Subscribe(gone))
        await gone.stop()
        for i in range(3):
            await node.log.ask(Append(AGENT_UPDATE, {"i": i}, "t", "a"))
        await eventually(lambda: len(seen) == 3)
        assert [e.payload["i"] for e in seen] == [0, 1, 2] and all(e.seq > 0 for e in seen)
        assert node.log.is_alive  # the stopped subscriber did not trouble it
    assert [e.seq for e in seen] == [e.seq for e in await stored_events(backend)]


async def test_appends_sent_before_the_log_stops_are_written_and_answered(backend: Store) -> None:
    async with open_node(backend) as node:
        answers: list[Any] = []
        sent = 0

        async def append(i: int) -> None:
            nonlocal sent
            sent += 1  # an ask is in the mailbox before its first checkpoint
            answers.append(await node.log.ask(Append(AGENT_UPDATE, {"i": i}, "t", "a"), timeout=20))

        async with anyio.create_task_group() as tg:
            for i in range(50):
                tg.start_soon(append, i)
            await eventually(lambda: sent == 50)
            await node.log.stop()
    assert len(answers) == 50 and all(isinstance(a, Event) for a in answers)  # written and answered
    assert sorted(e.seq for e in answers) == [e.seq for e in await stored_events(backend)]


async def test_a_stop_that_does_not_wait_still_writes_and_answers_what_the_log_took(backend: Store) -> None:
    """``stop(now=True)``: the queued appends are dropped (their asks fail with
    ``ActorStopped``), but one the log had already taken into its batch is written and
    answered — never left unanswered (its asker would wait for its timeout). A log takes
    up to 256 messages (the system's ``throughput``) before it yields, so with 1,000 sent
    the stop lands while some are taken and not yet written."""
    async with open_node(backend) as node:
        answers: list[Any] = []
        sent = 0

        async def append(i: int) -> None:
            nonlocal sent
            sent += 1
            try:
                answers.append(await node.log.ask(Append(AGENT_UPDATE, {"i": i}, "t", "a"), timeout=20))
            except ActorStopped as dropped:
                answers.append(dropped)

        async with anyio.create_task_group() as tg:
            for i in range(1000):
                tg.start_soon(append, i)
            await eventually(lambda: sent == 1000)
            await eventually(lambda: node.log.queued < 1000)  # it has taken some
            await node.log.stop(now=True)
    written = [a for a in answers if isinstance(a, Event)]
    assert len(answers) == 1000 and written  # every ask answered, none left to time out
    assert sorted(e.seq for e in written) == [e.seq for e in await stored_events(backend)]


async def test_following_the_log_sees_new_events_as_they_come(backend: Store) -> None:
    async with open_node(backend) as node:
        await node.log.ask(Append(AGENT_UPDATE, {"i": 0}, "t", "a"))
        got: list[Event] = []

        async def follow() -> None:
            async with aclosing(backend.events(after=0, follow=True)) as events:
                async for event in events:
                    got.append(event)
                    if len(got) == 3:
                        return

        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                tg.start_soon(follow)
                await eventually(lambda: len(got) == 1)
                for i in (1, 2):
                    await node.log.ask(Append(AGENT_UPDATE, {"i": i}, "t", "a"))
    assert [e.payload["i"] for e in got] == [0, 1, 2]


async def test_the_log_rolls_into_segments_read_as_one_and_followed_across_rolls(backend: Store) -> None:
    """``events_per_segment``: the log rolls (files renamed whole; PostgreSQL partitions,
    made as inserts reach them), and reads — all, from a point, the newest few, a
    follower started before — see every event once, in order."""
    from greenroom.store._retention import Retention

    retention = Retention(events_per_segment=10, check_every=0.01)
    got: list[Event] = []
    async with open_node(backend, retention=retention, lease_check_interval=0.01) as node:

        async def follow() -> None:
            async with aclosing(backend.events(after=0, follow=True)) as events:
                async for event in events:
                    got.append(event)
                    if len(got) == 35:
                        return

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(follow)
                for i in range(35):
                    await node.log.ask(Append(AGENT_UPDATE, {"i": i}, "t", "a"))
    events = await stored_events(backend)
    assert [e.payload["i"] for e in events] == list(range(35))
    assert [e.seq for e in events] == sorted({e.seq for e in events})  # PostgreSQL's may have holes
    assert [e.seq for e in got] == [e.seq for e in events]
    assert [e.seq for e in await stored_events(backend, after=events[12].seq)] == [e.seq for e in events[13:]]
    async with aclosing(backend.events(last=3)) as last:
        assert [e.seq for e in [e async for e in last]] == [e.seq for e in events[-3:]]
    sizes = await backend.sizes()
    assert sizes.event_segments >= 4 and sizes.events_dropped_through == 0


async def test_retention_drops_old_segments_whole_and_a_reader_from_before_is_told(backend: Store) -> None:
    """``events_for``: closed segments that old go, oldest first, never the newest; a
    reader after a dropped ``seq`` gets ``EventsGone`` naming the oldest kept, one after it
    reads an unbroken run, and ``last`` gives the newest kept without a refusal."""
    from greenroom.store import EventsGone
    from greenroom.store._retention import Retention

    retention = Retention(events_per_segment=10, events_for=0.001, check_every=0.01)
    async with open_node(backend, retention=retention, lease_check_interval=0.01) as node:
        for i in range(35):
            await node.log.ask(Append(AGENT_UPDATE, {"i": i}, "t", "a"))

        async def dropped() -> bool:
            await node.log.ask(Append(AGENT_UPDATE, {"i": -1}, "t", "a"))  # the files prune as they write
            return await backend.events_dropped_through() >= 20

        await eventually(dropped, timeout=20)
    floor = await backend.events_dropped_through()
    with pytest.raises(EventsGone) as gone:
        await stored_events(backend, after=floor - 1)
    assert gone.value.oldest == floor + 1 and gone.value.field == "after"
    kept = await stored_events(backend, after=floor)
    assert kept and kept[0].seq > floor  # PostgreSQL's seq may have a hole (an aborted append) there
    assert [e.seq for e in kept] == sorted({e.seq for e in kept})
    async with aclosing(backend.events(last=1000)) as last:
        assert [e.seq for e in [e async for e in last]] == [e.seq for e in kept]
    sizes = await backend.sizes()
    assert sizes.events_dropped_through == floor and sizes.event_segments >= 1


# -- the chat store -----------------------------------------------------------------------------


async def test_the_chat_store_keeps_users_apart(backend: Store) -> None:
    chat = ChatStore(backend.records(), shared=backend.shared)
    try:
        milk = await chat.add_task("alice", "buy milk", "2 litres")
        bread = await chat.add_task("alice", "bread")
        theirs = await chat.add_task("bob", "bob's")
        assert len({milk.id, bread.id, theirs.id}) == 3 and not milk.completed
        assert [t.title for t in await chat.list_tasks("alice")] == ["buy milk", "bread"]
        assert await chat.complete_task("bob", milk.id) is None  # not bob's
        assert await chat.update_task("bob", milk.id, title="mine") is None
        assert await chat.delete_task("bob", milk.id) is None
        completed = await chat.complete_task("alice", milk.id)
        assert completed is not None and completed.completed
        updated = await chat.update_task("alice", bread.id, title="rye bread")
        assert updated is not None and (updated.title, updated.description) == ("rye bread", "")
        assert [t.title for t in await chat.list_tasks("alice", "completed")] == ["buy milk"]
        assert [t.title for t in await chat.list_tasks("alice", "pending")] == ["rye bread"]
        deleted = await chat.delete_task("alice", bread.id)
        assert deleted is not None and deleted.title == "rye bread"
        assert [t.title for t in await chat.list_tasks("alice")] == ["buy milk"]
        assert [t.title for t in await chat.list_tasks("bob")] == ["bob's"]
    finally:
        await chat.aclose()


async def test_many_tasks_are_deleted_in_one_transaction_only_the_users_own(backend: Store) -> None:
    chat = ChatStore(backend.records(), shared=backend.shared)
    try:
        done = [await chat.add_task("alice", f"done {n}") for n in range(3)]
        for task in done:
            await chat.complete_task("alice", task.id)
        open_ = await chat.add_task("alice", "still to do")
        bobs = await chat.add_task("bob", "bob's")
        await chat.complete_task("bob", bobs.id)
        ids = [t.id for t in done] + [open_.id, bobs.id, 10**9]
        gone = await chat.delete_tasks("alice", ids, only_completed=True)
        assert [t.title for t in gone] == ["done 0", "done 1", "done 2"] and all(t.completed for t in gone)
        assert [t.title for t in await chat.list_tasks("alice")] == ["still to do"]
        assert [t.title for t in await chat.list_tasks("bob")] == ["bob's"]  # never another user's
        assert await chat.delete_tasks("alice", ids, only_completed=True) == []  # once only
        assert [t.title for t in await chat.delete_tasks("alice", [open_.id])] == ["still to do"]
    finally:
        await chat.aclose()


async def test_conversations_keep_their_turns_and_confirmations(backend: Store) -> None:
    chat = ChatStore(backend.records(), shared=backend.shared)
    try:
        await chat.open_conversation("alice", "c1", create=True)
        await chat.open_conversation("alice", "c1", create=True)  # again: still hers
        with pytest.raises(ConversationNotFound) as refused:
            await chat.open_conversation("bob", "c1", create=True)
        assert refused.value.field == "conversation_id"
        with pytest.raises(ConversationNotFound):
            await chat.open_conversation("alice", "nope", create=False)
        pending = StoredPending(tool_name="delete_task", parameters={"task_id": 1}, title="x", expires_at=9e9)
        for n in range(3):
            ran = (ToolOutcome(name="t", arguments={"n": n}, ok=True, result=n),)
            turn = [ChatMessage("user", f"q{n}", at=float(n)),
                    ChatMessage("assistant", f"a{n}", at=float(n), outcomes=ran)]  # fmt: skip
            await chat.save_turn("alice", "c1", turn, pending if n == 2 else None)
        history = await chat.load_history("alice", "c1", 3)
        assert [m.content for m in history] == ["a1", "q2", "a2"]  # the last three, oldest first
        assert history[-1].outcomes == (ToolOutcome(name="t", arguments={"n": 2}, ok=True, result=2),)
        assert await chat.load_history("bob", "c1", 10) == []
        with pytest.raises(ConversationNotFound):
            await chat.save_turn("bob", "c1", [], None)
        assert await chat.load_pending("alice", "c1") == pending
        assert await chat.load_pending("bob", "c1") is None
        # what a request starts from, in one read: the same pending and history
        assert await chat.load_conversation("alice", "c1", 3) == (pending, history)
        for user, conversation in (("bob", "c1"), ("alice", "nope")):
            with pytest.raises(ConversationNotFound):
                await chat.load_conversation(user, conversation, 3)
        taken = []
        async with anyio.create_task_group() as tg:
            for _ in range(4):

                async def take() -> None:
                    taken.append(await chat.take_pending("alice", "c1", pending))

                tg.start_soon(take)
        assert sorted(taken) == [False, False, False, True]  # exactly one taker
        assert await chat.load_pending("alice", "c1") is None
        hold = await chat.hold_conversation("c1", "me", 30.0)  # issue 49: a hold is a fencing token
        assert isinstance(hold, int) and hold >= 1
        assert await chat.hold_conversation("c1", "me", 30.0) == hold  # the same holder, the same token
        said = [ChatMessage("user", "under the hold", at=1.0)]
        await chat.save_turn("alice", "c1", said, None, hold=hold)  # the current hold: written
        assert [m.content for m in await chat.load_history("alice", "c1", 50)][-1] == "under the hold"
        under = ConversationHold("c1", hold)  # the to-do list's writes under the current hold: made
        added = await chat.add_task("alice", "held", hold=under)
        assert (await chat.update_task("alice", added.id, description="d", hold=under)) is not None
        assert (await chat.complete_task("alice", added.id, hold=under)) is not None
        assert [t.id for t in await chat.delete_tasks("alice", [added.id], hold=under)] == [added.id]
        await chat.let_go_conversation("c1", "me")
    finally:
        await chat.aclose()


async def test_idle_conversations_are_forgotten_whole_but_not_one_held_or_recent(backend: Store) -> None:
    """``forget_idle`` (``[retention] chat_for``): a conversation with no turn since
    ``before`` goes with its messages and pending confirmation; one a request holds now,
    one with a recent turn and the user's task list stay."""
    chat = ChatStore(backend.records(), shared=backend.shared)
    try:
        pending = StoredPending(tool_name="delete_task", parameters={"task_id": 1}, title="x", expires_at=9e9)
        await chat.add_task("alice", "keep me")
        for conversation, at in (("old", 10.0), ("held", 10.0), ("recent", 4e9)):
            await chat.open_conversation("alice", conversation, create=True)
            turn = [ChatMessage("user", "q", at=at)]
            await chat.save_turn("alice", conversation, turn, pending)
        assert await chat.hold_conversation("held", "me", 30.0)
        assert await chat.forget_idle(500.0) == 1
        with pytest.raises(ConversationNotFound):
            await chat.open_conversation("alice", "old", create=False)
        assert await chat.load_pending("alice", "old") is None
        for kept in ("held", "recent"):
            assert [m.content for m in await chat.load_history("alice", kept, 10)] == ["q"]
            assert await chat.load_pending("alice", kept) == pending
        await chat.let_go_conversation("held", "me")
        assert await chat.forget_idle(500.0) == 1 and await chat.forget_idle(500.0) == 0
        assert [m.content for m in await chat.load_history("alice", "recent", 10)] == ["q"]
        assert [t.title for t in await chat.list_tasks("alice")] == ["keep me"]
    finally:
        await chat.aclose()


async def test_a_conversation_the_caller_names_is_opened_on_first_use_and_held(backend: Store) -> None:
    """Spec 001: the chat API names the conversation. On a shared store a request holds
    the conversation across processes, so it must exist before the hold is taken."""
    from greenroom import ActorSystem
    from greenroom.chat import AgentContext, AgentRunner, LLMAgentEngine, MCPToolExecutor, task_server
    from greenroom.llm import RuleBasedModel

    chat = ChatStore(backend.records(), shared=backend.shared)
    try:
        async with MCPToolExecutor(task_server(chat)) as tools, ActorSystem() as system:
            runner = await AgentRunner.spawn(
                system, LLMAgentEngine(RuleBasedModel(), tools), chat, timeout=30
            )
            with anyio.fail_after(20):
                added = await runner.run(AgentContext.from_request("auth0|1", "app-7", []), "add buy milk")
                shown = await runner.run(AgentContext.from_request("auth0|1", "app-7", []), "show my tasks")
            with pytest.raises(ConversationNotFound):
                await runner.run(AgentContext.from_request("auth0|2", "app-7", []), "hello")
            await runner.aclose()
        assert added.success and shown.response == "Here are your tasks:\n1. ☐ buy milk"
        assert [m.role for m in await chat.load_history("auth0|1", "app-7", 10)] == ["user", "assistant"] * 2
        assert await chat.hold_conversation("app-7", "someone", 30.0)  # let go after each request
    finally:
        await chat.aclose()


# -- the step journal (durable agent work) --------------------------------------------------


def _step(task_id: str, key: str, kind: str = "model", **fields: Any) -> Any:
    from greenroom.store import Step

    return Step(
        task_id=task_id, key=key, kind=kind, fingerprint=fields.pop("fingerprint", f"fp-{key}"), **fields
    )


async def test_steps_are_read_back_in_order_per_task_and_a_replay_never_rewrites_one(backend: Store) -> None:
    journal = backend.step_store()
    try:
        await journal.write(
            [
                _step("t1", "p0/main/m0", body={"text": "first", "usage": [3, 4]}, attempt=1, at=10.0),
                _step("t2", "p0/main/m0", body={"text": "other task"}),
                _step("t1", "p0/main/m0/t0", "tool_started"),
                _step("t1", "p0/main/m0/t0", "tool", body={"ok": True, "result": {"n": 1}}),
            ]
        )
        # the same place written again (a second attempt replaying) keeps the first record
        await journal.write([_step("t1", "p0/main/m0", body={"text": "changed"}, fingerprint="other")])
        steps = await journal.read("t1")
        assert [(s.key, s.kind) for s in steps] == [
            ("p0/main/m0", "model"), ("p0/main/m0/t0", "tool_started"), ("p0/main/m0/t0", "tool")
        ]  # fmt: skip
        first = steps[0]
        assert (first.body, first.fingerprint, first.attempt, first.at) == (
            {"text": "first", "usage": [3, 4]}, "fp-p0/main/m0", 1, 10.0
        )  # fmt: skip
        assert steps[2].body == {"ok": True, "result": {"n": 1}}
        assert [s.body for s in await journal.read("t2")] == [{"text": "other task"}]
        assert await journal.read("nobody") == []
        assert await journal.drop(["t1", "nobody"]) == 3
        assert await journal.read("t1") == [] and len(await journal.read("t2")) == 1
    finally:
        await journal.aclose()


async def test_a_step_under_an_old_attempt_token_is_refused_and_the_rest_of_its_batch_written(
    backend: Store,
) -> None:
    """Issue 49: a step names its attempt's token; once a later attempt was granted (or
    the attempt ended) the store refuses it — checked where the attempts are serialised —
    and writes the other steps of the same batch."""
    async with open_node(backend) as node:
        sup = node.supervisor
        await sup.ask(Submit([task("t"), task("other")]))
        assert (await sup.ask(Claim("a", "w"))).task.token == 1
        assert (await sup.ask(Claim("b", "w"))).task.id == "other"
        journal = backend.step_store()
        try:
            assert await journal.write([_step("t", "p0/main/m0", token=1)]) == {}  # the live attempt
            await sup.ask(Release("t", "a", token=1))
            assert (await sup.ask(Claim("a", "w"))).task.token == 2  # the same agent, a new attempt
            refused = await journal.write([
                _step("t", "p0/main/m1", token=1),  # the stale attempt's
                _step("t", "p0/main/m1", "tool_started", token=2),  # the live one's
                _step("other", "p0/main/m0", token=1),  # another task's live attempt
                _step("loose", "p0/main/m0"),  # no token: not fenced
            ])  # fmt: skip
            assert list(refused) == [("t", 1)]
            fence = refused[("t", 1)]
            assert isinstance(fence, Fenced) and (fence.token, fence.current, fence.task_id) == (1, 2, "t")
            assert [(s.key, s.kind) for s in await journal.read("t")] == [
                ("p0/main/m0", "model"), ("p0/main/m1", "tool_started")
            ]  # fmt: skip
            assert len(await journal.read("other")) == 1 and len(await journal.read("loose")) == 1
            await sup.ask(Complete("t", "a", done("t"), token=2))
            ended = await journal.write([_step("t", "p0/main/m2", token=2)])  # its attempt ended
            assert list(ended) == [("t", 2)] and "COMPLETED" in str(ended[("t", 2)])
        finally:
            await journal.aclose()


async def test_a_step_the_journal_cannot_keep_is_refused_by_name_and_nothing_of_its_batch_is_written(
    backend: Store,
) -> None:
    journal = backend.step_store()
    try:
        await journal.write([_step("t1", "p0/main/m0", body={"text": "kept"})])
        for bad, field in (
            (_step("t1", "", body={}), "key"),
            (_step("", "p0/main/m1"), "task_id"),
            (_step("t1", "p0/main/m1", "guess"), "kind"),
            (_step("t1", "x" * 600), "key"),
        ):
            with pytest.raises(InvalidInput) as refused:
                await journal.write([_step("t1", "p0/main/m9", body={"text": "same batch"}), bad])
            assert refused.value.field == field
        assert [s.body for s in await journal.read("t1")] == [{"text": "kept"}]
    finally:
        await journal.aclose()


async def test_steps_written_by_one_store_are_read_by_another_on_the_same_backend(
    store_url: str | None, tmp_path: Path
) -> None:
    """What a crashed process recorded is what the next one (or another daemon) reads."""
    data_dir = tmp_path / "data"
    async with await make_store(store_url, data_dir) as first:
        journal = first.step_store()
        await journal.write([_step("t1", "p0/main/m0", body={"text": "paid for once"})])
        await journal.aclose()
    async with await make_store(store_url, data_dir) as second:
        journal = second.step_store()
        try:
            assert [s.body["text"] for s in await journal.read("t1")] == ["paid for once"]
        finally:
            await journal.aclose()


async def _read_as_the_next_process(store_url: str | None, data_dir: Path, task_id: str) -> list[Any]:
    """A task's steps as a fresh process on the same data (another store) reads them."""
    async with await make_store(store_url, data_dir) as store:
        journal = store.step_store()
        try:
            return await journal.read(task_id)
        finally:
            await journal.aclose()


_HAND_AND_DIE = """
import os, signal, sys
import anyio
from greenroom.store import Step
sys.path.insert(0, sys.argv[3])
from _stores import make_store

async def main() -> None:
    store = await make_store(sys.argv[1] or None, __import__("pathlib").Path(sys.argv[2]))
    async with store:
        journal = store.step_store()
        await journal.write([Step(task_id="t1", key="p0/main/m0", kind="model", fingerprint="f",
                                  encoded=b'{"text":"handed"}')], durable=False)
        os.kill(os.getpid(), signal.SIGKILL)  # no sync, no close: the process just dies

anyio.run(main)
"""


def test_steps_handed_to_the_store_without_a_sync_survive_the_process_being_killed(
    store_url: str | None, tmp_path: Path
) -> None:
    """``write(durable=False)`` returns once the store has the steps: a SIGKILL right after
    it (no sync, no close) loses none of them."""
    import signal

    needs_a_process(store_url)
    import subprocess
    import sys

    data_dir = tmp_path / "data"
    died = subprocess.run(
        [sys.executable, "-c", _HAND_AND_DIE, store_url or "", str(data_dir), str(Path(__file__).parent)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert died.returncode == -signal.SIGKILL, died.stderr

    def read() -> list[Any]:
        return anyio.run(_read_as_the_next_process, store_url, data_dir, "t1")

    steps = read()
    assert [(s.key, s.body) for s in steps] == [("p0/main/m0", {"text": "handed"})]


_NOTE_AND_DIE = """
import os, signal, sys
import anyio
from greenroom.store import Step
sys.path.insert(0, sys.argv[3])
from _stores import make_store

async def main() -> None:
    store = await make_store(sys.argv[1] or None, __import__("pathlib").Path(sys.argv[2]))
    async with store:
        journal = store.step_store()
        await journal.write([Step(task_id="t1", key="p0/main/m0/t0", kind="tool_released", fingerprint="f",
                                  encoded=b'{}')], durable=False)
        for n in range(3):
            await journal.note(Step(task_id="t1", key=f"p0/main/m{n}/t0", kind="tool", fingerprint="f",
                                    encoded=b'{"content":"ran %d"}' % n))
        os.kill(os.getpid(), signal.SIGKILL)  # no batch, no sync, no close: the process just dies

anyio.run(main)
"""


def test_a_noted_step_survives_the_process_being_killed_right_after(
    store_url: str | None, tmp_path: Path
) -> None:
    """Issue 49's crash window: ``note`` keeps a step at once, from the caller — a SIGKILL
    right after it (nothing else written, no sync, no close) loses none of the notes; the
    next process reads them as steps (the files fold them in when they are opened)."""
    import signal

    needs_a_process(store_url)
    import subprocess
    import sys

    data_dir = tmp_path / "data"
    died = subprocess.run(
        [sys.executable, "-c", _NOTE_AND_DIE, store_url or "", str(data_dir), str(Path(__file__).parent)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert died.returncode == -signal.SIGKILL, died.stderr

    def read() -> list[Any]:
        return anyio.run(_read_as_the_next_process, store_url, data_dir, "t1")

    steps = read()
    assert [(s.key, s.kind, s.body) for s in steps] == [
        ("p0/main/m0/t0", "tool_released", {}),
        *[(f"p0/main/m{n}/t0", "tool", {"content": f"ran {n}"}) for n in range(3)],
    ]
    assert [s.key for s in read()] == [s.key for s in steps]  # folded once, read again


async def test_a_note_under_an_old_attempt_token_is_never_read_as_a_step(backend: Store) -> None:
    async with open_node(backend) as node:
        sup = node.supervisor
        await sup.ask(Submit([task("t")]))
        assert (await sup.ask(Claim("a", "w"))).task.token == 1
        await sup.ask(Release("t", "a", token=1))
        assert (await sup.ask(Claim("a", "w"))).task.token == 2
        journal = backend.step_store()
        try:
            try:  # refused now (the files: against the live graph) or when it is folded in
                await journal.note(_step("t", "p0/main/m0/t0", "tool", token=1, body={"ok": False}))
            except Fenced as refused:
                assert (refused.token, refused.current) == (1, 2)
            await journal.note(_step("t", "p0/main/m0/t0", "tool", token=2, body={"ok": True}))
        finally:
            await journal.aclose()
        fresh = backend.step_store()  # the next process on the data dir folds the notes in
        try:
            assert [s.body for s in await fresh.read("t")] == [{"ok": True}]
        finally:
            await fresh.aclose()


async def test_a_sync_covers_the_writes_before_it_and_a_durable_write_reads_back(backend: Store) -> None:
    journal = backend.step_store()
    try:
        await journal.write([_step("t1", "p0/main/m0", body={"n": 0})], durable=False)
        await journal.write([_step("t1", "p0/main/m1", body={"n": 1})], durable=False)
        await journal.sync()
        await journal.write([_step("t1", "p0/main/m2", body={"n": 2})])
        assert [s.body["n"] for s in await journal.read("t1")] == [0, 1, 2]
    finally:
        await journal.aclose()


async def test_a_step_body_is_read_back_byte_for_byte_with_its_keys_in_their_order(backend: Store) -> None:
    """A replay gives a model back exactly what it sent (prompt caches and the divergence
    check depend on it): keys in the order written, never sorted or reordered."""
    journal = backend.step_store()
    encoded = b'{"record":{"arguments":{"account":"L025","amount":7,"a":null}},"content":"ok"}'
    try:
        await journal.write(
            [
                _step("t1", "p0/main/m0/t0", "tool", encoded=encoded),
                _step("t1", "p0/main/m1", body={"z": 1, "b": 2}),
            ]
        )
        first, second = await journal.read("t1")
        assert msgspec.json.encode(first.body) == encoded
        assert list(first.body["record"]["arguments"]) == ["account", "amount", "a"]
        assert list(second.body) == ["z", "b"]
    finally:
        await journal.aclose()


async def test_many_tasks_steps_are_read_in_one_call(backend: Store) -> None:
    journal = backend.step_store()
    try:
        steps = [_step(f"t{i}", f"p0/main/m{j}", body={"n": j}) for i in range(3) for j in range(2)]
        await journal.write(steps)
        found = await journal.read_many(["t2", "t0", "nobody", "t0"])
        assert list(found) == ["t2", "t0", "nobody"]
        assert [s.body["n"] for s in found["t2"]] == [0, 1] and found["nobody"] == []
        assert found["t0"] == await journal.read("t0")
    finally:
        await journal.aclose()


async def test_dropping_the_steps_of_tasks_never_journaled_drops_and_makes_nothing(
    backend: Store, tmp_path: Path
) -> None:
    """The archive pass drops archived tasks' steps through the journal: a journal never
    written answers 0 and is not made for it (on the files, no ``steps.sqlite3``)."""
    journal = backend.step_store()
    try:
        assert await journal.drop(["never-ran", "nor-this"]) == 0
    finally:
        await journal.aclose()
    assert not (tmp_path / "data" / "steps.sqlite3").exists()


# -- load runs' records ------------------------------------------------------------------------


async def test_load_records_keep_the_first_under_a_key_in_arrival_order_per_run(backend: Store) -> None:
    from greenroom.load import LoadEntry, LoadRecordStore

    records = LoadRecordStore(backend.records())
    try:
        first = [LoadEntry("r/1/1/0", b'{"n":1}'), LoadEntry("r/1/1/1", b'{"n":2}'), LoadEntry("s/1", b"{}")]
        assert await records.add("run-a", first) == 3
        again = [LoadEntry("s/1", b'{"twice":true}'), LoadEntry("r/2/1/0", b'{"n":3}')]
        assert await records.add("run-a", again) == 1  # a session run again never counts twice
        assert await records.add("run-b", [LoadEntry("s/1", b'{"other":1}')]) == 1  # keys are per run
        kept = await records.read("run-a")
        assert [(e.key, e.body) for e in kept] == [
            ("r/1/1/0", b'{"n":1}'), ("r/1/1/1", b'{"n":2}'), ("s/1", b"{}"), ("r/2/1/0", b'{"n":3}'),
        ]  # fmt: skip
        assert [e.key for e in await records.read("run-a", "r/")] == ["r/1/1/0", "r/1/1/1", "r/2/1/0"]
        assert await records.count("run-a", "s/") == 1 and await records.count("run-a") == 4
        assert await records.read("nothing-yet") == []
        assert await records.runs() == {"run-a": 4, "run-b": 1}
        assert await records.drop("run-a") == 4
        assert await records.runs() == {"run-b": 1}
        assert (await records.read("run-b"))[0].body == b'{"other":1}'
    finally:
        await records.aclose()


async def test_load_records_under_an_old_attempt_token_are_refused_with_nothing_kept(backend: Store) -> None:
    """Issue 49: a load session's records name its task attempt's token; once the task was
    granted again (the session's agent paused past its lease), the old attempt's records
    are refused whole — ``Fenced`` — and the live one's kept."""
    from greenroom.load import LoadEntry, LoadRecordStore

    async with open_node(backend) as node:
        sup = node.supervisor
        await sup.ask(Submit([task("load-1")]))
        assert (await sup.ask(Claim("a", "w"))).task.token == 1
        records = LoadRecordStore(backend.records())
        try:
            assert await records.add("run", [LoadEntry("r/0/1/0", b"{}")], fence=("load-1", 1)) == 1
            await sup.ask(Release("load-1", "a", token=1))
            assert (await sup.ask(Claim("b", "w"))).task.token == 2
            with pytest.raises(Fenced) as refused:
                await records.add("run", [LoadEntry("s/0", b'{"stale":1}')], fence=("load-1", 1))
            assert (refused.value.token, refused.value.current) == (1, 2)
            assert await records.add("run", [LoadEntry("s/0", b'{"live":1}')], fence=("load-1", 2)) == 1
            assert [(e.key, e.body) for e in await records.read("run")] == [
                ("r/0/1/0", b"{}"), ("s/0", b'{"live":1}')
            ]  # fmt: skip
        finally:
            await records.aclose()


async def test_a_bad_load_record_is_refused_by_name_and_nothing_of_its_batch_is_kept(backend: Store) -> None:
    from greenroom.load import LoadEntry, LoadRecordStore

    records = LoadRecordStore(backend.records())
    try:
        await records.add("run", [LoadEntry("s/0", b'{"kept":true}')])
        good = LoadEntry("s/1", b"{}")
        for run, entry, field in (
            ("a run", good, "run"),
            ("", good, "run"),
            ("a/b", good, "run"),
            ("run", LoadEntry("", b"{}"), "key"),
            ("run", LoadEntry("has space", b"{}"), "key"),
            ("run", LoadEntry("s/2", b"[1]"), "body"),
            ("run", LoadEntry("s/2", b"{" + b" " * (1 << 20)), "body"),
        ):
            with pytest.raises(InvalidInput) as refused:
                await records.add(run, [good, entry])
            assert refused.value.field == field
            assert repr(run if field == "run" else entry.key)[:20] in str(refused.value) or field == "body"
        assert [e.key for e in await records.read("run")] == ["s/0"]  # nothing of a refused batch
        with pytest.raises(InvalidInput) as refused:
            await records.read("run", "bad prefix")
        assert refused.value.field == "prefix"
    finally:
        await records.aclose()


async def test_load_records_written_by_two_processes_at_once_are_all_kept(
    store_url: str | None, tmp_path: Path
) -> None:
    """Two daemons' stores writing one run's records together: every one is kept once."""
    from greenroom.load import LoadEntry, LoadRecordStore

    async with (
        await make_store(store_url, tmp_path / "data") as one,
        await make_store(store_url, tmp_path / "data") as two,
    ):
        writers = [LoadRecordStore(one.records()), LoadRecordStore(two.records())]
        try:

            async def write(number: int, records: Any) -> None:
                for n in range(20):
                    batch = [LoadEntry(f"r/{number}/{n}/{i}", b"{}") for i in range(3)]
                    await records.add("shared", [*batch, LoadEntry(f"s/{n}", b"{}")])

            async with anyio.create_task_group() as tg:
                for number, records in enumerate(writers):
                    tg.start_soon(write, number, records)
            assert await writers[1].count("shared", "r/") == 120
            assert await writers[0].count("shared", "s/") == 20  # each session once
        finally:
            for records in writers:
                await records.aclose()


# -- named budgets ---------------------------------------------------------------------------


async def test_budget_spend_adds_up_and_each_write_answers_the_totals(backend: Store) -> None:
    from greenroom.harness import BudgetStore, Spent

    budgets = BudgetStore(backend.records())
    try:
        first = await budgets.add({"team": Spent(100, 0.5, 1), "chat": Spent(7, 0.0, 1)})
        assert (first["team"].tokens, first["team"].cost, first["team"].calls) == (100, 0.5, 1)
        second = await budgets.add({"team": Spent(50, 0.25, 2)})
        assert list(second) == ["team"]  # the totals of the names written
        assert (second["team"].tokens, second["team"].cost, second["team"].calls) == (150, 0.75, 3)
        everything = await budgets.read()
        assert sorted(everything) == ["chat", "team"] and everything["chat"].tokens == 7
        assert await budgets.read(["team", "nobody"]) == {"team": everything["team"]}
        had = await budgets.reset("team")
        assert had is not None and had.tokens == 150
        again = await budgets.reset("team")  # a reset total is zero, kept (its version grows)
        assert again is not None and (again.tokens, again.cost, again.calls) == (0, 0.0, 0)
        assert await budgets.reset("nobody") is None
        assert {name: s.tokens for name, s in (await budgets.read()).items()} == {"chat": 7, "team": 0}
        assert (await budgets.add({"team": Spent(5, 0.0, 1)}))["team"].tokens == 5  # the new period
    finally:
        await budgets.aclose()


async def test_a_bad_budget_name_or_spend_is_refused_by_name_and_nothing_is_added(backend: Store) -> None:
    from greenroom.harness import BudgetStore, Spent

    budgets = BudgetStore(backend.records())
    try:
        await budgets.add({"team": Spent(10, 0.0, 1)})
        for spends, field in (
            ({"team": Spent(1, 0.0, 1), "": Spent(1, 0.0, 1)}, "name"),
            ({"team": Spent(1, 0.0, 1), "a b": Spent(1, 0.0, 1)}, "name"),
            ({"team": Spent(-5, 0.0, 1)}, "tokens"),
            ({"team": Spent(1, float("nan"), 1)}, "cost"),
            ({"team": Spent(1, 0.0, -1)}, "calls"),
        ):
            with pytest.raises(InvalidInput) as refused:
                await budgets.add(spends)
            assert refused.value.field == field
        assert (await budgets.read())["team"].tokens == 10  # nothing of a refused batch was added
        with pytest.raises(InvalidInput):
            await budgets.reset("no spaces allowed")
    finally:
        await budgets.aclose()


async def test_entity_states_are_saved_in_one_write_versioned_loaded_and_forgotten(backend: Store) -> None:
    """Issue 41's store: saves of several entities in one transaction, each a new version
    (a key given twice: its last state); loads of several at once, a key never saved
    absent; kinds apart; a count; a delete. After a restart too."""
    entities = backend.entity_store()
    try:
        assert await entities.save("Counter", [("a", b'{"n":1}'), ("b", b'{"n":2}'), ("a", b'{"n":3}')]) == {
            "a": 1, "b": 1
        }  # fmt: skip
        assert await entities.save("Counter", [("a", b'{"n":4}')]) == {"a": 2}
        await entities.save("Other", [("a", b"other")])
        found = await entities.load("Counter", ["a", "b", "never"])
        assert sorted(found) == ["a", "b"]
        assert (found["a"].state, found["a"].version, found["b"].state) == (b'{"n":4}', 2, b'{"n":2}')
        assert found["a"].saved_at > 0
        assert (await entities.load("Other", ["a"]))["a"].state == b"other"
        assert (await entities.count("Counter"), await entities.count("Nobody")) == (2, 0)
        assert await entities.delete("Counter", ["b", "never"]) == 1
        assert await entities.load("Counter", ["b"]) == {}
        assert await entities.load("Counter", []) == {}
    finally:
        await entities.aclose()
    entities = backend.entity_store()  # another connection, as after a restart
    try:
        assert (await entities.load("Counter", ["a"]))["a"].version == 2
    finally:
        await entities.aclose()


async def test_a_bad_entity_kind_key_or_state_is_refused_by_name_and_nothing_is_saved(backend: Store) -> None:
    entities = backend.entity_store()
    try:
        await entities.save("Counter", [("a", b"1")])
        for kind, states, field in (
            ("", [("a", b"2")], "kind"),
            ("no spaces", [("a", b"2")], "kind"),
            ("Counter", [("a", b"2"), ("", b"3")], "key"),
            ("Counter", [("a", b"2"), ("x" * 513, b"3")], "key"),
            ("Counter", [("a", b"2"), ("nul\x00", b"3")], "key"),
            ("Counter", [("a", b"2"), ("b", "text")], "state"),
            ("Counter", [("a", b"2"), ("b", b"x" * ((16 << 20) + 1))], "state"),
        ):
            with pytest.raises(InvalidInput) as refused:
                await entities.save(kind, states)  # type: ignore[arg-type]
            assert refused.value.field == field, (kind, field)
        with pytest.raises(InvalidInput):
            await entities.load("Counter", [""])
        stored = await entities.load("Counter", ["a", "b"])
        assert list(stored) == ["a"] and (stored["a"].state, stored["a"].version) == (
            b"1",
            1,
        )  # nothing saved
    finally:
        await entities.aclose()


async def test_an_entity_is_held_by_one_node_at_a_time_and_taken_over_once_released_or_lapsed(
    backend: Store,
) -> None:
    """Issue 41's placement: a claim takes free keys (and reads their states in the same
    transaction), leaves those another node's live lease holds (naming it), takes back its
    own, and takes over a released or lapsed one; a claim's placeholder is no saved state."""
    a, b = backend.entity_store(), backend.entity_store()  # two nodes' views
    try:
        claimed = await a.claim("Counter", ["y", "x", "x"], "node-a", 30)
        assert (claimed.taken, claimed.states, claimed.elsewhere) == (["x", "y"], {}, {})
        assert claimed.tokens == {"x": 1, "y": 1}
        assert await a.load("Counter", ["x"]) == {} and await a.count("Counter") == 0  # placeholders
        await a.save("Counter", [("x", b"1")])
        other = await b.claim("Counter", ["x", "z"], "node-b", 30)
        assert (other.taken, other.elsewhere) == (["z"], {"x": "node-a"})
        mine = await a.claim("Counter", ["x"], "node-a", 30)
        assert mine.taken == ["x"] and mine.states["x"].state == b"1"
        assert mine.tokens == {"x": 1}  # its own live lease: the same holding, the same token
        await a.release("Counter", ["x", "z"], "node-a")  # z is node-b's: left as it is
        moved = await b.claim("Counter", ["x"], "node-b", 30)
        assert moved.taken == ["x"] and (moved.states["x"].state, moved.states["x"].version) == (b"1", 1)
        assert (await a.claim("Counter", ["z"], "node-a", 30)).elsewhere == {"z": "node-b"}
        assert moved.tokens == {"x": 2}  # a new holding: the next token
        assert await b.renew("node-b", 30) == {("Counter", "x"): 2, ("Counter", "z"): 1}
        await b.claim("Counter", ["w"], "node-b", -1)  # a lease already lapsed: its node died
        assert (await a.claim("Counter", ["w"], "node-a", 30)).taken == ["w"]
        with pytest.raises(InvalidInput):
            await a.claim("no spaces", ["k"], "node-a", 30)
    finally:
        await a.aclose()
        await b.aclose()


async def test_an_entity_write_under_an_old_token_is_refused_whole_with_nothing_changed(
    backend: Store,
) -> None:
    """Issue 49's fencing of entities: a record written under its lease's token commits its
    state, its mail's ``done`` and its answers together; once another node took the lease
    (a lapse, a release), a write under the old token is refused whole — the state, the
    mail and the answers as they were — and the new holder's goes through."""
    from greenroom.store import Fenced, Record

    a, b = backend.entity_store(), backend.entity_store()
    try:
        token_a = (await a.claim("Counter", ["k"], "node-a", -1)).tokens["k"]  # lapses at once
        first = await a.write("Counter", "node-a", [Record("k", b"1", token_a)])
        assert first.versions == {"k": 1} and first.refused == {}  # lapsed, but nobody took it
        await b.post([("Counter", "k", b'"inc"', "asker", 5)])
        token_b = (await b.claim("Counter", ["k"], "node-b", 30)).tokens["k"]
        assert token_b == token_a + 1
        (mail,) = await b.take_mail("node-b")
        stale = await a.write(
            "Counter", "node-a", [Record("k", b"stale", token_a, (mail.seq,), (("asker", 5, True, b"2"),))]
        )
        refusal = stale.refused["k"]
        assert stale.versions == {} and isinstance(refusal, Fenced)
        assert (refusal.token, refusal.current) == (token_a, token_b)
        assert str(token_a) in str(refusal) and str(token_b) in str(refusal)
        assert (await b.load("Counter", ["k"]))["k"].state == b"1"  # nothing changed
        assert await b.take_answers("asker") == []
        await b.release("Counter", ["k"], "node-b")
        assert await b.orphans() == [("Counter", "k")]  # the mail is still there
        token_b = (await b.claim("Counter", ["k"], "node-b", 30)).tokens["k"]
        (mail,) = await b.take_mail("node-b")
        ok = await b.write(
            "Counter", "node-b", [Record("k", b"2", token_b, (mail.seq,), (("asker", 5, True, b"2"),))]
        )
        assert ok.versions == {"k": 2} and ok.refused == {}
        assert [(x.ask_id, x.body) for x in await a.take_answers("asker")] == [(5, b"2")]
        assert await b.orphans() == [] and await b.take_mail("node-b") == []  # done with the state
        settled = await b.write("Counter", "node-b", [Record("k", None, token_b)])  # the token only
        assert settled.versions == {} and settled.refused == {}
        await b.release("Counter", ["k"], "node-b")
        late = await b.write("Counter", "node-b", [Record("k", b"3", token_b)])  # its holding ended
        assert "released" in str(late.refused["k"])
        never = await a.write("Counter", "node-a", [Record("nobody", b"x", 1)])
        assert "never claimed" in str(never.refused["nobody"])
        assert (await a.load("Counter", ["k"]))["k"].state == b"2"
        for bad, field in [
            ([Record("k", b"9", -1)], "token"),
            ([Record("k", b"9", True)], "token"),  # type: ignore[arg-type]
            ([Record("k", b"9", 1), Record("k", b"8", 2)], "token"),
            ([Record("", b"9", 1)], "key"),
            ([Record("k", "text", 1)], "state"),  # type: ignore[arg-type]
            ([("k", b"9")], "records"),
        ]:
            with pytest.raises(InvalidInput) as caught:
                await a.write("Counter", "node-a", bad)  # type: ignore[arg-type]
            assert caught.value.field == field
        assert (await a.load("Counter", ["k"]))["k"].state == b"2"  # nothing written by any
    finally:
        await a.aclose()
        await b.aclose()


async def test_mail_for_an_entity_reaches_its_holder_at_least_once_and_answers_reach_the_asker(
    backend: Store,
) -> None:
    a, b = backend.entity_store(), backend.entity_store()
    try:
        await a.claim("Counter", ["m"], "node-a", 30)
        with anyio.fail_after(10):
            await a.wait("node-a", 30)  # the first wait starts listening and returns
        woke = anyio.Event()

        async def waiting() -> None:
            await a.wait("node-a", 30)
            woke.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(waiting)
            await b.post([("Counter", "m", b'"hi"', None, None), ("Counter", "m", b'"ask"', "node-b", 7)])
            with anyio.fail_after(10):  # woken by the post, not by its 30 s timeout
                await woke.wait()
        mail = await a.take_mail("node-a")
        assert [(m.body, m.asker, m.ask_id) for m in mail] == [(b'"hi"', None, None), (b'"ask"', "node-b", 7)]
        assert await a.take_mail("node-a") == [] and await b.take_mail("node-b") == []  # taken; not b's
        assert await a.orphans() == []  # held by node-a
        await a.release("Counter", ["m"], "node-a")  # the entity moves before the mail was done
        assert await b.orphans() == [("Counter", "m")]  # mail, and nobody holds it
        await b.claim("Counter", ["m"], "node-b", 30)
        assert await b.orphans() == []
        again = await b.take_mail("node-b")
        assert [m.seq for m in again] == [m.seq for m in mail]  # taken again by the new holder
        await b.done_mail([m.seq for m in again])
        assert await b.take_mail("node-b") == []
        await a.answer([("node-b", 7, True, b"8")])
        assert [(x.ask_id, x.ok, x.body) for x in await b.take_answers("node-b")] == [(7, True, b"8")]
        assert await b.take_answers("node-b") == []
    finally:
        await a.aclose()
        await b.aclose()


async def test_budget_writers_at_once_never_lose_each_others_spend(
    store_url: str | None, tmp_path: Path
) -> None:
    """Two processes' stores (two daemons) adding to one budget together: every increment
    counts."""
    from greenroom.harness import BudgetStore, Spent

    async with (
        await make_store(store_url, tmp_path / "data") as one,
        await make_store(store_url, tmp_path / "data") as two,
    ):
        writers = [BudgetStore(one.records()), BudgetStore(two.records())]
        try:

            async def spend(budgets: Any) -> None:
                for _ in range(25):
                    await budgets.add({"team": Spent(3, 0.5, 1), "chat": Spent(1, 0.0, 1)})

            async with anyio.create_task_group() as tg:
                for budgets in writers:
                    tg.start_soon(spend, budgets)
            totals = await writers[0].read()
            assert (totals["team"].tokens, totals["team"].cost, totals["team"].calls) == (150, 25.0, 50)
            assert totals["chat"].tokens == 50
        finally:
            for budgets in writers:
                await budgets.aclose()


async def test_a_named_budget_continues_from_its_stored_total_and_shares_it(
    store_url: str | None, tmp_path: Path
) -> None:
    """A tracked budget starts from what was spent before (a restart), takes what another
    daemon spends, is not charged again for a replayed step, and takes an operator's reset."""
    from greenroom.actors import ActorSystem
    from greenroom.harness import BudgetStore, TokenBudget
    from greenroom.harness._ledger import BudgetLedgerActor, TrackBudget

    async def spend(budget: TokenBudget, tokens: int) -> None:
        admission = await budget.admit()
        assert admission is not None
        admission.spend(tokens, 0.01)

    data_dir = tmp_path / "data"
    async with await make_store(store_url, data_dir) as store, ActorSystem() as system:
        ledger = await system.spawn(lambda: BudgetLedgerActor(BudgetStore(store.records())), name="budgets")
        budget = TokenBudget(1000, name="team")
        assert (await ledger.ask(TrackBudget(budget))).tokens == 0
        await spend(budget, 300)
        await spend(budget, 200)
        budget.restore(400)  # a replayed step: its spend is in the total already
        assert budget.spent == 500
        await ledger.stop()  # what is unwritten is written on stop

    async with (
        await make_store(store_url, data_dir) as store,
        await make_store(store_url, data_dir) as other,
        ActorSystem() as system,
    ):  # a restart: this daemon, and another on the same store
        ledger = await system.spawn(
            lambda: BudgetLedgerActor(BudgetStore(store.records()), refresh_every=0.05), name="budgets"
        )
        elsewhere = await system.spawn(
            lambda: BudgetLedgerActor(BudgetStore(other.records())), name="elsewhere"
        )
        again, theirs = TokenBudget(1000, name="team"), TokenBudget(1000, name="team")
        assert (await ledger.ask(TrackBudget(again))).tokens == 500
        assert again.spent == 500 and round(again.cost, 6) == 0.02 and again.remaining == 500
        await elsewhere.ask(TrackBudget(theirs))
        await spend(theirs, 450)
        await eventually(lambda: again.spent == 950, timeout=10)  # the other daemon's spend
        await spend(again, 60)  # past the limit now, on both
        await eventually(lambda: again.exhausted and theirs.exhausted, timeout=10)
        assert await again.admit() is None
        reset = BudgetStore(other.records())
        try:
            assert (await reset.reset("team")) is not None
        finally:
            await reset.aclose()
        await eventually(lambda: again.spent == 0 and not again.exhausted, timeout=10)  # a new period
        await ledger.stop()
        await elsewhere.stop()


# -- the archive ---------------------------------------------------------------------------


async def _archived_ids(supervisor: ActorRef) -> list[str]:
    return [t.id for t in await supervisor.ask(ListTasks(archived=True))]


async def test_finished_tasks_leave_for_the_archive_where_they_are_still_found(backend: Store) -> None:
    """Past ``archive_after``, finished tasks leave the live graph: the live listing and
    the counts no longer hold them, ``GetTask`` and the archived listing still find them,
    their ids stay taken, a task depending on an archived one is decided by its status
    (completed: ready; cancelled: failed), and an archived task cannot be changed. All of
    it after a restart too, and for a reader with no daemon."""
    from greenroom.store._retention import Retention

    now = [1_000_000.0]
    options: dict[str, Any] = {
        "retention": Retention(archive_after=60, keep_finished=None, check_every=0.01),
        "clock": lambda: now[0],
        "lease_check_interval": 0.01,
    }
    async with open_node(backend, **options) as node:
        sup = node.supervisor
        await sup.ask(Submit([task("a"), task("b"), task("c", depends_on=["a", "b"]), task("d")]))
        for task_id in ("a", "b"):
            granted = await sup.ask(Claim("x", "w"))
            assert isinstance(granted, Granted) and granted.task.id == task_id
            await sup.ask(Complete(task_id, "x", done(task_id)))
        await sup.ask(Cancel("d", "not needed"))
        journal = backend.step_store()
        await journal.write([_step("a", "p0/main/m0", body={"text": "done"})])
        assert await _archived_ids(sup) == []  # finished just now: live for a minute
        now[0] += 120

        async def archived() -> bool:
            return await _archived_ids(sup) == ["a", "b", "d"]

        await eventually(archived, timeout=10)
        assert [t.id for t in await sup.ask(ListTasks())] == ["c"]

        async def counted() -> bool:  # counted once the pass resumes: a reader may see its commit first
            return (await sup.ask(Stats())).archived_here == 3

        await eventually(counted, timeout=10)
        stats = await sup.ask(Stats())
        assert (stats.total, stats.archived_here, stats.archive_dropped_here) == (1, 3, 0)
        assert stats.writes is not None and stats.writes.count >= 4  # a submission, two claims...
        assert await journal.read("a") == []  # its step journal went with it
        await journal.aclose()
        found = await sup.ask(GetTask("a"))
        assert found.status is TaskStatus.COMPLETED and found.result is not None
        with pytest.raises(DuplicateTask):  # an archived id stays taken
            await sup.ask(Submit([task("a")]))
        with pytest.raises(InvalidTransition, match=r"cancel task 'a': it is COMPLETED \(archived\)"):
            await sup.ask(Cancel("a"))
        await sup.ask(Submit([task("e", depends_on=["a"]), task("f", depends_on=["d"])]))
        assert (await sup.ask(GetTask("f"))).status is TaskStatus.DEPENDENCY_FAILED
        claimed = {(await sup.ask(Claim(agent, "w"))).task.id for agent in ("y", "z")}  # type: ignore[union-attr]
        assert claimed == {"c", "e"}  # a dependency met in the archive
    async with open_node(backend, **options) as node:  # a restart
        sup = node.supervisor
        assert (await sup.ask(GetTask("b"))).status is TaskStatus.COMPLETED
        assert await _archived_ids(sup) == ["a", "b", "d"]
        assert {t.id for t in await sup.ask(ListTasks())} == {"c", "e", "f"}
    assert (await backend.read_task("d")).status is TaskStatus.CANCELLED  # no daemon
    assert [t.id for t in await backend.read_tasks(archived=True)] == ["a", "b", "d"]
    sizes = await backend.sizes()
    assert (sizes.archived_tasks, sizes.archive_parts) == (3, 1) and sizes.bytes > 0
    assert sizes.bytes == sum(sizes.by_part.values())
    with pytest.raises(UnknownTask):
        await backend.read_task("nope")


async def test_the_newest_finished_stay_live_and_the_archive_forgets_past_archive_for(
    backend: Store,
) -> None:
    """``keep_finished``: only the newest finished tasks stay live; ``archive_for``: the
    archive drops what is older, whole (then the id is free again)."""
    from greenroom.store._retention import Retention

    now = [1_000_000.0]
    retention = Retention(archive_after=None, keep_finished=1, archive_for=86400, check_every=0.01)
    async with open_node(
        backend, retention=retention, clock=lambda: now[0], lease_check_interval=0.01
    ) as node:
        sup = node.supervisor
        await sup.ask(Submit([task(f"t{i}") for i in range(3)]))
        for _ in range(3):
            granted = await sup.ask(Claim("x", "w"))
            assert isinstance(granted, Granted)
            await sup.ask(Complete(granted.task.id, "x", done(granted.task.id)))
            now[0] += 1

        async def two_archived() -> bool:
            return await _archived_ids(sup) == ["t0", "t1"]

        await eventually(two_archived, timeout=10)
        assert [t.id for t in await sup.ask(ListTasks())] == ["t2"]  # the newest stays live
        now[0] += 3 * 86400

        async def forgotten() -> bool:
            return await _archived_ids(sup) == []

        await eventually(forgotten, timeout=10)
        with pytest.raises(UnknownTask):
            await sup.ask(GetTask("t0"))
        with pytest.raises(InvalidSubmission, match="depends_on"):  # a dropped id is unknown, not "done"
            await sup.ask(Submit([task("late", depends_on=["t0"])]))
        await sup.ask(Submit([task("t0")]))  # past archive_for the id is free again
        await sup.ask(Submit([task("after", depends_on=["t0"])]))  # it means the new t0 now
        granted = await sup.ask(Claim("x", "w"))
        assert isinstance(granted, Granted) and granted.task.id == "t0"  # "after" waits for it
        assert await sup.ask(Claim("y", "w")) == NoWork()
