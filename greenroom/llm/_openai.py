"""``OpenAIChatModel``: any OpenAI-compatible chat-completions server (OpenAI itself,
vLLM, Ollama, llama.cpp, ...), through greenroom's own HTTP/1.1 client (``_http``) or
the ``openai`` SDK's ``AsyncOpenAI`` — the same requests, retries and errors either way."""

from __future__ import annotations

import email.utils
import logging
import os
import random
import re
import time
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio
import httpx2
import msgspec

from .._checks import check_int, check_seconds
from .._errors import InvalidInput
from ..messages import ChatDelta, ChatMessage, ChatReply, ChatRequest, Usage
from ._errors import BadRequest, ContextTooLong, ModelError, RateLimited, TimedOut, Unavailable
from ._http import Answer, ConnectionFailed
from ._price import Price
from ._protocol import ClosingModel
from ._scripted import estimate_usage
from ._sse import EventDecoder, ReplyAssembler, decode_chunk, parse_arguments
from ._stream import ChatStream, Pull, StreamBroken, once, reply_deltas
from ._transport import Body, OriginTransport, SDKTransport, Transport

if TYPE_CHECKING:  # imported when a model is made: a command that makes none never pays for it
    pass

logger = logging.getLogger("greenroom.llm")

API_KEY_ENV = "OPENAI_API_KEY"
BASE_URL_ENV = "OPENAI_BASE_URL"
MODEL_ENV = "OPENAI_MODEL"
DEFAULT_BASE_URL = "https://api.openai.com/v1"
"""Where calls go with no base URL given (the SDK's default too)."""
NO_KEY = "no-key"
"""Sent when no key is configured: local servers (Ollama, llama.cpp, vLLM) ignore it."""

_RETRIED_STATUSES = frozenset({408, 500, 502, 503, 504})

_CONTEXT_OVERFLOW = re.compile(
    r"context[ _-]?(length|window|size)|maximum context|too many tokens|prompt is too long"
    r"|exceeds? (the )?(available )?context",
    re.IGNORECASE,
)
"""How servers say a request does not fit the model's window (OpenAI, vLLM and
llama-cpp-python: ``context_length_exceeded``; llama.cpp: ``exceed_context_size_error``;
Ollama: "exceeds the context length")."""
_CONTEXT_LIMIT = re.compile(r"(?:maximum context length is|context (?:window|size|length) of) (\d+)", re.I)
_CONTEXT_REQUESTED = re.compile(r"(?:requested|resulted in) (\d+) tokens", re.IGNORECASE)
_INVALID_REQUEST = re.compile(
    r"validation error|input should be|field required|invalid[ _]request|is not valid|unprocessable",
    re.IGNORECASE,
)
"""A 500 whose text says the request itself was invalid (llama-cpp-python answers a body
its schema refuses with a 500 carrying pydantic's "validation error"): sending the same
body again cannot succeed, so it is not retried."""


def _wire_message(message: ChatMessage) -> dict[str, Any]:
    # ``content`` is always a string: an assistant turn that only calls tools goes as "",
    # never null (llama-cpp-python's server refuses a null with a 500; OpenAI takes both)
    content = message.content
    wire: dict[str, Any] = {"role": message.role, "content": "" if content is None else content}
    if message.tool_calls:
        wire["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": msgspec.json.encode(call.arguments).decode()},
            }
            for call in message.tool_calls
        ]
    if message.tool_call_id is not None:
        wire["tool_call_id"] = message.tool_call_id
    return wire


class _WireFunction(msgspec.Struct):
    name: str = ""
    arguments: str | None = None


class _WireCall(msgspec.Struct):
    id: str = ""
    type: str = "function"
    function: _WireFunction = msgspec.field(default_factory=_WireFunction)


class _WireMessage(msgspec.Struct):
    content: str | None = None
    tool_calls: list[_WireCall] | None = None


class _WireChoice(msgspec.Struct):
    message: _WireMessage = msgspec.field(default_factory=_WireMessage)
    finish_reason: str | None = None


class _WireUsage(msgspec.Struct):
    prompt_tokens: int | None = 0
    completion_tokens: int | None = 0


class _WireCompletion(msgspec.Struct):
    """The fields of a chat completion we read (others are ignored), decoded by msgspec
    straight from the response bytes."""

    choices: list[_WireChoice] = []
    usage: _WireUsage | None = None


_completion_decoder = msgspec.json.Decoder(_WireCompletion)
_encode = msgspec.json.Encoder().encode


def _proxied(url: str) -> bool:
    """Whether the environment sends ``url`` through a proxy (``HTTPS_PROXY`` and the
    like, minus ``NO_PROXY``), as the SDK's httpx client would."""
    parts = urllib.parse.urlsplit(url)
    proxies = urllib.request.getproxies()
    if not (proxies.get(parts.scheme) or proxies.get("all")):
        return False
    return not urllib.request.proxy_bypass(parts.hostname or "")


def _version() -> str:
    from .. import __version__

    return __version__


def retry_after_seconds(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """The wait a 429/503 asks for: ``retry-after-ms``, or ``Retry-After`` in seconds or
    as an HTTP date. ``None`` when absent or unreadable."""
    value = headers.get("retry-after-ms")
    if value is not None:
        try:
            return max(0.0, float(value) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _context_too_long(model: str, status: int, text: str, body: object) -> ContextTooLong:
    """The overflow error, with the window and the request's size when the server gave
    them (in its text, or as llama.cpp's ``n_ctx`` / ``n_prompt_tokens``)."""
    fields = body if isinstance(body, dict) else {}

    def number(key: str, pattern: re.Pattern[str]) -> int | None:
        value = fields.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
        found = pattern.search(text)
        return int(found.group(1)) if found else None

    limit = number("n_ctx", _CONTEXT_LIMIT)
    requested = number("n_prompt_tokens", _CONTEXT_REQUESTED)
    sizes = "".join(
        [f" (needed {requested} tokens" if requested else "", f" of {limit}" if limit and requested else ""]
    )
    sizes += ")" if requested else (f" (the window is {limit} tokens)" if limit else "")
    return ContextTooLong(
        f"{model}: the request does not fit the model's context window{sizes} (HTTP {status}): {text[:300]}",
        status=status,
        limit=limit,
        requested=requested,
    )


class _StatusError:
    """An HTTP error answer as the retry rules read it, the same from either client: the
    status, the OpenAI-style error fields (``code``, ``param``, ``type``: from the body's
    ``error`` object), the SDK's ``message`` ("Error code: N - <message>"), the body and
    the headers (names lower-cased)."""

    __slots__ = ("body", "code", "headers", "message", "param", "status_code", "type")

    def __init__(self, status: int, body: object, message: str, headers: Mapping[str, str]) -> None:
        self.status_code = status
        self.body = body
        self.message = message
        self.headers = headers
        fields = body if isinstance(body, dict) else {}
        code = fields.get("code")
        self.code = str(code) if code is not None else None
        self.param: Any = fields.get("param")
        self.type: Any = fields.get("type")

    @classmethod
    def from_answer(cls, answer: Answer) -> _StatusError:
        """What the SDK makes of the same answer (``_make_status_error_from_response``)."""
        message = f"Error code: {answer.status}"
        text = answer.body.decode("utf-8", "replace").strip()
        body: object = text
        try:
            body = msgspec.json.decode(text)
        except msgspec.DecodeError:
            pass
        else:
            inner = body.get("error", body) if isinstance(body, dict) else None
            said = inner.get("message") if isinstance(inner, dict) else None
            if isinstance(said, str) and said:
                message += f" - {said}"
            if isinstance(body, dict):
                body = body.get("error", body)
        return cls(answer.status, body, message, answer.headers)


_STREAM_REFUSED = re.compile(
    r"stream(ing)?\b.*\bnot (be )?supported|not support\w* stream|cannot stream", re.IGNORECASE
)
"""How a server says it does not stream a request (llama-cpp-python: "Automatic streaming
tool choice is not supported")."""


def _shape(request: ChatRequest) -> tuple[bool, str]:
    """What a server's refusal to stream is about: tools offered, and the tool choice."""
    return (bool(request.tools), request.tool_choice if request.tools else "")


def _cut_kind(error: ConnectionFailed) -> str:
    """A stream's connection that failed: an answer that is not HTTP says so; anything else
    cut the stream."""
    return "bad HTTP" if error.kind == "bad HTTP" else "stream cut"


def _said(error: object) -> str:
    """An error object's message (an OpenAI-style ``{"message": ...}``, or as it is)."""
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])[:300]
    return str(error)[:300]


class _Whole:
    """What a streamed call falls back on: the request sent whole (a server that refused
    to stream it), or an answer that came whole (a server that ignores ``stream``)."""

    __slots__ = ("model", "params", "per_call", "request")

    def __init__(
        self, model: OpenAIChatModel, request: ChatRequest, params: dict[str, Any], per_call: float
    ) -> None:
        self.model = model
        self.request = request
        self.params = params
        self.per_call = per_call

    async def refused(self, cause: str) -> Sequence[ChatDelta]:
        self.model._refused(self.request, cause)
        return reply_deltas(await self.model._attempts(self.request, self.params, self.per_call))

    def answered(self, body: bytes) -> Sequence[ChatDelta]:
        self.model._note(
            "the server answered streamed requests whole (their first token is their whole reply)"
        )
        return reply_deltas(self.model._reply(self.request, self.model._completion(body)))


CLIENTS = ("greenroom", "openai")
"""The transports ``OpenAIChatModel`` can send through: greenroom's own HTTP client
(:class:`OriginTransport`) or the ``openai`` SDK's ``AsyncOpenAI`` (:class:`SDKTransport`)."""


class OpenAIChatModel(ClosingModel):
    """A chat model behind an OpenAI-compatible endpoint.

    ``model``, ``base_url`` and ``api_key`` come from the arguments, else from
    ``OPENAI_MODEL``, ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY`` (no base URL: the
    SDK's default, OpenAI; no key: a placeholder local servers accept). The key is
    never logged and never appears in an exception or in ``repr``.

    ``client``: ``"greenroom"`` (the default) sends each call through greenroom's own
    HTTP/1.1 client — keep-alive connections over anyio streams, a fraction of the SDK's
    CPU per call; ``"openai"`` through the SDK's ``AsyncOpenAI`` (the reference: the test
    suite runs every behaviour on both). A proxy configured for the endpoint in the
    environment (``HTTPS_PROXY`` and the like) sends calls through the SDK, which speaks
    to proxies. Either way the request body is the same JSON, retried, timed out, mapped
    to errors and cancelled alike.

    ``timeout``: seconds one attempt may take (per call, overridable in ``chat``): on
    greenroom's client, the whole attempt (connect, send, the answer read whole); on the
    SDK's, each phase of it.
    A 429 is retried after the ``Retry-After`` the server gave (or a backoff), a 5xx,
    408 or a connection failure after an exponential backoff; at most ``max_retries``
    retries, and never a wait longer than ``max_retry_wait`` (then ``RateLimited`` /
    ``Unavailable`` at once). A timeout is not retried. Errors are mapped to
    :class:`RateLimited`, :class:`TimedOut`, :class:`Unavailable` and
    :class:`BadRequest`.

    ``max_in_flight``: admission control. At most that many calls are in flight at once
    to this endpoint; the others wait in FIFO order (a cancelled waiter leaves the line),
    and the connection pool is sized to match. ``None``: no bound (the SDK's pool of up
    to 1,000 connections). Under many concurrent conversations a bound keeps the HTTP
    client's per-request work from growing with the number of requests waiting.
    ``pools``: split those connections over this many HTTP clients, used in turn (a
    pool's bookkeeping per request grows with its size; 8 pools of 8 cost less than one
    of 64 — measured on trio in ``python -m benchmarks chat``). ``price``: what its tokens cost
    (:class:`Price`), so harnesses and the chat engine count spend in money too.

    ``keep_alive``: idle connections kept open (per pool) for the next calls (default:
    ``max_in_flight``, or 100); a load generator with thousands of users in flight keeps one
    for each, or every wave of replies closes connections the next wave opens again.

    ``stream``: whether :meth:`stream` asks the server to stream (``False``: each call is
    sent whole and given as one piece, for a server known to stream badly; a server that
    refuses or interrupts streams is also detected and used whole, said once in the log).
    ``fallbacks``: whether it does that detecting — right for an agent, which wants its
    reply. A load generator, whose job is to measure what the server does, passes
    ``False``: a streamed request then stays streamed whatever other streams met, and a
    stream cut, empty or refused is an error of its kind (:attr:`ModelError.kind`).
    Either way the rewrites a server's refusal of a field makes (the token field's name,
    the temperature, ``stream_options``) are listed in :attr:`compatibility`.

    Cancellation stops the call in flight (and any retry wait, or a wait for admission)
    at once. Close it with ``aclose()`` or ``async with``: an unclosed client leaks its
    connections (and warns under trio).
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 3,
        max_retry_wait: float = 60.0,
        temperature: float | None = None,
        max_tokens: int | None = None,
        max_in_flight: int | None = None,
        pools: int = 1,
        price: Price | None = None,
        client: str = "greenroom",
        stream: bool = True,
        keep_alive: int | None = None,
        fallbacks: bool = True,
    ) -> None:
        model = model if model is not None else os.environ.get(MODEL_ENV)
        if not isinstance(model, str) or not model.strip():
            raise InvalidInput(
                f"OpenAIChatModel model must be a non-empty string (or set {MODEL_ENV}), got {model!r}",
                field="model",
                value=model,
            )
        base_url = base_url if base_url is not None else os.environ.get(BASE_URL_ENV) or None
        if base_url is not None and (
            not isinstance(base_url, str) or not base_url.startswith(("http://", "https://"))
        ):
            raise InvalidInput(
                f"OpenAIChatModel base_url must be an http(s) URL, got {base_url!r}", field="base_url"
            )
        if api_key is not None and not isinstance(api_key, str):
            raise InvalidInput("OpenAIChatModel api_key must be a string", field="api_key")
        if api_key is not None and any(c in api_key for c in "\r\n\0"):
            raise InvalidInput(  # the value is a secret: named, never shown
                "OpenAIChatModel api_key must not hold a line break or NUL", field="api_key"
            )
        if temperature is not None and (
            isinstance(temperature, bool)
            or not isinstance(temperature, (int, float))
            or not 0 <= temperature <= 2
        ):
            raise InvalidInput(
                f"OpenAIChatModel temperature must be a number in [0, 2], got {temperature!r}",
                field="temperature",
            )
        if price is not None and not isinstance(price, Price):
            raise InvalidInput(
                f"OpenAIChatModel price must be a greenroom.llm.Price, got {price!r}", field="price"
            )
        if client not in CLIENTS:
            raise InvalidInput(
                f"OpenAIChatModel client must be one of {', '.join(CLIENTS)}, got {client!r}", field="client"
            )
        if client == "greenroom" and _proxied(base_url or DEFAULT_BASE_URL):
            logger.info("%s: a proxy is configured for %s: calls go through the openai SDK", model, base_url)
            client = "openai"
        self.client = client
        """Which HTTP client sends the calls (``"openai"`` when a proxy is configured for
        the endpoint: greenroom's own client does not speak to proxies)."""
        self.model = model
        self.base_url = base_url
        self.price = price
        """What this model's tokens cost (``None``: not known; spend is then counted in tokens)."""
        self.timeout = check_seconds("OpenAIChatModel", "timeout", timeout)
        self.max_retries = check_int("OpenAIChatModel", "max_retries", max_retries, minimum=0)
        self.max_retry_wait = check_seconds("OpenAIChatModel", "max_retry_wait", max_retry_wait, zero_ok=True)
        self.temperature = temperature
        self.max_tokens = (
            None if max_tokens is None else check_int("OpenAIChatModel", "max_tokens", max_tokens)
        )
        self._key = api_key or os.environ.get(API_KEY_ENV) or NO_KEY
        self.max_in_flight = (
            None if max_in_flight is None else check_int("OpenAIChatModel", "max_in_flight", max_in_flight)
        )
        self.pools = check_int("OpenAIChatModel", "pools", pools)
        self.keep_alive = (
            None if keep_alive is None else check_int("OpenAIChatModel", "keep_alive", keep_alive)
        )
        if self.pools > 1 and (self.max_in_flight is None or self.max_in_flight < self.pools):
            raise InvalidInput(
                f"OpenAIChatModel pools={pools} needs max_in_flight >= pools, got {max_in_flight!r}",
                field="max_in_flight",
                value=max_in_flight,
            )
        self._no_stream_options = False  # the server refused stream_options
        self._whole_shapes: set[tuple[bool, str]] = set()  # request shapes the server does not stream
        self._sent = 0  # requests this model sent (attempts, whole or streamed), in all
        if not isinstance(stream, bool):
            raise InvalidInput(
                f"OpenAIChatModel stream must be true or false, got {stream!r}", field="stream"
            )
        self.streams = stream
        """Whether ``stream`` asks the server to stream (``False``: every call is sent
        whole, its reply given as one piece — for a server known to stream badly)."""
        self._no_streams = not stream  # or: the server breaks a stream when another request arrives
        if not isinstance(fallbacks, bool):
            raise InvalidInput(
                f"OpenAIChatModel fallbacks must be true or false, got {fallbacks!r}", field="fallbacks"
            )
        self.fallbacks = fallbacks
        """Whether a server that refuses, cuts or interrupts streams gets requests whole
        from then on (``False``: every streamed request stays streamed; a cut is an error)."""
        self.compatibility: list[str] = []
        """What this model changed in its requests because the server refused something
        (each said once, in the order it happened): what a report of the run lists."""
        self._tokens_field = "max_tokens"  # or max_completion_tokens, once the server asked for it
        self._no_temperature = False  # the server takes only its default temperature
        self._admission: anyio.CapacityLimiter | None = None  # made on first use, in the loop
        self._headers = (
            (b"content-type", b"application/json"),
            (b"accept", b"application/json"),
            (b"authorization", f"Bearer {self._key}".encode("latin-1", "replace")),
            (b"user-agent", f"greenroom/{_version()}".encode("ascii")),
        )
        self._transports = [self._make_transport(base_url) for _ in range(self.pools)]
        self._next = 0
        self.closed = False

    def _make_transport(self, base_url: str | None) -> Transport:
        size = None if self.max_in_flight is None else -(-self.max_in_flight // self.pools)
        idle = None if self.keep_alive is None else -(-self.keep_alive // self.pools)
        if self.client == "greenroom":
            return OriginTransport(
                base_url or DEFAULT_BASE_URL, max_idle=idle or size or 100, headers=self._headers
            )
        import openai

        http_client = None
        if size is not None or idle is not None:
            limits = httpx2.Limits(max_connections=size, max_keepalive_connections=idle or size)
            http_client = openai.DefaultAsyncHttpxClient(limits=limits)
        # retries are ours (bounded, Retry-After aware, mapped to our errors): the SDK's are off
        return SDKTransport(
            openai.AsyncOpenAI(
                api_key=self._key,
                base_url=base_url,
                max_retries=0,
                timeout=self.timeout,
                http_client=http_client,
            )
        )

    def __repr__(self) -> str:
        return f"OpenAIChatModel(model={self.model!r}, base_url={self.base_url!r})"

    def _redact(self, text: str) -> str:
        if self._key != NO_KEY and len(self._key) >= 4:
            text = text.replace(self._key, "[redacted]")
        return text

    async def chat(self, request: ChatRequest, *, timeout: float | None = None) -> ChatReply:
        """One chat completion (see the class doc for retries, timeouts, cancellation)."""
        if self.closed:
            raise RuntimeError("OpenAIChatModel.chat() after aclose()")
        per_call = (
            self.timeout if timeout is None else check_seconds("OpenAIChatModel.chat", "timeout", timeout)
        )
        params = self._params(request)
        if self.max_in_flight is not None:
            async with self._admitted():  # FIFO: the longest-waiting call goes first
                return await self._attempts(request, params, per_call)
        return await self._attempts(request, params, per_call)

    def _admitted(self) -> anyio.CapacityLimiter:
        assert self.max_in_flight is not None
        admission = self._admission
        if admission is None:
            admission = self._admission = anyio.CapacityLimiter(self.max_in_flight)
        return admission

    def _params(self, request: ChatRequest) -> dict[str, Any]:
        """The request's wire body (without ``stream``)."""
        params: dict[str, Any] = {
            "model": self.model,
            "messages": [_wire_message(m) for m in request.messages],
        }
        if request.tools:
            params["tools"] = [
                {
                    "type": "function",
                    "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
                }
                for t in request.tools
            ]
            params["tool_choice"] = request.tool_choice
        temperature = request.temperature if request.temperature is not None else self.temperature
        if temperature is not None:
            params["temperature"] = temperature
        max_tokens = request.max_tokens if request.max_tokens is not None else self.max_tokens
        if max_tokens is not None:
            params[self._tokens_field] = max_tokens
        if self._no_temperature:
            params.pop("temperature", None)
        return params

    async def _attempts(self, request: ChatRequest, params: dict[str, Any], per_call: float) -> ChatReply:
        attempt = 0
        while True:
            transport = self._transports[self._next]
            self._next = (self._next + 1) % self.pools
            self._sent += 1
            body, status_error, failure = await self._post(transport, params, per_call)
            if body is not None:
                return self._reply(request, self._completion(body))
            if status_error is not None and self._adapt(status_error, params):
                continue  # the same request in the form this model takes: not a retry
            attempt = await self._retry_after(status_error, failure, attempt)

    def _completion(self, body: bytes) -> _WireCompletion:
        try:
            return _completion_decoder.decode(body)
        except msgspec.DecodeError as error:
            raise Unavailable(
                f"{self.model}: the server answered something that is not a chat completion ({error}): "
                f"{body[:200]!r}",
                kind="bad JSON",
            ) from None

    async def _retry_after(
        self, status_error: _StatusError | None, failure: ModelError | None, attempt: int
    ) -> int:
        """After a failed attempt: raise its error when it is not to be retried, else wait
        the backoff (or what the server asked for) and return the next attempt's number."""
        wait: float | None
        if status_error is not None:
            wait, failure = self._judge_status(status_error, attempt)
        else:  # the server could not be reached
            wait = self._backoff(attempt)
        assert failure is not None
        if wait is None or attempt >= self.max_retries or wait > self.max_retry_wait:
            raise failure
        attempt += 1
        logger.warning("%s; retry %d/%d in %.2fs", failure, attempt, self.max_retries, wait)
        await anyio.sleep(wait)
        return attempt

    async def _post(
        self, transport: Transport, params: dict[str, Any], per_call: float
    ) -> tuple[bytes | None, _StatusError | None, ModelError | None]:
        """One attempt: the completion's bytes, or the error answer, or the failure to
        reach the server (one of the three)."""
        try:
            answer = await transport.post("/chat/completions", _encode(params), per_call)
        except TimeoutError:
            raise TimedOut(f"{self.model}: no answer within {per_call:g}s") from None
        except ConnectionFailed as error:
            return None, None, self._unreachable(error)
        if 200 <= answer.status < 300:
            return answer.body, None, None
        return None, _StatusError.from_answer(answer), None

    def stream(
        self, request: ChatRequest, *, timeout: float | None = None
    ) -> AbstractAsyncContextManager[ChatStream]:
        """The reply as the server makes it (:class:`ChatStream`), asked for with
        ``stream`` and ``stream_options.include_usage`` (usage estimated when the server
        sends none).

        Retries as :meth:`chat` does, only before the first byte of the answer; after it a
        break (the connection drops, an error event, ``timeout`` seconds with no data) raises
        :class:`StreamBroken` with what arrived. ``timeout`` bounds the wait for the first
        byte and each silence after it. A server that refuses to stream a request (as
        llama-cpp-python refuses tools with tool choice ``auto``) gets it, and every later
        request of that shape, whole — said once in the log. Leaving the block early or
        being cancelled closes the connection at once.
        """
        return self._stream(request, timeout)

    @asynccontextmanager
    async def _stream(self, request: ChatRequest, timeout: float | None) -> AsyncIterator[ChatStream]:
        if self.closed:
            raise RuntimeError("OpenAIChatModel.stream() after aclose()")
        per_call = (
            self.timeout if timeout is None else check_seconds("OpenAIChatModel.stream", "timeout", timeout)
        )
        opened = anyio.current_time()  # the client's own wait for admission counts
        async with AsyncExitStack() as stack:
            if self.max_in_flight is not None:
                await stack.enter_async_context(self._admitted())
            params = self._params(request)
            if self.fallbacks and (self._no_streams or _shape(request) in self._whole_shapes):
                pull = self._whole_pull(request, params, per_call)
            else:
                pull = await self._open_stream(request, params, per_call, stack)
            yield ChatStream(request, pull, estimate=estimate_usage, opened_at=opened)

    def _whole_pull(self, request: ChatRequest, params: dict[str, Any], per_call: float) -> Pull:
        """A stream of one pull: the request sent whole (a server that does not stream it)."""

        async def whole() -> Sequence[ChatDelta]:
            return reply_deltas(await self._attempts(request, params, per_call))

        return once(whole)

    async def _open_stream(
        self, request: ChatRequest, params: dict[str, Any], per_call: float, stack: AsyncExitStack
    ) -> Pull:
        """The attempts of a streamed call up to its first byte (retried as ``_attempts``
        retries); the pull that reads the rest, its connection closed by ``stack``."""

        whole = _Whole(self, request, params, per_call)

        attempt = 0
        while True:
            asked = dict(params, stream=True)
            if not self._no_stream_options:
                asked["stream_options"] = {"include_usage": True}
            transport = self._transports[self._next]
            self._next = (self._next + 1) % self.pools
            self._sent += 1
            pull, status_error, failure = await self._open(transport, asked, per_call, stack, whole)
            if pull is not None:
                return pull
            if status_error is not None and (
                self._adapt(status_error, params) or self._adapt_stream(status_error, request)
            ):
                if self.fallbacks and _shape(request) in self._whole_shapes:
                    return self._whole_pull(request, params, per_call)
                continue  # the same request in the form this server takes: not a retry
            attempt = await self._retry_after(status_error, failure, attempt)

    async def _open(
        self,
        transport: Transport,
        params: dict[str, Any],
        per_call: float,
        stack: AsyncExitStack,
        whole: _Whole,
    ) -> tuple[Pull | None, _StatusError | None, ModelError | None]:
        """One streamed attempt, up to the answer's head: the pull that reads its body
        (its connection closed by ``stack``), or the error answer, or the failure to reach
        the server."""
        opening = transport.stream("/chat/completions", _encode(params), per_call)
        try:
            answer: Body = await opening.__aenter__()
        except TimeoutError:
            raise TimedOut(f"{self.model}: no answer within {per_call:g}s") from None
        except ConnectionFailed as error:
            return None, None, self._unreachable(error)
        if not 200 <= answer.status < 300:
            try:
                body = await answer.read()
            except (TimeoutError, ConnectionFailed):
                body = b""
            finally:
                await opening.__aexit__(None, None, None)
            return None, _StatusError.from_answer(Answer(answer.status, dict(answer.headers), body)), None
        stack.push_async_exit(opening.__aexit__)
        streamed = answer.headers.get("content-type", "").startswith("text/event-stream")
        return self._reader(answer.receive, per_call, whole, streamed), None, None

    def _reader(
        self,
        receive: Callable[[], Awaitable[bytes]],
        per_call: float,
        whole: _Whole,
        streamed: bool = True,
    ) -> Pull:
        """The pull of a streamed answer whose body ``receive`` gives piece by piece
        (``b""`` at its end; ``TimeoutError`` past ``per_call`` seconds of silence, or
        ``ConnectionFailed`` when it breaks). A
        body that ends before its first event is a refusal to stream (llama-cpp-python
        0.3 answers tools with tool choice ``auto`` so: a 200, then nothing): the request
        is sent ``whole`` instead. An answer that is not an event stream (``streamed``
        false: a server that ignores ``stream``) is read as the whole completion it is."""
        model = self.model
        events = EventDecoder()
        assembler = ReplyAssembler()
        finished = False  # the body ended: nothing more to pull
        done = False  # the server said [DONE]
        seen = False  # an event arrived
        opened = self._sent  # this stream's own request is counted

        def broken(cause: str, kind: str = "stream cut") -> StreamBroken:
            said = f"{model}: the stream broke after {assembler.described()}: {cause}"
            return StreamBroken(said, partial=assembler.partial(), kind=kind)

        async def pull() -> Sequence[ChatDelta]:
            nonlocal finished, done, seen
            if finished:
                return ()
            if not streamed:
                finished = True
                parts = []
                try:
                    while data := await receive():
                        parts.append(data)
                except TimeoutError:
                    raise broken(f"no data for {per_call:g}s", "timeout") from None
                except ConnectionFailed as error:
                    raise broken(self._redact(str(error)), _cut_kind(error)) from None
                return whole.answered(b"".join(parts))
            while True:
                try:
                    data = await receive()  # bounded by per_call: its own timeout
                except TimeoutError:
                    raise broken(f"no data for {per_call:g}s", "timeout") from None
                except ConnectionFailed as error:
                    if not seen and self.fallbacks:
                        finished = True
                        return await whole.refused(self._redact(str(error)))
                    if self._sent > opened and self.fallbacks:  # another request was sent since this one
                        self._interrupted()
                    raise broken(self._redact(str(error)), _cut_kind(error)) from None
                if not data:
                    finished = True
                    if not seen:
                        if self.fallbacks:
                            return await whole.refused("the stream ended before its first event")
                        raise broken("the stream ended before its first event", "empty stream")
                    if assembler.finish_reason is None and not done:
                        raise broken("the answer ended before the reply did")
                    return assembler.finish()
                out: list[ChatDelta] = []
                fast = events.chunks(data)
                if fast is not None:
                    chunks, ended = fast
                    seen = True
                    done = done or ended
                    said = assembler.take_all(chunks, out)
                    if said is not None:
                        raise broken(f"the server sent an error: {_said(said)}", "stream error")
                    if out:
                        return out
                    continue
                for event in events.feed(data):
                    seen = True
                    if event.startswith(b"[DONE]"):
                        done = True
                        continue
                    try:
                        chunk = decode_chunk(event)
                    except msgspec.DecodeError:
                        raise broken(
                            f"the server sent what is not a chunk: {event[:200]!r}", "bad JSON"
                        ) from None
                    if chunk.error is not None:
                        raise broken(f"the server sent an error: {_said(chunk.error)}", "stream error")
                    out += assembler.take(chunk)
                if out:
                    return out

        return pull

    def _unreachable(self, error: ConnectionFailed) -> Unavailable:
        """The failure of an attempt that got no answer: the address, and what happened."""
        where = self.base_url or DEFAULT_BASE_URL
        kind, reached, detail = error.kind, error.reached, error.detail
        said = f"the connection to the server at {where} failed" if reached else f"cannot reach {where}"
        detail = self._redact(detail)
        return Unavailable(f"{self.model}: {said}: {kind}" + (f" ({detail})" if detail else ""), kind=kind)

    def _note(self, text: str) -> None:
        """Say once, in the log and in :attr:`compatibility`, what changed for this server."""
        if text not in self.compatibility:
            self.compatibility.append(text)
            logger.warning("%s: %s", self.model, text)

    def _adapt_stream(self, error: _StatusError, request: ChatRequest) -> bool:
        """A server that refuses ``stream_options`` is asked without it from now on; one
        that refuses to stream this request's shape (llama-cpp-python: tools with tool
        choice ``auto``) gets such requests whole. True when either changed."""
        if error.status_code in (401, 403, 429) or error.status_code not in (400, 422, 500, 501):
            return False
        text = str(error.message) + " " + str(error.body)
        if "stream_options" in text and not self._no_stream_options:
            self._no_stream_options = True
            self._note("stream_options left out (the server refused it): streamed usage is estimated")
            return True
        if self.fallbacks and _STREAM_REFUSED.search(text):
            self._refused(request, self._redact(str(error.message)))
            return True
        return False

    def _interrupted(self) -> None:
        """The server closed a stream after another one began: it interrupts a stream on
        each new request (llama-cpp-python's default), so concurrent streams cannot
        finish. Every request is sent whole from now on (said once)."""
        if self._no_streams:
            return
        self._no_streams = True
        self._note(
            "the server closed a stream when another request arrived (it interrupts streams, "
            "as llama-cpp-python does by default): requests are sent whole from then on"
        )

    def _refused(self, request: ChatRequest, cause: str) -> None:
        """The server does not stream requests of this shape: sent whole from now on."""
        shape = _shape(request)
        if shape in self._whole_shapes:
            return
        self._whole_shapes.add(shape)
        shaped = f"with tools and tool choice {shape[1]!r}" if shape[0] else "without tools"
        self._note(
            f"the server does not stream requests {shaped} ({cause[:200]}): they are sent whole from then on"
        )

    def _adapt(self, error: _StatusError, params: dict[str, Any]) -> bool:
        """OpenAI's reasoning models refuse ``max_tokens`` (they take
        ``max_completion_tokens``) and any ``temperature`` but their default. Such a 400
        changes ``params`` for this call and every later one; True when it did."""
        if error.status_code != 400 or error.code not in ("unsupported_parameter", "unsupported_value"):
            return False
        if (
            error.param == "max_tokens"
            and "max_tokens" in params
            and "max_completion_tokens" in error.message
        ):
            self._tokens_field = "max_completion_tokens"
            params["max_completion_tokens"] = params.pop("max_tokens")
            self._note("max_tokens sent as max_completion_tokens (the server refused max_tokens)")
        elif error.param == "temperature" and "temperature" in params:
            self._no_temperature = True
            del params["temperature"]
            self._note("temperature left out (the server takes only its default)")
        else:
            return False
        return True

    def _backoff(self, attempt: int) -> float:
        return min(self.max_retry_wait, 0.5 * 2.0**attempt) * (1 + random.random() / 4)

    def _judge_status(self, error: _StatusError, attempt: int) -> tuple[float | None, ModelError]:
        """``(wait before retrying or None, the error to raise if not retrying)``."""
        status = error.status_code
        text = self._redact(str(error.message))
        detail = text[:300]
        if status not in (401, 403, 429) and (
            error.code in ("context_length_exceeded", "exceed_context_size_error")
            or error.type == "exceed_context_size_error"
            or (status <= 500 and _CONTEXT_OVERFLOW.search(text) is not None)
        ):
            return None, _context_too_long(self.model, status, text, error.body)
        if status == 500 and (error.type == "invalid_request_error" or _INVALID_REQUEST.search(text)):
            return None, BadRequest(
                f"{self.model}: the server refused the request as invalid (HTTP {status}): {detail}",
                status=status,
            )
        if status == 429:
            asked = retry_after_seconds(error.headers)
            wait = asked if asked is not None else self._backoff(attempt)
            return wait, RateLimited(f"{self.model}: rate limited (HTTP 429): {detail}", retry_after=asked)
        if status in _RETRIED_STATUSES:
            asked = retry_after_seconds(error.headers)
            wait = asked if asked is not None else self._backoff(attempt)
            return wait, Unavailable(f"{self.model}: server error (HTTP {status}): {detail}", status=status)
        if status in (401, 403):
            return None, BadRequest(
                f"{self.model}: the server refused the credentials (HTTP {status})", status=status
            )
        return None, BadRequest(f"{self.model}: request refused (HTTP {status}): {detail}", status=status)

    def _reply(self, request: ChatRequest, completion: _WireCompletion) -> ChatReply:
        if not completion.choices:
            raise Unavailable(f"{self.model}: the server answered with no choices", kind="no choices")
        choice = completion.choices[0]
        message = choice.message
        calls = tuple(
            parse_arguments(call.id, call.function.name, call.function.arguments)
            for call in (message.tool_calls or ())
            if call.type == "function"
        )
        reply = ChatReply(
            text=message.content or "", tool_calls=calls, finish_reason=choice.finish_reason or "stop"
        )
        usage = completion.usage
        if usage is None:  # some servers do not report usage: count it ourselves
            return ChatReply(
                reply.text, reply.tool_calls, estimate_usage(request, reply), reply.finish_reason
            )
        return ChatReply(
            reply.text,
            reply.tool_calls,
            Usage(prompt_tokens=usage.prompt_tokens or 0, completion_tokens=usage.completion_tokens or 0),
            reply.finish_reason,
        )

    async def aclose(self) -> None:
        """Close the HTTP client. Idempotent; shielded, so it completes even when the
        caller is being cancelled."""
        if self.closed:
            return
        self.closed = True
        with anyio.CancelScope(shield=True):
            for transport in self._transports:
                await transport.aclose()
