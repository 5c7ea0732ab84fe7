"""``Batcher``: one durable write per batch, replies only after it, errors to the batch's
askers alone; a SIGKILL between write and reply loses nothing acknowledged; and the
policies the writers need (linger, batch size, one batch in flight per lane)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest
from _support import eventually

from greenroom import Actor, ActorSystem
from greenroom._commit import Batcher
from greenroom._files import append_durably, open_for_append
from greenroom._threads import run_blocking

pytestmark = pytest.mark.anyio

TESTS = Path(__file__).resolve().parent


class Committer(Actor):
    """Answers each ask with its message once the batch holding it is durable in ``path``;
    ``write`` is the blocking write of one batch (the test steers it)."""

    def __init__(self, path: Path, write: Any = None) -> None:
        self.path = path
        self.commits: Batcher[str] = Batcher(max_batch=1000)
        self.lines: list[bytes] = []
        self.write = write
        self.batches = 0

    async def on_start(self) -> None:
        self.fd = await anyio.to_thread.run_sync(open_for_append, self.path)

    async def on_stop(self) -> None:
        os.close(self.fd)

    async def receive(self, message: Any) -> Any:
        self.commits.add(self.context.reply_later(), message)
        self.lines.append(f"{message}\n".encode())
        if self.commits.due(self.context.queued):
            data, self.lines = b"".join(self.lines), []
            self.batches += 1
            batch = self.batches

            def write() -> None:
                if self.write is not None:
                    self.write(batch, data)
                append_durably(self.fd, data)

            async def write_batch(values: list[str]) -> None:
                await run_blocking(write)

            await self.commits.commit(write_batch, stopped=lambda: RuntimeError("stopped"))


async def test_no_reply_before_the_batch_is_durable(tmp_path: Path) -> None:
    path = tmp_path / "data.log"
    writing, release = threading.Event(), threading.Event()

    def held(batch: int, data: bytes) -> None:
        writing.set()
        release.wait(10)

    answers: list[str] = []
    async with ActorSystem() as system, anyio.create_task_group() as tg:
        ref = await system.spawn(lambda: Committer(path, held))

        async def ask(value: str) -> None:
            answers.append(await ref.ask(value, timeout=None))

        for value in ("a", "b", "c"):
            tg.start_soon(ask, value)
        await anyio.to_thread.run_sync(writing.wait, 10)
        assert answers == []  # the write has not returned: nobody is answered
        assert path.read_bytes() == b""  # ... and nothing is on disk yet
        release.set()
        await eventually(lambda: len(answers) == 3)
    assert sorted(answers) == ["a", "b", "c"]
    assert sorted(path.read_bytes().splitlines()) == [b"a", b"b", b"c"]


async def test_a_write_error_fails_exactly_the_batchs_askers(tmp_path: Path) -> None:
    path = tmp_path / "data.log"
    writing, release = threading.Event(), threading.Event()

    def fails_first(batch: int, data: bytes) -> None:
        if not writing.is_set():  # the first write of all (the restarted actor counts anew)
            writing.set()
            release.wait(10)
            raise OSError(28, "No space left on device")

    outcomes: dict[str, Any] = {}
    async with ActorSystem() as system, anyio.create_task_group() as tg:
        ref = await system.spawn(lambda: Committer(path, fails_first))

        async def ask(value: str) -> None:
            try:
                outcomes[value] = await ref.ask(value, timeout=None)
            except OSError as error:
                outcomes[value] = error

        for value in ("a", "b"):
            tg.start_soon(ask, value)
        await anyio.to_thread.run_sync(writing.wait, 10)
        for value in ("c", "d"):  # queued during the failing write: the next batch
            tg.start_soon(ask, value)
        await eventually(lambda: len(ref._cell.mailbox) == 2)
        release.set()
        await eventually(lambda: len(outcomes) == 4)
    assert isinstance(outcomes["a"], OSError) and isinstance(outcomes["b"], OSError)
    assert "No space left" in str(outcomes["a"])
    assert (outcomes["c"], outcomes["d"]) == ("c", "d")  # the restarted actor wrote them
    assert sorted(path.read_bytes().splitlines()) == [b"c", b"d"]  # nothing of the failed batch


def test_a_batcher_checks_its_settings_naming_them() -> None:
    with pytest.raises(ValueError, match="Batcher max_batch must be an int >= 1, got 0"):
        Batcher(max_batch=0)
    with pytest.raises(ValueError, match="LogActor linger"):
        Batcher(linger=-1, owner="LogActor")


class Reply:
    def __init__(self) -> None:
        self.outcome: Any = None

    def succeed(self, value: Any) -> None:
        self.outcome = ("ok", value)

    def fail(self, error: BaseException) -> None:
        self.outcome = ("failed", error)


def test_told_values_linger_and_an_asked_one_or_a_full_batch_is_due_at_once() -> None:
    batcher: Batcher[int] = Batcher(max_batch=3, linger=0.005)
    batcher.add(None, 1)
    assert not batcher.due(queued=0) and batcher.lingering(queued=0)  # told only: wait for more
    assert not batcher.due(queued=5) and not batcher.lingering(queued=5)  # the mailbox first
    batcher.add(Reply(), 2)
    assert batcher.due(queued=0) and not batcher.lingering(queued=0)  # someone waits
    assert not batcher.due(queued=1)
    batcher.add(None, 3)
    assert batcher.due(queued=7)  # full: at once, however much is queued
    eager: Batcher[int] = Batcher()
    eager.add(None, 1)
    assert eager.due(queued=0) and not eager.lingering(queued=0)  # no linger: as before


def test_a_lane_with_a_batch_in_flight_gathers_until_it_ends_unless_a_full_batch_waits() -> None:
    batcher: Batcher[str] = Batcher(max_batch=3)
    for value in ("c1", "c2"):
        batcher.add(None, value, key="claims")
    batcher.add(None, "x", key="other")
    first = batcher.take()
    assert first is not None and (first.key, first.values) == ("claims", ["c1", "c2"])
    batcher.add(None, "c3", key="claims")  # arrives during the write: gathers behind it
    second = batcher.take()
    assert second is not None and (second.key, second.values) == ("other", ["x"])
    assert batcher.take() is None and len(batcher) == 1  # "claims" is in flight
    for value in ("c4", "c5"):
        batcher.add(None, value, key="claims")
    full = batcher.take()  # a full batch goes even so
    assert full is not None and full.values == ["c3", "c4", "c5"]
    batcher.done(first)
    batcher.done(full)
    batcher.add(None, "c6", key="claims")
    last = batcher.take()
    assert last is not None and last.values == ["c6"] and not batcher


def test_a_lane_past_the_batch_size_is_taken_in_turns_and_a_batch_put_back_goes_first() -> None:
    batcher: Batcher[int] = Batcher(max_batch=2)
    for value in range(5):
        batcher.add(None, value, key="a")
    batcher.add(None, 9, key="b")
    taken = batcher.take()
    assert taken is not None and taken.values == [0, 1]
    behind = batcher.take()  # "a" has more, but went behind "b"
    assert behind is not None and behind.values == [9]
    batcher.put_back(behind)  # its worker was gone
    again = batcher.take()
    assert again is not None and again.values == [9]
    assert [b.values for b in batcher.drain()] == [[2, 3], [4]]


def test_answers_follow_the_write_results_and_a_failure_fails_every_reply() -> None:
    batcher: Batcher[int] = Batcher()
    replies = [Reply(), None, Reply()]
    for reply, value in zip(replies, (1, 2, 3), strict=True):
        batcher.add(reply, value)
    batch = batcher.take()
    assert batch is not None
    batch.answer(["one", "two", ValueError("three")])
    assert replies[0].outcome == ("ok", "one")  # type: ignore[union-attr]
    assert replies[2].outcome[0] == "failed"  # type: ignore[union-attr]
    waiting = [Reply(), Reply()]
    for reply in waiting:
        batcher.add(reply, 0, key="k")
    batcher.fail_all(RuntimeError("stopping"))
    assert [r.outcome[0] for r in waiting] == ["failed", "failed"] and not batcher


def test_a_sigkill_between_the_write_and_the_replies_loses_nothing_acknowledged(tmp_path: Path) -> None:
    data, acks = tmp_path / "data.log", tmp_path / "acks.log"
    script = f"""
import os, signal, sys
sys.path.insert(0, {str(TESTS)!r})
import anyio
from greenroom import ActorSystem
from test_commit import Committer

def killer(batch, data):
    if batch == 4:  # durably written below, then killed before any reply of this batch
        from greenroom._files import append_durably
        append_durably(os.open({str(data)!r}, os.O_WRONLY | os.O_APPEND), data)
        os.kill(os.getpid(), signal.SIGKILL)

async def main():
    async with ActorSystem() as system:
        ref = await system.spawn(lambda: Committer(__import__("pathlib").Path({str(data)!r}), killer))
        async def one(i):
            value = await ref.ask(f"m{{i}}", timeout=None)
            fd = os.open({str(acks)!r}, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            os.write(fd, (value + "\\n").encode())
            os.close(fd)
        for round in range(10):
            async with anyio.create_task_group() as tg:
                for i in range(round * 20, round * 20 + 20):
                    tg.start_soon(one, i)

anyio.run(main, backend=sys.argv[1])
"""
    for backend in ("asyncio", "trio"):
        data.unlink(missing_ok=True)
        acks.unlink(missing_ok=True)
        done = subprocess.run([sys.executable, "-c", script, backend], capture_output=True, timeout=60)
        assert done.returncode == -signal.SIGKILL, done.stderr.decode()
        acknowledged = set(acks.read_text().split()) if acks.exists() else set()
        on_disk = data.read_bytes().splitlines()
        assert acknowledged  # batches 1-3 were answered before the kill
        assert acknowledged <= {line.decode() for line in on_disk}  # every one of them is on disk
        assert len(on_disk) > len(acknowledged)  # the killed batch is on disk, yet was never answered
