"""``GET /metrics``: the daemon's figures in Prometheus's text format, read back by
``prometheus_client``'s own parser after a seeded run, against what ``/v1/status`` says."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _support import eventually
from prometheus_client.parser import text_string_to_metric_families
from test_service import add_tokens, running

from greenroom.daemon._config import AgentPoolConfig
from greenroom.messages import AgentError, AgentTask, Claim, Fail, TaskStatus

pytestmark = pytest.mark.anyio


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a scrape: (name, sorted labels) -> value, as Prometheus reads it."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


async def test_a_scrape_after_a_seeded_run_has_the_counts_the_api_reports(tmp_path: Path) -> None:
    pools = {"write": AgentPoolConfig(agent="greenroom.agents.examples:WriteAgent", concurrency=2)}
    scraper = (await add_tokens(tmp_path, ("prometheus", "metrics")))["prometheus"]
    async with running(tmp_path, agents=pools) as daemon, daemon.client("ops") as ops:
        await ops.submit([AgentTask(id=f"w{i}", type="write", input={"topic": "t"}) for i in range(5)])
        await ops.submit([AgentTask(id=f"p{i}", type="nobody") for i in range(3)])
        await ops.cancel("p0")
        await ops.submit([AgentTask(id="f", type="flaky", max_attempts=2)])
        for _ in range(2):  # one failed attempt retried, then the last one failed
            await daemon.host.supervisor.ask(Claim("agent", "flaky"))
            await daemon.host.supervisor.ask(Fail("f", "agent", AgentError(reason="no", retryable=True)))

        async def written() -> bool:
            return all(t.status is TaskStatus.COMPLETED for t in await ops.list_tasks(agent_type="write"))

        await eventually(written, timeout=20)
        status = await ops.status()
        daemon.tokens["prometheus"] = scraper
        async with daemon.http("prometheus") as http:
            response = await http.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    figures = samples(response.text)
    by_status = status["tasks"]["by_status"]
    assert {name: count for name, count in by_status.items() if count} == {
        "COMPLETED": 5,
        "PENDING": 2,
        "CANCELLED": 1,
        "FAILED": 1,
    }
    for name, count in by_status.items():
        assert figures[("greenroom_tasks", (("status", name),))] == count
    assert figures[("greenroom_tasks_live", ())] == status["tasks"]["total"] == 9
    assert status["tasks"]["by_type"] == {
        "write": {"COMPLETED": 5}, "nobody": {"PENDING": 2, "CANCELLED": 1}, "flaky": {"FAILED": 1}
    }  # fmt: skip
    for agent_type, counts in status["tasks"]["by_type"].items():
        for name, count in counts.items():
            assert figures[("greenroom_tasks_by_type", (("status", name), ("type", agent_type)))] == count
    assert len([key for key in figures if key[0] == "greenroom_tasks_by_type"]) == 4
    appended = status["log"]["appended_here"]
    assert appended >= 9 and figures[("greenroom_events_appended_here_total", ())] == appended  # 9 submitted
    writes = status["tasks"]["writes"]
    assert sum(writes["counts"]) > 0
    assert figures[("greenroom_store_write_seconds_count", (("part", "tasks"),))] == sum(writes["counts"])
    assert figures[("greenroom_store_write_seconds_sum", (("part", "tasks"),))] == writes["sum"]
    assert figures[("greenroom_store_write_seconds_count", (("part", "events"),))] > 0
    assert figures[("greenroom_tasks_archived_here_total", ())] == status["tasks"]["archived_here"] == 0
    model = status["agents"]["write"]["model"] or "own"
    assert (
        figures[("greenroom_model_calls_total", (("model", model), ("type", "write")))]
        == (status["agents"]["write"]["model_calls"])
    )
    assert figures[("greenroom_tasks_completed_here_total", ())] == status["tasks"]["completed_here"] == 5
    assert figures[("greenroom_claims_granted_here_total", ())] == status["tasks"]["granted_here"] == 7
    assert figures[("greenroom_attempts_failed_here_total", ())] == status["tasks"]["failures_here"] == 2
    assert figures[("greenroom_approvals_waiting", ())] == 0
    assert figures[("greenroom_runnable_types", (("type", "nobody"),))] == 1
    assert figures[("greenroom_agents", (("type", "write"),))] == 2
    assert figures[("greenroom_agents_alive", (("type", "write"),))] == 2
    assert ("greenroom_mailbox_depth", (("actor", "supervisor"),)) in figures
    assert figures[("greenroom_info", (("version", status["version"]),))] == 1
    assert figures[("greenroom_store_bytes_total", ())] == status["storage"]["bytes"]


@pytest.mark.parametrize(("who", "code"), [(None, 401), ("alice", 403), ("ops", 200), ("root", 200)])
async def test_metrics_need_a_metrics_tasks_or_admin_token(
    tmp_path: Path, who: str | None, code: int
) -> None:
    async with running(tmp_path) as daemon, daemon.http(who) as http:
        response = await http.get("/metrics")
    assert response.status_code == code, response.text
    if code != 200:
        assert response.json()["error"]["code"] in ("unauthenticated", "forbidden")


async def test_a_metrics_token_reads_metrics_and_nothing_else(tmp_path: Path) -> None:
    scraper = (await add_tokens(tmp_path, ("prometheus", "metrics")))["prometheus"]
    async with running(tmp_path) as daemon:
        daemon.tokens["prometheus"] = scraper
        async with daemon.http("prometheus") as http:
            assert (await http.get("/metrics")).status_code == 200
            for method, path in [("GET", "/v1/tasks"), ("GET", "/v1/status"), ("POST", "/v1/stop")]:
                refused = await http.request(method, path)
                assert refused.status_code == 403, path
                assert refused.json()["error"]["code"] == "forbidden"


def test_the_exposition_is_written_by_prometheus_client_from_one_status_snapshot() -> None:
    """Budgets, the chat's spend, agents' timings and the store's parts as families; a
    figure the status lacks (no limit, no timing yet) is absent, never a made-up 0."""
    from greenroom.service._metrics import exposition

    status: dict[str, Any] = {
        "version": "9.9",
        "pid": 1,
        "data_dir": "/d",
        "uptime": 12.5,
        "tasks": {"total": 1, "completed_here": 0, "by_status": {"WAITING": 1}, "runnable_types": [],
                  "by_type": {"research": {"WAITING": 1}}},
        "agents": {
            "research": {
                "configured": 1, "alive": 1, "busy": 0, "queued": 3, "restarts": 2, "tokens_spent": 40,
                "model_calls": 4, "cost": 0.5, "model": "gpt-x",
                "model_timing": {"calls": 4, "first_token_ms": {"p50": 120.0, "p99": 300.0},
                                 "tokens_per_second": {"p50": None, "p99": None}},
            }
        },
        "mailboxes": {"supervisor": 0, "log": 7},
        "budgets": {"team": {"tokens": 90, "cost": 1.25, "limit": 1000, "cost_limit": None,
                             "exhausted": False}},
        "chat": {"llm_calls": 2, "total_tokens": 30, "cost": 0.0},
        "storage": {"bytes": 4096, "by_part": {"tasks": 4096}, "archived_tasks": 0, "archive_parts": 0,
                    "event_segments": 1, "events_dropped_through": 0},
    }  # fmt: skip
    figures = samples(exposition(_typed(status)).decode())
    assert figures[("greenroom_approvals_waiting", ())] == 1
    assert figures[("greenroom_agent_queue_depth", (("type", "research"),))] == 3
    assert figures[("greenroom_agent_restarts_total", (("type", "research"),))] == 2
    assert figures[("greenroom_model_tokens_total", (("model", "gpt-x"), ("type", "research")))] == 40
    assert figures[("greenroom_model_cost_total", (("model", "gpt-x"), ("type", "research")))] == 0.5
    assert figures[("greenroom_tasks_by_type", (("status", "WAITING"), ("type", "research")))] == 1
    assert not any(name.startswith("greenroom_store_write_seconds") for name, _ in figures)  # none given
    status["tasks"]["writes"] = {"bounds": [0.001, 0.01], "counts": [2, 0, 1], "sum": 0.5}
    status["tasks"]["archived_here"] = 7
    figures = samples(exposition(_typed(status)).decode())
    bucket = "greenroom_store_write_seconds_bucket"
    assert [figures[(bucket, (("le", le), ("part", "tasks")))] for le in ("0.001", "0.01", "+Inf")] == [
        2,
        2,
        3,
    ]
    assert figures[("greenroom_store_write_seconds_count", (("part", "tasks"),))] == 3
    assert figures[("greenroom_tasks_archived_here_total", ())] == 7
    assert (
        figures[("greenroom_model_first_token_seconds", (("quantile", "0.99"), ("type", "research")))] == 0.3
    )
    assert not any(name == "greenroom_model_tokens_per_second" for name, _ in figures)  # no timing yet
    assert figures[("greenroom_mailbox_depth", (("actor", "log"),))] == 7
    assert figures[("greenroom_budget_limit_tokens", (("budget", "team"),))] == 1000
    assert not any(name == "greenroom_budget_limit_cost" for name, _ in figures)  # no cost limit
    assert figures[("greenroom_chat_tokens_total", ())] == 30
    assert figures[("greenroom_store_bytes", (("part", "tasks"),))] == 4096


def test_time_to_first_token_is_a_histogram_of_every_call_merged_over_a_types_setups() -> None:
    """Every streamed call lands in a bucket (the quantiles keep only the last 1,024); the
    exposition is a Prometheus histogram: cumulative buckets, ``_count`` and ``_sum``."""
    from greenroom.harness._timings import CallTimings, merged
    from greenroom.messages import CallTiming
    from greenroom.service._metrics import exposition

    one, other = CallTimings(keep=2), CallTimings()
    for seconds in (0.01, 0.07, 0.07, 0.3):  # the first two fall out of what `one` keeps
        one.add(CallTiming(first_token=seconds, duration=seconds + 1))
    other.add(CallTiming(first_token=45.0, duration=46.0))
    summary = merged([one, other]).summary()
    calls = dict((str(bound), count) for bound, count in summary["duration_histogram"]["buckets"])
    assert (calls["1.0"], calls["2.5"], calls["60.0"], calls["+Inf"]) == (0, 4, 5, 5)  # 1.01-1.3 s, 46 s
    assert summary["duration_ms"]["p99"] == 46000.0
    buckets = dict((str(bound), count) for bound, count in summary["first_token_histogram"]["buckets"])
    assert (buckets["0.025"], buckets["0.1"], buckets["0.5"], buckets["30.0"], buckets["+Inf"]) == (
        1,
        3,
        4,
        4,
        5,
    )
    status: dict[str, Any] = {"agents": {"write": {"model_timing": summary}}}
    figures = samples(exposition(_typed(status)).decode())
    name = "greenroom_model_first_token_histogram_seconds"
    assert figures[(f"{name}_bucket", (("le", "0.1"), ("type", "write")))] == 3
    assert figures[(f"{name}_bucket", (("le", "+Inf"), ("type", "write")))] == 5
    assert figures[(f"{name}_count", (("type", "write"),))] == 5
    assert figures[(f"{name}_sum", (("type", "write"),))] == pytest.approx(45.45)
    assert figures[("greenroom_model_call_seconds_bucket", (("le", "2.5"), ("type", "write")))] == 4
    assert figures[("greenroom_model_call_seconds_count", (("type", "write"),))] == 5


def test_a_history_sample_keeps_what_the_charts_draw_and_the_last_ones_only() -> None:
    from greenroom.service._history import History

    status: dict[str, Any] = {
        "tasks": {
            "completed_here": 7,
            "by_status": {"PENDING": 3, "FAILED": 1, "DEPENDENCY_FAILED": 2},
            "by_type": {
                "a": {"PENDING": 2, "FAILED": 1},
                "b": {"PENDING": 1},
                "c": {"COMPLETED": 4},
                **{f"z{i:02}": {"PENDING": 1} for i in range(30)},
            },
        },
        "agents": {
            "a": {"model_timing": {"first_token_ms": {"p99": 120.0}, "tokens_per_second": {"p50": 40.0}}},
            "b": {"model_timing": {"first_token_ms": {"p99": 300.0}, "tokens_per_second": {"p50": None}}},
        },
        "budgets": {"team": {"tokens": 90, "limit": 1000}},
    }
    history = History(every=2.0, keep=3)
    for at in range(5):
        history.add(_typed(status), at=float(at))
    document = history.document()
    assert document["every"] == 2.0 and [s["at"] for s in document["samples"]] == [2.0, 3.0, 4.0]
    last = document["samples"][-1]
    assert (last["completed"], last["failed"], last["pending"], last["in_progress"]) == (7, 3, 3, 0)
    assert (last["first_token_p99_ms"], last["tokens_per_second_p50"]) == (300.0, 40.0)  # the worst of each
    assert last["first_token_p50_ms"] is None  # no agent says its median
    assert last["budgets"] == {"team": {"tokens": 90, "limit": 1000}}
    queued = last["queued_by_type"]  # each type's PENDING tasks, 0 for a type with none; 20 types at most
    assert len(queued) == 20 and (queued["a"], queued["b"], queued["c"], queued["z00"]) == (2, 1, 0, 1)


def _typed(status: dict[str, Any]) -> Any:
    """A status document (its JSON) as the ``DaemonStatus`` it is, the fields it leaves
    out at their defaults."""
    import msgspec

    from greenroom.service import DaemonStatus

    return msgspec.convert(
        {"version": "0", "pid": 1, "data_dir": "/d", "uptime": 0.0, **status}, DaemonStatus
    )


def test_every_sample_of_a_scrape_is_a_field_of_the_status_snapshot() -> None:
    """Issue 50's typed status: a snapshot with a distinct figure in every field the
    scrape exports; the scrape has exactly the samples listed here, each the figure of its
    field — a family added, dropped or read from the wrong field fails here (and a renamed
    field fails the type check of ``_metrics``)."""
    from greenroom.messages import Durations
    from greenroom.service import (
        AgentPool,
        BudgetStatus,
        ChatStatus,
        DaemonStatus,
        Histogram,
        LogStatus,
        ModelTiming,
        Quantiles,
        TaskFigures,
    )
    from greenroom.service._metrics import exposition
    from greenroom.store import StoreSizes

    status = DaemonStatus(
        version="1.2", pid=7, data_dir="/d", uptime=11.5,
        tasks=TaskFigures(
            total=21, completed_here=22, granted_here=23, failures_here=24,
            by_status={"WAITING": 25, "PENDING": 26}, by_type={"t": {"PENDING": 27}}, runnable_types=["t"],
            archived_here=28, archive_dropped_here=29,
            writes=Durations(bounds=[0.01], counts=[30, 31], sum=0.5),
        ),
        log=LogStatus(appended_here=32, writes=Durations(bounds=[0.01], counts=[33, 34], sum=0.25)),
        agents={"t": AgentPool(
            configured=35, alive=36, busy=37, queued=38, restarts=39, tokens_spent=40, model_calls=41,
            cost=0.42, model="m",
            model_timing=ModelTiming(
                calls=43, first_token_ms=Quantiles(44.0, 45.0), tokens_per_second=Quantiles(46.0, 47.0),
                first_token_histogram=Histogram([(0.1, 48), ("+Inf", 49)], 4.9),
                duration_histogram=Histogram([(1.0, 50), ("+Inf", 51)], 5.1),
            ),
        )},
        chat=ChatStatus(llm_calls=52, total_tokens=53, cost=0.54),
        mailboxes={"log": 55},
        budgets={"b": BudgetStatus(tokens=56, cost=0.57, limit=58, cost_limit=0.59, exhausted=True)},
        storage=StoreSizes(
            archived_tasks=60, archive_parts=61, bytes=62, by_part={"p": 63}, event_segments=64,
            events_dropped_through=65,
        ),
    )  # fmt: skip
    t, tm, b = (("type", "t"),), (("model", "m"), ("type", "t")), (("budget", "b"),)
    expected = {
        ("greenroom_info", (("version", "1.2"),)): 1,
        ("greenroom_uptime_seconds", ()): 11.5,
        ("greenroom_tasks", (("status", "PENDING"),)): 26,
        ("greenroom_tasks", (("status", "WAITING"),)): 25,
        ("greenroom_tasks_by_type", (("status", "PENDING"), *t)): 27,
        ("greenroom_tasks_live", ()): 21,
        ("greenroom_approvals_waiting", ()): 25,
        ("greenroom_runnable_types", t): 1,
        ("greenroom_tasks_completed_here_total", ()): 22,
        ("greenroom_claims_granted_here_total", ()): 23,
        ("greenroom_attempts_failed_here_total", ()): 24,
        ("greenroom_tasks_archived_here_total", ()): 28,
        ("greenroom_archive_dropped_here_total", ()): 29,
        ("greenroom_events_appended_here_total", ()): 32,
        ("greenroom_store_write_seconds_bucket", (("le", "0.01"), ("part", "tasks"))): 30,
        ("greenroom_store_write_seconds_bucket", (("le", "+Inf"), ("part", "tasks"))): 61,
        ("greenroom_store_write_seconds_count", (("part", "tasks"),)): 61,
        ("greenroom_store_write_seconds_sum", (("part", "tasks"),)): 0.5,
        ("greenroom_store_write_seconds_bucket", (("le", "0.01"), ("part", "events"))): 33,
        ("greenroom_store_write_seconds_bucket", (("le", "+Inf"), ("part", "events"))): 67,
        ("greenroom_store_write_seconds_count", (("part", "events"),)): 67,
        ("greenroom_store_write_seconds_sum", (("part", "events"),)): 0.25,
        ("greenroom_model_call_seconds_bucket", (("le", "1.0"), *t)): 50,
        ("greenroom_model_call_seconds_bucket", (("le", "+Inf"), *t)): 51,
        ("greenroom_model_call_seconds_count", t): 51,
        ("greenroom_model_call_seconds_sum", t): 5.1,
        ("greenroom_agents", t): 35,
        ("greenroom_agents_alive", t): 36,
        ("greenroom_agents_busy", t): 37,
        ("greenroom_agent_queue_depth", t): 38,
        ("greenroom_agent_restarts_total", t): 39,
        ("greenroom_model_calls_total", tm): 41,
        ("greenroom_model_tokens_total", tm): 40,
        ("greenroom_model_cost_total", tm): 0.42,
        ("greenroom_model_first_token_seconds", (("quantile", "0.5"), *t)): 0.044,
        ("greenroom_model_first_token_seconds", (("quantile", "0.99"), *t)): 0.045,
        ("greenroom_model_tokens_per_second", (("quantile", "0.5"), *t)): 46.0,
        ("greenroom_model_tokens_per_second", (("quantile", "0.99"), *t)): 47.0,
        ("greenroom_model_first_token_histogram_seconds_bucket", (("le", "0.1"), *t)): 48,
        ("greenroom_model_first_token_histogram_seconds_bucket", (("le", "+Inf"), *t)): 49,
        ("greenroom_model_first_token_histogram_seconds_count", t): 49,
        ("greenroom_model_first_token_histogram_seconds_sum", t): 4.9,
        ("greenroom_mailbox_depth", (("actor", "log"),)): 55,
        ("greenroom_budget_spent_tokens", b): 56,
        ("greenroom_budget_spent_cost", b): 0.57,
        ("greenroom_budget_limit_tokens", b): 58,
        ("greenroom_budget_limit_cost", b): 0.59,
        ("greenroom_budget_exhausted", b): 1,
        ("greenroom_chat_model_calls_total", ()): 52,
        ("greenroom_chat_tokens_total", ()): 53,
        ("greenroom_chat_cost_total", ()): 0.54,
        ("greenroom_store_bytes", (("part", "p"),)): 63,
        ("greenroom_store_bytes_total", ()): 62,
        ("greenroom_tasks_archived", ()): 60,
        ("greenroom_archive_parts", ()): 61,
        ("greenroom_event_segments", ()): 64,
        ("greenroom_events_dropped_through", ()): 65,
    }
    figures = samples(exposition(status).decode())
    assert sorted(set(figures) - set(expected)) == []  # no sample this list does not name
    assert sorted(set(expected) - set(figures)) == []  # every one it names is there
    assert {key: pytest.approx(value) for key, value in expected.items()} == figures
