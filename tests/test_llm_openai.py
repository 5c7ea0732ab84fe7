"""``OpenAIChatModel`` against a real chat-completions server on 127.0.0.1."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import anyio
import msgspec
import pytest
from _support import MODEL_CLIENTS, eventually, use_model_client

from greenroom import ActorSystem
from greenroom.harness import Harness, Tool
from greenroom.llm import BadRequest, ContextTooLong, OpenAIChatModel, RateLimited, TimedOut, Unavailable
from greenroom.llm._openai import retry_after_seconds
from greenroom.messages import ChatMessage, ChatRequest, ModelToolCall, ToolSpec
from greenroom.testing import ModelServer, Respond, completion, error_body

pytestmark = pytest.mark.anyio

KEY = "sk-test-0123456789abcdef-secret"


@pytest.fixture
def server() -> Iterator[ModelServer]:
    with ModelServer().running() as running:
        yield running


@pytest.fixture(params=MODEL_CLIENTS)
def client(request: pytest.FixtureRequest, anyio_backend: object, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every behaviour holds on greenroom's own HTTP client (both of its paths) and on the
    openai SDK's (the reference), against the same real server."""
    return use_model_client(str(request.param), anyio_backend, monkeypatch)


def make_model(server: ModelServer, client: str, **options: object) -> OpenAIChatModel:
    settings: dict[str, object] = {"max_retries": 2, "max_retry_wait": 5.0, "timeout": 10.0}
    settings.update(options)
    return OpenAIChatModel(
        "test-model",
        base_url=server.url,
        api_key=KEY,
        client=client,
        **settings,  # type: ignore[arg-type]
    )


def ask(text: str = "hi") -> ChatRequest:
    return ChatRequest((ChatMessage("user", text),))


class Lookup(msgspec.Struct):
    city: str


async def test_a_tool_call_turn_then_a_text_turn_through_a_harness(server: ModelServer, client: str) -> None:
    server.add(
        Respond(body=completion(tool_calls=[("call-1", "weather", '{"city": "Oslo"}')], prompt_tokens=20)),
        Respond(body=completion("It is 3 degrees in Oslo.", prompt_tokens=40, completion_tokens=9)),
    )
    seen_cities: list[str] = []

    def weather(args: Lookup) -> dict[str, object]:
        seen_cities.append(args.city)
        return {"city": args.city, "celsius": 3}

    async with make_model(server, client) as model, ActorSystem() as system:
        harness = await Harness.spawn(
            system, model, system_prompt="You are terse.", tools=[Tool("weather", weather, args=Lookup)]
        )
        result = await harness.run_bounded("Weather in Oslo?", max_iterations=4)

    assert result.stop_reason == "done"
    assert result.final_text == "It is 3 degrees in Oslo."
    assert seen_cities == ["Oslo"]
    assert result.tool_calls == [
        {"id": "call-1", "name": "weather", "arguments": {"city": "Oslo"}, "ok": True,
         "result": {"city": "Oslo", "celsius": 3}}
    ]  # fmt: skip
    first, second = server.seen
    assert first.path == "/v1/chat/completions"
    assert first.headers["authorization"] == f"Bearer {KEY}"
    assert first.body["model"] == "test-model"
    assert [m["role"] for m in first.body["messages"]] == ["system", "user"]
    assert first.body["tools"][0]["function"]["name"] == "weather"
    assert first.body["tools"][0]["function"]["parameters"]["required"] == ["city"]
    # the second turn carries the assistant's tool call and the tool's answer
    roles = [m["role"] for m in second.body["messages"]]
    assert roles == ["system", "user", "assistant", "tool"]
    assistant, tool = second.body["messages"][2:]
    assert assistant["tool_calls"][0]["function"] == {"name": "weather", "arguments": '{"city":"Oslo"}'}
    assert assistant["content"] == ""  # never null: llama-cpp-python's server refuses that with a 500
    assert tool == {"role": "tool", "content": '{"city":"Oslo","celsius":3}', "tool_call_id": "call-1"}


async def test_usage_and_tool_arguments_are_mapped(server: ModelServer, client: str) -> None:
    server.add(
        Respond(
            body=completion(tool_calls=[("a", "f", "{not json"), ("b", "g", "[1, 2]")], completion_tokens=4)
        )
    )
    async with make_model(server, client) as model:
        reply = await model.chat(ChatRequest((ChatMessage("user", "x"),), (ToolSpec("f"), ToolSpec("g"))))
    assert reply.usage.prompt_tokens == 11 and reply.usage.completion_tokens == 4
    assert reply.usage.total_tokens == 15
    bad_json, not_object = reply.tool_calls
    assert bad_json.arguments == {} and "not valid JSON" in (bad_json.arguments_error or "")
    assert not_object.arguments == {} and "must be a JSON object" in (not_object.arguments_error or "")
    assert server.seen[0].body["tool_choice"] == "auto"


async def test_a_429_with_retry_after_is_retried_after_the_wait_it_asked_for(
    server: ModelServer, client: str
) -> None:
    server.add(
        Respond(429, error_body("slow down", "rate_limit_error"), headers={"Retry-After": "0.3"}),
        Respond(body=completion("finally")),
    )
    async with make_model(server, client) as model:
        started = anyio.current_time()
        reply = await model.chat(ask())
        waited = anyio.current_time() - started
    assert reply.text == "finally"
    assert len(server.seen) == 2
    assert waited >= 0.29  # it honoured the server's Retry-After (a lower bound, not a speed claim)


async def test_rate_limited_once_retries_are_spent(
    server: ModelServer, caplog: pytest.LogCaptureFixture, client: str
) -> None:
    server.add(*[Respond(429, error_body("no"), headers={"retry-after-ms": "10"}) for _ in range(3)])
    caplog.set_level(logging.WARNING, "greenroom.llm")
    async with make_model(server, client, max_retries=2) as model:
        with pytest.raises(RateLimited) as caught:
            await model.chat(ask())
    assert len(server.seen) == 3  # the first try and two retries
    assert caught.value.retry_after == pytest.approx(0.01)
    assert caught.value.status == 429
    assert len([r for r in caplog.records if "retry" in r.getMessage()]) == 2


async def test_a_retry_after_longer_than_allowed_fails_at_once(server: ModelServer, client: str) -> None:
    server.add(Respond(429, error_body("come back tomorrow"), headers={"Retry-After": "86400"}))
    async with make_model(server, client, max_retry_wait=5.0) as model:
        with pytest.raises(RateLimited) as caught:
            await model.chat(ask())
    assert len(server.seen) == 1
    assert caught.value.retry_after == 86400


async def test_server_errors_are_retried_then_reported_unavailable(server: ModelServer, client: str) -> None:
    server.add(Respond(503, error_body("busy", "server_error"), headers={"Retry-After": "0"}))
    server.add(Respond(body=completion("ok")))
    async with make_model(server, client) as model:
        assert (await model.chat(ask())).text == "ok"
        server.add(*[Respond(500, error_body("broken", "server_error"), headers={"Retry-After": "0"})] * 3)
        with pytest.raises(Unavailable) as caught:
            await model.chat(ask())
    assert caught.value.status == 500
    assert len(server.seen) == 2 + 3


async def test_a_bad_request_is_not_retried(server: ModelServer, client: str) -> None:
    server.add(Respond(400, error_body("unknown parameter: foo")))
    async with make_model(server, client) as model:
        with pytest.raises(BadRequest, match="unknown parameter") as caught:
            await model.chat(ask())
    assert caught.value.status == 400
    assert len(server.seen) == 1


async def test_an_unreachable_server_is_unavailable(client: str) -> None:
    with anyio.fail_after(30):
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        await listener.aclose()  # nothing listens there now
        async with OpenAIChatModel(
            "m",
            base_url=f"http://127.0.0.1:{port}/v1",
            api_key=KEY,
            max_retries=1,
            max_retry_wait=0.01,
            client=client,
        ) as model:
            with pytest.raises(Unavailable, match="cannot reach"):
                await model.chat(ask())


async def test_a_call_longer_than_the_timeout_is_timed_out(server: ModelServer, client: str) -> None:
    server.add(Respond(body=completion("too late"), hold=True))
    async with make_model(server, client, timeout=0.3) as model:
        with pytest.raises(TimedOut, match=r"no answer within 0\.3s"):
            await model.chat(ask())
    assert len(server.seen) == 1  # a timeout is not retried


async def test_an_immediate_stop_cancels_a_slow_call(server: ModelServer, client: str) -> None:
    server.add(Respond(body=completion("never seen"), hold=True))
    async with make_model(server, client) as model, ActorSystem() as system:
        harness = await Harness.spawn(system, model)
        async with anyio.create_task_group() as tg:
            results = []

            async def phase() -> None:
                results.append(await harness.run_bounded("think hard", max_iterations=3))

            tg.start_soon(phase)
            await eventually(server.holding.is_set)
            harness.request_stop(immediate=True)
        # the phase ended while the server was still holding the answer back
        assert not server._release.is_set()
        assert results[0].stop_reason == "stop_requested"
        assert await harness.history() == ()  # the cancelled turn left nothing behind


async def test_the_api_key_never_appears_in_errors_logs_or_repr(
    server: ModelServer, caplog: pytest.LogCaptureFixture, client: str
) -> None:
    caplog.set_level(logging.DEBUG)
    server.add(Respond(401, echo_auth=True))
    server.add(Respond(400, echo_auth=True))
    server.add(Respond(429, echo_auth=True, headers={"Retry-After": "0"}), Respond(400, echo_auth=True))
    async with make_model(server, client, max_retries=1) as model:
        errors = []
        for _ in range(3):
            with pytest.raises(BadRequest) as caught:
                await model.chat(ask())
            errors.append(caught.value)
    assert "refused the credentials" in str(errors[0])
    assert "[redacted]" in str(errors[1])  # the server echoed it back; we blanked it
    for error in errors:
        assert KEY not in str(error) and KEY not in repr(error)
        assert (
            error.__cause__ is None and error.__context__ is None
        )  # the SDK error (holding the request) is dropped
    assert KEY not in repr(model)
    assert any("retry" in r.getMessage() for r in caplog.records)
    assert KEY not in caplog.text


async def test_configuration_comes_from_arguments_or_the_environment(
    server: ModelServer, monkeypatch: pytest.MonkeyPatch, client: str
) -> None:
    monkeypatch.setenv("OPENAI_MODEL", "env-model")
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    server.add(Respond(body=completion("a")), Respond(body=completion("b")))
    async with OpenAIChatModel(client=client) as model:
        await model.chat(ask())
    async with OpenAIChatModel("arg-model", api_key="sk-from-arg", client=client) as model:
        await model.chat(ask())
    assert server.seen[0].body["model"] == "env-model"
    assert server.seen[0].headers["authorization"] == "Bearer sk-from-env"
    assert server.seen[1].body["model"] == "arg-model"
    assert server.seen[1].headers["authorization"] == "Bearer sk-from-arg"


async def test_a_closed_model_refuses_calls(server: ModelServer, client: str) -> None:
    model = make_model(server, client)
    await model.aclose()
    await model.aclose()  # idempotent
    with pytest.raises(RuntimeError, match="after aclose"):
        await model.chat(ask())
    assert server.seen == []


def test_bad_settings_name_the_field_and_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_MODEL", raising=False)
    with pytest.raises(ValueError, match=r"model must be a non-empty string .*OPENAI_MODEL.*None"):
        OpenAIChatModel()
    with pytest.raises(ValueError, match="base_url must be an http\\(s\\) URL, got 'ftp://x'"):
        OpenAIChatModel("m", base_url="ftp://x")
    with pytest.raises(ValueError, match="timeout must be a positive number of seconds, got -1"):
        OpenAIChatModel("m", timeout=-1)
    with pytest.raises(ValueError, match="max_retries must be an int >= 0, got 'many'"):
        OpenAIChatModel("m", max_retries="many")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="temperature must be a number in \\[0, 2\\], got 3"):
        OpenAIChatModel("m", temperature=3)


def test_retry_after_accepts_seconds_milliseconds_and_http_dates() -> None:
    now = datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC)
    later = format_datetime(now + timedelta(seconds=30), usegmt=True)
    assert retry_after_seconds({"retry-after": "2.5"}) == 2.5
    assert retry_after_seconds({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert retry_after_seconds({"retry-after": later}, now=now.timestamp()) == pytest.approx(30)
    assert retry_after_seconds({"retry-after": "soon"}) is None
    assert retry_after_seconds({}) is None
    assert retry_after_seconds({"retry-after": "-5"}) == 0.0


async def test_max_in_flight_admits_calls_in_fifo_order_and_bounds_the_endpoint(
    server: ModelServer, client: str
) -> None:
    """With one call in flight, the calls reach the server one by one, in the order they
    were made (two admitted at once could race on the wire: order is the admission's)."""
    server.add(*(Respond(body=completion(text=f"r{i}"), hold=True) for i in range(5)))
    model = make_model(server, client, max_in_flight=1)
    answers: list[str] = []
    try:
        async with anyio.create_task_group() as tg:
            for i in range(5):

                async def call(i: int = i) -> None:
                    answers.append((await model.chat(ask(f"q{i}"))).text)

                tg.start_soon(call)

                def admitted_or_waiting(i: int = i) -> bool:
                    admission = model._admission
                    return admission is not None and (
                        admission.statistics().tasks_waiting + admission.borrowed_tokens == i + 1
                    )

                await eventually(admitted_or_waiting)
            await eventually(lambda: len(server.seen) == 1)
            assert model._admission is not None and model._admission.statistics().tasks_waiting == 4
            server.release()
    finally:
        await model.aclose()
    assert [s.body["messages"][-1]["content"] for s in server.seen] == [f"q{i}" for i in range(5)]  # FIFO
    assert answers == [f"r{i}" for i in range(5)]


def test_max_in_flight_is_checked() -> None:
    with pytest.raises(ValueError, match="max_in_flight must be an int >= 1, got 0"):
        OpenAIChatModel("m", base_url="http://127.0.0.1:9/v1", max_in_flight=0)


async def test_calls_take_the_pools_in_turn(server: ModelServer, client: str) -> None:
    server.add(*(Respond(body=completion(text=f"r{i}")) for i in range(4)))
    model = make_model(server, client, max_in_flight=4, pools=2)
    used: list[int] = []

    class Counted:  # a transport that says which pool it is, then sends through the real one
        def __init__(self, index: int, inner: Any) -> None:
            self.index, self.inner = index, inner

        async def post(self, *args: Any) -> Any:
            used.append(self.index)
            return await self.inner.post(*args)

        async def aclose(self) -> None:
            await self.inner.aclose()

    model._transports = [Counted(n, inner) for n, inner in enumerate(model._transports)]  # type: ignore[misc]
    try:
        texts = [(await model.chat(ask(f"q{i}"))).text for i in range(4)]
    finally:
        await model.aclose()
    assert texts == ["r0", "r1", "r2", "r3"] and used == [0, 1, 0, 1]


def test_pools_need_a_bound_at_least_as_large() -> None:
    with pytest.raises(ValueError, match="pools=4 needs max_in_flight >= pools, got 2"):
        OpenAIChatModel("m", base_url="http://127.0.0.1:9/v1", max_in_flight=2, pools=4)
    with pytest.raises(ValueError, match="pools must be an int >= 1, got 0"):
        OpenAIChatModel("m", base_url="http://127.0.0.1:9/v1", pools=0)


async def test_a_turn_that_only_calls_tools_goes_with_empty_content_never_null(
    server: ModelServer, client: str
) -> None:
    """The server (strict like llama-cpp-python's) answers a null ``content`` with a 500:
    a message without text is sent as ``""``, so the tool round trip completes."""
    server.add(Respond(body=completion("fine")))
    history = (
        ChatMessage("user", "weather?"),
        ChatMessage("assistant", None, (ModelToolCall("c1", "weather", {"city": "Oslo"}),)),
        ChatMessage("tool", '{"celsius": 3}', tool_call_id="c1"),
    )
    async with make_model(server, client) as model:
        reply = await model.chat(ChatRequest(history))
    assert reply.text == "fine"
    assert [m["content"] for m in server.seen[0].body["messages"]] == ["weather?", "", '{"celsius": 3}']


async def test_a_context_overflow_is_context_too_long_with_its_sizes_and_not_retried(
    server: ModelServer,
    client: str,
) -> None:
    openai_style = error_body(
        "This model's maximum context length is 2048 tokens. However, you requested 2300 tokens "
        "(2044 in the messages, 256 in the completion). Please reduce the length of the messages."
    )
    openai_style["error"]["code"] = "context_length_exceeded"
    llama_cpp_style = {
        "error": {
            "code": 400,
            "message": "the request exceeds the available context size, try increasing it",
            "type": "exceed_context_size_error",
            "n_prompt_tokens": 5000,
            "n_ctx": 4096,
        }
    }
    server.add(Respond(400, openai_style), Respond(400, llama_cpp_style))
    async with make_model(server, client) as model:
        with pytest.raises(ContextTooLong) as first:
            await model.chat(ask())
        with pytest.raises(ContextTooLong) as second:
            await model.chat(ask())
    assert (first.value.limit, first.value.requested, first.value.status) == (2048, 2300, 400)
    assert "needed 2300 tokens of 2048" in str(first.value)
    assert (second.value.limit, second.value.requested) == (4096, 5000)
    assert isinstance(first.value, BadRequest)  # retrying the same request cannot help
    assert len(server.seen) == 2


async def test_a_500_saying_the_request_was_invalid_is_not_retried(server: ModelServer, client: str) -> None:
    invalid = error_body(
        "1 validation error for CreateChatCompletionRequest\nmessages.2.content\n  Input should be a "
        "valid string",
        "internal_server_error",
    )
    server.add(Respond(500, invalid, headers={"Retry-After": "0"}))
    server.add(*[Respond(500, error_body("out of memory", "server_error"), headers={"Retry-After": "0"})] * 3)
    async with make_model(server, client, max_retries=2) as model:
        with pytest.raises(BadRequest, match="refused the request as invalid") as refused:
            await model.chat(ask())
        assert len(server.seen) == 1  # not sent again: the same body cannot succeed
        with pytest.raises(Unavailable):  # an ordinary 500 is still retried
            await model.chat(ask())
    assert refused.value.status == 500
    assert len(server.seen) == 1 + 3


async def test_max_tokens_and_temperature_go_on_the_wire_per_model_or_per_request(
    server: ModelServer,
    client: str,
) -> None:
    server.add(Respond(body=completion("a")), Respond(body=completion("b")))
    async with make_model(server, client, max_tokens=64, temperature=0.5) as model:
        await model.chat(ask())
        await model.chat(ChatRequest((ChatMessage("user", "x"),), temperature=0.0, max_tokens=8))
    first, second = (seen.body for seen in server.seen)
    assert (first["max_tokens"], first["temperature"]) == (64, 0.5)
    assert (second["max_tokens"], second["temperature"]) == (8, 0.0)


async def test_a_cancelled_call_closes_its_connection_so_the_server_can_stop(
    server: ModelServer, client: str
) -> None:
    """An abandoned request does not leave the connection open for the server to keep
    generating into: the server sees the client hang up while it is still working."""
    server.add(Respond(body=completion("never read"), hold=True))
    async with make_model(server, client) as model:
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(model.chat, ask("a long story please"))
                await eventually(server.holding.is_set)
                tg.cancel_scope.cancel()
        await eventually(server.disconnected.is_set)
    assert not server._release.is_set()  # it hung up while the answer was still held back


async def test_a_model_that_refuses_max_tokens_or_temperature_gets_them_as_it_takes_them(
    server: ModelServer,
    client: str,
) -> None:
    """OpenAI's reasoning models answer 400 to ``max_tokens`` (use ``max_completion_tokens``)
    and to any temperature but theirs: the call goes again in the form they take, once,
    and every later call uses it."""
    no_max_tokens = error_body(
        "Unsupported parameter: 'max_tokens' is not supported with this model. "
        "Use 'max_completion_tokens' instead."
    )
    no_max_tokens["error"].update(param="max_tokens", code="unsupported_parameter")
    no_temperature = error_body(
        "Unsupported value: 'temperature' does not support 0.0 with this model. "
        "Only the default (1) value is supported."
    )
    no_temperature["error"].update(param="temperature", code="unsupported_value")
    server.add(Respond(400, no_max_tokens), Respond(400, no_temperature), Respond(body=completion("a")))
    server.add(Respond(body=completion("b")))
    async with make_model(server, client, max_retries=0) as model:
        request = ChatRequest((ChatMessage("user", "x"),), temperature=0.0, max_tokens=64)
        assert (await model.chat(request)).text == "a"
        assert (await model.chat(request)).text == "b"
    bodies = [seen.body for seen in server.seen]
    assert [("max_tokens" in b, b.get("max_completion_tokens"), b.get("temperature")) for b in bodies] == [
        (True, None, 0.0),
        (False, 64, 0.0),
        (False, 64, None),
        (False, 64, None),
    ]


# -- greenroom's own client: what a server may do on the wire ---------------------------------


async def _raw_server(
    answers: list[bytes], connections: list[int], *, task_status: anyio.abc.TaskStatus[int]
) -> None:
    """A bare TCP server: per connection, reads one request and writes the next of
    ``answers`` as it is, then closes the connection (no ``Connection: close`` said)."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)

    async def serve(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            connections.append(1)
            request = b""
            while b"\r\n\r\n" not in request:
                request += await stream.receive()
            head, _, body = request.partition(b"\r\n\r\n")
            sizes = [line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")]
            length = int(sizes[0].split(b":")[1])
            while len(body) < length:
                body += await stream.receive()
            await stream.send(answers.pop(0))

    async with listener:
        task_status.started(port)
        await listener.serve(serve)


def _http_answer(body: bytes, *, chunked: bool = False) -> bytes:
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
    if not chunked:
        return head + b"content-length: %d\r\n\r\n" % len(body) + body
    half = len(body) // 2
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (body[:half], body[half:]))
    return head + b"transfer-encoding: chunked\r\n\r\n" + chunks + b"0\r\n\r\n"


@asynccontextmanager
async def _raw_model(answers: list[bytes], connections: list[int]) -> AsyncIterator[OpenAIChatModel]:
    """greenroom's client, no retries, against :func:`_raw_server` giving ``answers``."""
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            port = await tg.start(_raw_server, answers, connections)
            async with OpenAIChatModel(
                "m", base_url=f"http://127.0.0.1:{port}/v1", max_retries=0, client="greenroom"
            ) as model:
                yield model
            tg.cancel_scope.cancel()


async def test_own_client_replaces_a_kept_alive_connection_the_server_closed() -> None:
    """The server closes each connection after one answer without saying so: the next
    call finds its idle connection closed and opens another — no error, no retry wait."""
    connections: list[int] = []
    answers = [_http_answer(msgspec.json.encode(completion(f"r{i}"))) for i in range(3)]
    async with _raw_model(answers, connections) as model:
        texts = [(await model.chat(ask())).text for _ in range(3)]
    assert texts == ["r0", "r1", "r2"] and len(connections) == 3


async def test_own_client_reads_a_chunked_answer_and_refuses_one_that_is_not_http() -> None:
    answers = [
        _http_answer(msgspec.json.encode(completion("in two chunks")), chunked=True),
        b"SMTP ready\r\n\r\n",
    ]
    async with _raw_model(answers, []) as model:
        assert (await model.chat(ask())).text == "in two chunks"
        with pytest.raises(Unavailable, match=r"failed: bad HTTP \(the answer is not valid HTTP/1\.1") as bad:
            await model.chat(ask())
    assert bad.value.kind == "bad HTTP"


def test_the_client_is_chosen_by_name_and_a_proxy_sends_calls_through_the_sdk(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(ValueError, match="client must be one of greenroom, openai, got 'curl'"):
        OpenAIChatModel("m", base_url="http://127.0.0.1:9/v1", client="curl")
    for name in (
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "NO_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
        "no_proxy",
    ):
        monkeypatch.delenv(name, raising=False)
    assert OpenAIChatModel("m", base_url="http://10.1.2.3:8000/v1").client == "greenroom"
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.internal:3128")
    assert (
        OpenAIChatModel("m", base_url="http://10.1.2.3:8000/v1").client == "openai"
    )  # greenroom's cannot proxy
    monkeypatch.setenv("NO_PROXY", "10.1.2.3")
    assert OpenAIChatModel("m", base_url="http://10.1.2.3:8000/v1").client == "greenroom"
    assert OpenAIChatModel("m", base_url="http://10.1.2.3:8000/v1", client="openai").client == "openai"


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"base_url": "ftp://x"}, "base_url"),
        ({"temperature": 3}, "temperature"),
        ({"client": "curl"}, "client"),
        ({"stream": "yes"}, "stream"),
        ({"keep_alive": 0}, "keep_alive"),
    ],
)
def test_a_bad_setting_of_the_model_is_refused_naming_the_field(
    options: dict[str, object], field: str
) -> None:
    from greenroom import InvalidInput

    with pytest.raises(InvalidInput) as refused:
        OpenAIChatModel("m", **options)  # type: ignore[arg-type]
    assert refused.value.field == field and field in str(refused.value)


def test_a_bad_tool_or_sandbox_setting_is_refused_naming_the_field() -> None:
    from greenroom import InvalidInput
    from greenroom.harness import Sandbox, Tool

    with pytest.raises(InvalidInput) as refused:
        Tool("no spaces here", lambda: None)
    assert refused.value.field == "name"
    with pytest.raises(InvalidInput) as refused:
        Tool("ok", lambda: None, risk="high")  # type: ignore[arg-type]
    assert refused.value.field == "risk"
    with pytest.raises(InvalidInput) as refused:
        Sandbox(rate_limit=5)  # type: ignore[arg-type]
    assert refused.value.field == "rate_limit"


async def test_an_unreachable_server_is_named_with_what_happened(client: str) -> None:
    import socket

    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}/v1"
    async with OpenAIChatModel("m", base_url=url, client=client, max_retries=0) as model:
        with pytest.raises(Unavailable) as whole:
            await model.chat(ask())
        with pytest.raises(Unavailable) as streamed:
            async with model.stream(ask()) as stream:
                await stream.read()
    for refused in (whole.value, streamed.value):
        assert refused.kind == "connection refused"
        assert f"cannot reach {url}: connection refused" in str(refused)
