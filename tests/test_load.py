"""``greenroom load`` (issue 38, first part): workloads, arrival schedules, sessions whose
tools really run, every request timed from the instant it was due; against the test kit's
streaming server on 127.0.0.1, on both loops."""

from __future__ import annotations

import json
import random
import re
import statistics
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import islice
from pathlib import Path

import anyio
import msgspec
import pytest

from greenroom._errors import InvalidInput
from greenroom.llm import OpenAIChatModel
from greenroom.load import PRESETS, Dist, LoadPlan, Slo, SyntheticTool, Workload, load_workload, run_load
from greenroom.load._arrivals import open_starts
from greenroom.testing import ModelServer, Respond, completion

pytestmark = pytest.mark.anyio


@pytest.fixture
def server() -> Iterator[ModelServer]:
    with ModelServer().running() as running:
        yield running


def model_on(server: ModelServer, **options: object) -> OpenAIChatModel:
    return OpenAIChatModel("m", base_url=server.url, max_retries=0, **options)  # type: ignore[arg-type]


# -- arrivals -------------------------------------------------------------------------------


def test_a_poisson_schedule_has_the_rate_and_the_spread_of_one() -> None:
    starts = list(islice(open_starts(50.0, rng=random.Random(7)), 5000))
    gaps = [b - a for a, b in zip([0.0, *starts], starts, strict=False)]
    mean = statistics.fmean(gaps)
    # 5,000 exponential gaps: the mean within 5 % of 1/rate (its standard error is 1.4 %),
    # and the coefficient of variation of an exponential, 1
    assert mean == pytest.approx(1 / 50, rel=0.05)
    assert statistics.pstdev(gaps) / mean == pytest.approx(1.0, rel=0.06)
    assert starts == sorted(starts)


def test_uniform_bursty_and_ramped_schedules() -> None:
    uniform = list(islice(open_starts(4.0, pattern="uniform", rng=random.Random(1)), 8))
    assert uniform == pytest.approx([0.25 * n for n in range(1, 9)])
    bursty = list(islice(open_starts(10.0, pattern="bursty", burst=5, rng=random.Random(1)), 20))
    assert len(set(bursty)) == 4  # four bursts of five at once
    ramped = list(islice(open_starts(10.0, pattern="uniform", ramp_up=4.0, rng=random.Random(1)), 40))
    # a linear ramp over 4 s delivers what 2 s at full rate would: 20 starts in the first 4 s
    assert sum(1 for at in ramped if at <= 4.0 + 1e-9) == 20
    assert ramped[0] > uniform[0] / 4 * 10  # the first start comes later than at full rate


def test_a_bad_rate_or_ramp_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="rate"):
        next(open_starts(0.0, rng=random.Random()))
    with pytest.raises(ValueError, match="ramp_up"):
        next(open_starts(1.0, ramp_up=-1, rng=random.Random()))


# -- runs -----------------------------------------------------------------------------------


async def test_a_closed_loop_runs_its_sessions_and_measures_every_request(server: ModelServer) -> None:
    for _ in range(16):
        server.add(
            Respond(body=completion("one two three four five"), first_token_delay=0.05, token_delay=0.01)
        )
    workload = Workload(turns=Dist(value=2), prompt_tokens=Dist(value=20), output_tokens=Dist(value=5))
    async with model_on(server) as model:
        report = await run_load(model, workload, LoadPlan(concurrency=4, sessions=8))
    assert (report.sessions, report.sessions_ok, report.requests, report.errors) == (8, 8, 16, 0)
    assert report.ttft_ms.p50 >= 50  # the server's first piece took 50 ms
    assert 9 <= report.itl_ms.p50 <= 60  # pieces 10 ms apart
    assert report.e2e_ms.p50 >= report.ttft_ms.p50 + 30
    assert None not in (report.ttft_ms.p90, report.ttft_ms.p99, report.ttft_ms.mean)
    printed = msgspec.to_builtins(report)  # what --json prints: every figure by its name
    assert set(printed["ttft_ms"]) == {"p50", "p90", "p99", "mean"}
    for key in ("goodput", "offered_rate", "achieved_rate", "client_cpu_s", "send_lag_ms"):
        assert key in printed
    # the context grows: the second turn carries the first turn's question and answer
    second = [seen for seen in server.seen if len(seen.body["messages"]) == 3]
    assert len(second) == 8 and all(seen.body["stream"] for seen in server.seen)
    assert {seen.body["max_tokens"] for seen in server.seen} == {5}


async def test_a_sessions_tools_really_run_and_their_results_go_back(server: ModelServer) -> None:
    tool = SyntheticTool("lookup", latency_s=Dist(value=0.05), result_tokens=Dist(value=30))
    workload = Workload(turns=Dist(value=1), tools=(tool,))
    server.add(
        Respond(body=completion(tool_calls=[("c1", "lookup", '{"query": "x"}'), ("c2", "nope", "{}")])),
        Respond(body=completion("done")),
    )
    async with model_on(server) as model:
        report = await run_load(model, workload, LoadPlan(concurrency=1, sessions=1))
    assert report.tool_runs == {"lookup": 1} and report.tool_calls == 2
    assert report.time_in_tools_s >= 0.05
    first, second = server.seen
    assert first.body["tools"][0]["function"]["name"] == "lookup"
    results = [m for m in second.body["messages"] if m["role"] == "tool"]
    assert len(results[0]["content"].split()) == 30  # the tool's answer, its size as drawn
    assert results[1]["content"] == "error: no tool named 'nope'"


async def test_every_timer_starts_at_the_scheduled_instant(server: ModelServer) -> None:
    """Two sessions due at once through a client that sends one request at a time: the
    second's wait in the client's own queue is in its TTFT and its send lag."""
    for _ in range(2):
        server.add(Respond(body=completion("a b"), first_token_delay=0.3))
    async with model_on(server, max_in_flight=1) as model:
        records: list = []
        report = await run_load(
            model,
            Workload(turns=Dist(value=1)),
            LoadPlan(rate=1000.0, pattern="bursty", sessions=2),
            records=records,
        )
    assert report.requests == 2
    slow = max(records, key=lambda r: r.ttft)
    assert slow.ttft >= 0.6  # 0.3 s waiting behind the other, then its own 0.3 s
    assert report.send_lag_ms.p99 < 50  # the generator was on time: the client queue is the model's


@contextmanager
def accepting_late(upstream: str, delay: float) -> Iterator[str]:
    """A front for ``upstream`` that leaves connections in the kernel's backlog for
    ``delay`` seconds from the first one's arrival before accepting them (a server too busy
    to accept), then relays bytes both ways. Its URL."""
    import select
    import selectors
    import socket
    import threading
    import urllib.parse

    target = urllib.parse.urlsplit(upstream)
    listener = socket.create_server(("127.0.0.1", 0), backlog=64)
    stop = threading.Event()

    def relay(client: socket.socket) -> None:
        with client, socket.create_connection((target.hostname, target.port)) as server:
            pairs = {client: server, server: client}
            with selectors.DefaultSelector() as watch:
                for end in pairs:
                    watch.register(end, selectors.EVENT_READ)
                while not stop.is_set():
                    for key, _ in watch.select(0.1):
                        data = key.fileobj.recv(65536)  # type: ignore[union-attr]
                        if not data:
                            return
                        pairs[key.fileobj].sendall(data)  # type: ignore[index]

    def accept() -> None:
        select.select([listener], [], [], 30)  # the first connection is in the backlog...
        stop.wait(delay)  # ...and waits there, un-accepted, with those that follow
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            threading.Thread(target=relay, args=(client,), daemon=True).start()

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}{target.path}"
    finally:
        stop.set()
        acceptor.join(5)
        listener.close()


async def test_a_server_that_accepts_late_shows_in_the_ttft_not_in_the_send_lag(server: ModelServer) -> None:
    """The client connects at once (the kernel's backlog takes it) and sends on time; the
    server accepts 0.4 s later: every TTFT counts that wait, from the scheduled instant."""
    for _ in range(3):
        server.add(Respond(body=completion("a b")))
    records: list = []
    with accepting_late(server.url, 0.4) as url:
        async with OpenAIChatModel("m", base_url=url, max_retries=0) as model:
            report = await run_load(
                model, Workload(turns=Dist(value=1)), LoadPlan(concurrency=3, sessions=3), records=records
            )
    assert report.requests == 3 and report.errors == 0
    assert all(r.ttft >= 0.4 for r in records), [r.ttft for r in records]
    assert report.send_lag_ms.p99 < 100  # the generator itself was on time


async def test_a_failed_request_ends_its_session_and_is_counted_by_kind(server: ModelServer) -> None:
    server.add(Respond(body=completion("half way there"), break_after=1))
    async with model_on(server) as model:
        report = await run_load(model, Workload(turns=Dist(value=3)), LoadPlan(concurrency=1, sessions=1))
    assert report.sessions_ok == 0 and report.requests == 1
    assert report.errors_by_kind == {"stream cut": 1}
    assert "the stream broke after" in report.error_examples["stream cut"]


async def test_goodput_counts_the_requests_that_met_the_slo(server: ModelServer) -> None:
    server.add(Respond(body=completion("fast")), Respond(body=completion("slow"), first_token_delay=0.3))
    plan = LoadPlan(concurrency=1, sessions=2, slo=Slo(ttft_s=0.2))
    async with model_on(server) as model:
        report = await run_load(model, Workload(turns=Dist(value=1)), plan)
    assert report.goodput_requests == 1


@pytest.mark.virtual_time
async def test_an_open_loop_ends_at_its_duration_with_the_offered_rate(server: ModelServer) -> None:
    from greenroom.llm import ScriptedModel

    model = ScriptedModel(lambda request: "ok", latency=0.1)
    report = await run_load(model, Workload(turns=Dist(value=1)), LoadPlan(rate=20.0, duration=30.0, seed=3))
    # 600 expected in 30 s; a Poisson count's standard deviation is ~24.5
    assert 500 <= report.sessions <= 700
    assert report.offered_rate == 20.0 and report.achieved_rate == pytest.approx(20.0, rel=0.2)


@pytest.mark.parametrize(
    ("plan", "field", "message"),
    [
        (LoadPlan(sessions=1), "concurrency", "one of concurrency"),
        (LoadPlan(concurrency=1), "sessions", "sessions or duration"),
        (LoadPlan(rate=-1.0, sessions=1), "rate", "rate must be sessions per second > 0, got -1.0"),
        (LoadPlan(concurrency=0, sessions=1), "concurrency", "from 1 to 1000000, got 0"),
        (LoadPlan(concurrency=1, sessions=0), "sessions", "at least 1, got 0"),
        (LoadPlan(concurrency=1, duration=float("nan")), "duration", "seconds > 0, got nan"),
    ],
)
def test_a_bad_plan_is_refused_naming_the_field_and_the_value(
    plan: LoadPlan, field: str, message: str
) -> None:
    with pytest.raises(InvalidInput) as refused:
        plan.check()
    assert refused.value.field == field and message in str(refused.value)


# -- workloads ------------------------------------------------------------------------------


def test_a_workload_file_is_read_and_checked_field_by_field(tmp_path: Path) -> None:
    good = tmp_path / "agents.toml"
    good.write_text(
        'name = "support"\nsystem_prompt_tokens = 300\nturns = {kind = "uniform", low = 2, high = 4}\n'
        'think_s = 1.5\n[[tools]]\nname = "search"\nlatency_s = {kind = "exponential", mean = 0.2}\n'
    )
    workload = load_workload(good)
    assert workload.name == "support" and workload.think_s == Dist(value=1.5)
    assert workload.tools[0].latency_s.kind == "exponential"
    for text, field in [
        ('turns = "many"\n', "workload.turns"),
        ('turns = {kind = "uniform", low = 5, high = 1}\n', "workload.turns"),
        ('prompt_tokens = {kind = "normal", mean = -3}\n', "workload.prompt_tokens"),
        ("colour = 3\n", "workload.colour"),
        ('[[tools]]\nname = "no spaces please"\n', "workload.tools"),
        ('tool_choice = "sometimes"\n', "workload.tool_choice"),
    ]:
        bad = tmp_path / "bad.toml"
        bad.write_text(text)
        with pytest.raises(InvalidInput) as refused:
            load_workload(bad)
        assert refused.value.field == field, (text, refused.value)
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(InvalidInput, match="is not valid"):
        load_workload(tmp_path / "broken.json")
    with pytest.raises(InvalidInput, match="cannot be read"):
        load_workload(tmp_path / "missing.toml")


def test_distributions_draw_within_their_bounds() -> None:
    rng = random.Random(5)
    normal = Dist("normal", mean=10, sd=20, low=1, high=15)
    assert all(1 <= normal.draw(rng) <= 15 for _ in range(1000))
    lognormal = Dist("lognormal", mean=100, sd=50)
    draws = [lognormal.draw(rng) for _ in range(20000)]
    assert statistics.fmean(draws) == pytest.approx(100, rel=0.05) and min(draws) > 0
    assert set(PRESETS) >= {"single", "chat", "retrieval", "tool-heavy", "coding"}


def test_greenroom_load_runs_from_the_command_line_and_writes_json_and_csv(
    server: ModelServer, tmp_path: Path
) -> None:
    for _ in range(6):
        server.add(Respond(body=completion("x y z")))
    rows = tmp_path / "requests.csv"
    done = subprocess.run(
        [sys.executable, "-m", "greenroom", "load", "--base-url", server.url, "--model", "m",
         "--preset", "single", "--concurrency", "2", "--sessions", "6", "--json", "--csv", str(rows),
         "--backend", "trio"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["sessions"], report["requests"], report["workload"]) == (6, 6, "single")
    lines = rows.read_text().splitlines()
    assert lines[0].startswith("session,turn,scheduled_s,send_lag_ms,ttft_ms") and len(lines) == 7


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--sessions", "1"], "give --concurrency N (a closed loop) or --rate R"),
        (["--replay", "/nope.jsonl", "--replay-journal"], "not both"),
        (["--sweep", "1:5"], "--sweep needs an objective"),
        (
            ["--sweep", "5:1", "--slo-ttft-ms", "100"],
            "argument --sweep: must be LOW:HIGH with 0 < LOW < HIGH",
        ),
        (["--concurrency", "1"], "give --sessions N or --duration S"),
        (["--concurrency", "1", "--sessions", "1", "--preset", "huge"], "--preset must be one of"),
        (["--rate", "-2", "--sessions", "1"], "argument --rate: must be a number > 0"),
        (["--concurrency", "1", "--sessions", "1", "--workload", "/nope.toml"], "cannot be read"),
    ],
)
def test_greenroom_load_refuses_bad_flags_naming_them(args: list[str], message: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "greenroom", "load", "--base-url", "http://127.0.0.1:9/v1",
         "--model", "m", *args],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode != 0 and message in done.stderr, done.stderr


class _Capacity:
    """A model server that serves ``slots`` requests at a time, ``seconds`` each: a known
    capacity of ``slots / seconds`` requests a second."""

    def __init__(self, slots: int, seconds: float) -> None:
        import anyio

        self.limiter = anyio.CapacityLimiter(slots)
        self.seconds = seconds

    async def chat(self, request: object, *, timeout: float | None = None) -> object:
        import anyio

        from greenroom.messages import ChatReply, Usage

        async with self.limiter:
            await anyio.sleep(self.seconds)
        return ChatReply("ok", usage=Usage(10, 1))

    async def aclose(self) -> None:
        pass


@pytest.mark.virtual_time
async def test_a_run_past_the_servers_capacity_stops_early_saying_so() -> None:
    model = _Capacity(slots=2, seconds=0.5)  # 4 requests a second at most
    plan = LoadPlan(rate=10.0, duration=600.0, seed=1)
    report = await run_load(model, Workload(turns=Dist(value=1)), plan)  # type: ignore[arg-type]
    assert report.stopped is not None and report.stopped.startswith("saturated")
    assert report.duration_s < 60  # not the 600 s asked for
    assert report.sessions_started > report.sessions


@pytest.mark.virtual_time
async def test_a_run_within_the_servers_capacity_is_not_stopped() -> None:
    model = _Capacity(slots=8, seconds=0.5)  # 16 a second: 10 offered fit
    report = await run_load(model, Workload(turns=Dist(value=1)), LoadPlan(rate=10.0, duration=60.0, seed=1))  # type: ignore[arg-type]
    assert report.stopped is None and report.duration_s >= 60


@pytest.mark.virtual_time
async def test_a_sweep_converges_on_the_capacity_of_the_server() -> None:
    from greenroom.load import sweep_rate

    model = _Capacity(slots=2, seconds=0.5)  # 4 requests a second
    found = await sweep_rate(
        model, Workload(turns=Dist(value=1)), Slo(ttft_s=2.0),  # type: ignore[arg-type]
        low=0.5, high=32.0, step_duration=60.0, tolerance=0.05,
    )  # fmt: skip
    # Poisson arrivals queue before the capacity itself: the highest rate meeting a 2 s
    # TTFT for 99 % of requests lies below 4 a second, and well above half of it
    assert found["rate"] is not None and 2.0 <= found["rate"] <= 4.0, found["steps"]
    assert [step["passed"] for step in found["steps"][:2]] == [True, False]


# -- replay ---------------------------------------------------------------------------------


def _trace(path: Path) -> Path:
    lines = [
        {"session": "a", "at": 100.0, "max_tokens": 7,
         "messages": [{"role": "user", "content": "first of a"}]},
        {"session": "b", "at": 100.1, "messages": [{"role": "user", "content": "first of b"}]},
        {"session": "a", "at": 100.5, "max_tokens": 9,
         "messages": [{"role": "user", "content": "first of a"},
                      {"role": "assistant", "content": None, "tool_calls": [
                          {"id": "c1", "type": "function",
                           "function": {"name": "f", "arguments": "{\"q\": 1}"}}]},
                      {"role": "tool", "tool_call_id": "c1", "content": "an answer"}],
         "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]},
    ]  # fmt: skip
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    return path


async def test_a_trace_is_sent_again_with_its_shapes_and_timing(server: ModelServer, tmp_path: Path) -> None:
    from greenroom.load._replay import read_trace, replay

    for _ in range(3):
        server.add(Respond(body=completion("ok")))
    records: list = []
    async with model_on(server) as model:
        report = await replay(model, read_trace(_trace(tmp_path / "t.jsonl")), records=records)
    assert (report.requests, report.sessions, report.recorded_requests) == (3, 2, 3)
    by_content = {seen.body["messages"][-1]["content"]: seen.body for seen in server.seen}
    assert by_content["first of a"]["max_tokens"] == 7 and "max_tokens" not in by_content["first of b"]
    third = by_content["an answer"]
    assert [m["role"] for m in third["messages"]] == ["user", "assistant", "tool"]
    assert third["messages"][1]["tool_calls"][0]["function"] == {"name": "f", "arguments": '{"q":1}'}
    assert third["tools"][0]["function"]["name"] == "f" and third["max_tokens"] == 9
    # a's second request was sent half a second after its first, as recorded
    a = sorted((r for r in records if r.session == 0), key=lambda r: r.turn)
    assert a[1].scheduled - a[0].scheduled == pytest.approx(0.5, abs=0.05)


def test_a_bad_trace_is_refused_naming_the_line_and_the_field(tmp_path: Path) -> None:
    from greenroom.load._replay import read_trace

    bad = tmp_path / "bad.jsonl"
    good = json.dumps({"session": "s", "at": 1, "messages": [{"role": "user", "content": "hi"}]})
    for line, wanted in [
        ('{"session": "s", "at": "noon", "messages": []}', "at must be a number"),
        (
            '{"session": "s", "at": 2, "messages": [{"role": "robot"}]}',
            "messages[0] must be an OpenAI message",
        ),
        ('{"session": "s", "at": 2, "messages": [{"role": "user"}], "max_tokens": 0}', "max_tokens"),
        ("not json", "is not JSON"),
    ]:
        bad.write_text(good + "\n" + line + "\n")
        with pytest.raises(InvalidInput, match=re.escape(wanted)) as refused:
            read_trace(bad)
        assert refused.value.field == f"{bad}:2"


async def test_recorded_journals_are_replayed_with_their_sizes(server: ModelServer, tmp_path: Path) -> None:
    from test_durable import Effects, journal_on, model_for_two_turns, run_attempt

    from greenroom.harness._journal import ReadSteps
    from greenroom.load._replay import recording_from_steps, replay

    async with journal_on(None, tmp_path / "data") as (system, writer):
        _, _, harness = await run_attempt(system, writer, model_for_two_turns(), Effects().tools(), 1)
        await harness.aclose()
        steps = await writer.ask(ReadSteps("t1"))
    recording = recording_from_steps(steps)
    recorded = [step.body["usage"] for step in steps if step.kind == "model"]
    assert list(recording) == ["t1"] and len(recording["t1"]) == len(recorded) == 2
    for _ in range(2):
        server.add(Respond(body=completion("ok")))
    async with model_on(server) as model:
        report = await replay(model, recording)
    assert report.requests == 2
    assert [seen.body["max_tokens"] for seen in server.seen] == [
        usage["completion_tokens"] for usage in recorded
    ]
    sizes = [len(seen.body["messages"][0]["content"].split()) for seen in server.seen]
    assert sizes == [usage["prompt_tokens"] for usage in recorded]


def test_greenroom_load_replays_a_daemons_journals(server: ModelServer, tmp_path: Path) -> None:
    data = tmp_path / "data"
    ran = subprocess.run(
        [sys.executable, "-m", "greenroom", "run", "--data-dir", str(data), "--seed-example", "1",
         "--until-idle", "--quiet", "--no-api"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    for _ in range(100):
        server.add(Respond(body=completion("ok")))
    done = subprocess.run(
        [sys.executable, "-m", "greenroom", "load", "--replay-journal", "--data-dir", str(data),
         "--base-url", server.url, "--model", "m", "--speed", "50", "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["requests"] == report["recorded_requests"] == len(server.seen) > 0
    assert report["errors"] == 0


def test_greenroom_load_sweeps_for_the_highest_rate_meeting_the_objectives(server: ModelServer) -> None:
    for _ in range(400):
        server.add(Respond(body=completion("ok")))
    done = subprocess.run(
        [sys.executable, "-m", "greenroom", "load", "--base-url", server.url, "--model", "m",
         "--preset", "single", "--sweep", "1:4", "--step-duration", "5", "--slo-ttft-ms", "2000", "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["rate"] == 4.0  # a server that answers at once meets it at every rate tried
    assert [step["rate"] for step in found["steps"]] == [1.0, 4.0]


def test_greenroom_load_writes_a_self_contained_html_report(server: ModelServer, tmp_path: Path) -> None:
    for _ in range(400):
        server.add(Respond(body=completion("one two three"), token_delay=0.005))
    page, sweep_page = tmp_path / "run.html", tmp_path / "sweep.html"
    common = [sys.executable, "-m", "greenroom", "load", "--base-url", server.url, "--model", "m",
              "--preset", "single"]  # fmt: skip
    run = subprocess.run([*common, "--concurrency", "3", "--sessions", "9", "--html", str(page)],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert run.returncode == 0, run.stderr
    sweep = ["--sweep", "2:4", "--step-duration", "3", "--slo-ttft-ms", "2000", "--html", str(sweep_page)]
    swept = subprocess.run([*common, *sweep], capture_output=True, text=True, timeout=120)
    assert swept.returncode == 0, swept.stderr
    text = page.read_text()
    assert text.startswith("<!doctype html>") and "http" not in text.split("<body>", 1)[1]  # nothing fetched
    assert text.count('<img alt="chart" src="data:image/png;base64,') == 2
    assert "<th>ttft_ms</th>" in text and "requests (errors)</th><td>9 (0)" in text
    assert sweep_page.read_text().count("data:image/png;base64,") == 3  # and the rate chart
    assert "highest rate meeting the objectives" in sweep_page.read_text()


def test_the_html_report_says_how_to_get_matplotlib_when_it_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from greenroom.load._html import html_report

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # an import of it fails
    with pytest.raises(InvalidInput, match=r"greenroom\[plot\]"):
        html_report({}, [])


@pytest.mark.virtual_time
async def test_a_closed_loops_users_join_evenly_over_its_ramp_up() -> None:
    from greenroom.llm import ScriptedModel

    model = ScriptedModel(lambda request: "ok", latency=100.0)  # each session outlasts the ramp
    records: list = []
    await run_load(model, Workload(turns=Dist(value=1)), LoadPlan(concurrency=4, sessions=4, ramp_up=8.0),
                   records=records)  # fmt: skip
    starts = sorted(r.scheduled for r in records)
    assert [round(b - starts[0], 1) for b in starts] == [0.0, 2.0, 4.0, 6.0]


async def test_your_own_python_tools_are_offered_and_really_run(server: ModelServer) -> None:
    from greenroom.harness import Tool

    seen: list[tuple[str, int]] = []

    def inventory(sku: str, count: int = 1) -> dict[str, object]:
        seen.append((sku, count))
        return {"sku": sku, "in_stock": 7 * count}

    def broken(sku: str) -> str:
        raise RuntimeError("the warehouse is closed")

    server.add(
        Respond(body=completion(tool_calls=[
            ("c1", "inventory", '{"sku": "A-1", "count": 2}'), ("c2", "broken", '{"sku": "B"}'),
            ("c3", "inventory", '{"count": "many"}'),
        ])),
        Respond(body=completion("ok")),
    )  # fmt: skip
    async with model_on(server) as model:
        report = await run_load(
            model, Workload(turns=Dist(value=1)), LoadPlan(concurrency=1, sessions=1),
            tools=[Tool("inventory", inventory), Tool("broken", broken)],
        )  # fmt: skip
    assert seen == [("A-1", 2)]  # the call with bad arguments never reached it
    assert report.tool_runs == {"inventory": 2, "broken": 1} and report.errors == 0
    offered = {tool["function"]["name"] for tool in server.seen[0].body["tools"]}
    assert offered == {"inventory", "broken"}
    results = [m["content"] for m in server.seen[1].body["messages"] if m["role"] == "tool"]
    assert results[0] == '{"sku":"A-1","in_stock":14}'
    assert results[1] == "error: RuntimeError: the warehouse is closed"
    assert results[2].startswith("error:") and "count" in results[2]


def test_two_tools_of_one_name_are_refused() -> None:
    from greenroom.harness import Tool
    from greenroom.load._session import Sessions

    workload = Workload(tools=(SyntheticTool("lookup"),))
    with pytest.raises(ValueError, match="two tools of the load have one name"):
        Sessions(object(), workload, tools=[Tool("lookup", lambda: "x")])  # type: ignore[arg-type]


async def test_a_workload_files_mcp_servers_and_python_tools_really_run(
    server: ModelServer, tmp_path: Path
) -> None:
    """A real MCP server over stdio (its own process) and a ``module:function`` tool, both
    named in the workload file: offered with their schemas, called, their answers (and a
    failure) sent back to the model."""
    calls = tmp_path / "calls.log"
    here = Path(__file__).parent
    spec = tmp_path / "w.toml"
    spec.write_text(
        'turns = 1\npython_tools = ["load_tools:stock"]\n'
        f"[[mcp]]\ncommand = {json.dumps(sys.executable)}\n"
        f"args = [{json.dumps(str(here / 'load_tools.py'))}]\n"
        f"env = {{ LOAD_TOOL_CALLS = {json.dumps(str(calls))} }}\n"
    )
    workload = load_workload(spec)
    server.add(
        Respond(body=completion(tool_calls=[
            ("c1", "lookup", '{"query": "red shoes"}'), ("c2", "stock", '{"sku": "AB-12"}'),
            ("c3", "fail", '{"query": "blue"}'),
        ])),
        Respond(body=completion("ok")),
    )  # fmt: skip
    async with model_on(server) as model:
        report = await run_load(model, workload, LoadPlan(concurrency=1, sessions=1))
    assert calls.read_text() == "lookup red shoes\n"  # it ran, in the server's process
    assert report.tool_runs == {"stock": 1, "lookup": 1, "fail": 1}
    offered = {tool["function"]["name"]: tool["function"] for tool in server.seen[0].body["tools"]}
    assert set(offered) == {"stock", "lookup", "fail"}
    assert offered["lookup"]["parameters"]["properties"]["query"]["type"] == "string"
    assert offered["lookup"]["description"] == "Look a query up in the catalogue."
    results = [m["content"] for m in server.seen[1].body["messages"] if m["role"] == "tool"]
    assert "found red shoes" in results[0]
    assert results[1] == '{"sku":"AB-12","in_stock":5}'
    assert results[2] == "error: Error executing tool fail"  # the server's words (it hides the cause)


@pytest.mark.parametrize(
    ("text", "field", "message"),
    [
        ('python_tools = ["no_such_module_x:f"]', "workload.python_tools", "cannot import"),
        ('python_tools = ["not a spec"]', "workload.python_tools", "must be 'package.module:function'"),
        ('python_tools = ["load_tools:server"]', "workload.python_tools", "is not a function"),
        ("[[mcp]]\nargs = []", "workload.mcp", "needs one of command (stdio) and url"),
        ('[[mcp]]\nurl = "ftp://x"', "workload.mcp", "must be an http(s) URL"),
        ('[[mcp]]\ncommand = "x"\nport = 3', "workload.mcp", "port"),
    ],
)
def test_a_bad_tool_in_a_workload_file_is_refused_naming_it(
    tmp_path: Path, text: str, field: str, message: str
) -> None:
    spec = tmp_path / "w.toml"
    spec.write_text(text + "\n")
    with pytest.raises(InvalidInput) as refused:
        load_workload(spec)
    assert (refused.value.field or "").startswith(field) and message in str(refused.value), str(refused.value)


async def test_an_mcp_tool_the_server_lacks_is_refused_before_any_request(
    server: ModelServer, tmp_path: Path
) -> None:
    from greenroom.load._tools import McpServer

    here = Path(__file__).parent
    mcp = McpServer(command=sys.executable, args=(str(here / "load_tools.py"),), tools=("lookup", "nope"))
    async with model_on(server) as model:
        with pytest.raises(ValueError, match="has no tool 'nope'"):
            await run_load(model, Workload(mcp=(mcp,)), LoadPlan(concurrency=1, sessions=1))
    assert server.seen == []


async def test_runs_are_compared_on_one_page_against_concurrency_and_rate(
    server: ModelServer, tmp_path: Path
) -> None:
    """Three runs' reports (two closed loops, one open; one as an older greenroom wrote
    it, without today's newer fields) on one page: a chart for the closed loops against
    the concurrency, one for the open loop against the rate."""
    pytest.importorskip("matplotlib")
    for _ in range(8):
        server.add(Respond(body=completion("a b c")))
    names = []
    async with model_on(server) as model:
        for number, plan in enumerate(
            [
                LoadPlan(concurrency=1, sessions=2),
                LoadPlan(concurrency=3, sessions=3),
                LoadPlan(rate=50.0, sessions=3),
            ]
        ):
            report = await run_load(model, Workload(turns=Dist(value=1)), plan)
            path = tmp_path / f"run{number}.json"
            written = msgspec.to_builtins(report)
            if number == 0:  # as an older greenroom wrote it: without the fields added since
                for key in ("compatibility", "usage_estimated", "error_examples", "unreached", "session_s"):
                    del written[key]
            path.write_text(json.dumps(written))
            names.append(str(path))
    page = tmp_path / "runs.html"
    done = await anyio.run_process(
        [sys.executable, "-m", "greenroom", "load", "--compare", *names, "--html", str(page)], check=False
    )
    assert done.returncode == 0, done.stderr
    text = page.read_text()
    assert text.count('src="data:image/png;base64,') == 2  # one per kind of loop
    assert "1 at once" in text and "3 at once" in text and "50.0 sessions/s (poisson)" in text
    bad = tmp_path / "bad.json"
    bad.write_text('{"not": "a report"}')
    refused = await anyio.run_process(
        [sys.executable, "-m", "greenroom", "load", "--compare", names[0], str(bad), "--html", str(page)],
        check=False,
    )
    assert refused.returncode != 0 and b"is not a report of greenroom load --json" in refused.stderr
    assert page.read_text() == text  # the page written before is left as it was


def test_a_prompt_has_the_words_asked_and_sessions_differ() -> None:
    from greenroom.load._workload import _POOL_WORDS, text_of

    rng = random.Random(5)
    for tokens in (1, 7, 300, _POOL_WORDS, 2 * _POOL_WORDS + 3):
        text = text_of(tokens, rng)
        assert len(text.split(" ")) == tokens and text == text.strip(), tokens
    assert text_of(50, random.Random(1)) == text_of(50, random.Random(1))  # the seed decides
    assert len({text_of(50, random.Random(seed)) for seed in range(20)}) == 20


# -- what outside checks found (issue 48, points 1-3) -----------------------------------------


async def test_what_a_run_prepares_once_is_ready_before_its_first_request_is_due(
    server: ModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The prompts' word pool (made once a process) is made before the run's clock starts:
    the first request is not charged the generator's own start-up."""
    from greenroom.load import _workload

    made: list[float] = []
    original = _workload._word_pool

    def watched() -> tuple[str, list[int]]:
        fresh = _workload._pool is None
        pool = original()
        if fresh:
            made.append(anyio.current_time())
        return pool

    monkeypatch.setattr(_workload, "_pool", None)
    monkeypatch.setattr(_workload, "_word_pool", watched)
    for _ in range(3):
        server.add(Respond(body=completion("a b c")))
    records: list = []
    async with model_on(server) as model:
        await run_load(
            model, Workload(turns=Dist(value=1)), LoadPlan(concurrency=1, sessions=3), records=records
        )
    assert len(made) == 1, "the pool is made once, by the run"
    first = min(records, key=lambda r: r.scheduled)
    assert made[0] <= first.scheduled, "the pool was made after the first request was due"


def _load(server_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "greenroom", "load", "--base-url", server_url, "--model", "m",
         "--preset", "single", "--json", *args],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_cut_streams_are_counted_each_and_the_run_stays_streamed(server: ModelServer) -> None:
    """A server that cuts some streams mid-way while others are in flight: every request
    is still sent streamed (no fallback changes what is measured) and every cut is counted
    as a "stream cut" with an example."""
    cuts = 0
    for number in range(24):
        cut = number % 4 == 1
        cuts += cut
        server.add(
            Respond(
                body=completion("one two three four five six"),
                token_delay=0.02,
                break_after=2 if cut else None,
            )
        )
    done = _load(server.url, "--concurrency", "4", "--sessions", "24")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert len(server.seen) == 24 and all(seen.body.get("stream") for seen in server.seen)
    assert report["errors_by_kind"] == {"stream cut": cuts}
    assert "the stream broke after" in report["error_examples"]["stream cut"]
    assert report["compatibility"] == []  # nothing was changed in what was sent
    # usage came with every whole stream (stream_options.include_usage kept)
    assert all(seen.body["stream_options"] == {"include_usage": True} for seen in server.seen)
    assert report["usage_estimated"] == 0


def test_the_rewrites_a_server_asks_for_are_listed_in_the_report(server: ModelServer) -> None:
    refused_tokens = {
        "error": {
            "message": "Unsupported parameter: 'max_tokens' is not supported with this model. "
            "Use 'max_completion_tokens' instead.",
            "type": "invalid_request_error",
            "param": "max_tokens",
            "code": "unsupported_parameter",
        }
    }
    refused_options = {"error": {"message": "Unrecognized request argument supplied: stream_options"}}
    server.add(Respond(400, refused_tokens), Respond(400, refused_options))
    for _ in range(3):
        server.add(Respond(body=completion("x y z")))
    done = _load(server.url, "--concurrency", "1", "--sessions", "3")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["errors"] == 0 and report["requests"] == 3
    assert report["compatibility"] == [
        "max_tokens sent as max_completion_tokens (the server refused max_tokens)",
        "stream_options left out (the server refused it): streamed usage is estimated",
    ]
    assert report["usage_estimated"] == 3  # no include_usage: the server sent no usage
    assert all("max_completion_tokens" in seen.body for seen in server.seen[2:])
    text = _load(server.url, "--concurrency", "1", "--sessions", "1")
    assert text.returncode != 0  # nothing scripted left: its 500 fails the only request


def _closed_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_an_unreachable_server_fails_the_run_naming_the_address_and_the_reason() -> None:
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    done = _load(url, "--concurrency", "2", "--sessions", "4")
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert report["errors_by_kind"] == {"connection refused": 4} and report["unreached"] is True
    assert f"could not reach the server at {url}: connection refused" in done.stderr
    assert "Unavailable" not in done.stdout + done.stderr
    plain = subprocess.run(
        [sys.executable, "-m", "greenroom", "load", "--base-url", url, "--model", "m", "--preset", "single",
         "--concurrency", "1", "--sessions", "1"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert plain.returncode == 1 and "connection refused" in plain.stdout
    assert plain.stderr.count("greenroom: error:") == 1


def test_errors_are_counted_by_what_happened_with_an_example_each(server: ModelServer) -> None:
    server.add(
        Respond(500, {"error": {"message": "the GPU caught fire"}}),
        Respond(503, {"error": {"message": "overloaded"}}),
        Respond(body="not a completion", ignore_stream=True),
        Respond(body=completion("one two three"), break_after=1),
        Respond(body=completion("fine")),
    )
    done = _load(server.url, "--concurrency", "1", "--sessions", "5")
    assert done.returncode == 0, done.stderr  # one request succeeded: a run with errors, not a failed run
    report = json.loads(done.stdout)
    assert report["errors_by_kind"] == {"HTTP 500": 1, "HTTP 503": 1, "bad JSON": 1, "stream cut": 1}
    assert "the GPU caught fire" in report["error_examples"]["HTTP 500"]
    assert "overloaded" in report["error_examples"]["HTTP 503"]
    assert "not a chat completion" in report["error_examples"]["bad JSON"]
    assert report["unreached"] is False


def test_a_run_whose_every_request_failed_exits_non_zero_with_the_kinds(server: ModelServer) -> None:
    for _ in range(3):
        server.add(Respond(500, {"error": {"message": "down for maintenance"}}))
    done = _load(server.url, "--concurrency", "1", "--sessions", "3")
    assert done.returncode == 1
    assert "every request of the run failed (3): HTTP 500 in 3 request(s)" in done.stderr
    assert "down for maintenance" in done.stderr


def test_a_report_with_a_field_of_the_wrong_shape_is_refused_naming_the_file_and_the_field() -> None:
    """``report_from``: a report-shaped document whose figure is not what a report holds
    (a spread that is text) is refused naming the file and the field; a report an older
    greenroom wrote, without the newer fields, reads with them at their defaults."""
    from greenroom._errors import InvalidInput
    from greenroom.load import LoadReport, report_from

    with pytest.raises(
        InvalidInput, match=r"'run7\.json' is not a report of greenroom load --json: .*ttft_ms"
    ):
        report_from({"plan": {}, "ttft_ms": "fast"}, "run7.json")
    old = report_from({"plan": {"concurrency": 2}, "ttft_ms": {"p50": 12.0}, "requests": 3}, "old.json")
    assert old == LoadReport(plan={"concurrency": 2}, ttft_ms=old.ttft_ms, requests=3)
    assert (old.ttft_ms.p50, old.ttft_ms.p99, old.compatibility, old.unreached) == (12.0, None, [], False)
