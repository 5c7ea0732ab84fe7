"""The log actor: ordered durable appends, the narrator-only policy, torn tails, tailing."""

from __future__ import annotations

import json
from contextlib import aclosing
from pathlib import Path
from typing import Any

import anyio
import pytest
from _support import eventually, file_log, open_node

from greenroom import Actor, ActorRef, ActorSystem
from greenroom._files import DataDirBusy
from greenroom.embedded import EventLogError, FileEventStore, read_events
from greenroom.embedded._reader import tail_events
from greenroom.log import LogActor, NarratorCapability, PolicyError
from greenroom.log._policy import surfacing_flag
from greenroom.messages import AGENT_UPDATE, NARRATION, Append, Event, Subscribe, Unsubscribe

pytestmark = pytest.mark.anyio


async def test_concurrent_appends_get_gapless_seqs_in_file_order(tmp_path: Path) -> None:
    acked: list[Event] = []
    async with ActorSystem() as system:
        log = await system.spawn(lambda: file_log(tmp_path))

        async def agent(index: int) -> None:
            for i in range(50):
                acked.append(await log.ask(Append(type=AGENT_UPDATE, agent_id=f"a{index}", payload={"i": i})))

        async with anyio.create_task_group() as tg:
            for index in range(40):
                tg.start_soon(agent, index)
    on_disk = read_events(tmp_path / "events.jsonl")
    assert [e.seq for e in on_disk] == list(range(1, 2001))
    assert sorted(acked, key=lambda e: e.seq) == on_disk  # every acknowledged event, as acknowledged
    for index in range(40):  # each agent's own events keep their order
        mine = [e.payload["i"] for e in on_disk if e.agent_id == f"a{index}"]
        assert mine == list(range(50))
    lines = (tmp_path / "events.jsonl").read_bytes().splitlines()
    assert all(json.loads(line)["seq"] for line in lines)


async def test_log_stats_count_the_events_made_durable_and_time_each_write(tmp_path: Path) -> None:
    """``LogStats``: what ``/metrics`` reads of the log — events stored (a refused one not
    counted) and every write in the histogram, one write per batch."""
    from greenroom.messages import AppendMany, LogStats

    async with ActorSystem() as system:
        log = await system.spawn(lambda: file_log(tmp_path))
        assert (await log.ask(LogStats())).appended == 0
        await log.ask(Append(type=AGENT_UPDATE, payload={"i": 1}))
        await log.ask(AppendMany([Append(type=AGENT_UPDATE, payload={"i": i}) for i in range(5)]))
        with pytest.raises(PolicyError):
            await log.ask(Append(type=NARRATION, visibility="user"))
        figures = await log.ask(LogStats())
    assert figures.appended == 6 == len(read_events(tmp_path / "events.jsonl"))
    assert figures.writes.count == 2 and figures.writes.sum > 0
    assert len(figures.writes.counts) == len(figures.writes.bounds) + 1


async def test_only_the_narrators_capability_may_show_text_to_users(tmp_path: Path) -> None:
    narrator = NarratorCapability()
    async with ActorSystem() as system:
        log = await system.spawn(lambda: file_log(tmp_path, narrator=narrator))
        with pytest.raises(PolicyError) as refused:
            await log.ask(Append(type=NARRATION, payload={"text": "hi"}, visibility="user"))
        assert refused.value.policy_error == "narrator_only"
        with pytest.raises(PolicyError):  # a look-alike token is not the capability
            await log.ask(Append(type=NARRATION, visibility="user", capability=NarratorCapability()))
        with pytest.raises(PolicyError):
            await log.ask(Append(type=NARRATION, visibility="user", capability=repr(narrator)))
        shown = await log.ask(
            Append(type=NARRATION, payload={"text": "hi"}, visibility="user", capability=narrator)
        )
        assert shown.visibility == "user" and shown.seq == 1
        # even the narrator cannot make an agent's event user-visible
        with pytest.raises(PolicyError):
            await log.ask(Append(type=AGENT_UPDATE, payload={"render_to_user": True}, capability=narrator))
    assert [e.seq for e in read_events(tmp_path / "events.jsonl")] == [1]


async def test_torn_last_line_is_cut_on_start_and_seq_continues(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with ActorSystem() as system:
        log = await system.spawn(lambda: file_log(tmp_path))
        for i in range(3):
            await log.ask(Append(type="X", payload={"i": i}))
    path = tmp_path / "events.jsonl"
    whole = path.read_bytes()
    path.write_bytes(whole + b'{"seq":4,"ts":1.0,"type":"X","payl')  # a crash mid-append
    async with ActorSystem() as system:
        log = await system.spawn(lambda: file_log(tmp_path))
        event = await log.ask(Append(type="Y"))
    assert event.seq == 4
    assert "cut 34 bytes of a torn last line" in caplog.text
    assert path.read_bytes().startswith(whole)
    assert [e.seq for e in read_events(path)] == [1, 2, 3, 4]


async def test_garbled_complete_last_line_is_an_error_and_nothing_is_cut(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    content = b'{"seq":1,"ts":1.0,"type":"X"}\n{"seq":2,"ts":1.0,"type":"X","nonsense":\n'
    path.write_bytes(content)
    async with ActorSystem() as system:
        with pytest.raises(EventLogError, match=r"line 2 \(the last complete line\) is not a valid event"):
            await system.spawn(lambda: file_log(tmp_path))
    assert path.read_bytes() == content  # a complete line is damage to look at, never cut


async def test_corrupt_line_in_the_middle_is_reported_by_readers(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_bytes(b'{"seq":1,"ts":1.0,"type":"X"}\n{"seq":"two"}\n{"seq":3,"ts":1.0,"type":"X"}\n')
    with pytest.raises(EventLogError, match="line 2: bad event: field 'seq' expected `int`"):
        read_events(path)


async def test_second_log_actor_on_the_same_dir_is_refused(tmp_path: Path) -> None:
    async with ActorSystem() as system:
        await system.spawn(lambda: file_log(tmp_path))
        with pytest.raises(DataDirBusy, match="the event log"):
            await system.spawn(lambda: file_log(tmp_path))


class Collector(Actor):
    def __init__(self) -> None:
        self.seen: list[int] = []

    async def receive(self, message: Any) -> Any:
        if message == "seen":
            return self.seen
        self.seen.append(message.seq)


async def _seen_all(collector: ActorRef) -> bool:
    return bool(await collector.ask("seen") == [1, 2, 3, 4, 5])


async def test_tail_follows_and_subscribers_get_durable_events(tmp_path: Path) -> None:
    async with open_node(tmp_path) as node:
        collector = await node.system.spawn(Collector)
        await node.log.ask(Subscribe(collector))
        followed: list[int] = []

        async def follow() -> None:
            async with aclosing(tail_events(tmp_path / "events.jsonl", poll_interval=0.01)) as events:
                async for event in events:
                    followed.append(event.seq)
                    if len(followed) == 5:
                        return

        async with anyio.create_task_group() as tg:
            tg.start_soon(follow)
            for i in range(5):
                await node.log.ask(Append(type="X", payload={"i": i}))
                await anyio.sleep(0.01)
        assert followed == [1, 2, 3, 4, 5]
        await eventually(lambda: _seen_all(collector))
        rest = [e.seq async for e in tail_events(tmp_path / "events.jsonl", after_seq=3, follow=False)]
    assert rest == [4, 5]


@pytest.mark.parametrize(
    ("append", "message"),
    [
        (Append(type=""), "bad event: field 'type' must be 1-100 letters, digits or _.:- (got '')"),
        (Append(type="has space"), "field 'type' must be 1-100 letters, digits or _.:- (got 'has space')"),
        (Append(type="X", payload=[1, 2]), "field 'payload' must be a JSON object (a dict) (got [1, 2])"),  # type: ignore[arg-type]
        (Append(type="X", task_id=7), "field 'task_id' must be a string or None (got 7)"),  # type: ignore[arg-type]
    ],
)
async def test_malformed_appends_are_refused_with_nothing_appended(
    tmp_path: Path, append: Append, message: str
) -> None:
    async with ActorSystem() as system:
        log = await system.spawn(lambda: file_log(tmp_path))
        first = await log.ask(Append(type="X", payload={"kept": True}))
        with pytest.raises(ValueError) as refused:
            await log.ask(append)
        assert message in str(refused.value)
        after = await log.ask(Append(type="X"))
    assert (first.seq, after.seq) == (1, 2)  # the refused one took no seq
    assert [e.payload for e in read_events(tmp_path / "events.jsonl")] == [{"kept": True}, {}]


@pytest.mark.parametrize(
    ("build", "error", "message"),
    [
        (lambda: LogActor(FileEventStore(), max_batch=0), ValueError, "max_batch must be an int >= 1, got 0"),
        (
            lambda: LogActor(FileEventStore(), narrator="x"),
            TypeError,
            "must be a NarratorCapability, got 'x'",
        ),
        (lambda: LogActor("/tmp"), TypeError, "LogActor store must be an EventStore, got '/tmp'"),
    ],
)
async def test_bad_log_actor_arguments(build: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        build()


async def test_policy_verdicts_hold_when_remembered_and_after_the_memory_is_cleared(tmp_path: Path) -> None:
    """The policy remembers which payload keys (and the log which event types) it has
    judged; a remembered verdict, and one made again after the memory filled up and
    was cleared, must be the verdict a fresh check gives."""
    async with ActorSystem() as system:
        log = await system.spawn(lambda: file_log(tmp_path))
        for _ in range(2):  # the second time, both verdicts come from memory
            with pytest.raises(PolicyError) as refused:
                await log.ask(Append(type="X", payload={"display_to_user": 1, "note": "n"}))
            assert "payload.display_to_user" in str(refused.value)
            assert (await log.ask(Append(type="X", payload={"note": "n", "display_to_user": 0}))).seq > 0
        for i in range(5000):  # more distinct keys than the memory holds
            assert surfacing_flag({f"k{i}": 1}) is None
        assert surfacing_flag({"display_to_user": 1}) == "payload.display_to_user"
        with pytest.raises(
            ValueError, match=r"field 'type' must be 1-100 letters, digits or _\.:- \(got \['X'\]\)"
        ):
            await log.ask(Append(type=["X"]))  # type: ignore[arg-type]  # unhashable: no cache lookup
        for i in range(1100):  # more distinct types than that memory holds
            await log.ask(Append(type=f"T{i}"))
        with pytest.raises(ValueError, match=r"got 'bad type'"):
            await log.ask(Append(type="bad type"))
    stored = read_events(tmp_path / "events.jsonl")
    assert [e.type for e in stored[:2]] == ["X", "X"] and len(stored) == 2 + 1100


class _CountedStore(FileEventStore):
    """The file store, noting the size of each batch written."""

    def __init__(self, data_dir: Path, writes: list[int]) -> None:
        super().__init__(data_dir)
        self.writes = writes

    async def write(self, events: Any, encoded: Any = None) -> Any:
        self.writes.append(len(events))
        return await super().write(events, encoded)


async def test_told_events_linger_for_company_and_an_asked_one_writes_them_at_once(tmp_path: Path) -> None:
    """Told appends (nobody waits) wait up to ``linger`` for more before one write; an
    asked append writes the batch as soon as the mailbox is empty; a stop writes what is
    held; ``linger=0`` writes each as before."""
    writes: list[int] = []

    async def barrier(log: ActorRef) -> None:  # the log has handled everything sent before
        await log.ask(Unsubscribe(log))

    async def told_two(log: ActorRef) -> None:  # two told appends, each handled before the next
        for i in range(2):
            log.tell(Append(type=AGENT_UPDATE, payload={"told": i}))
            await barrier(log)

    async with ActorSystem() as system:
        log = await system.spawn(lambda: LogActor(_CountedStore(tmp_path / "a", writes), linger=3600))
        for i in range(3):
            log.tell(Append(type=AGENT_UPDATE, payload={"told": i}))
            await barrier(log)
        assert writes == []  # held: nobody waits for them
        asked = await log.ask(Append(type=AGENT_UPDATE, payload={"asked": True}))
        assert (asked.seq, writes) == (4, [4])  # written with the asked one, at once
        log.tell(Append(type=AGENT_UPDATE, payload={"told": 3}))
        await barrier(log)
    assert writes == [4, 1]  # the stop wrote what was held
    assert [e.seq for e in read_events(tmp_path / "a" / "events.jsonl")] == [1, 2, 3, 4, 5]

    writes.clear()
    async with ActorSystem() as system:
        log = await system.spawn(lambda: LogActor(_CountedStore(tmp_path / "b", writes), linger=0.05))
        await told_two(log)
        await eventually(lambda: writes == [2])  # the linger ran out: one write for both
    assert writes == [2]

    writes.clear()
    async with ActorSystem() as system:
        log = await system.spawn(lambda: LogActor(_CountedStore(tmp_path / "c", writes), linger=0))
        await told_two(log)
        assert writes == [1, 1]  # no linger: each as the mailbox empties


def test_a_bad_linger_is_refused_by_name(tmp_path: Path) -> None:
    for bad in (-1, float("nan"), "5ms", True):
        with pytest.raises(ValueError, match="LogActor linger"):
            LogActor(FileEventStore(tmp_path), linger=bad)  # type: ignore[arg-type]


@pytest.mark.virtual_time
async def test_the_narrator_streams_a_reply_to_users_in_gathered_pieces(tmp_path: Path) -> None:
    from greenroom.llm import ScriptedModel
    from greenroom.log import narrate
    from greenroom.messages import NARRATION_DELTA, ChatMessage, ChatRequest

    narrator = NarratorCapability()
    words = " ".join(f"w{n}" for n in range(20))
    model = ScriptedModel([words], latency=0.1, token_latency=0.02)
    request = ChatRequest((ChatMessage("user", "tell them"),))
    async with ActorSystem() as system:
        log = await system.spawn(lambda: file_log(tmp_path, narrator=narrator))
        async with model.stream(request) as stream:
            reply = await narrate(log, narrator, stream, task_id="t1", every=0.1)
        async with ScriptedModel(["sneaky"]).stream(request) as stream:
            with pytest.raises(PolicyError) as refused:  # another capability: nothing reaches users
                await narrate(log, NarratorCapability(), stream)
        assert refused.value.policy_error == "narrator_only"
    events = read_events(tmp_path / "events.jsonl")
    deltas = [e for e in events if e.type == NARRATION_DELTA]
    (whole,) = [e for e in events if e.type == NARRATION]
    assert all(e.visibility == "user" and e.task_id == "t1" for e in [*deltas, whole])
    assert "".join(e.payload["text"] for e in deltas) == words == whole.payload["text"] == reply.text
    assert [e.payload["index"] for e in deltas] == list(range(len(deltas)))
    # 20 pieces 20 ms apart, gathered 100 ms at a time: the first at once, then ~5 pieces each
    assert deltas[0].payload["text"] == "w0 " and 4 <= len(deltas) <= 7
