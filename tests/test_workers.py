"""``greenroom run --workers N``: real worker processes on one PostgreSQL store, one
listening socket and one ``daemon.json``; a worker SIGKILLed is started again and its
task run once more; the machine's status and counters answer for every worker and never
go down; on files, ``--workers`` is refused saying why."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from greenroom.postgres import Database, upgrade

TESTS = Path(__file__).parent


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(TESTS), "GREENROOM_TEST_ACKS": str(tmp_path / "acks.log")}


def _wait(done: Callable[[], Any], seconds: float, why: str) -> Any:
    """``done()`` ten times a second until it is truthy (its value), or fail saying ``why``
    past ``seconds`` (well inside the test's timeout)."""
    deadline = time.monotonic() + seconds
    while not (value := done()):
        assert time.monotonic() < deadline, why
        time.sleep(0.1)
    return value


def test_workers_are_refused_on_the_files_store_saying_why(tmp_path: Path) -> None:
    env = {name: value for name, value in os.environ.items() if name != "GREENROOM_STORE"}
    done = subprocess.run(
        [sys.executable, "-m", "greenroom", "run", "--workers", "2", "--data-dir", str(tmp_path / "d"),
         "--quiet"],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert done.returncode != 0
    assert "--workers 2 needs a PostgreSQL store" in done.stderr and "one owner process" in done.stderr
    assert not (tmp_path / "d" / "daemon.json").exists()


class _Machine:
    """A ``greenroom run --workers 2`` under test: its API read with the admin token."""

    def __init__(self, pg_url: str, tmp_path: Path) -> None:
        anyio.run(self._upgrade, pg_url)
        self.data_dir = tmp_path / "node"
        config = tmp_path / "w.toml"
        config.write_text(
            "lease_seconds = 2\nheartbeat_interval = 0.5\nshutdown_grace = 5\n"
            '[agents.slow]\nagent = "crash_agents:SlowStepAgent"\nconcurrency = 2\n'
        )
        self.err = open(tmp_path / "parent.err", "w")  # noqa: SIM115 -- closed by stop()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "greenroom", "run", "--workers", "2", "--store", pg_url,
             "--config", str(config), "--data-dir", str(self.data_dir), "--quiet"],
            stdout=subprocess.DEVNULL, stderr=self.err, env=_env(tmp_path),
        )  # fmt: skip
        self.errors = tmp_path / "parent.err"
        info = _wait(self._info, 60, "no daemon.json in 60 s")
        self.url, self.token = info

    @staticmethod
    async def _upgrade(url: str) -> None:
        async with Database(url, max_size=2) as db:
            await db.run(upgrade)

    def _info(self) -> tuple[str, str] | None:
        assert self.process.poll() is None, self.errors.read_text()
        try:
            info = json.loads((self.data_dir / "daemon.json").read_text())
            token = (self.data_dir / "admin.token").read_text().strip()
        except (FileNotFoundError, ValueError):
            return None
        return info["url"], token

    def get(self, path: str) -> bytes:
        request = urllib.request.Request(self.url + path, headers={"Authorization": f"Bearer {self.token}"})
        with urllib.request.urlopen(request, timeout=10) as answer:
            return bytes(answer.read())

    def status(self) -> dict[str, Any]:
        for _ in range(50):  # a worker starting (or just killed) may refuse one connection
            try:
                return dict(json.loads(self.get("/v1/status")))
            except OSError:
                time.sleep(0.1)
        raise AssertionError("the API did not answer in 5 s")

    def counter(self, name: str) -> float:
        for line in self.get("/metrics").decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        raise AssertionError(f"{name} not in /metrics")

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        self.err.close()
        return code


@pytest.fixture
def machine(pg_url: str, tmp_path: Path) -> Iterator[_Machine]:
    running = _Machine(pg_url, tmp_path)
    try:
        yield running
    finally:
        running.stop()


def _live(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.timeout(300)
def test_two_workers_share_one_address_and_answer_for_the_machine(machine: _Machine) -> None:
    def both_serving() -> dict[str, Any] | None:
        status = machine.status()
        workers = status["workers"]
        ready = len(workers) == 2 and all(w["pid"] for w in workers)
        return status if ready and status["agents"].get("slow", {}).get("configured") == 4 else None

    status = _wait(both_serving, 60, "the workers never both served")
    pids = {worker["pid"] for worker in status["workers"]}
    assert len(pids) == 2 and all(_live(pid) for pid in pids) and machine.process.pid not in pids
    answered = _wait(lambda: {machine.status()["pid"] for _ in range(20)} == pids or None, 60,
                     "one worker answered every request")  # fmt: skip
    assert answered
    info = json.loads((machine.data_dir / "daemon.json").read_text())
    assert info["pid"] == machine.process.pid  # one daemon.json, the parent's
    names = {(machine.data_dir / f"node.{slot}.id").read_text() for slot in (0, 1)}
    assert len(names) == 2  # each worker a node of its own: a restart never takes a sibling's tasks
    assert machine.stop() == 0
    assert not (machine.data_dir / "daemon.json").exists() and not any(_live(pid) for pid in pids)


@pytest.mark.timeout(300)
def test_a_worker_killed_is_started_again_its_task_run_once_more_and_no_counter_goes_down(
    machine: _Machine, pg_url: str, tmp_path: Path
) -> None:
    tasks = tmp_path / "tasks.json"
    tasks.write_text(json.dumps([{"id": "t1", "type": "slow", "max_attempts": 5}]))
    added = subprocess.run(
        [sys.executable, "-m", "greenroom", "tasks", "add", "--file", str(tasks), "--store", pg_url],
        capture_output=True, text=True, timeout=60, env=_env(tmp_path),
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    acks = tmp_path / "acks.log"

    def starts() -> list[list[str]]:
        lines = acks.read_text().splitlines() if acks.exists() else []
        return [line.split()[1:] for line in lines if line.startswith("start t1 ")]

    first = _wait(starts, 60, "t1 never started")[0]
    assert first[1] == "1"
    victim = int(first[2])
    granted = machine.counter("greenroom_claims_granted_here_total")
    assert granted >= 1
    os.kill(victim, signal.SIGKILL)

    def restarted() -> dict[str, Any] | None:
        status = machine.status()
        workers = status["workers"]
        again = sum(w["restarts"] for w in workers) == 1 and victim not in {w["pid"] for w in workers}
        return status if again else None

    status = _wait(restarted, 60, "the killed worker was not started again")
    assert all(_live(w["pid"]) for w in status["workers"])
    assert machine.counter("greenroom_claims_granted_here_total") >= granted  # the dead worker's count kept
    _wait(lambda: machine.status()["tasks"]["by_status"].get("COMPLETED") == 1, 90, "t1 never completed")
    ran = starts()
    assert len(ran) == 2 and int(ran[1][2]) != victim  # run once more (by a live worker), not twice more
    assert machine.counter("greenroom_claims_granted_here_total") >= 2
    assert "ended (killed by SIGKILL); starting it again" in machine.errors.read_text()


def test_the_machine_status_sums_what_each_worker_did_and_keeps_the_dead_ones_counts() -> None:
    from greenroom.messages import Durations
    from greenroom.service import DaemonStatus
    from greenroom.service._status import AgentPool, TaskFigures, WorkerStatus, machine_status

    def worker(pid: int, completed: int, busy: int, by_status: dict[str, int]) -> DaemonStatus:
        return DaemonStatus(
            version="x", pid=pid, data_dir="d", uptime=1.0,
            tasks=TaskFigures(total=9, completed_here=completed, by_status=by_status,
                              writes=Durations([0.01, 0.1], [completed, 1, 0], 0.5)),
            agents={"step": AgentPool(configured=2, alive=2, busy=busy, tokens_spent=10 * completed)},
            mailboxes={"supervisor": busy},
        )  # fmt: skip

    own = worker(1, 3, 1, {"COMPLETED": 7})
    other = worker(2, 4, 2, {"COMPLETED": 6})  # its snapshot a moment older: the graph's figures are own's
    dead = worker(3, 5, 2, {})
    workers = [WorkerStatus(slot=0, pid=1), WorkerStatus(slot=1, pid=2, restarts=1)]
    machine = machine_status(own, [other], [dead], workers)
    assert machine.tasks.completed_here == 12 and machine.tasks.by_status == {"COMPLETED": 7}
    assert machine.tasks.writes is not None and machine.tasks.writes.counts == [12, 3, 0]
    pool = machine.agents["step"]
    assert (pool.configured, pool.busy, pool.tokens_spent) == (4, 3, 120)  # state: live only; counts: all
    assert machine.mailboxes == {"supervisor": 3} and machine.workers == workers
