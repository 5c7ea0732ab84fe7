"""``greenroom load --processes N``: real generator processes sharing one run's schedule —
the same seed gives the same sessions whatever N, one report of every request with each
process's figures, and a process SIGKILLed mid-run is reported with what it had sent."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from greenroom.testing import ModelServer, Respond, completion


@pytest.fixture
def server() -> Iterator[ModelServer]:
    with ModelServer().running() as running:
        yield running


def _load(server: ModelServer, *args: str) -> list[str]:
    return [
        sys.executable, "-m", "greenroom", "load", "--base-url", server.url, "--model", "m",
        "--preset", "single", "--seed", "7", "--json", "--quiet", *args,
    ]  # fmt: skip


def _prompts(server: ModelServer, start: int) -> list[str]:
    """What the server was asked since request ``start``: each request's last message."""
    return sorted(json.dumps(seen.body["messages"][-1]) for seen in server.seen[start:])


@pytest.mark.parametrize("loop", [["--concurrency", "3"], ["--rate", "40"]])
def test_the_same_seed_gives_the_same_sessions_whatever_the_number_of_processes(
    server: ModelServer, loop: list[str]
) -> None:
    asked: dict[int, list[str]] = {}
    reports = {}
    for processes in (1, 2, 3):
        start = len(server.seen)
        for _ in range(60):
            server.add(Respond(body=completion("a b c")))
        done = subprocess.run(
            _load(server, *loop, "--sessions", "9", "--processes", str(processes)),
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        reports[processes] = json.loads(done.stdout)
        asked[processes] = _prompts(server, start)
        server.responses.clear()
    assert asked[1] == asked[2] == asked[3] and len(asked[1]) == reports[1]["requests"]
    for processes, report in reports.items():
        assert report["sessions"] == 9 and report["generator_processes"] == processes
        if processes > 1:
            parts = report["processes"]
            assert [p["part"] for p in parts] == list(range(processes))
            assert sum(p["requests"] for p in parts) == report["requests"]  # merged, not averaged
            assert all(p["died"] is None and p["cpu_s"] is not None for p in parts)


def _children(parent: int) -> list[int]:
    """The generator processes ``parent`` started (read from ``/proc``)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == parent and b"greenroom.load._generator" in command:
            found.append(int(entry.name))
    return found


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the children through /proc")
@pytest.mark.parametrize("loop", ["asyncio", "trio"])
def test_a_generator_process_killed_mid_run_is_reported_with_what_it_sent(
    server: ModelServer, loop: str
) -> None:
    for _ in range(400):
        server.add(Respond(body=completion("one two three four"), token_delay=0.02))
    run = subprocess.Popen(
        _load(server, "--concurrency", "4", "--sessions", "40", "--processes", "2", "--backend", loop),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while len(server.seen) < 8:  # both processes are sending
            assert time.monotonic() < deadline and run.poll() is None, "the run never got going"
            time.sleep(0.02)
        children = _children(run.pid)
        assert len(children) == 2
        os.kill(children[0], signal.SIGKILL)
        out, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == 0, err
    report = json.loads(out)
    died = [p for p in report["processes"] if p["died"] is not None]
    assert len(died) == 1 and died[0]["pid"] == children[0]
    assert "killed by SIGKILL" in died[0]["died"] and "request(s) reported" in died[0]["died"]
    alive = [p for p in report["processes"] if p["died"] is None]
    assert alive[0]["sessions"] > 0 and report["requests"] == died[0]["requests"] + alive[0]["requests"]


def test_processes_must_be_a_positive_count(server: ModelServer) -> None:
    done = subprocess.run(
        _load(server, "--concurrency", "2", "--sessions", "2", "--processes", "0"),
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2 and "--processes" in done.stderr and "'0'" in done.stderr
