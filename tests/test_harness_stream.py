"""Harness phases stream their model calls: the phase result is the same, each call's time
to first token and tokens per second reach the step journal, the ``HARNESS_PHASE`` event
and the status page; a stop closes the stream; a replayed step streams nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from _support import eventually
from test_durable import Effects, journal_on, model_for_two_turns, run_attempt

from greenroom import ActorSystem
from greenroom.harness import Harness, HarnessSetup, StopSignal
from greenroom.harness._journal import ReadSteps
from greenroom.llm import OpenAIChatModel, ScriptedModel
from greenroom.llm._openai import CLIENTS
from greenroom.messages import HARNESS_PHASE, Append, ChatReply, Usage
from greenroom.testing import ModelServer, Probe, Respond, completion

pytestmark = pytest.mark.anyio


@pytest.mark.virtual_time
async def test_a_phase_streams_and_its_event_carries_each_calls_first_token_and_rate() -> None:
    model = ScriptedModel(
        [ChatReply("one two three four five", usage=Usage(10, 9))], latency=0.5, token_latency=0.1
    )
    async with ActorSystem() as system:
        log = await Probe.spawn(system)
        harness = await Harness.spawn(system, model, log=log.ref, agent_id="writer")
        whole = await harness.run_bounded("go")
        event = await log.expect(Append, where=lambda a: a.type == HARNESS_PHASE)
        actor: Any = harness.ref._cell.actor
        summary = actor.timings.summary()
        await harness.aclose()
    assert whole.final_text == "one two three four five" and whole.stop_reason == "done"
    (call,) = event.payload["model_calls"]
    assert call["first_token_ms"] == pytest.approx(500, abs=5)
    # 8 tokens after the first, in the 0.4 s the four later pieces took
    assert call["tokens_per_second"] == pytest.approx(8 / 0.4, rel=0.05)
    assert summary["calls"] == 1 and summary["first_token_ms"]["p50"] == pytest.approx(500, abs=5)


async def test_the_step_journal_keeps_each_calls_timing_and_a_replay_streams_nothing(
    store_url: str | None, tmp_path: Path
) -> None:
    effects = Effects()
    async with journal_on(store_url, tmp_path / "data") as (system, writer):
        first, _, harness = await run_attempt(system, writer, model_for_two_turns(), effects.tools(), 1)
        await harness.aclose()
        steps = await writer.ask(ReadSteps("t1"))
        models = [step for step in steps if step.kind == "model"]
        assert len(models) == 2
        for step in models:
            timing = step.body["timing"]
            assert 0 <= timing["first_token"] <= timing["duration"]
        again_model = model_for_two_turns()
        again, _, harness = await run_attempt(system, writer, again_model, effects.tools(), 2)
        await harness.aclose()
    assert again_model.requests == [] and again.final_text == first.final_text  # nothing streamed


@pytest.fixture
def server() -> Iterator[ModelServer]:
    with ModelServer().running() as running:
        yield running


@pytest.mark.parametrize("client", CLIENTS)
async def test_an_immediate_stop_closes_the_stream_so_the_server_stops(
    server: ModelServer, client: str
) -> None:
    server.add(Respond(body=completion(" ".join(["word"] * 200)), token_delay=0.1))
    stop = StopSignal()
    async with OpenAIChatModel("m", base_url=server.url, client=client) as model, ActorSystem() as system:
        harness = await Harness.spawn(system, model, stop=stop)
        async with anyio.create_task_group() as tg:
            results: list[Any] = []

            async def run() -> None:
                results.append(await harness.run_bounded("talk"))

            tg.start_soon(run)
            await eventually(lambda: server.pieces_sent >= 2)
            stop.request(immediate=True)
        await eventually(server.disconnected.is_set)
        await harness.aclose()
    assert results[0].stop_reason == "stop_requested"
    assert server.pieces_sent < 20  # of 200


@pytest.mark.virtual_time
async def test_a_setup_counts_every_runs_timings_for_the_status_page() -> None:
    setup = HarnessSetup(ScriptedModel(lambda r: "a b c", latency=0.2, token_latency=0.05))
    async with ActorSystem() as system:
        for _ in range(3):
            harness = await setup.spawn(system)
            await harness.run_bounded("go")
            await harness.aclose()
    summary = setup.timings.summary()
    assert summary["calls"] == 3
    assert summary["first_token_ms"]["p50"] == pytest.approx(200, abs=5)
    assert summary["first_token_ms"]["p99"] == pytest.approx(200, abs=5)
    assert summary["tokens_per_second"]["p50"] is not None
