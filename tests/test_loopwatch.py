"""Issue 49: a daemon whose event loop was blocked longer than a fraction of its lease
says which call blocked it, once per stall, in the log — on both loops."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

from greenroom import ActorSystem
from greenroom._loopwatch import LoopWatch

pytestmark = pytest.mark.anyio


class _Said(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []
        self.arrived = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        self.arrived.set()


def block_the_loop_until_said(watch: LoopWatch, said: _Said, looks_after: int) -> None:
    """A call that blocks the event loop (it runs on it, and waits on a thread's event):
    until the warning came, then for ``looks_after`` more looks of the watcher."""
    assert said.arrived.wait(20), "no warning while the loop was blocked"
    with watch.looked:
        until = watch.checks + looks_after
        assert watch.looked.wait_for(lambda: watch.checks >= until, timeout=20)


async def test_a_blocked_loop_is_said_once_naming_the_call_that_blocked_it() -> None:
    said = _Said()
    logger = logging.getLogger("greenroom.loop")
    logger.addHandler(said)
    try:
        async with ActorSystem() as system:
            watch: Any = None

            def make() -> LoopWatch:
                nonlocal watch
                watch = LoopWatch(0.2, "every heartbeat waited")
                return watch

            ref = await system.spawn(make, name="loopwatch")
            block_the_loop_until_said(watch, said, looks_after=4)  # 4 more looks: still one warning
            assert len(said.records) == 1 and watch.stalls == 1
            text = said.records[0].getMessage()
            assert "(more than 0.2 s): every heartbeat waited" in text
            assert "in block_the_loop_until_said (tests/test_loopwatch.py:" in text, text
            said.arrived.clear()
            with watch.looked:  # the loop ran again (its stamp moved): a new stall is said anew
                stamp = watch.stamp
            await ref.ask("tick", timeout=10)
            assert watch.stamp != stamp
            block_the_loop_until_said(watch, said, looks_after=1)
            assert len(said.records) == 2 and watch.stalls == 2
            await ref.stop()
            assert not watch._thread.is_alive()  # stopping it stopped the watcher thread
    finally:
        logger.removeHandler(said)


def test_a_threshold_must_be_a_positive_number_of_seconds() -> None:
    for bad in (0, -1.0):
        with pytest.raises(ValueError, match="threshold must be > 0 seconds"):
            LoopWatch(bad)
