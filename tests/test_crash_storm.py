"""The crash storm of durable agent work (issue 24): real daemons, SIGKILLed at random
instants while a thousand durable tasks run, on the files and on PostgreSQL, the event
loop alternating between asyncio and trio from one daemon to the next.

Each task is three phases of a ``StormAgent``: a model reply asking two tool calls — a
non-idempotent ``append`` (no key: a call a kill cut short parks the task on the
question "it may have run") and a keyed ``note`` — and an answer. The model is an
OpenAI-compatible server on 127.0.0.1 that counts what it is asked per (task, step).
"""

from __future__ import annotations

import collections
import json
import random
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest
from _stores import make_store
from test_daemon import _env

from greenroom.testing import completion

TASKS = 1000
PHASES = 3
KILLS = 20
AGENTS = 16


class CountingModel:
    """An OpenAI-compatible server on 127.0.0.1 that answers by rule and counts what it is
    asked per step: (the phase's user message, the number of messages so far). A phase's
    first request is answered with two tool calls, the one after their results with text."""

    def __init__(self, latency: float = 0.002) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.asked: collections.Counter[tuple[str, int]] = collections.Counter()
        self.total = 0
        self.changed = threading.Condition()
        model = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                import time

                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
                messages = body["messages"]
                user = next(m["content"] for m in messages if m["role"] == "user")
                with model.changed:
                    model.asked[(user, len(messages))] += 1
                    model.total += 1
                    model.changed.notify_all()
                time.sleep(latency)  # a kill can land while a request is out
                if messages[-1]["role"] == "tool":
                    answer = completion(f"{user}: done")
                else:
                    answer = completion(
                        tool_calls=[
                            ("c0", "append", json.dumps({"line": f"{user} append"})),
                            ("c1", "note", json.dumps({"text": f"{user} note"})),
                        ]
                    )
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client killed mid-request: nothing to report

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def wait_for(self, requests: int, timeout: float) -> bool:
        """Until ``requests`` requests in all have arrived (or ``timeout`` seconds)."""
        with self.changed:
            return self.changed.wait_for(lambda: self.total >= requests, timeout)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _decide_waiting(store_url: str | None, data_dir: Path, effects: Path) -> int:
    """A person answers each parked "may have run" question, as an operator would: the
    effect is in the file → ``approve --as-done`` (it ran; record it, do not run it); it is
    not → ``approve`` (run it). Through the command line's own code, with no daemon."""
    from greenroom.cli import main

    store = ["--store", store_url] if store_url else []
    listed = subprocess.run(
        [sys.executable, "-m", "greenroom", "tasks", "list", "--status", "waiting", "--json",
         "--data-dir", str(data_dir), *store],
        capture_output=True, text=True, timeout=120, env=_env(data_dir),
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    done = set(effects.read_text().splitlines()) if effects.exists() else set()
    waiting = json.loads(listed.stdout)
    for task in waiting:
        call = task["waiting"]
        assert call["tool"] == "append" and "may have run" in call["question"], call
        as_done = ["--as-done"] if call["arguments"]["line"] in done else []
        code = main(["tasks", "approve", task["id"], *as_done, "--step", call["step"],
                     "--data-dir", str(data_dir), *store])  # fmt: skip
        assert code == 0
    return len(waiting)


async def _phase_events(store_url: str | None, data_dir: Path) -> list[dict[str, Any]]:
    from contextlib import aclosing

    from greenroom.messages import HARNESS_PHASE

    async with await make_store(store_url, data_dir) as store, aclosing(store.events()) as events:
        return [event.payload async for event in events if event.type == HARNESS_PHASE]


@pytest.mark.timeout(600)
def test_a_thousand_durable_tasks_survive_twenty_kills(store_url: str | None, tmp_path: Path) -> None:
    """20 SIGKILLs at random instants during 1,000 tasks of 3 phases of 2 tool calls, then
    runs to the end: every task completes; no step the journal holds is asked of the model
    again (repeats are bounded by the requests in flight at the kills); each tool call's
    effect happens exactly once — the keyed one by its key, the non-idempotent one because
    a call a kill cut short is put to a person, never run again blindly; the phase events
    tell what was replayed."""
    data_dir = tmp_path / "data"
    calls, effects = tmp_path / "calls.log", tmp_path / "effects.log"
    model = CountingModel()
    config = tmp_path / "storm.toml"
    config.write_text(
        f'lease_seconds = 3\nshutdown_grace = 5\n\n[llm]\nbase_url = "{model.url}"\nmodel = "m"\n'
        "timeout = 10\nmax_retries = 0\n\n"
        f'[agents.storm]\nagent = "crash_agents:StormAgent"\nconcurrency = {AGENTS}\nmodel = "m"\n'
    )
    tasks = tmp_path / "tasks.json"
    tasks.write_text(json.dumps([{"id": f"s{i:04}", "type": "storm"} for i in range(TASKS)]))
    store = ["--store", store_url] if store_url else []
    env = {**_env(data_dir), "GREENROOM_TEST_CALLS": str(calls), "GREENROOM_TEST_EFFECTS": str(effects)}

    def greenroom(*words: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "greenroom", *words, "--data-dir", str(data_dir), *store]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)

    if store_url:  # the schema, as an operator creates it
        upgrade = [sys.executable, "-m", "greenroom", "db", "upgrade", *store]
        assert subprocess.run(upgrade, env=env, timeout=60).returncode == 0
    added = greenroom("tasks", "add", "--file", str(tasks))
    assert added.returncode == 0, added.stderr
    steps = TASKS * PHASES * 2  # each phase: a reply asking two calls, then an answer
    rng = random.Random(2024)
    loops = ("asyncio", "trio")
    kills = 0
    run = ["run", "--config", str(config), "--quiet", "--no-api"]
    try:
        for kill in range(KILLS):
            before = model.total
            command = [sys.executable, "-m", "greenroom", *run, "--backend", loops[kill % 2],
                       "--data-dir", str(data_dir), *store]  # fmt: skip
            with (tmp_path / f"run{kill}.err").open("w") as err:
                process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=err)
            # spread over about two thirds of the work: each daemon dies after 60-340 requests
            model.wait_for(before + rng.randint(60, 340), timeout=120)
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=30)
            kills += 1
        decided = 0
        for round_ in range(4):  # to the end; then a person answers what a kill left open
            done = greenroom(*run, "--until-idle", "--backend", loops[round_ % 2], timeout=240)
            assert done.returncode == 0, done.stderr[-3000:]
            if not (answered := _decide_waiting(store_url, data_dir, effects)):
                break
            decided += answered
        asked_at_end = dict(model.asked)
    finally:
        model.close()
    listed = greenroom("tasks", "list", "--json")
    stored = json.loads(listed.stdout)
    unfinished = {task["id"]: task["status"] for task in stored if task["status"] != "COMPLETED"}
    assert len(stored) == TASKS and unfinished == {}, done.stderr[-3000:]

    assert len(asked_at_end) == steps  # every step was asked, and nothing else
    repeats = sum(count - 1 for count in asked_at_end.values())
    assert repeats <= kills * AGENTS, f"{repeats} repeated requests after {kills} kills of {AGENTS} agents"

    lines = effects.read_text().splitlines()
    appended = [line for line in lines if line.endswith(" append")]
    noted = [line.split(" ", 1)[0] for line in lines if not line.endswith(" append")]
    assert len(appended) == len(set(appended)) == TASKS * PHASES  # exactly once per call, never twice
    assert len(noted) == len(set(noted)) == TASKS * PHASES  # the keyed tool: once per key
    assert all(key.startswith("s") and key.endswith("/m0/t1") for key in noted)  # task and step

    phases = anyio.run(_phase_events, store_url, data_dir)
    replayed = sum(payload.get("replayed", 0) for payload in phases)
    assert replayed > 0  # the events tell the replay
    assert all("recorded" in payload for payload in phases)  # every phase was durable
    where = "postgresql" if store_url else "files"
    print(f"\n{where}: {kills} kills: {repeats} repeated model requests of {steps} steps; "
          f"{decided} calls put to a person; {replayed} steps replayed")  # fmt: skip
