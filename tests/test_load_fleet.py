"""``greenroom load`` spread over daemons (issue 38): a run's sessions are tasks of type
``load`` in the shared graph, each daemon's :class:`LoadAgent` s run them and write every
request's record to the store, and one report is built from all of them — on both stores
and both loops in one process, then on two daemon processes sharing PostgreSQL, one of
them SIGKILLed mid-run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest
from _stores import make_store
from _support import eventually

from greenroom.daemon import AgentHost
from greenroom.daemon._config import AgentPoolConfig, DaemonConfig
from greenroom.load import LoadPlan, LoadRecordStore, LoadTarget, Workload, fleet_report, fleet_tasks
from greenroom.load._dist import fixed
from greenroom.load._fleet import order_of
from greenroom.messages import AgentTask, Submit, TaskStatus
from greenroom.testing import ModelServer, Respond, completion

pytestmark = pytest.mark.anyio

SHORT = Workload(
    "short", turns=fixed(2), prompt_tokens=fixed(20), output_tokens=fixed(8), think_s=fixed(0.02)
)


def _pools(concurrency: int) -> DaemonConfig:
    pool = AgentPoolConfig(agent="greenroom.load:LoadAgent", concurrency=concurrency)
    return DaemonConfig(agents={"load": pool}, lease_seconds=5.0)


_FINAL = {TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED, TaskStatus.DEPENDENCY_FAILED}


async def _final(host: AgentHost, ids: set[str]) -> list[AgentTask]:
    """Every task of ``ids``, once all are final (waited for under a deadline: a host's
    idle figures on PostgreSQL can lag a submission by a moment)."""
    from greenroom.messages import ListTasks

    found: list[AgentTask] = []

    async def all_final() -> bool:
        nonlocal found
        found = [t for t in await host.supervisor.ask(ListTasks(), timeout=None) if t.id in ids]
        return len(found) == len(ids) and all(t.status in _FINAL for t in found)

    await eventually(all_final, timeout=60)
    return found


async def _finished(host: AgentHost, ids: set[str]) -> list[AgentTask]:
    """Every task of ``ids``, all COMPLETED."""
    tasks = await _final(host, ids)
    assert {t.status for t in tasks} == {TaskStatus.COMPLETED}, [(t.id, t.status, t.error) for t in tasks]
    return tasks


@pytest.mark.parametrize("loop", ["open", "closed"])
async def test_a_runs_sessions_are_tasks_a_daemons_load_agents_run_and_record(
    store_url: str | None, tmp_path: Path, loop: str
) -> None:
    """Open loop: a task per session; closed loop: a task per user running its sessions
    back to back. Every request the server saw has its record in the store, and the
    report counts every session once."""
    with ModelServer().running() as server:
        for _ in range(24):
            server.add(Respond(body=completion("a b c d")))
        plan = (
            LoadPlan(rate=40.0, sessions=12, seed=3)
            if loop == "open"
            else LoadPlan(concurrency=3, sessions=12, seed=3)
        )
        tasks = fleet_tasks("r1", SHORT, plan, LoadTarget(server.url, "m"), start=time.time())
        assert len(tasks) == (12 if loop == "open" else 3) and {t.type for t in tasks} == {"load"}
        store = await make_store(store_url, tmp_path / "data")
        async with AgentHost(_pools(4), tmp_path / "data", store=store) as host:
            await host.supervisor.ask(Submit(tasks), timeout=None)
            await _finished(host, {t.id for t in tasks})
            records = LoadRecordStore(host.store.records())
            try:
                report, requests = await fleet_report(records, "r1", plan=plan, workload=SHORT, duration=1.0)
            finally:
                await records.aclose()
        assert (report.sessions, report.sessions_ok) == (12, 12)
        assert report.requests == len(requests) == len(server.seen) == 24  # 2 turns each
        assert sorted({r.session for r in requests}) == list(range(12))
        assert report.ttft_ms.p50 is not None and report.errors == 0
        assert list(report.daemons.values()) == [12]  # one process ran them all
        assert report.client_cpu_s > 0
        if loop == "open":  # each session's first request was due at its scheduled instant
            offsets = sorted(order_of(t).offset for t in tasks)
            firsts = sorted(r.scheduled for r in requests if r.turn == 0)
            assert firsts == pytest.approx(offsets, abs=1e-6)


async def test_a_load_task_with_a_bad_order_fails_naming_what_is_wrong(
    store_url: str | None, tmp_path: Path
) -> None:
    store = await make_store(store_url, tmp_path / "data")
    bad = [
        AgentTask("bad-1", "load", input={"run": "r", "start": 0, "first": 0}),
        AgentTask(
            "bad-2", "load", input={"run": "r", "start": 0, "first": "x", "workload": {}, "target": {}}
        ),
    ]
    async with AgentHost(_pools(1), tmp_path / "data", store=store) as host:
        await host.supervisor.ask(Submit(bad), timeout=None)
        one, two = sorted(await _final(host, {t.id for t in bad}), key=lambda t: t.id)
    assert one.status == two.status == TaskStatus.FAILED
    assert one.attempt == 1 and two.attempt == 1  # not retried: the order cannot get better
    assert one.error is not None and "not a load session order" in one.error.reason
    assert "workload" in one.error.reason
    assert two.error is not None and "first" in two.error.reason


def test_a_plan_without_sessions_cannot_go_on_daemons() -> None:
    with pytest.raises(ValueError, match="needs sessions"):
        fleet_tasks("r", SHORT, LoadPlan(rate=1.0, duration=5.0), LoadTarget("http://x", "m"), start=0.0)


# -- two daemon processes over one PostgreSQL --------------------------------------------------


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "greenroom", *args], capture_output=True, text=True, timeout=timeout
    )


def _daemon(url: str, config: Path, data_dir: Path, backend: str) -> subprocess.Popen[str]:
    with open(f"{data_dir}.err", "a") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "greenroom", "run", "--store", url, "--config", str(config), "--no-api",
             "--quiet", "--data-dir", str(data_dir), "--backend", backend],
            stdout=subprocess.DEVNULL, stderr=err, text=True, env=dict(os.environ),
        )  # fmt: skip


def _wait_until(done: Any, deadline: float, why: Any) -> None:
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(why())
        time.sleep(0.1)


@pytest.mark.timeout(300)  # below: every wait has its deadline, all of them inside this one
def test_a_run_on_two_daemons_over_postgresql_counts_every_session_once_and_a_kill_loses_no_record(
    pg_url: str, tmp_path: Path
) -> None:
    """Two daemons (one on asyncio, one on trio) share a run of 40 sessions; one is
    SIGKILLed once ten sessions are done. Every record stored before the kill is in the
    final report, every session is counted exactly once, and the only requests the server
    saw without a record are the ones the kill cut short."""
    import psycopg

    assert _cli("db", "upgrade", "--store", pg_url).returncode == 0
    config = tmp_path / "load.toml"
    config.write_text(
        'lease_seconds = 2\nshutdown_grace = 5\n[agents.load]\nagent = "greenroom.load:LoadAgent"\n'
        "concurrency = 6\n"
    )
    workload = tmp_path / "w.toml"
    workload.write_text(
        'name = "steady"\nturns = 3\nprompt_tokens = 30\noutput_tokens = 6\n'
        'think_s = { kind = "fixed", value = 0.15 }\n'
    )
    sessions = 40
    with ModelServer().running() as server:
        for _ in range(sessions * 3 * 2):  # a cut session is run again: room for every retry
            server.add(Respond(body=completion("one two three four five six"), token_delay=0.01))
        daemons = [
            _daemon(pg_url, config, tmp_path / "node0", "asyncio"),
            _daemon(pg_url, config, tmp_path / "node1", "trio"),
        ]
        watch = psycopg.connect(pg_url, autocommit=True)

        def keys() -> set[str]:
            return {
                row[0] for row in watch.execute("SELECT key FROM gr_records WHERE collection = 'load/fleet'")
            }

        def said() -> str:
            errs = [(tmp_path / f"node{n}.err").read_text()[-800:] for n in range(2)]
            return f"{len(keys())} records; daemons said {errs}"

        load = subprocess.Popen(
            [sys.executable, "-m", "greenroom", "load", "--on-daemons", "--store", pg_url,
             "--data-dir", str(tmp_path / "cli"), "--run", "fleet", "--base-url", server.url, "--model", "m",
             "--workload", str(workload), "--rate", "8", "--sessions", str(sessions), "--json", "--quiet"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        deadline = time.monotonic() + 180  # (a loaded machine: ~11 s on a quiet one)
        try:
            _wait_until(lambda: sum(k.startswith("s/") for k in keys()) >= 10, deadline, said)
            daemons[0].send_signal(signal.SIGKILL)
            daemons[0].wait(30)
            before = keys()  # what was recorded when the kill landed
            out, err = load.communicate(timeout=max(1.0, deadline - time.monotonic()))
        finally:
            if load.poll() is None:
                load.kill()
            for daemon in daemons:
                if daemon.poll() is None:
                    daemon.send_signal(signal.SIGTERM)
            for daemon in daemons:
                daemon.wait(30)
        after = keys()
        watch.close()
        assert load.returncode == 0, err + said()
        report = json.loads(out)
        assert before <= after  # the kill lost no recorded request
        assert report["sessions"] == sessions == sum(k.startswith("s/") for k in after)
        assert report["sessions_ok"] == sessions and report["tasks_failed"] == 0
        assert report["requests"] == sum(k.startswith("r/") for k in after)
        cut_short = len(server.seen) - report["requests"]
        assert 0 <= cut_short <= 6  # at most one request per agent of the killed daemon
        assert len(report["daemons"]) == 2, report["daemons"]
        sessions_by_attempt = [msgspec.json.decode(b) for (b,) in _bodies(pg_url)]
        assert all(body["turns"] == 3 for body in sessions_by_attempt)


def _bodies(url: str) -> list[tuple[bytes]]:
    import psycopg

    with psycopg.connect(url) as db:
        return [
            (bytes(row[0]),)
            for row in db.execute(
                "SELECT body FROM gr_records WHERE collection LIKE 'load/%' AND key LIKE 's/%'"
            )
        ]


def test_a_run_on_a_daemon_on_the_files_goes_through_its_api(tmp_path: Path) -> None:
    """The default store: the command submits through the API of the daemon serving the
    data dir and reads the records its agents wrote under it."""
    data = tmp_path / "data"
    config = tmp_path / "load.toml"
    config.write_text('[agents.load]\nagent = "greenroom.load:LoadAgent"\nconcurrency = 3\n')
    with ModelServer().running() as server:
        for _ in range(8):
            server.add(Respond(body=completion("fine")))
        daemon = subprocess.Popen(
            [sys.executable, "-m", "greenroom", "run", "--config", str(config), "--quiet",
             "--data-dir", str(data)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        try:
            _wait_until(
                lambda: (data / "daemon.json").exists(), time.monotonic() + 60, lambda: "no daemon.json"
            )
            done = _cli(
                "load", "--on-daemons", "--data-dir", str(data), "--base-url", server.url, "--model", "m",
                "--preset", "single", "--concurrency", "2", "--sessions", "8", "--json", "--quiet",
            )  # fmt: skip
        finally:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(60)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["sessions"], report["requests"], report["tasks_failed"]) == (8, 8, 0)
    assert len(server.seen) == 8


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--rate", "1", "--duration", "5"], "--on-daemons needs --sessions N"),
        (["--rate", "1", "--sessions", "2", "--run", "no spaces"], "load run must be"),
        (["--rate", "1", "--sessions", "2", "--replay", "x.jsonl"], "--on-daemons runs a workload"),
    ],
)
def test_greenroom_load_on_daemons_refuses_bad_flags_naming_them(
    tmp_path: Path, args: list[str], message: str
) -> None:
    done = _cli(
        "load", "--on-daemons", "--data-dir", str(tmp_path / "d"), "--base-url", "http://127.0.0.1:9",
        "--model", "m", *args,
    )  # fmt: skip
    assert done.returncode != 0 and message in done.stderr, done.stderr
    assert not (tmp_path / "d").exists()  # nothing was submitted anywhere
