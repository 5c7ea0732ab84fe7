"""``GroupCommit``: one durable write per batch, replies only after it, errors to the
batch's askers alone; and a SIGKILL between write and reply loses nothing acknowledged."""

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
from greenroom._commit import GroupCommit
from greenroom._files import append_durably, open_for_append

pytestmark = pytest.mark.anyio

TESTS = Path(__file__).resolve().parent


class Committer(Actor):
    """Answers each ask with its message once the batch holding it is durable in ``path``;
    ``write`` is the blocking write of one batch (the test steers it)."""

    def __init__(self, path: Path, write: Any = None) -> None:
        self.path = path
        self.commits: GroupCommit[str] = GroupCommit(max_batch=1000)
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

            await self.commits.commit(write, stopped=lambda: RuntimeError("stopped"))


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


def test_a_group_commit_checks_its_batch_size() -> None:
    with pytest.raises(ValueError, match="GroupCommit max_batch must be an int >= 1, got 0"):
        GroupCommit(max_batch=0)


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
