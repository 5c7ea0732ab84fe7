"""Tracing: the trace context rides inside the message envelope, so one request's spans
form one trace across the long-lived actors it touches; off, nothing is wrapped."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from greenroom import Actor, ActorSystem, _tracing

pytestmark = pytest.mark.anyio


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    _tracing.enable(provider)
    try:
        yield exporter
    finally:
        _tracing.disable()
        provider.shutdown()


class Relay(Actor):
    """Asks the next actor and answers with what it said, plus the type it was given."""

    def __init__(self, next_ref: Any = None) -> None:
        self.next_ref = next_ref
        self.seen: list[type] = []

    async def receive(self, message: Any) -> Any:
        self.seen.append(type(message))
        if self.next_ref is None:
            return [message]
        return [message, *await self.next_ref.ask(message)]


async def test_a_message_carries_its_senders_trace_to_a_long_lived_actor(
    spans: InMemorySpanExporter,
) -> None:
    tracer = _tracing._tracer
    async with ActorSystem() as system:
        last = Relay()
        tail = await system.spawn(lambda: last, name="tail")
        head = await system.spawn(lambda: Relay(tail), name="head")
        with tracer.start_as_current_span("caller") as caller:
            assert await head.ask("hi") == ["hi", "hi"]
        head.tell("untraced")  # no span current: nothing to carry, nothing wrapped
        assert await tail.ask("plain") == ["plain"]
    assert last.seen == [str, str, str]  # the actor sees the message itself, never the envelope
    by_name = {span.name: span for span in spans.get_finished_spans()}
    assert set(by_name) == {"caller", "head str", "tail str"}
    trace_id = caller.get_span_context().trace_id
    assert {span.context.trace_id for span in by_name.values()} == {trace_id}
    assert by_name["head str"].parent.span_id == caller.get_span_context().span_id
    assert by_name["tail str"].parent.span_id == by_name["head str"].context.span_id
    assert by_name["tail str"].attributes["greenroom.actor"] == "tail"


async def test_off_nothing_is_wrapped_and_no_span_is_made() -> None:
    assert not _tracing.enabled
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    async with ActorSystem() as system:
        relay = Relay()
        ref = await system.spawn(lambda: relay)
        with tracer.start_as_current_span("caller"):
            await ref.ask("hi")
    assert relay.seen == [str]
    assert [span.name for span in exporter.get_finished_spans()] == ["caller"]


async def test_a_chat_request_through_the_api_is_one_trace_across_its_actors(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    from test_service import running

    trace_id = 0x4BF92F3577B34DA6A3CE929D0E0E4736
    traceparent = f"00-{trace_id:032x}-00f067aa0ba902b7-01"  # the caller's own trace, W3C
    async with running(tmp_path) as daemon, daemon.http("alice") as http:
        answer = await http.post(
            "/v1/chat", json={"message": "add buy milk"}, headers={"traceparent": traceparent}
        )
        assert answer.status_code == 200 and answer.json()["success"]
    finished = spans.get_finished_spans()
    mine = [span for span in finished if span.context.trace_id == trace_id]
    names = {span.name for span in mine}
    assert "POST /v1/chat" in names and "chat request" in names
    actors = {span.attributes["greenroom.actor"] for span in mine if "greenroom.actor" in span.attributes}
    assert "chat-runner" in actors and "log" in actors
    assert any("chatrequestactor" in name for name in actors), actors  # the per-request actor
    # every span of the request is in the caller's trace, and chains up to the HTTP span
    by_id = {span.context.span_id: span for span in mine}
    root = next(span for span in mine if span.name == "POST /v1/chat")
    for span in mine:
        node = span
        while node is not root:
            assert node.parent is not None and node.parent.span_id in by_id, node.name
            node = by_id[node.parent.span_id]
