"""Streamed model calls: ``OpenAIChatModel.stream`` on both HTTP clients against a real
server on 127.0.0.1 (the test kit's, which plays a stream, breaks one, refuses one and
sees a client hang up), and the offline models' streams in virtual time."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import anyio
import pytest
from _support import MODEL_CLIENTS, eventually, use_model_client

from greenroom.llm import (
    ChatStream,
    ModelError,
    OpenAIChatModel,
    RuleBasedModel,
    ScriptedModel,
    StreamBroken,
    StreamingChatModel,
    Unavailable,
    open_stream,
)
from greenroom.llm._sse import EventDecoder
from greenroom.llm._stream import pieces
from greenroom.messages import ChatDelta, ChatMessage, ChatReply, ChatRequest, ModelToolCall, ToolSpec, Usage
from greenroom.testing import ModelServer, Respond, completion, error_body

pytestmark = pytest.mark.anyio

LONG = " ".join(f"word{n}" for n in range(60))


@pytest.fixture
def server() -> Iterator[ModelServer]:
    with ModelServer().running() as running:
        yield running


@pytest.fixture(params=MODEL_CLIENTS)
def client(request: pytest.FixtureRequest, anyio_backend: object, monkeypatch: pytest.MonkeyPatch) -> str:
    return use_model_client(str(request.param), anyio_backend, monkeypatch)


def make_model(server: ModelServer, client: str, **options: object) -> OpenAIChatModel:
    settings: dict[str, object] = {"max_retries": 2, "max_retry_wait": 5.0, "timeout": 10.0}
    settings.update(options)
    return OpenAIChatModel("test-model", base_url=server.url, client=client, **settings)  # type: ignore[arg-type]


def ask(text: str = "hi", tools: tuple[ToolSpec, ...] = ()) -> ChatRequest:
    return ChatRequest((ChatMessage("user", text),), tools)


async def read_all(model: StreamingChatModel, request: ChatRequest) -> tuple[list[ChatDelta], ChatReply]:
    async with model.stream(request) as stream:
        deltas = [delta async for delta in stream]
    return deltas, stream.reply


async def test_a_reply_streams_piece_by_piece_and_adds_up_to_the_whole_reply(
    server: ModelServer, client: str
) -> None:
    server.add(Respond(body=completion("Hello there, my friend.", prompt_tokens=20, completion_tokens=6)))
    server.add(Respond(body=completion("Hello there, my friend.", prompt_tokens=20, completion_tokens=6)))
    async with make_model(server, client) as model:
        deltas, reply = await read_all(model, ask())
        whole = await model.chat(ask())

    assert [d.text for d in deltas if d.text] == ["Hello ", "there, ", "my ", "friend."]
    assert deltas[-1] == ChatDelta(usage=Usage(20, 6), finish_reason="stop")  # the last piece, only it
    assert all(d.usage is None and d.finish_reason is None for d in deltas[:-1])
    assert (reply.text, reply.tool_calls, reply.usage, reply.finish_reason) == (
        whole.text, whole.tool_calls, whole.usage, whole.finish_reason,
    )  # fmt: skip
    assert reply.timing is not None and whole.timing is None
    assert 0 < reply.timing.first_token <= reply.timing.duration
    streamed, plain = server.seen[0].body, server.seen[1].body
    assert streamed["stream"] is True and streamed["stream_options"] == {"include_usage": True}
    assert server.seen[0].headers["accept"] == "text/event-stream"
    assert "stream" not in plain
    assert {k: v for k, v in streamed.items() if k not in ("stream", "stream_options")} == plain


async def test_tool_call_fragments_arrive_as_whole_calls(server: ModelServer, client: str) -> None:
    server.add(
        Respond(
            body=completion(
                tool_calls=[
                    ("c1", "add_task", '{"title": "buy milk", "tags": ["a", "b"]}'),
                    ("c2", "bad", "{nope"),
                ]
            )
        )
    )
    async with make_model(server, client) as model:
        deltas, reply = await read_all(model, ask(tools=(ToolSpec("add_task"), ToolSpec("bad"))))

    calls = [d.tool_call for d in deltas if d.tool_call is not None]
    assert calls[0] == ModelToolCall("c1", "add_task", {"title": "buy milk", "tags": ["a", "b"]})
    assert calls[1].name == "bad" and calls[1].arguments == {}
    assert "not valid JSON" in (calls[1].arguments_error or "")
    assert reply.tool_calls == tuple(calls) and reply.finish_reason == "tool_calls"
    assert reply.text == ""


async def test_usage_is_estimated_when_the_server_sends_none(server: ModelServer, client: str) -> None:
    server.add(Respond(body=completion("four words of text"), stream_usage=False))
    async with make_model(server, client) as model:
        deltas, reply = await read_all(model, ask("count me"))
    assert deltas[-1].usage is None  # nothing came from the server...
    assert reply.usage.prompt_tokens > 0 and reply.usage.completion_tokens > 0  # ...so it is estimated


async def test_a_failure_before_the_first_byte_is_retried(server: ModelServer, client: str) -> None:
    server.add(
        Respond(503, error_body("overloaded", "server_error"), headers={"retry-after": "0"}),
        Respond(body=completion("after a retry")),
    )
    async with make_model(server, client) as model:
        _, reply = await read_all(model, ask())
    assert reply.text == "after a retry"
    assert len(server.seen) == 2 and all(seen.body["stream"] for seen in server.seen)


async def test_a_stream_broken_mid_way_is_an_error_saying_what_arrived_never_retried(
    server: ModelServer, client: str
) -> None:
    server.add(Respond(body=completion("one two three four five six")), Respond(body=completion("x")))
    server.responses[0].break_after = 3
    got: list[str] = []
    async with make_model(server, client) as model:
        with pytest.raises(StreamBroken) as broken:
            async with model.stream(ask()) as stream:
                async for delta in stream:
                    got.append(delta.text)
    assert "".join(got) == "one two three "
    assert broken.value.partial.text == "one two three "
    assert "broke after 14 characters of text" in str(broken.value)
    assert len(server.seen) == 1  # the server had begun: not asked again


async def test_a_silence_after_the_first_byte_longer_than_the_timeout_breaks_the_stream(
    server: ModelServer, client: str
) -> None:
    server.add(Respond(body=completion("slow " * 5), token_delay=5.0))
    async with make_model(server, client, timeout=0.3) as model:
        with pytest.raises(StreamBroken) as broken:
            await read_all(model, ask())
    assert broken.value.partial.text == "slow "
    assert len(server.seen) == 1


async def test_a_steady_stream_longer_than_the_timeout_is_not_cut(server: ModelServer, client: str) -> None:
    server.add(Respond(body=completion("tick " * 8), token_delay=0.1))
    async with make_model(server, client, timeout=0.5) as model:  # 0.8 s in all, never 0.5 s silent
        _, reply = await read_all(model, ask())
    assert reply.text == "tick " * 8


@pytest.mark.parametrize("refusal", [True, "empty"])
async def test_a_server_that_refuses_to_stream_gets_those_requests_whole_said_once(
    server: ModelServer, client: str, caplog: pytest.LogCaptureFixture, refusal: bool | str
) -> None:
    tools = (ToolSpec("add_task"),)
    server.add(
        Respond(body=completion("first"), refuse_stream=refusal),
        Respond(body=completion("second")),
        Respond(body=completion("no tools: streamed")),
    )
    with caplog.at_level(logging.WARNING, logger="greenroom.llm"):
        async with make_model(server, client) as model:
            _, first = await read_all(model, ask(tools=tools))
            _, second = await read_all(model, ask(tools=tools))
            deltas, third = await read_all(model, ask())
    assert (first.text, second.text, third.text) == ("first", "second", "no tools: streamed")
    # refused streamed, sent whole; then whole at once; a request without tools still streams
    assert [seen.body.get("stream") for seen in server.seen] == [True, None, None, True]
    said = [r.getMessage() for r in caplog.records if "does not stream" in r.getMessage()]
    assert len(said) == 1 and "tool choice 'auto'" in said[0]
    assert len([d for d in deltas if d.text]) == 3


async def test_cancelling_a_stream_closes_the_connection_so_the_server_stops(
    server: ModelServer, client: str
) -> None:
    server.add(Respond(body=completion(LONG), token_delay=0.2))
    async with make_model(server, client) as model:
        with anyio.CancelScope() as scope:
            async with model.stream(ask()) as stream:
                async for _ in stream:
                    scope.cancel()  # the caller gives up at the first piece
        assert scope.cancelled_caught
        await eventually(server.disconnected.is_set)
    assert server.pieces_sent < 5  # of 60: it stopped generating


async def test_leaving_a_stream_early_closes_the_connection(server: ModelServer, client: str) -> None:
    server.add(Respond(body=completion(LONG), token_delay=0.2), Respond(body=completion("next")))
    async with make_model(server, client) as model:
        async with model.stream(ask()) as stream:
            async for _ in stream:
                break
        await eventually(server.disconnected.is_set)
        with pytest.raises(RuntimeError, match="before the stream ended"):
            _ = stream.reply
        _, reply = await read_all(model, ask())  # the client goes on with a new connection
    assert reply.text == "next"


async def test_a_server_that_cannot_be_reached_is_unavailable(client: str) -> None:
    model = OpenAIChatModel("m", base_url="http://127.0.0.1:9/v1", client=client, max_retries=0, timeout=5.0)
    async with model:
        with pytest.raises(Unavailable, match="cannot reach"):
            await read_all(model, ask())


# -- the offline models, on the event loop's clock ---------------------------------------


@pytest.mark.virtual_time
async def test_a_scripted_model_plays_its_reply_with_per_token_delays_virtual_time_skips() -> None:
    model = ScriptedModel(["one two three four", ChatReply("x")], latency=2.0, token_latency=0.5)
    started = anyio.current_time()
    deltas, reply = await read_all(model, ask())
    assert [d.text for d in deltas if d.text] == ["one ", "two ", "three ", "four"]
    assert reply.timing is not None
    assert reply.timing.first_token == pytest.approx(2.0, abs=0.01)
    assert reply.timing.duration == pytest.approx(3.5, abs=0.01)  # 2 s, then three pieces 0.5 s apart
    assert anyio.current_time() - started == pytest.approx(3.5, abs=0.01)
    assert reply.usage.completion_tokens > 0
    started = anyio.current_time()
    whole = await model.chat(ask())  # a whole reply takes as long as its stream would
    assert whole.text == "x" and anyio.current_time() - started == pytest.approx(2.0, abs=0.01)


@pytest.mark.virtual_time
async def test_a_scripted_stream_cancelled_before_its_first_piece_consumes_nothing() -> None:
    model = ScriptedModel(["only reply"], latency=10.0)
    with anyio.move_on_after(1.0):
        await read_all(model, ask())
    assert model.remaining == 1 and model.requests == []
    _, reply = await read_all(model, ask())
    assert reply.text == "only reply"


@pytest.mark.virtual_time
async def test_the_rule_based_model_streams_its_tool_calls_and_text() -> None:
    model = RuleBasedModel(latency=0.05, token_latency=0.02)
    tools = (ToolSpec("add_task"),)
    deltas, reply = await read_all(model, ask("add buy milk", tools))
    assert [d.tool_call.name for d in deltas if d.tool_call is not None] == ["add_task"]
    assert reply.tool_calls[0].arguments == {"title": "buy milk"}
    _, greeting = await read_all(model, ask("hello", tools))
    assert greeting.timing is not None and greeting.timing.tokens_per_second == pytest.approx(
        (greeting.usage.completion_tokens - 1) / (greeting.timing.duration - greeting.timing.first_token)
    )


async def test_open_stream_gives_a_model_that_cannot_stream_as_one_piece() -> None:
    class Whole:
        async def chat(self, request: ChatRequest, *, timeout: float | None = None) -> ChatReply:
            return ChatReply("all at once", usage=Usage(3, 3))

        async def aclose(self) -> None:
            pass

    async with open_stream(Whole(), ask()) as stream:
        assert isinstance(stream, ChatStream)
        reply = await stream.read()
    assert reply.text == "all at once" and reply.usage == Usage(3, 3)
    assert reply.timing is not None and reply.timing.first_token == reply.timing.duration


def test_a_negative_token_latency_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="token_latency"):
        ScriptedModel(["x"], token_latency=-1)
    with pytest.raises(ValueError, match="token_latency"):
        RuleBasedModel(token_latency=float("nan"))


def test_pieces_join_back_to_the_text() -> None:
    for text in ["", "a", "  lead and trail  ", "tab\tand\nnewline", "one"]:
        assert "".join(pieces(text)) == text


def test_server_sent_events_are_cut_wherever_the_bytes_break() -> None:
    stream = (
        b': comment\r\n\r\ndata: {"a": 1}\r\n\r\n'
        b"event: x\r\ndata: line1\r\ndata: line2\r\n\r\ndata: [DONE]\r\n\r\n"
    )
    whole = EventDecoder().feed(stream)
    assert whole == [b'{"a": 1}', b"line1\nline2", b"[DONE]"]
    for size in (1, 2, 3, 7):
        decoder = EventDecoder()
        cut = [decoder.feed(stream[i : i + size]) for i in range(0, len(stream), size)]
        assert [event for events in cut for event in events] == whole
    decoder = EventDecoder()  # a CR at the end may be half a CRLF: its line waits for the next byte
    assert decoder.feed(b"data: x\n\ndata: y\rdata: z\r\r") == [b"x"]
    assert decoder.feed(b"data: w\r\r\n") == [b"y\nz", b"w"]


async def test_a_server_that_interrupts_streams_gets_every_request_whole_said_once(
    client: str, caplog: pytest.LogCaptureFixture
) -> None:
    """llama-cpp-python closes a stream in progress when another request arrives: the
    broken stream is an error; from then on every request goes whole."""
    with ModelServer(interrupt_streams=True).running() as server:
        server.add(Respond(body=completion(LONG), token_delay=0.05), Respond(body=completion("second")))
        server.add(Respond(body=completion("third")))
        with caplog.at_level(logging.WARNING, logger="greenroom.llm"):
            async with make_model(server, client) as model:
                whole = None
                with pytest.raises(StreamBroken):
                    async with model.stream(ask()) as stream:
                        async for _ in stream:
                            if whole is None:  # a request mid-stream: the server cuts the stream
                                whole = await model.chat(ask())
                _, third = await read_all(model, ask())
    assert whole is not None and whole.text == "second" and third.text == "third"
    assert [seen.body.get("stream") for seen in server.seen] == [True, None, None]
    said = [r.getMessage() for r in caplog.records if "interrupts streams" in r.getMessage()]
    assert len(said) == 1


async def test_a_harness_asks_again_whole_when_nobody_saw_the_broken_streams_pieces(
    server: ModelServer,
) -> None:
    from greenroom import ActorSystem
    from greenroom.harness import Harness

    server.add(Respond(body=completion("half of it"), break_after=1), Respond(body=completion("all of it")))
    async with make_model(server, "greenroom") as model, ActorSystem() as system:
        harness = await Harness.spawn(system, model)
        result = await harness.run_bounded("go")
        await harness.aclose()
    assert result.final_text == "all of it" and result.stop_reason == "done"
    assert [seen.body.get("stream") for seen in server.seen] == [True, None]


async def test_a_server_that_ignores_stream_is_read_as_the_whole_answer_it_sent(
    server: ModelServer, client: str
) -> None:
    server.add(Respond(body=completion("whole anyway", completion_tokens=3), ignore_stream=True))
    async with make_model(server, client) as model:
        deltas, reply = await read_all(model, ask())
    assert reply.text == "whole anyway" and reply.usage.completion_tokens == 3
    assert [d.text for d in deltas if d.text] == ["whole anyway"]  # it came at once
    assert len(server.seen) == 1  # asked once: not taken for a refusal


async def test_a_model_told_not_to_stream_sends_each_call_whole(server: ModelServer, client: str) -> None:
    server.add(Respond(body=completion("one two three")))
    async with make_model(server, client, stream=False) as model:
        deltas, reply = await read_all(model, ask())
    assert reply.text == "one two three" and "stream" not in server.seen[0].body
    assert [d.text for d in deltas if d.text] == ["one two three"]  # it came at once
    with pytest.raises(ValueError, match="stream must be true or false"):
        OpenAIChatModel("m", base_url=server.url, stream="no")  # type: ignore[arg-type]


# -- fallbacks=False: a load generator's model measures what the server does (issue 48) ------


async def test_without_fallbacks_an_interrupting_server_cuts_streams_and_they_stay_streamed(
    client: str,
) -> None:
    with ModelServer(interrupt_streams=True).running() as server:
        server.add(Respond(body=completion(LONG), token_delay=0.05), Respond(body=completion("second")))
        server.add(Respond(body=completion("third")))
        async with make_model(server, client, fallbacks=False) as model:
            second = None
            with pytest.raises(StreamBroken) as cut:
                async with model.stream(ask()) as stream:
                    async for _ in stream:
                        if second is None:  # a request mid-stream: the server cuts the stream
                            _, second = await read_all(model, ask())
            _, third = await read_all(model, ask())
            assert model.compatibility == []
    assert cut.value.kind == "stream cut"
    assert second is not None and (second.text, third.text) == ("second", "third")
    assert [seen.body.get("stream") for seen in server.seen] == [True, True, True]


@pytest.mark.parametrize(("refusal", "kind"), [(True, "HTTP 500"), ("empty", "empty stream")])
async def test_without_fallbacks_a_refused_stream_is_an_error_of_its_kind(
    server: ModelServer, client: str, refusal: bool | str, kind: str
) -> None:
    server.add(Respond(body=completion("first"), refuse_stream=refusal))
    async with make_model(server, client, fallbacks=False, max_retries=0) as model:
        with pytest.raises(ModelError) as refused:
            await read_all(model, ask(tools=(ToolSpec("add_task"),)))
    assert refused.value.kind == kind
    assert [seen.body.get("stream") for seen in server.seen] == [True]  # never sent again whole


async def test_the_kind_of_a_broken_stream_says_what_happened(server: ModelServer, client: str) -> None:
    server.add(Respond(body=completion("one two three"), break_after=1))
    server.add(Respond(body=completion("slow to say"), token_delay=1.0))
    async with make_model(server, client, fallbacks=False, timeout=0.3) as model:
        with pytest.raises(StreamBroken) as cut:
            await read_all(model, ask())
        with pytest.raises(StreamBroken) as silent:
            await read_all(model, ask())
    assert (cut.value.kind, silent.value.kind) == ("stream cut", "timeout"), str(silent.value)
