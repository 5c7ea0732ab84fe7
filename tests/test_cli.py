"""The ``greenroom`` command: version, flag validation, errors, what each command imports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from greenroom import __version__
from greenroom.cli import main


def test_version() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "greenroom", "--version"], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == f"greenroom {__version__}"


WHOLE = "must be a whole number from 1 to 1000000,"


def test_version_imports_neither_the_benchmarks_nor_the_openai_sdk() -> None:
    """What a command imports, not how long it takes: ``--version`` used to import every
    benchmark suite and through them the openai SDK (~0.6 s)."""
    probe = (
        "import sys\nfrom greenroom.cli import main\n"
        "try:\n    main(['--version'])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in ('benchmarks', 'openai', 'greenroom.daemon') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


HEAVY = (
    "starlette", "hypercorn", "openai", "mcp", "httpx2", "benchmarks", "greenroom.agents",
    "greenroom.harness", "greenroom.llm", "greenroom.chat", "greenroom.pipeline", "greenroom.daemon._host",
    "greenroom.daemon._config", "greenroom.service._app",
)  # fmt: skip


@pytest.mark.parametrize("argv", [["status"], ["tasks", "list"], ["tasks", "show", "nope"]])
def test_read_commands_import_no_server_model_or_agent_layer(argv: list[str], tmp_path: Path) -> None:
    """``status`` and ``tasks list`` on a data dir with no daemon import the store and the
    kernel, never the API server, the model SDK, MCP, the agents or the benchmarks (they
    took 0.83 s through the daemon's config; what matters is what they import, not the
    time a loaded machine takes)."""
    probe = (
        "import sys\nfrom greenroom.cli import main\n"
        f"code = main({[*argv, '--data-dir', str(tmp_path)]!r})\n"
        f"print(code, sorted(m for m in {HEAVY!r} if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    code, imported = done.stdout.strip().splitlines()[-1].split(" ", 1)
    assert imported == "[]", done.stderr
    assert code == ("1" if "show" in argv else "0"), done.stderr


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["tasks", "add", "--type", "w", "--priority", str(10**26)],
         "argument --priority: must be a whole number from -1000000 to 1000000, got '1000000000000000000"),
        (["run", "--seed-example", "1000000000"],
         "argument --seed-example: must be a whole number from 1 to 10000, got '1000000000'"),
        (["tasks", "add", "--type", "w", "--max-attempts", "5000"],
         "argument --max-attempts: must be a whole number from 1 to 1000, got '5000'"),
    ],
)  # fmt: skip
def test_bad_flags_are_named_with_their_value(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_no_command_prints_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "usage: greenroom" in capsys.readouterr().err


# -- errors: one line for the user's, a bug line (traceback behind --debug) for ours --------


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        [sys.executable, "-m", "greenroom", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def test_a_read_command_never_creates_the_data_dir(tmp_path: Path) -> None:
    missing = tmp_path / "not-yet"
    for command in (("tasks", "list"), ("tasks", "show", "x"), ("events", "tail")):
        done = run_cli(*command, "--data-dir", str(missing))
        assert done.returncode == 1, command
        assert (
            done.stderr == f"greenroom: error: data dir {str(missing)!r} does not exist "
            "(nothing has run there yet; check --data-dir)\n"
        )
        assert not missing.exists()


def test_an_os_error_is_one_line_naming_the_path(tmp_path: Path) -> None:
    done = run_cli("tasks", "add", "--type", "x", "--data-dir", "/sys/greenroom-cannot-be-here")
    assert done.returncode == 1
    assert done.stderr.startswith("greenroom: error: /sys/greenroom-cannot-be-here")
    assert "Operation not permitted" in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1


def test_a_data_dir_that_is_a_file_or_empty_is_one_line(tmp_path: Path) -> None:
    a_file = tmp_path / "plain"
    a_file.write_text("x")
    done = run_cli("tasks", "list", "--data-dir", str(a_file))
    assert done.returncode == 1 and "exists and is not a directory" in done.stderr
    assert "Traceback" not in done.stderr
    empty = run_cli("tasks", "list", "--data-dir", "")
    assert empty.returncode == 1
    assert "the data dir must name a directory, got ''" in empty.stderr


def test_a_deeply_nested_input_is_refused_in_one_line(tmp_path: Path) -> None:
    nested = "[" * 20_000 + "]" * 20_000
    done = run_cli("tasks", "add", "--type", "w", "--input", nested, "--data-dir", str(tmp_path))
    assert done.returncode == 1
    assert "--input is nested too deeply" in done.stderr and "Traceback" not in done.stderr
    deep_file = tmp_path / "deep.json"
    deep_file.write_text('[{"id": "a", "type": "w", "input": ' + "[" * 20_000 + "]" * 20_000 + "}]")
    done = run_cli("tasks", "add", "--file", str(deep_file), "--data-dir", str(tmp_path))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert (
        not (tmp_path / "tasks.graph.journal").exists()
        or "a" not in (tmp_path / "tasks.graph.journal").read_text()
    )


@pytest.mark.parametrize(
    ("tasks", "expected"),
    [
        ('[{"id": "b", "type": "w", "depends_on": ["ghost"]}]',
         "task 'b' field 'depends_on' names 'ghost', which is not in the graph"),
        ('[{"id": "b", "type": "w", "depends_on": ["b"]}]',
         "task 'b' field 'depends_on' names the task itself"),
        ('[{"id": "a", "type": "w", "depends_on": ["b"]}, {"id": "b", "type": "w", "depends_on": ["a"]}]',
         "which closes a dependency cycle"),
        ('[{"id": "a", "type": "w", "attempt": 7, "max_attempts": 3}]',
         "task 'a' field 'attempt' is 7, above its max_attempts (3)"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("command", [("tasks", "list"), ("run", "--until-idle", "--quiet")])
def test_a_graph_no_submission_could_make_is_a_clear_error(
    tmp_path: Path, tasks: str, expected: str, command: tuple[str, ...]
) -> None:
    graph = tmp_path / "tasks.graph.json"
    graph.write_text(f'{{"format": "greenroom.tasks/1", "seq": 0, "tasks": {tasks}}}')
    before = graph.read_bytes()
    done = run_cli(*command, "--data-dir", str(tmp_path))
    assert done.returncode == 1
    assert expected in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1
    assert graph.read_bytes() == before


def test_a_complete_garbled_journal_line_is_an_error_even_for_readers_and_nothing_is_cut(
    tmp_path: Path,
) -> None:
    assert run_cli("tasks", "add", "--type", "w", "--id", "a", "--data-dir", str(tmp_path)).returncode == 0
    journal = tmp_path / "tasks.graph.journal"
    content = journal.read_bytes() + b'{"seq": 99, "tasks": "not a list"}\n'
    journal.write_bytes(content)
    for command in (("tasks", "list"), ("run", "--until-idle", "--quiet")):
        done = run_cli(*command, "--data-dir", str(tmp_path))
        assert done.returncode == 1, command
        line = content.count(b"\n")
        assert f"tasks.graph.journal, line {line}:" in done.stderr and "nothing was changed" in done.stderr
        assert journal.read_bytes() == content


def test_a_read_command_leaves_a_torn_journal_end_for_the_owner(tmp_path: Path) -> None:
    assert run_cli("tasks", "add", "--type", "w", "--id", "a", "--data-dir", str(tmp_path)).returncode == 0
    journal = tmp_path / "tasks.graph.journal"
    whole = journal.read_bytes()
    journal.write_bytes(whole + b'{"seq": 2, "tas')  # a crash mid-append
    done = run_cli("tasks", "list", "--json", "--data-dir", str(tmp_path))
    assert done.returncode == 0 and [t["id"] for t in json.loads(done.stdout)] == ["a"]
    assert journal.read_bytes() == whole + b'{"seq": 2, "tas'  # a reader never writes
    config = tmp_path / "none.toml"
    config.write_text('[agents.other]\nagent = "greenroom.agents.examples:ResearchAgent"\n')
    done = run_cli("tasks", "add", "--type", "w", "--id", "b", "--data-dir", str(tmp_path))
    assert done.returncode == 0
    assert journal.read_bytes().startswith(whole) and b'"tas\n' not in journal.read_bytes()


def test_a_bug_is_one_line_and_the_traceback_only_with_debug(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from greenroom.embedded import EmbeddedStore

    def broken(self: EmbeddedStore) -> list[object]:
        raise KeyError("internal-state")

    monkeypatch.setattr(EmbeddedStore, "_load", broken)
    assert main(["tasks", "list", "--data-dir", str(tmp_path)]) == 70
    err = capsys.readouterr().err
    assert "internal error (KeyError" in err and "this is a bug in greenroom" in err
    assert "Traceback" not in err and "--debug" in err
    assert main(["--debug", "tasks", "list", "--data-dir", str(tmp_path)]) == 70
    err = capsys.readouterr().err
    assert "Traceback" in err and "internal-state" in err


def test_user_errors_inside_an_exception_group_are_still_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from greenroom.cli import report_error
    from greenroom.supervisor import UnknownTask

    group = BaseExceptionGroup("tasks", [UnknownTask("x"), UnknownTask("x")])
    assert report_error(group) == 1
    assert capsys.readouterr().err == "greenroom: error: no task with id 'x'\n"


def test_an_oversized_task_input_is_refused_naming_the_limit(tmp_path: Path) -> None:
    (tmp_path / "big.json").write_text(
        json.dumps([{"id": "big", "type": "w", "input": {"t": "x" * 2_000_000}}])
    )
    done = run_cli("tasks", "add", "--file", str(tmp_path / "big.json"), "--data-dir", str(tmp_path / "d"))
    assert done.returncode == 1
    assert "task 'big'" in done.stderr and "larger than max_task_bytes (1048576)" in done.stderr
    assert len(done.stderr) < 500 and "Traceback" not in done.stderr  # the input is not echoed back
    listed = run_cli("tasks", "list", "--json", "--data-dir", str(tmp_path / "d"))
    assert listed.returncode == 0 and json.loads(listed.stdout) == []


def test_tasks_decide_shows_a_dry_run_then_decides_each_with_apply(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``greenroom tasks decide``: with no daemon, on the files — a dry run lists the calls
    the filter selects and decides nothing; ``--apply`` decides each as this machine's
    user; bad flags are refused by name, nothing decided."""
    import anyio

    from greenroom.embedded import EmbeddedStore
    from greenroom.messages import AgentTask, Claim, GetTask, Park, Submit, TaskStatus

    data_dir = tmp_path / "data"
    rerun = {"step": "p0/main/m0/t0#rerun", "tool": "append", "arguments": {"line": "x"}, "risk": "WRITES",
             "question": "it may have run"}  # fmt: skip
    approval = {"step": "p0/main/m0/t0", "tool": "wire", "arguments": {"amount": 5}, "risk": "EXECUTES"}

    async def seed() -> None:
        from _stores import open_node

        async with EmbeddedStore(data_dir) as store, open_node(store) as node:
            await node.supervisor.ask(Submit([AgentTask(id=i, type="w") for i in ("q0", "q1", "ask")]))
            for agent, call in (("a", rerun), ("b", rerun), ("c", approval)):
                claimed = (await node.supervisor.ask(Claim(agent, "w"))).task
                await node.supervisor.ask(Park(claimed.id, agent, call))

    async def status(task_id: str) -> TaskStatus:
        from _stores import open_node

        async with EmbeddedStore(data_dir) as store, open_node(store) as node:
            return (await node.supervisor.ask(GetTask(task_id))).status

    anyio.run(seed)
    where = ["--data-dir", str(data_dir)]
    assert main(["tasks", "decide", "--approve", "--as-done", "--may-have-run", *where]) == 0
    shown = capsys.readouterr().out
    assert "q0  append" in shown and "q1  append" in shown and "ask" not in shown
    assert "dry run: 2 call(s) would be recorded as done" in shown
    assert anyio.run(status, "q0") is TaskStatus.WAITING
    for bad, message in ((["--deny", "--as-done", "--reason", "r"], "--as-done goes with --approve"),
                         (["--deny"], "--deny needs --reason")):  # fmt: skip
        assert main(["tasks", "decide", *bad, "--apply", *where]) == 1
        assert message in capsys.readouterr().err
    assert anyio.run(status, "q0") is TaskStatus.WAITING  # the refusals decided nothing
    assert (
        main(["tasks", "decide", "--approve", "--as-done", "--may-have-run", "--apply", "--json", *where])
        == 0
    )
    answer = json.loads(capsys.readouterr().out)
    assert sorted(answer["decided"]) == ["q0", "q1"] and not answer["dry_run"]
    assert anyio.run(status, "q1") is TaskStatus.PENDING and anyio.run(status, "ask") is TaskStatus.WAITING


@pytest.mark.parametrize("command", ["tasks list", "status"])
def test_reading_the_files_starts_no_event_loop_and_reads_what_is_stored(
    tmp_path: Path, command: str
) -> None:
    """``tasks list`` and ``status`` on the files with no daemon read in the calling thread:
    neither anyio's asyncio backend nor trio is imported, and what they say is stored."""
    data = tmp_path / "data"
    added = subprocess.run(
        [sys.executable, "-m", "greenroom", "tasks", "add", "--type", "w", "--id", "t1",
         "--data-dir", str(data)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    probe = (
        f"import sys; from greenroom.cli import main; code = main({command.split()!r} + ['--json', "
        f"'--data-dir', {str(data)!r}]); "
        "print(sorted(m for m in ('anyio._backends._asyncio', 'trio') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    said, loops = done.stdout.rsplit("\n", 2)[0], done.stdout.strip().splitlines()[-1]
    assert loops == "[]"
    if command == "status":
        document = json.loads(said)
        assert document["running"] is False and document["tasks"]["total"] == 1
        assert {k: v for k, v in document["tasks"]["by_status"].items() if v} == {"PENDING": 1}
    else:
        assert [task["id"] for task in json.loads(said)] == ["t1"]


def test_tasks_retry_runs_a_failed_task_again_on_the_files_and_refuses_one_that_is_not(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``greenroom tasks retry ID`` with no daemon: as this machine's user, a fresh attempt
    budget; a task that is not FAILED is refused in one line, nothing changed."""
    import getpass

    import anyio

    from greenroom.embedded import EmbeddedStore
    from greenroom.messages import AgentError, AgentTask, Claim, Fail, GetTask, Submit

    data_dir = tmp_path / "data"

    async def seed() -> None:
        from _stores import open_node

        async with EmbeddedStore(data_dir) as store, open_node(store) as node:
            await node.supervisor.ask(
                Submit([AgentTask(id="f", type="w", max_attempts=1), AgentTask(id="p", type="v")])
            )
            await node.supervisor.ask(Claim("a", "w"))
            await node.supervisor.ask(Fail("f", "a", AgentError(reason="down")))

    async def show(task_id: str) -> AgentTask:
        from _stores import open_node

        async with EmbeddedStore(data_dir) as store, open_node(store) as node:
            return await node.supervisor.ask(GetTask(task_id))

    anyio.run(seed)
    where = ["--data-dir", str(data_dir)]
    assert main(["tasks", "retry", "f", "--reason", "it is back", *where]) == 0
    assert capsys.readouterr().out.strip() == "retried f: PENDING"
    retried = anyio.run(show, "f")
    assert (retried.status.value, retried.attempt) == ("PENDING", 0)
    assert retried.retries[0]["by"] == f"{getpass.getuser()} (command line)"
    assert retried.retries[0]["reason"] == "it is back"
    assert main(["tasks", "retry", "p", *where]) == 1
    assert "cannot retry task 'p': it is PENDING" in capsys.readouterr().err
    assert anyio.run(show, "p").retries == []


def test_tasks_list_filters_by_owner_text_and_time_newest_first_on_the_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``greenroom tasks list --owner --text --within --newest`` with no daemon: the files
    read here and filtered by the rule the API uses; a bad ``--within`` is refused by name."""
    (tmp_path / "tasks.json").write_text(
        json.dumps([{"id": f"t{i}", "type": "w", "input": {"note": f"Batch {i % 2}"}} for i in range(4)])
    )
    data_dir = str(tmp_path / "d")
    assert main(["tasks", "add", "--file", str(tmp_path / "tasks.json"), "--data-dir", data_dir]) == 0
    capsys.readouterr()

    def ids(*flags: str) -> list[str]:
        assert main(["tasks", "list", "--json", "--data-dir", data_dir, *flags]) == 0
        return [task["id"] for task in json.loads(capsys.readouterr().out)]

    assert ids("--text", "batch 1") == ["t1", "t3"]
    assert ids("--text", "batch 1", "--newest") == ["t3", "t1"]
    assert ids("--within", "1h", "--newest") == ["t3", "t2", "t1", "t0"]
    assert ids("--owner", "nobody") == []
    with pytest.raises(SystemExit):
        main(["tasks", "list", "--data-dir", data_dir, "--within", "soon"])
    assert "--within: must be a duration such as 90s, 15m, 1h or 2d, got 'soon'" in capsys.readouterr().err
