"""The daemon and the CLI as users run them: real subprocesses, real signals, real files."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from greenroom.daemon import ConfigError, load_config
from greenroom.embedded import GraphFiles, read_events
from greenroom.messages import AGENT_RESULT, AGENT_UPDATE, TaskStatus

TESTS = Path(__file__).parent


def greenroom(*args: str, data_dir: Path, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "greenroom", *args, "--data-dir", str(data_dir)],
        capture_output=True,
        text=True,
        timeout=100,
        env=_env(data_dir),
        **kwargs,  # type: ignore[call-overload]
    )


def _env(data_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")])
    env["GREENROOM_TEST_ACKS"] = str(data_dir.parent / "acks.log")
    return env


def write_config(path: Path, concurrency: int = 10, lease: float = 2.0) -> Path:
    path.write_text(
        f"lease_seconds = {lease}\nheartbeat_interval = {lease / 4}\nshutdown_grace = 5\n\n"
        f'[agents.step]\nagent = "crash_agents:StepAgent"\nconcurrency = {concurrency}\n'
    )
    return path


def seed_chains(data_dir: Path, tmp_path: Path, chains: int, steps: int) -> list[str]:
    tasks = []
    for c in range(chains):
        for s in range(steps):
            task = {"id": f"c{c:03d}-s{s}", "type": "step", "max_attempts": 50}
            if s:
                task["depends_on"] = [f"c{c:03d}-s{s - 1}"]
            tasks.append(task)
    (tmp_path / "tasks.json").write_text(json.dumps(tasks))
    done = greenroom("tasks", "add", "--file", str(tmp_path / "tasks.json"), data_dir=data_dir)
    assert done.returncode == 0, done.stderr
    return [t["id"] for t in tasks]


def test_daemon_killed_with_sigkill_repeatedly_loses_nothing_acknowledged(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    # a kill is found at the restart (every attempt of a dead process), not by its lease;
    # the lease only has to outlast a loaded machine's pauses, or a live attempt is charged
    config = write_config(tmp_path / "greenroom.toml", concurrency=8, lease=10.0)
    ids = seed_chains(data_dir, tmp_path, chains=60, steps=6)
    acks_path = tmp_path / "acks.log"
    rng = random.Random(7)
    kills = 0
    for _ in range(4):
        acked_before = len(acks_path.read_text().splitlines()) if acks_path.exists() else 0
        process = subprocess.Popen(
            [sys.executable, "-m", "greenroom", "run", "--data-dir", str(data_dir), "--config", str(config),
             "--until-idle", "--quiet"],
            env=_env(data_dir), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while process.poll() is None and time.monotonic() < deadline:  # kill in the middle of the work
            if acks_path.exists() and len(acks_path.read_text().splitlines()) >= acked_before + 30:
                break
            time.sleep(0.01)
        time.sleep(rng.uniform(0.0, 0.15))
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
            kills += 1
        process.wait(timeout=30)
        assert process.stderr is not None
        process.stderr.close()
    assert kills == 4
    tasks_mid = {t.id: t for t in GraphFiles(data_dir).load()[0]}
    assert any(t.status is not TaskStatus.COMPLETED for t in tasks_mid.values())  # the kills cut work short
    final = greenroom("run", "--config", str(config), "--until-idle", "--quiet", data_dir=data_dir)
    assert final.returncode == 0, final.stderr
    tasks, _ = GraphFiles(data_dir).load()
    assert sorted(t.id for t in tasks) == sorted(ids)  # each task exactly once in the graph
    assert all(t.status is TaskStatus.COMPLETED for t in tasks)
    events = read_events(data_dir / "events.jsonl")  # every line parses (it raises otherwise)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    by_seq = {e.seq: e for e in events}
    results = {e.task_id for e in events if e.type == AGENT_RESULT and e.payload["outcome"] == "done"}
    acks = (tmp_path / "acks.log").read_text().splitlines()
    assert acks
    for ack in acks:
        kind, first, second = ack.split()
        if kind == "event":  # an acknowledged update is on disk, as acknowledged
            event = by_seq[int(first)]
            assert (event.type, event.task_id) == (AGENT_UPDATE, second)
        else:  # an acknowledged completion is in the graph and its result in the log
            assert first in results
    assert max(t.crashes for t in tasks) >= 1  # some attempt was cut short by a kill and redone
    assert max(t.attempt for t in tasks) == 1  # ... and the kill was not charged to the task


@pytest.mark.parametrize("api", [True, False])
def test_sigterm_stops_cleanly_and_the_cli_works_beside_a_running_daemon(tmp_path: Path, api: bool) -> None:
    """While a daemon runs, the CLI's task commands go through its API (the same output
    as on the files); with ``--no-api`` the writers are refused, naming the holder."""
    data_dir = tmp_path / "data"
    config = write_config(tmp_path / "greenroom.toml", concurrency=4, lease=30.0)
    seed_chains(data_dir, tmp_path, chains=150, steps=5)  # ~10 s of work: the checks below take seconds
    process = subprocess.Popen(
        [sys.executable, "-m", "greenroom", "run", "--data-dir", str(data_dir), "--config", str(config),
         *([] if api else ["--no-api"])],
        env=_env(data_dir), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not any(e.type == AGENT_RESULT for e in read_events(data_dir / "events.jsonl")):
            assert time.monotonic() < deadline and process.poll() is None
            time.sleep(0.05)
        added = greenroom(
            "tasks", "add", "--type", "step", "--id", "extra", "--priority", "-5", data_dir=data_dir
        )
        listing = greenroom("tasks", "list", "--type", "step", data_dir=data_dir)
        tail = greenroom("events", "tail", "--last", "2", data_dir=data_dir)  # readers need no lock
        assert tail.returncode == 0 and len(tail.stdout.splitlines()) == 2
        if api:
            assert added.returncode == 0 and added.stdout == "added extra\n", added.stderr
            assert listing.returncode == 0 and listing.stdout.splitlines()[0].split() == [
                "ID",
                "TYPE",
                "STATUS",
                "PRI",
                "ATTEMPT",
                "OWNER",
            ]
            assert any(line.startswith("extra ") for line in listing.stdout.splitlines())
            shown = greenroom("tasks", "show", "extra", data_dir=data_dir)
            assert json.loads(shown.stdout)["priority"] == -5
        else:
            assert added.returncode == 1
            assert "in use by another process" in added.stderr and f"pid {process.pid}" in added.stderr
            assert listing.returncode == 1 and "is a greenroom daemon running" in listing.stderr
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, err
    assert "stopped by SIGTERM" in out
    tasks, _ = GraphFiles(data_dir).load()
    assert not [t for t in tasks if t.status is TaskStatus.IN_PROGRESS]  # finished or handed back
    assert 0 < sum(t.status is TaskStatus.COMPLETED for t in tasks) < len(tasks)
    assert all(t.attempt <= 1 for t in tasks)  # handing back does not use up an attempt
    assert ("extra" in {t.id for t in tasks}) is api
    assert not (data_dir / "daemon.json").exists() and not (data_dir / "admin.token").exists()


def test_run_until_idle_on_the_seeded_example(tmp_path: Path) -> None:
    done = greenroom("run", "--seed-example", "5", "--until-idle", data_dir=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "16 task(s) completed this run" in done.stdout and "waiting 1" in done.stdout
    assert "seeded 17 example task(s)" in done.stderr
    tasks, _ = GraphFiles(tmp_path).load()
    final = next(t for t in tasks if t.id.endswith("final-review"))
    assert final.status is TaskStatus.COMPLETED and final.result is not None
    assert final.result.artifacts["words"] > 0  # it read its dependencies' results
    shown = greenroom("tasks", "show", final.id, data_dir=tmp_path)
    assert json.loads(shown.stdout)["status"] == "COMPLETED"
    listed = greenroom("tasks", "list", "--status", "completed", "--json", data_dir=tmp_path)
    assert len(json.loads(listed.stdout)) == 16
    # the publishing waits for a person, with the exact call; approved, it runs once
    (waiting,) = json.loads(
        greenroom("tasks", "list", "--status", "waiting", "--json", data_dir=tmp_path).stdout
    )
    assert waiting["waiting"]["tool"] == "publish" and waiting["waiting"]["arguments"]["words"] == 900
    assert f"{waiting['id']} waits for approval of 'publish'" in done.stderr
    denied = greenroom("tasks", "deny", waiting["id"], data_dir=tmp_path)
    assert denied.returncode == 2 and "--reason" in denied.stderr  # a denial says why
    wrong = greenroom("tasks", "approve", waiting["id"], "--step", "p9/main/m0/t0", data_dir=tmp_path)
    assert wrong.returncode == 1 and "field 'step' is not the call waiting" in wrong.stderr
    approved = greenroom("tasks", "approve", waiting["id"], data_dir=tmp_path)
    assert approved.returncode == 0 and approved.stdout == f"approved {waiting['id']}\n", approved.stderr
    twice = greenroom("tasks", "approve", waiting["id"], data_dir=tmp_path)
    assert twice.returncode == 1 and "it is PENDING" in twice.stderr
    finished = greenroom("run", "--until-idle", "--quiet", data_dir=tmp_path)
    assert "1 task(s) completed this run" in finished.stdout, finished.stderr
    published = json.loads(greenroom("tasks", "show", waiting["id"], data_dir=tmp_path).stdout)
    assert published["status"] == "COMPLETED" and "published" in published["result"]["notes"]
    assert published["decisions"]["p0/main/m0/t0"]["approved"] is True


# -- bad input ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("lease_seconds = 'long'\n[agents.step]\nagent = 'crash_agents:StepAgent'\n",
         "field 'lease_seconds' expected `float`, got `str` (got 'long')"),
        ("[agents.step]\nagent = 'crash_agents:StepAgent'\nconcurrency = 0\n",
         "field 'agents.step.concurrency' expected `int` >= 1 (got 0)"),
        ("[agents.step]\nagent = 'no_such_module:Agent'\n",
         "field 'agents.step.agent' cannot import 'no_such_module'"),
        ("[agents.step]\nagent = 'greenroom.messages:AgentTask'\n",
         "field 'agents.step.agent' is not a BaseAgent subclass (got 'greenroom.messages:AgentTask')"),
        ("[agents.research]\nagent = 'crash_agents:StepAgent'\n",
         "names an agent of type 'step', not 'research'"),
        ("[agents.step]\nagent = 'crash_agents:StepAgent'\nthreads = 4\n",
         "field 'agents.step.threads' is not a known field (got 4)"),
        ("agents = {}\n", "field 'agents' names no agent types"),
        ("lease_seconds = 5\nheartbeat_interval = 9\n[agents.step]\nagent = 'crash_agents:StepAgent'\n",
         "field 'heartbeat_interval' must be shorter than lease_seconds (5.0), got 9.0"),
        ("[agents\n", "is not valid TOML"),
        ("[agents.step]\nagent = 'crash_agents:StepAgent'\n[llm]\nbase_url = 'http://x/v1'\nmodel = 'm'\n"
         "max_tokens = 0\n", "field 'llm.max_tokens' expected `int` >= 1 (got 0)"),
        ("[agents.step]\nagent = 'crash_agents:StepAgent'\n[llm]\nbase_url = 'http://x/v1'\nmodel = 'm'\n"
         "temperature = 2.5\n", "field 'llm.temperature' expected `float` <= 2.0 (got 2.5)"),
        ("[agents.step]\nagent = 'crash_agents:StepAgent'\n[chat]\ncontext_window = 'big'\n",
         "field 'chat.context_window' expected `int | null`, got `str` (got 'big')"),
        ("[agents.step]\nagent = 'crash_agents:StepAgent'\n[llm]\nbase_url = 'http://x/v1'\nmodel = 'm'\n"
         "[llm.prices]\nm = { input = -1, output = 1 }\n",
         "field 'llm.prices.m.input' expected `float` >= 0.0 (got -1)"),
        ("[agents.step]\nagent = 'crash_agents:StepAgent'\n[llm]\nbase_url = 'http://x/v1'\nmodel = 'm'\n"
         "[llm.prices]\nm = { input = 1 }\n", "field 'llm.prices.m.output' is required"),
        ("[agents.step]\nagent = 'crash_agents:StepAgent'\n[llm]\nbase_url = 'http://x/v1'\nmodel = 'm'\n"
         "[llm.prices]\ngpt-4o = { input = 1, output = 2 }\n",
         "field 'llm.prices' prices 'gpt-4o', a model nothing here uses (models used: m)"),
        ("[agents.step]\nagent = 'crash_agents:StepAgent'\n[chat]\nbudget_cost = 5\n",
         "field 'chat.budget_cost' is 5, but chat's model 'scripted' has no price"),
        ("[agents.step]\nagent = 'crash_agents:StepAgent'\n[chat]\nbudget_tokens = 0\n",
         "field 'chat.budget_tokens' expected `int` >= 1 (got 0)"),
        ("[agents.step]\nagent = 'crash_agents:StepAgent'\n[retention]\nevents_per_segment = 0\n",
         "field 'retention.events_per_segment' expected `int` >= 1 (got 0)"),
        ("[agents.step]\nagent = 'crash_agents:StepAgent'\n[retention]\ndisk_budget = '5GB'\n",
         "field 'retention.disk_budget' expected `int | null`"),
        ("[agents.step]\nagent = 'crash_agents:StepAgent'\n[retention]\nchat_for = 0\n",
         "field 'retention.chat_for' expected `float` > 0.0"),
        ("[agents.step]\nagent = 'crash_agents:StepAgent'\n[api]\nhistory_every = 0\n",
         "field 'api.history_every' expected `float` > 0.0"),
    ],
)  # fmt: skip
def test_bad_config_is_a_clear_error(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    sys.path.insert(0, str(TESTS))
    try:
        with pytest.raises(ConfigError) as failed:
            load_config(path)
    finally:
        sys.path.remove(str(TESTS))
    assert message in str(failed.value) and str(path) in str(failed.value)


def test_bad_config_through_the_cli_leaves_the_data_dir_untouched(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    seed_chains(data_dir, tmp_path, chains=1, steps=2)
    before = {p.name: p.read_bytes() for p in data_dir.iterdir()}
    bad = tmp_path / "bad.toml"
    bad.write_text("[agents.step]\nagent = 'crash_agents:StepAgent'\nconcurrency = -3\n")
    done = greenroom("run", "--config", str(bad), "--until-idle", data_dir=data_dir)
    assert done.returncode == 1
    assert "field 'agents.step.concurrency' expected `int` >= 1 (got -3)" in done.stderr
    assert {p.name: p.read_bytes() for p in data_dir.iterdir()} == before


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["tasks", "add", "--type", "bad type"], "field 'type' expected `str` matching regex"),
        (["tasks", "add", "--type", "w", "--input", "{nope"], "--input is not valid JSON"),
        (["tasks", "add", "--type", "w", "--input", "[1]"], "field 'input' expected `object`, got `array`"),
        (
            ["tasks", "add", "--type", "w", "--depends-on", "ghost"],
            "field 'depends_on' is not a known task (got 'ghost')",
        ),
        (["tasks", "add"], "tasks add needs --file or --type"),
        (["tasks", "list", "--status", "done"], "--status must be one of PENDING"),
        (["tasks", "show", "missing"], "no task with id 'missing'"),
    ],
)
def test_bad_cli_input_is_named_and_changes_nothing(tmp_path: Path, args: list[str], message: str) -> None:
    seed = greenroom("tasks", "add", "--type", "w", "--id", "kept", data_dir=tmp_path)
    assert seed.returncode == 0, seed.stderr
    before = (tmp_path / "tasks.graph.json").read_bytes()
    done = greenroom(*args, data_dir=tmp_path)
    assert done.returncode == 1
    assert message in done.stderr
    assert (tmp_path / "tasks.graph.json").read_bytes() == before


def test_bad_task_file_names_the_record_and_field(tmp_path: Path) -> None:
    path = tmp_path / "tasks.json"
    path.write_text(json.dumps([{"id": "a", "type": "w"}, {"id": "b", "type": "w", "max_attempts": "3"}]))
    done = greenroom("tasks", "add", "--file", str(path), data_dir=tmp_path / "d")
    assert done.returncode == 1
    assert "field '[1].max_attempts' expected `int`, got `str` (got '3')" in done.stderr


def test_corrupt_graph_stops_the_daemon_with_the_file_named(tmp_path: Path) -> None:
    (tmp_path / "tasks.graph.json").write_text(
        '{"format": "greenroom.tasks/1", "seq": 0, "tasks": [{"id": 5}]}'
    )
    done = greenroom("run", "--until-idle", data_dir=tmp_path)
    assert done.returncode == 1
    assert "tasks.graph.json is not a valid task graph" in done.stderr and "(got 5)" in done.stderr
    assert (tmp_path / "tasks.graph.json").read_text().endswith('[{"id": 5}]}')


def test_bad_run_flags(tmp_path: Path) -> None:
    done = greenroom("run", "--seed-example", "0", data_dir=tmp_path)
    assert (
        done.returncode == 2
        and "argument --seed-example: must be a whole number from 1 to 10000, got '0'" in done.stderr
    )
    done = greenroom("run", "--progress", "-1", data_dir=tmp_path)
    assert (
        done.returncode == 2
        and "argument --progress: must be a number of seconds > 0, got '-1'" in done.stderr
    )
    (tmp_path / "file").write_text("")
    done = greenroom("tasks", "list", data_dir=tmp_path / "file")
    assert done.returncode == 1 and "exists and is not a directory" in done.stderr


def test_the_llm_section_puts_an_agent_type_on_a_real_server(tmp_path: Path) -> None:
    """``[llm]`` + a pool's ``model``: the example research agent's phases go to an
    OpenAI-compatible server on 127.0.0.1 (with the key from the environment), and the
    task completes with what the server said."""
    from greenroom.testing import ModelServer, Respond, completion

    data_dir = tmp_path / "data"
    config = tmp_path / "llm.toml"
    server = ModelServer()
    config.write_text(
        f'[llm]\nbase_url = "{server.url}"\nmodel = "default-model"\napi_key_env = "GREENROOM_TEST_KEY"\n'
        "timeout = 10\nmax_tokens = 300\ntemperature = 0.7\n\n"
        '[agents.research]\nagent = "greenroom.agents.examples:ResearchAgent"\nmodel = "big-model"\n'
    )
    server.add(
        Respond(body=completion(tool_calls=[("c1", "query_knowledge_base", '{"query": "a"}')])),
        Respond(body=completion("fact one")),
        Respond(body=completion(tool_calls=[("c2", "query_knowledge_base", '{"query": "b"}')])),
        Respond(body=completion("fact two")),
        Respond(body=completion("Outline: fact one, fact two")),
    )
    added = greenroom(
        "tasks", "add", "--type", "research", "--id", "r1", "--input", '{"topic": "x"}', data_dir=data_dir
    )
    assert added.returncode == 0, added.stderr
    with server.running():
        done = subprocess.run(
            [sys.executable, "-m", "greenroom", "run", "--config", str(config), "--until-idle", "--quiet",
             "--data-dir", str(data_dir)],
            capture_output=True, text=True, timeout=100,
            env={**_env(data_dir), "GREENROOM_TEST_KEY": "sk-test-secret"},
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert [seen.body["model"] for seen in server.seen] == ["big-model"] * 5
    assert {(seen.body["max_tokens"], seen.body["temperature"]) for seen in server.seen} == {(300, 0.7)}
    (offered,) = server.seen[0].body["tools"]
    assert offered["function"]["parameters"]["required"] == ["query"]  # a real model knows what to send
    assert server.seen[1].body["messages"][-2]["content"] == ""  # the tool-call turn: never null
    assert {seen.headers["authorization"] for seen in server.seen} == {"Bearer sk-test-secret"}
    assert "sk-test-secret" not in done.stdout + done.stderr
    task = GraphFiles(data_dir).load(owner=False)[0][0]
    assert task.status is TaskStatus.COMPLETED and task.result is not None
    assert task.result.artifacts["facts"] == ["fact one", "fact two"]


def test_agents_without_llm_phases_run_beside_an_llm_section_unless_a_model_is_named_for_them(
    tmp_path: Path,
) -> None:
    """``[llm] model`` is for the agents that have LLM phases: the others run as they are
    (the README's own config has write and review agents beside it); naming a model for
    one of them is refused, since it would do nothing."""
    data_dir = tmp_path / "data"
    config = tmp_path / "llm.toml"
    config.write_text(
        '[llm]\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "m"\n\n'
        '[agents.step]\nagent = "crash_agents:StepAgent"\n'
    )
    added = greenroom("tasks", "add", "--type", "step", "--id", "s1", data_dir=data_dir)
    assert added.returncode == 0, added.stderr
    done = greenroom("run", "--config", str(config), "--until-idle", "--quiet", "--no-api", data_dir=data_dir)
    assert done.returncode == 0, done.stderr
    assert GraphFiles(data_dir).load(owner=False)[0][0].status is TaskStatus.COMPLETED
    config.write_text(config.read_text() + 'model = "m"\n')
    named = greenroom(
        "run", "--config", str(config), "--until-idle", "--quiet", "--no-api", data_dir=data_dir
    )
    assert named.returncode == 1
    assert "agent type 'step' (StepAgent) has no LLM phases, so model 'm' would not be" in named.stderr


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ('[llm]\nbase_url = "ftp://x"\nmodel = "m"\n', "llm.base_url"),
        ('[llm]\nbase_url = "http://x"\nmodel = "m"\napi_key = "sk-in-the-file"\n', "api_key"),
        ('[llm]\nbase_url = "http://x"\nmodel = "m"\nclient = "curl"\n', "llm.client"),
        ('[llm]\nbase_url = "http://x"\nmodel = "m"\nstream = "yes"\n', "llm.stream"),
        ('[agents.research]\nagent = "greenroom.agents.examples:ResearchAgent"\nmodel = "m"\n',
         "field 'agents.research.model' names 'm', but there is no [llm] section"),
        ('[limits]\nmax_error_chars = 5\n', "limits.max_error_chars"),
    ],
)  # fmt: skip
def test_bad_llm_and_limits_sections_are_named(tmp_path: Path, toml: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    if "[agents." not in toml:
        toml += '\n[agents.research]\nagent = "greenroom.agents.examples:ResearchAgent"\n'
    path.write_text(toml)
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(path)


def test_sigterm_right_after_the_first_claims_is_a_graceful_stop(tmp_path: Path) -> None:
    """The handlers are installed before any agent starts: a SIGTERM as soon as the first
    claim is journalled (before the "serving" line) stops the daemon cleanly, exit 0,
    with every claimed task finished or handed back."""
    from greenroom.messages import TASK_CLAIMED

    data_dir = tmp_path / "data"
    config = write_config(tmp_path / "greenroom.toml", concurrency=50, lease=30.0)
    seed_chains(data_dir, tmp_path, chains=100, steps=2)
    events = data_dir / "events.jsonl"
    start = events.stat().st_size
    process = subprocess.Popen(
        [sys.executable, "-m", "greenroom", "run", "--data-dir", str(data_dir), "--config", str(config)],
        env=_env(data_dir), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while TASK_CLAIMED.encode() not in events.read_bytes()[start:]:
            assert time.monotonic() < deadline and process.poll() is None
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, err
    assert "stopped by SIGTERM" in out
    tasks, _ = GraphFiles(data_dir).load(owner=False)
    assert not [t for t in tasks if t.status is TaskStatus.IN_PROGRESS]
    assert all(t.attempt <= 1 for t in tasks)


def test_until_idle_says_which_tasks_cannot_run_and_why(tmp_path: Path) -> None:
    tasks = [
        {"id": "orphan", "type": "nobody"},
        {"id": "after", "type": "step", "depends_on": ["orphan"]},
        {"id": "fine", "type": "step"},
    ]
    (tmp_path / "tasks.json").write_text(json.dumps(tasks))
    data_dir = tmp_path / "data"
    added = greenroom("tasks", "add", "--file", str(tmp_path / "tasks.json"), data_dir=data_dir)
    assert added.returncode == 0
    config = write_config(tmp_path / "greenroom.toml", concurrency=2)
    done = greenroom("run", "--config", str(config), "--until-idle", "--quiet", data_dir=data_dir)
    assert done.returncode == 0, done.stderr
    assert "1 task(s) completed this run" in done.stdout
    assert "greenroom: cannot run: 1 task(s) of type 'nobody': no agent of that type runs here" in done.stderr
    assert "greenroom: cannot run: after: wait(s) on 'orphan' (type 'nobody', not served here)" in done.stderr


@pytest.mark.anyio
async def test_progress_prints_a_line_only_when_the_counts_change() -> None:
    import io

    import anyio

    from greenroom.cli._run import _Progress
    from greenroom.messages import GraphStats

    script = [GraphStats({"PENDING": 2}, ["w"], 2)] * 5 + [GraphStats({"COMPLETED": 2}, [], 2)] * 15
    asked = anyio.Event()

    class Host:
        calls = 0

        async def stats(self) -> GraphStats:
            Host.calls += 1
            if Host.calls == len(script):
                asked.set()
            return script[min(Host.calls, len(script)) - 1]

        def is_idle(self, stats: GraphStats) -> bool:
            return not stats.runnable_types

    out = io.StringIO()
    progress = _Progress(Host(), out, 0.001)  # type: ignore[arg-type]
    async with anyio.create_task_group() as tg:
        tg.start_soon(progress.run, 0.0)
        with anyio.fail_after(10):
            await asked.wait()
        tg.cancel_scope.cancel()
    lines = out.getvalue().splitlines()
    assert [line.split("] ", 1)[1] for line in lines] == [
        "0/2 final · completed 0 · running 0 · pending 2 · failed 0",
        "2/2 final · completed 2 · running 0 · pending 0 · failed 0",
    ]
    assert progress.busy > 0  # the busy samples counted, the idle ones not


@pytest.mark.anyio
async def test_progress_and_the_idle_watch_outlast_a_store_out_of_reach() -> None:
    """A sample the store cannot answer (PostgreSQL restarting) is skipped: the progress line
    and ``--until-idle``'s watch keep going and report once it answers again (found when
    a daemon exited 'greenroom: error: ... server closed the connection' at a restart)."""
    import io

    import anyio

    from greenroom import StoreUnavailable
    from greenroom.cli._run import _Progress
    from greenroom.daemon._host import AgentHost
    from greenroom.messages import GraphStats

    answers: list[GraphStats | None] = [None, None, GraphStats({"COMPLETED": 3}, [], 3)]

    class Host:
        asked = 0
        config = type("Config", (), {"agents": {"w": None}})()
        is_idle = AgentHost.is_idle

        async def stats(self) -> GraphStats:
            answer = answers[min(Host.asked, len(answers) - 1)]
            Host.asked += 1
            if answer is None:
                raise StoreUnavailable("PostgreSQL at db: server closed the connection unexpectedly")
            return answer

    printed = anyio.Event()

    class Out(io.StringIO):
        def write(self, text: str) -> int:
            printed.set()
            return super().write(text)

    out = Out()
    progress = _Progress(Host(), out, 0.001)  # type: ignore[arg-type]
    async with anyio.create_task_group() as tg:
        tg.start_soon(progress.run, 0.0)
        with anyio.fail_after(10):
            await printed.wait()
        tg.cancel_scope.cancel()
    assert out.getvalue().split("] ", 1)[1] == "3/3 final · completed 3 · running 0 · pending 0 · failed 0\n"

    class Supervisor:  # each wait for a change is answered by one (a lease check, say)
        changes = 0

        async def ask(self, message: object, timeout: float | None = None) -> int:
            Supervisor.changes += 1
            return Supervisor.changes

    Host.asked = 0
    host = Host()
    host.supervisor = Supervisor()  # type: ignore[attr-defined]
    host.busy = False  # type: ignore[attr-defined]
    with anyio.fail_after(10):
        idle = await AgentHost.wait_idle(host)  # type: ignore[arg-type]
    assert idle.total == 3 and Host.asked == 3 and Supervisor.changes == 3


def test_a_poison_task_that_kills_its_process_is_failed_and_the_rest_complete(tmp_path: Path) -> None:
    """A task that SIGKILLs its daemon every time it runs: restarted after each death,
    the daemon fails that task as poison after max_crashes (4: two deaths shared with
    the tasks beside it, then two with it running alone), with the reason, and
    every innocent task beside it completes without being charged an attempt."""
    data_dir = tmp_path / "data"
    config = tmp_path / "poison.toml"
    config.write_text(
        "lease_seconds = 30\nshutdown_grace = 5\n\n"
        '[agents.step]\nagent = "crash_agents:PoisonAgent"\nconcurrency = 8\n'
    )
    tasks = [{"id": "poison", "type": "step"}] + [{"id": f"i{n:02d}", "type": "step"} for n in range(40)]
    (tmp_path / "tasks.json").write_text(json.dumps(tasks))
    assert (
        greenroom("tasks", "add", "--file", str(tmp_path / "tasks.json"), data_dir=data_dir).returncode == 0
    )
    deaths = 0
    while True:
        done = greenroom("run", "--config", str(config), "--until-idle", "--quiet", data_dir=data_dir)
        if done.returncode == 0:
            break
        assert done.returncode == -signal.SIGKILL, done.stderr
        deaths += 1
        assert deaths <= 4, "the poison task was not stopped at max_crashes"
    assert deaths == 4  # two deaths shared with the others, then two alone
    graph = {t.id: t for t in GraphFiles(data_dir).load(owner=False)[0]}
    poison = graph.pop("poison")
    assert poison.status is TaskStatus.FAILED and poison.crashes == 4
    assert poison.error is not None and "a poison task?" in poison.error.reason
    assert all(t.status is TaskStatus.COMPLETED for t in graph.values())
    assert all(t.attempt == 1 for t in graph.values())
    assert "failed 1 task(s) as poison" in done.stderr


def test_finished_tasks_are_archived_and_still_shown_from_the_cli(tmp_path: Path) -> None:
    """With ``[retention] keep_finished = 0`` every finished task leaves the live graph:
    ``tasks list`` shows what is live, ``tasks list --archived`` and ``tasks show`` find
    the rest, with no daemon running; ``status`` says how much is archived."""
    agents = "".join(
        f'[agents.{name}]\nagent = "greenroom.agents.examples:{cls}"\nconcurrency = 2\n'
        for name, cls in (("research", "ResearchAgent"), ("write", "WriteAgent"),
                          ("review", "ReviewAgent"), ("publish", "PublishAgent"))
    )  # fmt: skip
    config = tmp_path / "archive.toml"
    config.write_text(
        f"{agents}\n[retention]\narchive_after = 0.001\nkeep_finished = 0\ncheck_every = 0.01\n"
    )
    data_dir = tmp_path / "data"
    done = greenroom("run", "--config", str(config), "--seed-example", "2", "--until-idle", "--quiet",
                     data_dir=data_dir)  # fmt: skip
    assert done.returncode == 0, done.stderr
    live = json.loads(greenroom("tasks", "list", "--json", data_dir=data_dir).stdout)
    archived = json.loads(greenroom("tasks", "list", "--archived", "--json", data_dir=data_dir).stdout)
    assert len(live) + len(archived) == 8 and all(t["status"] == "COMPLETED" for t in archived)
    assert len(archived) >= 6 and [t["status"] for t in live if t["status"] != "COMPLETED"] == ["WAITING"]
    # the summary counts what this run completed, not the change in the live graph archiving shrank
    assert "7 task(s) completed this run" in done.stdout, done.stdout
    shown = json.loads(greenroom("tasks", "show", archived[0]["id"], data_dir=data_dir).stdout)
    assert shown["id"] == archived[0]["id"] and shown["result"] is not None
    status = greenroom("status", data_dir=data_dir)
    assert f"archived tasks {len(archived)}" in status.stdout, status.stdout
    bad = tmp_path / "bad.toml"
    bad.write_text(f"{agents}\n[retention]\narchive_after = -5\n")
    refused = greenroom("run", "--config", str(bad), "--until-idle", data_dir=data_dir)
    assert refused.returncode != 0 and "retention.archive_after" in refused.stderr, refused.stderr


def test_the_cli_reads_a_log_in_segments_and_refuses_a_cursor_retention_passed(tmp_path: Path) -> None:
    """``[retention] events_per_segment`` rolls the log; with a disk budget the oldest
    segments go: ``events tail --after`` a dropped ``seq`` is refused naming the oldest
    kept, ``--last`` shows the newest, ``status`` says what was dropped."""
    config = tmp_path / "segments.toml"
    config.write_text(
        '[agents.write]\nagent = "greenroom.agents.examples:WriteAgent"\nconcurrency = 2\n'
        "[retention]\nevents_per_segment = 5\ndisk_budget = 1\ncheck_every = 0.01\n"
    )
    data_dir = tmp_path / "data"
    (tmp_path / "tasks.json").write_text(
        json.dumps([{"id": f"w{n}", "type": "write", "input": {"topic": "t"}} for n in range(4)])
    )
    assert (
        greenroom("tasks", "add", "--file", str(tmp_path / "tasks.json"), data_dir=data_dir).returncode == 0
    )
    done = greenroom("run", "--config", str(config), "--until-idle", "--quiet", data_dir=data_dir)
    assert done.returncode == 0, done.stderr
    status = json.loads(greenroom("status", "--json", data_dir=data_dir).stdout)
    floor = status["storage"]["events_dropped_through"]
    assert floor > 0 and status["storage"]["event_segments"] >= 2
    refused = greenroom("events", "tail", "--after", "0", data_dir=data_dir)
    assert refused.returncode != 0 and f"the oldest kept is {floor + 1}" in refused.stderr, refused.stderr
    newest = greenroom("events", "tail", "--last", "2", "--json", data_dir=data_dir)
    assert newest.returncode == 0 and len(newest.stdout.splitlines()) == 2, newest.stderr
    kept = greenroom("events", "tail", "--after", str(floor), "--json", data_dir=data_dir)
    assert json.loads(kept.stdout.splitlines()[0])["seq"] == floor + 1


def test_status_stop_tokens_and_cancel_from_the_cli_with_and_without_a_daemon(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    tasks = [{"id": f"w{n}", "type": "waiting"} for n in range(3)]  # no agent serves them: they wait
    (tmp_path / "tasks.json").write_text(json.dumps(tasks))
    assert (
        greenroom("tasks", "add", "--file", str(tmp_path / "tasks.json"), data_dir=data_dir).returncode == 0
    )
    offline = greenroom("status", data_dir=data_dir)
    assert offline.returncode == 0, offline.stderr
    lines = offline.stdout.splitlines()
    assert lines[:2] == [f"daemon: not running on {data_dir}", "tasks: 3 total · pending 3"]
    assert lines[2].startswith("storage: ") and "archived tasks 0 in 0 part(s) · live tasks 3" in lines[2]
    nothing = greenroom("stop", data_dir=data_dir)
    assert nothing.returncode == 1 and "no greenroom daemon is running" in nothing.stderr
    cancelled = greenroom("tasks", "cancel", "w0", "--reason", "offline", data_dir=data_dir)
    assert cancelled.returncode == 0 and cancelled.stdout == "cancelled w0\n", cancelled.stderr
    made = greenroom("tokens", "add", "--user", "ops", "--scope", "tasks", data_dir=data_dir)
    chat_made = greenroom("tokens", "add", "--user", "amy", "--scope", "chat", data_dir=data_dir)
    ops_token, chat_token = made.stdout.strip(), chat_made.stdout.strip()
    assert ops_token.startswith("grt_") and "shown only now" in made.stderr
    listed = greenroom("tokens", "list", data_dir=data_dir)
    assert "ops" in listed.stdout and ops_token not in listed.stdout
    config = write_config(tmp_path / "greenroom.toml", concurrency=1, lease=30.0)
    process = subprocess.Popen(
        [sys.executable, "-m", "greenroom", "run", "--data-dir", str(data_dir), "--config", str(config)],
        env=_env(data_dir), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not (data_dir / "daemon.json").exists():
            assert time.monotonic() < deadline and process.poll() is None
            time.sleep(0.02)
        url = json.loads((data_dir / "daemon.json").read_text())["url"]
        status = greenroom("status", data_dir=data_dir)
        assert status.returncode == 0, status.stderr
        first, second = status.stdout.splitlines()[:2]
        assert first.startswith(f"daemon: running · pid {process.pid} · up ") and first.endswith(f"API {url}")
        assert second == "tasks: 3 total · pending 2 · cancelled 1"
        assert (
            json.loads(greenroom("status", "--json", data_dir=data_dir).stdout)["agents"]["step"]["alive"]
            == 1
        )
        remote = greenroom(
            "tasks", "list", "--url", url, "--token", ops_token, data_dir=tmp_path / "elsewhere"
        )
        local = greenroom("tasks", "list", data_dir=data_dir)
        assert remote.returncode == 0 and remote.stdout == local.stdout  # the same table either way
        by_env = subprocess.run(
            [sys.executable, "-m", "greenroom", "tasks", "cancel", "w1", "--url", url],
            capture_output=True, text=True, timeout=60, env={**_env(data_dir), "GREENROOM_TOKEN": ops_token},
        )  # fmt: skip
        assert by_env.returncode == 0 and by_env.stdout == "cancelled w1\n", by_env.stderr
        wrong_scope = greenroom("tasks", "list", "--url", url, "--token", chat_token, data_dir=data_dir)
        assert wrong_scope.returncode == 1 and "needs 'tasks'" in wrong_scope.stderr
        refused = greenroom("stop", "--url", url, "--token", ops_token, data_dir=data_dir)
        assert refused.returncode == 1 and "needs 'admin'" in refused.stderr and process.poll() is None
        tail = greenroom("events", "tail", "--last", "1", data_dir=data_dir)
        assert tail.returncode == 0 and "TASK_CANCELLED [w1]" in tail.stdout
        stopped = greenroom("stop", data_dir=data_dir)  # the local admin token, found in the data dir
        assert stopped.returncode == 0 and "the daemon has stopped" in stopped.stderr, stopped.stderr
        out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, err
    assert "stopped through the API" in out
    after = greenroom("status", data_dir=data_dir)
    assert after.stdout.splitlines()[1] == "tasks: 3 total · pending 1 · cancelled 2"


def test_a_full_disk_stops_the_daemon_with_one_line_and_loses_nothing(tmp_path: Path) -> None:
    """A durable write refused by the OS (here: a file size limit, which fails writes the
    way a full disk does) stops the daemon with one line naming the file, no traceback;
    with room again, a restart finishes every task."""
    import resource

    def small_files() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))

    data_dir = tmp_path / "data"
    full = subprocess.run(
        [sys.executable, "-m", "greenroom", "run", "--data-dir", str(data_dir), "--seed-example", "100",
         "--until-idle", "--quiet"],
        capture_output=True, text=True, timeout=100, env=_env(data_dir), preexec_fn=small_files,
    )  # fmt: skip
    assert full.returncode == 1, full.stderr
    assert "Traceback" not in full.stderr
    last = full.stderr.strip().splitlines()[-1]
    # whichever durable file reaches the limit first: the graph's journal and the event log
    # say the OS's reason; SQLite (the step journal) says only "disk I/O error"
    assert last.startswith("greenroom: error: cannot write ")
    assert "File too large" in last or ("steps.sqlite3" in last and "disk I/O error" in last), last
    again = greenroom("run", "--until-idle", "--quiet", data_dir=data_dir)
    assert again.returncode == 0, again.stderr
    tasks, _ = GraphFiles(data_dir).load(owner=False)
    assert tasks and all(t.status is TaskStatus.COMPLETED for t in tasks if t.type != "publish")
    assert [t.status for t in tasks if t.type == "publish"] == [TaskStatus.WAITING]  # for a person


def test_a_command_right_after_a_daemon_starts_waits_for_its_api(tmp_path: Path) -> None:
    """A script that starts a daemon and asks its status at once: the command finds the
    daemon starting (its lock taken, its API not up yet) and waits for the API — bounded —
    instead of failing with "in use by another process"; a second daemon is refused."""
    data_dir = tmp_path / "data"
    config = write_config(tmp_path / "greenroom.toml", concurrency=2, lease=10.0)
    daemon = subprocess.Popen(
        [sys.executable, "-m", "greenroom", "run", "--data-dir", str(data_dir), "--config", str(config),
         "--quiet"],
        env=_env(data_dir), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        lock = data_dir / "daemon.lock"
        deadline = time.monotonic() + 30
        while not lock.exists():  # the daemon has begun; its API is not up yet (most of the time)
            assert time.monotonic() < deadline and daemon.poll() is None
            time.sleep(0.005)
        status = greenroom("status", data_dir=data_dir)
        added = greenroom("tasks", "add", "--type", "step", "--id", "early", data_dir=data_dir)
        assert status.returncode == 0, status.stderr
        assert added.returncode == 0 and added.stdout == "added early\n", added.stderr
        second = greenroom("run", "--config", str(config), "--until-idle", data_dir=data_dir)
        assert second.returncode == 1 and "in use by another process" in second.stderr, second.stderr
    finally:
        daemon.send_signal(signal.SIGTERM)
        _, err = daemon.communicate(timeout=30)
    assert daemon.returncode == 0, err
    listed = greenroom("tasks", "list", "--json", data_dir=data_dir)  # the daemon gone: on the files
    assert listed.returncode == 0 and "early" in listed.stdout


@pytest.mark.anyio
async def test_wait_idle_is_woken_by_the_work_ending_and_never_polls(tmp_path: Path) -> None:
    """Issue 48, point 12: a host waiting for idle while its agent runs a task (through
    several lease checks, which wake it) asks the store nothing — no sleep loop, and nothing
    to ask while an agent of its own is busy — and returns once the task ended and its
    agent waits for work."""
    import anyio
    from crash_agents import HeldAgent

    from greenroom.daemon import AgentPoolConfig, DaemonConfig
    from greenroom.daemon._host import AgentHost
    from greenroom.messages import AgentTask, AwaitChange, GraphStats, Stats, Submit

    HeldAgent.started, HeldAgent.gate = anyio.Event(), anyio.Event()
    pools = {"held": AgentPoolConfig(agent="crash_agents:HeldAgent", concurrency=2)}
    config = DaemonConfig(agents=pools, lease_seconds=1.0)  # a lease check every 0.25 s
    async with AgentHost(config, tmp_path / "data") as host:
        asked = 0
        stats = host.stats

        async def counted() -> GraphStats:
            nonlocal asked
            asked += 1
            return await stats()

        host.stats = counted  # type: ignore[method-assign]
        await host.supervisor.ask(Submit([AgentTask(id="long", type="held")]))
        await HeldAgent.started.wait()
        idle: list[GraphStats] = []

        async def watch() -> None:
            idle.append(await host.wait_idle())

        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)
            with anyio.fail_after(20):
                for _ in range(6):  # six lease checks with the task in flight: each wakes the watch
                    changes = await host.supervisor.ask(Stats())
                    await host.supervisor.ask(AwaitChange(changes.changes), timeout=None)
            assert idle == [] and asked == 0
            HeldAgent.gate.set()
        assert idle[0].by_status["COMPLETED"] == 1 and idle[0].by_status["IN_PROGRESS"] == 0
        assert asked == 1


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_daemon_paused_past_its_leases_on_the_files_finishes_every_task_with_no_effect_twice(
    tmp_path: Path, backend: str
) -> None:
    """Issue 49 on the files: a daemon running durable tasks (four phases, each a call of a
    writing tool that honours its call's token and key) is frozen (SIGSTOP) for 2.5x its
    2 s lease, then resumed. Awake, whichever runs first — the agents' heartbeats, or the
    lease check, which finds the running attempts' leases gone and grants those tasks again
    to its other agents while the old attempts carry on (refused at their next write, they
    give up quietly) — every task completes and no effect lands twice."""
    import collections

    data_dir = tmp_path / "data"
    config = tmp_path / "pause.toml"
    config.write_text(
        'lease_seconds = 2\nshutdown_grace = 5\n\n[agents.pause]\nagent = "crash_agents:PausedAgent"\n'
        "concurrency = 4\n"
    )
    ids = [f"p{i:02}" for i in range(12)]
    (tmp_path / "tasks.json").write_text(json.dumps([{"id": i, "type": "pause"} for i in ids]))
    assert (
        greenroom("tasks", "add", "--file", str(tmp_path / "tasks.json"), data_dir=data_dir).returncode == 0
    )
    effects, ledger = tmp_path / "effects.log", tmp_path / "ledger.json"
    env = {**_env(data_dir), "GREENROOM_TEST_EFFECTS": str(effects), "GREENROOM_TEST_LEDGER": str(ledger)}
    process = subprocess.Popen(
        [sys.executable, "-m", "greenroom", "run", "--data-dir", str(data_dir), "--config", str(config),
         "--until-idle", "--quiet", "--backend", backend],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not (effects.exists() and len(effects.read_text().splitlines()) >= 4):  # under way
            assert time.monotonic() < deadline and process.poll() is None, "the daemon did no work"
            time.sleep(0.05)
        process.send_signal(signal.SIGSTOP)
        time.sleep(5.0)  # the pause itself (2.5 leases), not a wait for anything
        process.send_signal(signal.SIGCONT)
        _, said = process.communicate(timeout=90)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)
            process.kill()
            process.wait()
    assert process.returncode == 0, said[-3000:]
    graph = {t.id: t for t in GraphFiles(data_dir).load(owner=False)[0]}
    assert all(graph[i].status is TaskStatus.COMPLETED for i in ids), {i: graph[i].status for i in ids}
    lines = [line.split() for line in effects.read_text().splitlines()]
    applied = collections.Counter(key for kind, key, *_ in lines if kind == "applied")
    assert set(applied) == {f"{i}/p{p}/p{p}/m0/t0" for i in ids for p in range(4)}
    assert max(applied.values()) == 1, applied.most_common(3)
    assert "Traceback" not in said, said[-3000:]
    print(f"\nstale calls refused by the tool: {sum(1 for kind, *_ in lines if kind == 'stale')}; "
          f"attempts given up: {said.count('gave up task')}")  # fmt: skip
