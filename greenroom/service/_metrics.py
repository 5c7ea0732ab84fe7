"""``GET /metrics``: the daemon's figures in Prometheus's text exposition format.

Written by ``prometheus_client`` (its ``CollectorRegistry`` and ``generate_latest``), not
by hand: at each scrape a collector turns one status snapshot — the same document
``GET /v1/status`` answers, so a scrape and the API always agree — into metric families.
Nothing is kept between scrapes (no global registry: several daemons in one process, as
the tests run them, never share figures).

Counters (``_total``) count since this daemon started; gauges are the state at the scrape.
The tasks' counts are the graph's (every daemon's, on PostgreSQL); what this daemon did
is ``greenroom_tasks_completed_here_total`` and the per-agent-type counters.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def exposition(status: dict[str, Any]) -> bytes:
    """The text a scrape answers, for ``status`` (``ServiceParts.status()``)."""
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_StatusCollector(status))
    return generate_latest(registry)


class _StatusCollector:
    """One status snapshot as metric families (``prometheus_client``'s collector shape)."""

    def __init__(self, status: dict[str, Any]) -> None:
        self.status = status

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        status = self.status
        tasks = status.get("tasks") or {}

        def gauge(name: str, documentation: str, labels: list[str] | None = None) -> GaugeMetricFamily:
            return GaugeMetricFamily(f"greenroom_{name}", documentation, labels=labels)

        def counter(name: str, documentation: str, labels: list[str] | None = None) -> CounterMetricFamily:
            return CounterMetricFamily(f"greenroom_{name}", documentation, labels=labels)

        info = gauge("info", "This daemon: its version (always 1)", ["version"])
        info.add_metric([str(status.get("version", ""))], 1)
        yield info
        uptime = gauge("uptime_seconds", "Seconds since this daemon started")
        uptime.add_metric([], float(status.get("uptime", 0.0)))
        yield uptime

        by_status = gauge("tasks", "Tasks in the live graph by status (every daemon's)", ["status"])
        for name, count in sorted((tasks.get("by_status") or {}).items()):
            by_status.add_metric([name], count)
        yield by_status
        by_type = gauge(
            "tasks_by_type", "Tasks in the live graph by agent type and status", ["type", "status"]
        )
        for agent_type, counts in sorted((tasks.get("by_type") or {}).items()):
            for name, count in sorted(counts.items()):
                by_type.add_metric([agent_type, name], count)
        yield by_type
        total = gauge("tasks_live", "Tasks in the live graph (archived ones not counted)")
        total.add_metric([], tasks.get("total", 0))
        yield total
        waiting = gauge("approvals_waiting", "Tasks WAITING for a person's decision")
        waiting.add_metric([], (tasks.get("by_status") or {}).get("WAITING", 0))
        yield waiting
        runnable = gauge("runnable_types", "Agent types with a task ready to claim (1 each)", ["type"])
        for agent_type in tasks.get("runnable_types") or []:
            runnable.add_metric([agent_type], 1)
        yield runnable
        for key, name, documentation in (  # what this daemon did since it started, one figure each
            ("completed_here", "tasks_completed_here", "Tasks this daemon completed since it started"),
            (
                "granted_here",
                "claims_granted_here",
                "Claims this daemon granted since it started (attempts begun)",
            ),
            (
                "failures_here",
                "attempts_failed_here",
                "Failed attempts reported to this daemon since it started",
            ),
            (
                "archived_here",
                "tasks_archived_here",
                "Finished tasks this daemon's retention moved to the archive",
            ),
            (
                "archive_dropped_here",
                "archive_dropped_here",
                "Archived tasks this daemon's retention dropped",
            ),
        ):
            family = counter(name, documentation)
            family.add_metric([], tasks.get(key, 0))
            yield family
        log = status.get("log") or {}
        appended = counter("events_appended_here", "Events this daemon's log actor made durable")
        appended.add_metric([], log.get("appended_here", 0))
        yield appended
        yield _writes({"tasks": tasks.get("writes"), "events": log.get("writes")})

        yield from _agents(status.get("agents") or {}, gauge, counter)

        mailboxes = gauge("mailbox_depth", "Messages queued in an actor's mailbox", ["actor"])
        for actor, depth in sorted((status.get("mailboxes") or {}).items()):
            mailboxes.add_metric([actor], depth)
        yield mailboxes

        yield from _budgets(status.get("budgets") or {}, gauge)
        chat = status.get("chat")
        if chat is not None:
            yield from _chat(chat, counter)
        yield from _storage(status.get("storage") or {}, gauge)


def _agents(agents: dict[str, dict[str, Any]], gauge: Any, counter: Any) -> Iterator[Any]:
    families = {
        "configured": gauge("agents", "Agent actors configured, per type", ["type"]),
        "alive": gauge("agents_alive", "Agent actors alive, per type", ["type"]),
        "busy": gauge("agents_busy", "Agent actors running a task, per type", ["type"]),
        "queued": gauge("agent_queue_depth", "Messages queued for the agent actors of a type", ["type"]),
        "restarts": counter("agent_restarts", "Agent actor restarts since start, per type", ["type"]),
    }
    by_model = {  # "own": the agent type's own model (no [llm] server), e.g. scripted
        "model_calls": counter("model_calls", "Model calls the agents of a type made", ["type", "model"]),
        "tokens_spent": counter("model_tokens", "Tokens the agents of a type spent", ["type", "model"]),
        "cost": counter(
            "model_cost", "What the agents of a type spent (the price's unit)", ["type", "model"]
        ),
    }
    first_token = gauge(
        "model_first_token_seconds", "Time to first token of the last streamed calls", ["type", "quantile"]
    )
    rate = gauge(
        "model_tokens_per_second", "Output tokens per second of the last streamed calls", ["type", "quantile"]
    )
    for agent_type, entry in sorted(agents.items()):
        for key, family in families.items():
            family.add_metric([agent_type], entry.get(key, 0))
        for key, family in by_model.items():
            family.add_metric([agent_type, entry.get("model") or "own"], entry.get(key, 0))
        timing = entry.get("model_timing") or {}
        for quantile in ("p50", "p99"):
            label = "0.5" if quantile == "p50" else "0.99"
            ms = (timing.get("first_token_ms") or {}).get(quantile)
            if ms is not None:
                first_token.add_metric([agent_type, label], ms / 1000)
            per_second = (timing.get("tokens_per_second") or {}).get(quantile)
            if per_second is not None:
                rate.add_metric([agent_type, label], per_second)
    from prometheus_client.core import HistogramMetricFamily

    histogram = HistogramMetricFamily(
        "greenroom_model_first_token_histogram_seconds",
        "Time to first token of every streamed call since start",
        labels=["type"],
    )
    calls = HistogramMetricFamily(
        "greenroom_model_call_seconds", "The whole time of every streamed call since start", labels=["type"]
    )
    for agent_type, entry in sorted(agents.items()):
        for family, key in ((histogram, "first_token_histogram"), (calls, "duration_histogram")):
            counted = (entry.get("model_timing") or {}).get(key)
            if counted:
                buckets = [
                    (str(float(bound)) if bound != "+Inf" else "+Inf", count)
                    for bound, count in counted["buckets"]
                ]
                family.add_metric([agent_type], buckets, sum_value=counted["sum"])
    yield calls
    yield from families.values()
    yield from by_model.values()
    yield first_token
    yield rate
    yield histogram


def _writes(parts: dict[str, dict[str, Any] | None]) -> Any:
    """The store's durable writes per part (``Durations``) as one histogram."""
    from prometheus_client.core import HistogramMetricFamily

    histogram = HistogramMetricFamily(
        "greenroom_store_write_seconds",
        "Durable writes of this daemon's task store (a group commit's write, a transaction) and log",
        labels=["part"],
    )
    for part, durations in parts.items():
        if not durations:
            continue
        cumulative, buckets = 0, []
        for bound, count in zip([*durations["bounds"], "+Inf"], durations["counts"], strict=True):
            cumulative += count
            buckets.append((str(float(bound)) if bound != "+Inf" else "+Inf", cumulative))
        histogram.add_metric([part], buckets, sum_value=durations["sum"])
    return histogram


def _budgets(budgets: dict[str, dict[str, Any]], gauge: Any) -> Iterator[Any]:
    spent = gauge("budget_spent_tokens", "Tokens spent against a named budget (every daemon's)", ["budget"])
    cost = gauge("budget_spent_cost", "Cost spent against a named budget (every daemon's)", ["budget"])
    limit = gauge("budget_limit_tokens", "A named budget's token limit (absent: none)", ["budget"])
    cost_limit = gauge("budget_limit_cost", "A named budget's cost limit (absent: none)", ["budget"])
    exhausted = gauge("budget_exhausted", "1 once a named budget is spent", ["budget"])
    for name, budget in sorted(budgets.items()):
        spent.add_metric([name], budget.get("tokens", 0))
        cost.add_metric([name], budget.get("cost", 0.0))
        if budget.get("limit") is not None:
            limit.add_metric([name], budget["limit"])
        if budget.get("cost_limit") is not None:
            cost_limit.add_metric([name], budget["cost_limit"])
        exhausted.add_metric([name], int(bool(budget.get("exhausted"))))
    yield from (spent, cost, limit, cost_limit, exhausted)


def _chat(chat: dict[str, Any], counter: Any) -> Iterator[Any]:
    calls = counter("chat_model_calls", "Model calls the chat assistant made since start")
    calls.add_metric([], chat.get("llm_calls", 0))
    tokens = counter("chat_tokens", "Tokens the chat assistant spent since start")
    tokens.add_metric([], chat.get("total_tokens", 0))
    cost = counter("chat_cost", "What the chat assistant spent since start")
    cost.add_metric([], chat.get("cost", 0.0))
    yield from (calls, tokens, cost)


def _storage(storage: dict[str, Any], gauge: Any) -> Iterator[Any]:
    size = gauge("store_bytes", "Bytes on disk, per part of the store", ["part"])
    for part, count in sorted((storage.get("by_part") or {}).items()):
        size.add_metric([part], count)
    yield size
    for key, name, documentation in (
        ("bytes", "store_bytes_total", "Bytes on disk in all"),
        ("archived_tasks", "tasks_archived", "Finished tasks in the archive"),
        ("archive_parts", "archive_parts", "The archive's segments (files) or days (PostgreSQL)"),
        ("event_segments", "event_segments", "The event log's segments, the open one included"),
        (
            "events_dropped_through",
            "events_dropped_through",
            "The last event seq retention dropped (0: none)",
        ),
    ):
        family = gauge(name, documentation)
        family.add_metric([], storage.get(key, 0))
        yield family
