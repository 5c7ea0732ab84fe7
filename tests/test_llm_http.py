"""The model client's HTTP: the ``Transport`` interface's two peers — greenroom's own
client (on asyncio's protocol fast path, and on anyio's streams) and the openai SDK's —
against a raw TCP server on 127.0.0.1 that writes each answer in pieces of a chosen size:
every split of the bytes reads the same, malformed chunks and sizes are refused, a silence
past the timeout breaks the stream, cancelling closes the connection. ``Exchange`` (the
``httptools`` parsing both greenroom paths share) is also fed every split directly."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
import pytest

import greenroom.llm._http as http
from greenroom import InvalidInput
from greenroom.llm._http import ConnectionFailed, Exchange
from greenroom.llm._transport import OriginTransport, SDKTransport, Transport

pytestmark = pytest.mark.anyio

HEADERS = ((b"content-type", b"application/json"), (b"accept", b"application/json"))
EVENTS = b"".join(b'data: {"n": %d}\n\n' % n for n in range(12)) + b"data: [DONE]\n\n"


def chunked(body: bytes, *, sizes: tuple[int, ...] = (1, 5, 16, 40), trailers: bytes = b"") -> bytes:
    """``body`` as a chunked answer: chunks of the sizes in turn (the first with an
    extension), then the last chunk and ``trailers``."""
    out, at, n = [], 0, 0
    while at < len(body):
        size = sizes[n % len(sizes)]
        part = body[at : at + size]
        ext = b";name=value" if n == 0 else b""
        out.append(b"%x%s\r\n%s\r\n" % (len(part), ext, part))
        at += size
        n += 1
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    return head + b"".join(out) + b"0\r\n" + trailers + b"\r\n"


def sized(body: bytes, status: int = 200) -> bytes:
    return b"HTTP/1.1 %d X\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
        status,
        len(body),
        body,
    )


@dataclass
class Stall:
    """Send ``first``, then nothing until the client hangs up."""

    first: bytes


@dataclass
class Close:
    """Send ``wire``, then close the connection."""

    wire: bytes


@dataclass
class Paced:
    """Send ``head``, then each of ``pieces`` ``gap`` seconds after the one before (a
    model making its reply), then close."""

    head: bytes
    pieces: list[bytes]
    gap: float


@dataclass
class RawServer:
    """Answers each request on a connection with the next of ``answers`` (bytes: kept
    open after), written ``split`` bytes a send."""

    answers: list[bytes | Stall | Close | Paced]
    split: int = 1 << 20
    port: int = 0
    connections: int = 0
    requests: list[bytes] = field(default_factory=list)
    hung_up: anyio.Event = field(default_factory=anyio.Event)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def handle(self, stream: anyio.abc.ByteStream) -> None:
        self.connections += 1
        buffer = b""
        async with stream:
            while True:
                try:
                    while b"\r\n\r\n" not in buffer:
                        buffer += await stream.receive()
                    head, _, rest = buffer.partition(b"\r\n\r\n")
                    found = re.search(rb"content-length: *(\d+)", head, re.IGNORECASE)
                    length = int(found.group(1)) if found else 0
                    while len(rest) < length:
                        rest += await stream.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    self.hung_up.set()
                    return
                self.requests.append(rest[:length])
                buffer = rest[length:]
                if not self.answers:
                    return
                answer = self.answers.pop(0)
                if isinstance(answer, Stall):
                    await stream.send(answer.first)
                    try:
                        while await stream.receive():
                            pass
                    except (anyio.EndOfStream, anyio.BrokenResourceError):
                        pass
                    self.hung_up.set()
                    return
                if isinstance(answer, Paced):
                    await stream.send(answer.head)
                    for piece in answer.pieces:
                        await anyio.sleep(answer.gap)
                        await stream.send(piece)
                    return
                wire = answer.wire if isinstance(answer, Close) else answer
                for at in range(0, len(wire), self.split):
                    await stream.send(wire[at : at + self.split])
                if isinstance(answer, Close):
                    return


@asynccontextmanager
async def serving(server: RawServer) -> AsyncIterator[RawServer]:
    async with anyio.create_task_group() as group:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
        server.port = listener.extra(anyio.abc.SocketAttribute.local_port)

        async def serve() -> None:
            async with listener:
                await listener.serve(server.handle)

        group.start_soon(serve)
        yield server
        group.cancel_scope.cancel()


TRANSPORTS = ("protocol", "streams", "sdk")


@pytest.fixture(params=TRANSPORTS)
def transport_kind(
    request: pytest.FixtureRequest, anyio_backend: object, monkeypatch: pytest.MonkeyPatch
) -> str:
    kind = str(request.param)
    if kind == "protocol" and "trio" in str(anyio_backend):
        pytest.skip("the protocol fast path is asyncio's; on trio the streams path is the one")
    monkeypatch.setattr(http, "ASYNCIO_FAST_PATH", kind == "protocol")
    return kind


@asynccontextmanager
async def transport(kind: str, server: RawServer) -> AsyncIterator[Transport]:
    made: Transport
    if kind == "sdk":
        import openai

        made = SDKTransport(openai.AsyncOpenAI(base_url=server.url, api_key="k", max_retries=0))
    else:
        made = OriginTransport(server.url, max_idle=10, headers=HEADERS)
    try:
        yield made
    finally:
        await made.aclose()


async def read_stream(made: Transport, timeout: float = 10.0) -> tuple[int, bytes]:
    async with made.stream("/chat/completions", b"{}", timeout) as body:
        return body.status, await body.read()


def splits(wire: bytes) -> Iterator[int]:
    yield from (1, 2, 3, 7, 64, len(wire))


# -- Exchange: the parsing both greenroom paths share ---------------------------------------


def test_an_answer_parses_the_same_however_the_reads_split_it() -> None:
    """Chunk extensions, trailers, a 100 Continue before the answer: every split of the
    bytes (one at a time included) gives the same head, body and end."""
    wire = b"HTTP/1.1 100 Continue\r\n\r\n" + chunked(EVENTS, trailers=b"X-Trailer: t\r\n")
    for size in range(1, len(wire) + 1):
        exchange, body = Exchange(), []
        for at in range(0, len(wire), size):
            exchange.feed(wire[at : at + size])
            body.append(exchange.take())
        assert exchange.failure is None, size
        assert (exchange.status, exchange.headers["content-type"]) == (200, "text/event-stream"), size
        assert "x-trailer" not in exchange.headers, size
        assert b"".join(body) == EVENTS and exchange.ended and exchange.reusable(), size


def test_bytes_past_the_end_of_an_answer_keep_it_but_not_its_connection() -> None:
    for extra in (b"HTTP/1.1 200 OK\r\n", b"garbage"):
        exchange = Exchange()
        exchange.feed(sized(b"{}") + extra)
        assert exchange.take() == b"{}" and exchange.ended and exchange.failure is None
        assert not exchange.reusable(), extra


MALFORMED = [
    (b"zz\r\nhello\r\n", "chunk size"),
    (b"0x5\r\nhello\r\n", "chunk size"),
    (b"-1\r\n", "chunk size"),
    (b"3\r\nabcXY", "after chunk data"),
    (b"fffffffffffffffffffff\r\n", "chunk size"),
]
"""Chunked bodies that are not chunked encoding, and a word of what llhttp says of each."""


@pytest.mark.parametrize(("body", "said"), MALFORMED)
def test_a_malformed_chunked_body_is_refused_saying_why(body: bytes, said: str) -> None:
    exchange = Exchange()
    exchange.feed(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + body)
    assert exchange.failure is not None and exchange.failure.kind == "bad HTTP"
    assert "not valid HTTP/1.1" in str(exchange.failure) and said in str(exchange.failure).lower()


def test_a_header_that_would_break_the_request_is_refused_naming_it() -> None:
    with pytest.raises(InvalidInput) as refused:
        http.check_headers([(b"x-key", b"abc\r\nx-evil: 1")])
    assert refused.value.field == "headers" and "x-key" in str(refused.value)
    with pytest.raises(InvalidInput) as refused:
        http.check_headers([(b"bad name", b"v")])
    assert refused.value.field == "headers"
    from greenroom.llm import OpenAIChatModel

    with pytest.raises(InvalidInput) as refused:
        OpenAIChatModel("m", base_url="http://127.0.0.1:9/v1", api_key="sk-secret\n")
    assert refused.value.field == "api_key" and "sk-secret" not in str(refused.value)


# -- the transports, over a real connection ------------------------------------------------


@pytest.mark.parametrize("split", [1, 2, 3, 7, 64, 1 << 20])
async def test_a_streamed_body_reads_the_same_however_the_server_splits_it(
    transport_kind: str, split: int
) -> None:
    """The server writes the answer ``split`` bytes a send; the body read is the events
    whole, and the connection carries the next request."""
    wire = chunked(EVENTS, trailers=b"X-Trailer: t\r\n")
    async with (
        serving(RawServer([wire, sized(b'{"again": true}')], split=split)) as server,
        transport(transport_kind, server) as made,
    ):
        with anyio.fail_after(20):
            assert await read_stream(made) == (200, EVENTS)
            again = await made.post("/chat/completions", b"{}", 10.0)
        if isinstance(made, OriginTransport):  # the path asked for is the one taken
            kept = type(made.client._idle[0]).__name__
            assert kept == ("ProtocolConnection" if transport_kind == "protocol" else "StreamConnection")
    assert (again.status, again.body) == (200, b'{"again": true}')
    assert server.connections == 1 and len(server.requests) == 2


@pytest.mark.parametrize(("body", "said"), MALFORMED)
async def test_a_malformed_chunked_body_breaks_the_stream_on_every_transport(
    transport_kind: str, body: bytes, said: str
) -> None:
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    async with serving(RawServer([Close(head + body)])) as server, transport(transport_kind, server) as made:
        with anyio.fail_after(10), pytest.raises(ConnectionFailed) as refused:
            await read_stream(made)
    assert refused.value.kind == "bad HTTP", str(refused.value)


async def test_an_answer_that_is_not_http_is_refused(transport_kind: str) -> None:
    async with (
        serving(RawServer([Close(b"SMTP ready\r\n\r\n")])) as server,
        transport(transport_kind, server) as made,
    ):
        with anyio.fail_after(10), pytest.raises(ConnectionFailed) as refused:
            await made.post("/chat/completions", b"{}", 10.0)
    assert refused.value.kind == "bad HTTP"


async def test_a_body_cut_short_is_an_error_saying_so(transport_kind: str) -> None:
    async with (
        serving(RawServer([Close(sized(b"x" * 100)[:-90])])) as server,
        transport(transport_kind, server) as made,
    ):
        with anyio.fail_after(10), pytest.raises(ConnectionFailed) as cut:
            await read_stream(made)
    assert cut.value.kind == "closed mid-answer", str(cut.value)


async def test_a_body_delimited_by_the_connection_is_read_whole_and_not_reused(transport_kind: str) -> None:
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n"
    async with (
        serving(RawServer([Close(head + b'{"to": "the end"}'), sized(b"{}")])) as server,
        transport(transport_kind, server) as made,
    ):
        with anyio.fail_after(10):
            whole = await made.post("/chat/completions", b"{}", 10.0)
            after = await made.post("/chat/completions", b"{}", 10.0)
    assert whole.body == b'{"to": "the end"}' and after.body == b"{}"
    assert server.connections == 2


async def test_a_silence_longer_than_the_timeout_breaks_the_stream(transport_kind: str) -> None:
    """One event, then nothing: the next read raises ``TimeoutError`` no sooner than the
    timeout, and leaving the stream hangs up on the server."""
    first = chunked(b"data: {}\n\n")[: -len(b"0\r\n\r\n")]
    async with serving(RawServer([Stall(first)])) as server, transport(transport_kind, server) as made:
        with anyio.fail_after(20):
            async with made.stream("/chat/completions", b"{}", 0.4) as body:
                got = b""
                while len(got) < len(b"data: {}\n\n"):  # the SDK gives a chunk a read
                    got += await body.receive()
                assert got == b"data: {}\n\n"
                waited = anyio.current_time()
                with pytest.raises(TimeoutError):
                    await body.receive()
                assert anyio.current_time() - waited >= 0.4
            await server.hung_up.wait()


async def test_a_steady_stream_longer_than_the_timeout_is_not_cut(transport_kind: str) -> None:
    """Pieces every 0.1 s for well past a 0.3 s timeout: the silence bound is per silence."""
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    event = b"data: {}\n\n"
    piece = b"%x\r\n%s\r\n" % (len(event), event)

    paced = Paced(head, [piece] * 12 + [b"0\r\n\r\n"], gap=0.1)
    async with serving(RawServer([paced])) as server, transport(transport_kind, server) as made:
        with anyio.fail_after(20):
            assert await read_stream(made, timeout=0.3) == (200, event * 12)


async def test_cancelling_a_stream_closes_its_connection(transport_kind: str) -> None:
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    async with serving(RawServer([Stall(head)])) as server, transport(transport_kind, server) as made:
        with anyio.fail_after(20):
            with anyio.CancelScope() as scope:
                async with made.stream("/chat/completions", b"{}", 30.0) as body:
                    scope.cancel()
                    await body.receive()
            assert scope.cancelled_caught
            await server.hung_up.wait()


async def test_a_large_body_read_slowly_arrives_whole(transport_kind: str) -> None:
    """More than the protocol path holds unread (it stops reading, then goes on)."""
    big = bytes(range(256)) * (3 * http.HIGH_WATER // 256)
    async with (
        serving(RawServer([sized(big)], split=1 << 16)) as server,
        transport(transport_kind, server) as made,
    ):
        with anyio.fail_after(30):
            async with made.stream("/chat/completions", b"{}", 10.0) as body:
                parts = []
                while data := await body.receive():
                    parts.append(data)
                    await anyio.lowlevel.checkpoint()
    assert b"".join(parts) == big


async def test_a_kept_alive_connection_the_server_closed_is_replaced(transport_kind: str) -> None:
    """The server closes each connection after its answer without saying so: the next
    request opens another — no error."""
    answers: list[Any] = [Close(sized(b'{"n": %d}' % n)) for n in range(3)]
    async with serving(RawServer(answers)) as server, transport(transport_kind, server) as made:
        with anyio.fail_after(20):
            bodies = [(await made.post("/chat/completions", b"{}", 10.0)).body for _ in range(3)]
    assert bodies == [b'{"n": 0}', b'{"n": 1}', b'{"n": 2}'] and server.connections == 3
