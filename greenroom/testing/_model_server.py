"""``ModelServer``: a real HTTP server on 127.0.0.1 speaking the OpenAI chat-completions
protocol, for tests of code that calls a model (``OpenAIChatModel`` pointed at its
``url``), since tests have no network.

It runs in its own thread (so it works the same under asyncio and trio) and answers
from a queue of scripted responses. Each response is a ``Respond``: a status, a JSON
body, headers, and optionally ``hold`` — the handler then waits until the test calls
``release()`` before answering (a slow model), or until the client closes the
connection (then ``disconnected`` is set: the server would stop generating). Every
request is recorded.

A request that asks to ``stream`` gets its answer as Server-Sent Events, a piece (a word,
a fragment of a tool call) at a time, with ``[DONE]`` last and the usage chunk when it
asked for one (``stream_options.include_usage``); ``Respond`` sets the delays between
pieces, a break mid-way (``break_after``) and a refusal to stream (``refuse_stream``).
``disconnected`` is set when a streamed request's client hangs up before the end. With
``interrupt_streams``, a new request closes every stream in progress, as llama-cpp-python's
server does by default.

It is as strict as the strictest server we met: like llama-cpp-python's, it answers a
message whose ``content`` is not a string (``null``, or missing) with a 500 carrying
pydantic's "validation error" text, before looking at the scripted responses.
"""

from __future__ import annotations

import json
import re
import select
import socket
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Respond:
    """One scripted answer: ``status``, the JSON ``body`` (see :func:`completion`),
    ``headers``; ``hold`` waits for ``release()`` (or the client hanging up) first."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    hold: bool = False
    echo_auth: bool = False  # put the request's Authorization header in the error body
    first_token_delay: float = 0.0
    """Streamed: seconds before the first piece."""
    token_delay: float = 0.0
    """Streamed: seconds between pieces (a piece: a word of the text, a fragment of a call)."""
    break_after: int | None = None
    """Streamed: the connection is dropped after this many pieces (a stream broken mid-way)."""
    refuse_stream: bool | str = False
    """A streamed request is refused and this answer stays first in line for the next
    request: ``True``, with a 500 ("Automatic streaming tool choice is not supported");
    ``"empty"``, as llama-cpp-python 0.3 does: a 200 event stream that ends with no event."""
    stream_usage: bool = True
    """Streamed: send the usage chunk when the request asks for it (``stream_options``)."""
    ignore_stream: bool = False
    """Answer a streamed request whole (JSON), as servers that ignore ``stream`` do."""


@dataclass
class Seen:
    """A request the server received: its path, headers (lower-cased names) and JSON body."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]


def completion(
    text: str | None = None,
    tool_calls: list[tuple[str, str, str]] | None = None,
    prompt_tokens: int = 11,
    completion_tokens: int = 7,
) -> dict[str, Any]:
    """A chat.completion body: ``tool_calls`` as ``(id, name, arguments JSON text)``."""
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if tool_calls:
        message["tool_calls"] = [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
            for cid, name, args in tool_calls
        ]
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 1,
        "model": "test-model",
        "choices": [
            {"index": 0, "finish_reason": "tool_calls" if tool_calls else "stop", "message": message}
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def error_body(message: str, kind: str = "invalid_request_error") -> dict[str, Any]:
    """An OpenAI-style error body."""
    return {"error": {"message": message, "type": kind, "code": None}}


class ModelServer:
    """Use it as ``with ModelServer().running() as server:``; script answers with
    ``server.add(Respond(body=completion("hi")))``; read what was asked in ``server.seen``.
    A request with nothing scripted left gets a 500 saying so. ``running()`` stops the
    server (and releases held requests) when the block ends."""

    def __init__(self, *, interrupt_streams: bool = False) -> None:
        self.interrupt_streams = interrupt_streams
        """A new request closes every stream in progress (llama-cpp-python's default)."""
        self._streaming: set[socket.socket] = set()
        self.responses: deque[Respond] = deque()
        self.seen: list[Seen] = []
        self.holding = threading.Event()  # a held request has arrived
        self.disconnected = threading.Event()  # a held or streamed request's client hung up
        self.pieces_sent = 0  # pieces of streamed replies sent, in all
        self._release = threading.Event()
        self._wake_r, self._wake_w = socket.socketpair()  # release() wakes held handlers
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # as real servers do: a small piece goes out at once

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                with server._lock:
                    if server.interrupt_streams:
                        for other in server._streaming:
                            other.shutdown(socket.SHUT_RDWR)
                        server._streaming.clear()
                    server.seen.append(Seen(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                    invalid = _invalid_message(body)
                    if invalid is not None:
                        respond = Respond(500, error_body(invalid, "internal_server_error"))
                    elif server.responses:
                        respond = server.responses.popleft()
                        if respond.refuse_stream and body.get("stream"):
                            server.responses.appendleft(respond)
                            if respond.refuse_stream == "empty":
                                respond = Respond(200, {"choices": []}, refuse_stream="empty")
                            else:
                                respond = Respond(500, error_body(STREAM_REFUSAL, "internal_server_error"))
                    else:
                        respond = Respond(
                            500, error_body("the test server has no scripted response left", "server_error")
                        )
                if respond.hold:
                    server.holding.set()
                    if not self._wait_for_release():
                        server.disconnected.set()
                        return
                if (
                    body.get("stream")
                    and respond.status == 200
                    and isinstance(respond.body, dict)
                    and not respond.ignore_stream
                ):
                    with server._lock:
                        server._streaming.add(self.connection)
                    try:
                        self._stream(respond, body)
                    except OSError:
                        server.disconnected.set()
                    finally:
                        with server._lock:
                            server._streaming.discard(self.connection)
                    return
                payload = respond.body
                if respond.echo_auth:
                    payload = error_body(f"bad key: {self.headers.get('Authorization')}")
                data = json.dumps(payload).encode()
                try:
                    self.send_response(respond.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for name, value in respond.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (cancelled): that is what some tests want

            def _stream(self, respond: Respond, asked: dict[str, Any]) -> None:
                """The completion as Server-Sent Events, chunked, piece by piece."""
                usage = (asked.get("stream_options") or {}).get("include_usage") and respond.stream_usage
                events = [] if respond.refuse_stream == "empty" else _chunks(respond.body, bool(usage))
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Transfer-Encoding", "chunked")
                    for name, value in respond.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    sent = 0
                    for event, piece in events:
                        if piece:
                            if respond.break_after is not None and sent >= respond.break_after:
                                self.wfile.flush()
                                self.connection.shutdown(socket.SHUT_RDWR)
                                self.close_connection = True
                                return
                            delay = respond.first_token_delay if sent == 0 else respond.token_delay
                            if delay and self._client_left(delay):
                                server.disconnected.set()
                                return
                        data = f"data: {event}\n\n".encode()
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                        self.wfile.flush()
                        if piece:
                            sent += 1
                            with server._lock:
                                server.pieces_sent += 1
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    server.disconnected.set()

            def _client_left(self, seconds: float) -> bool:
                """Wait ``seconds``; True (at once) when the client hangs up meanwhile."""
                ready, _, _ = select.select([self.connection], [], [], seconds)
                return bool(ready) and not self.connection.recv(1, socket.MSG_PEEK)

            def _wait_for_release(self) -> bool:
                """Until ``release()`` (True) or the client hangs up (False), 30 s at most."""
                while not server._release.is_set():
                    ready, _, _ = select.select([self.connection, server._wake_r], [], [], 30)
                    if not ready:
                        return True
                    if self.connection in ready and not self.connection.recv(1, socket.MSG_PEEK):
                        return False
                return True

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def add(self, *responses: Respond) -> None:
        with self._lock:
            self.responses.extend(responses)

    def release(self) -> None:
        self._release.set()
        self._wake_w.send(b"x")

    @contextmanager
    def running(self) -> Iterator[ModelServer]:
        thread = threading.Thread(target=self._server.serve_forever, name="chat-server", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.release()
            self._server.shutdown()
            self._server.server_close()
            thread.join(10)
            self._wake_r.close()
            self._wake_w.close()


STREAM_REFUSAL = "Automatic streaming tool choice is not supported"
"""What llama-cpp-python's server (chatml-function-calling) answers a streamed request
with tools and tool choice ``auto``."""


def _chunks(body: dict[str, Any], usage: bool) -> list[tuple[str, bool]]:
    """A chat.completion body as the events of its stream: ``(data, is a piece)``; text
    by words, each tool call as its id and name, then its arguments in two fragments."""
    choice = body["choices"][0]
    message = choice.get("message") or {}
    base = {"id": body.get("id", "chatcmpl-test"), "object": "chat.completion.chunk",
            "created": body.get("created", 1), "model": body.get("model", "test-model")}  # fmt: skip

    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        return json.dumps({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    events = [(chunk({"role": "assistant", "content": ""}), False)]
    events += [
        (chunk({"content": piece}), True)
        for piece in re.findall(r"\s*\S+\s*|\s+", message.get("content") or "")
    ]
    for index, call in enumerate(message.get("tool_calls") or ()):
        function = call["function"]
        head = {"index": index, "id": call["id"], "type": "function",
                "function": {"name": function["name"], "arguments": ""}}  # fmt: skip
        events.append((chunk({"tool_calls": [head]}), True))
        arguments = function.get("arguments") or ""
        half = len(arguments) // 2
        for part in (arguments[:half], arguments[half:]):
            if part:
                events.append(
                    (chunk({"tool_calls": [{"index": index, "function": {"arguments": part}}]}), True)
                )
    events.append((chunk({}, choice.get("finish_reason") or "stop"), False))
    if usage and body.get("usage"):
        events.append((json.dumps({**base, "choices": [], "usage": body["usage"]}), False))
    events.append(("[DONE]", False))
    return events


def _invalid_message(body: Any) -> str | None:
    """llama-cpp-python's answer to a message whose content is not a string."""
    for index, message in enumerate(body.get("messages") or []):
        if not isinstance(message.get("content"), str):
            return (
                "1 validation error for CreateChatCompletionRequest\n"
                f"messages.{index}.content\n  Input should be a valid string"
            )
    return None
