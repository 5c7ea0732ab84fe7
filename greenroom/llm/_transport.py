"""``Transport``: how an OpenAI-compatible model's requests reach its server — one
interface, two peers behind it, as httpx's transports are:

- :class:`OriginTransport`, greenroom's own HTTP/1.1 client (``_http.OriginClient``:
  ``httptools`` parsing, keep-alive, an asyncio protocol fast path);
- :class:`SDKTransport`, the ``openai`` SDK's ``AsyncOpenAI`` (its ``httpx`` client:
  proxies, its own auth and pool) — the reference the tests hold the first to.

Both ``POST`` the same JSON bytes and give the same things back: an :class:`Answer`
whatever its status (a status error is the caller's to judge), or a streamed body read
as it arrives; ``ConnectionFailed`` when the server could not be reached or the
connection broke (``reached`` says which), ``TimeoutError`` past the timeout.
``OpenAIChatModel`` holds transports and never asks which one it has.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any, Protocol

import anyio
import httpx2

from ._errors import UNREACHED
from ._http import Answer, ConnectionFailed, OriginClient, os_error_kind, os_error_text

if TYPE_CHECKING:
    import openai


class Body(Protocol):
    """A streamed answer: its ``status`` and ``headers`` (names lower-cased) at once, its
    body as it arrives."""

    @property
    def status(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]: ...

    async def receive(self) -> bytes:
        """What arrived since the last call, waiting only while nothing has; ``b""`` at the
        end. ``TimeoutError`` after the stream's silence bound, ``ConnectionFailed`` when
        the body breaks off."""
        ...

    async def read(self) -> bytes:
        """The rest of the body, whole."""
        ...


class Transport(Protocol):
    """What ``OpenAIChatModel`` sends through (see the module doc)."""

    async def post(self, path: str, body: bytes, timeout: float) -> Answer:
        """``POST`` ``body``; the whole answer, whatever its status. ``timeout`` bounds
        the whole exchange (``TimeoutError``). Cancelled, the connection is closed."""
        ...

    def stream(self, path: str, body: bytes, timeout: float) -> AbstractAsyncContextManager[Body]:
        """``POST`` ``body`` for an answer read as it arrives. ``timeout`` bounds the wait
        for the head and each silence in the body. Leaving the block before the body
        ended (early, on an error, cancelled) closes the connection."""
        ...

    async def aclose(self) -> None:
        """Close the idle connections. Idempotent."""
        ...


class OriginTransport:
    """Greenroom's own client, sending ``headers`` with each request (``accept`` set to
    ``text/event-stream`` for streams)."""

    __slots__ = ("client", "headers", "stream_headers")

    def __init__(self, base_url: str, *, max_idle: int, headers: Sequence[tuple[bytes, bytes]]) -> None:
        self.client = OriginClient(base_url, max_idle=max_idle)
        self.headers = tuple(headers)
        self.stream_headers = tuple(
            (name, b"text/event-stream") if name == b"accept" else (name, value) for name, value in headers
        )

    async def post(self, path: str, body: bytes, timeout: float) -> Answer:
        with anyio.fail_after(timeout):
            return await self.client.post(path, body, self.headers)

    def stream(self, path: str, body: bytes, timeout: float) -> AbstractAsyncContextManager[Body]:
        return self.client.stream(path, body, self.stream_headers, timeout=timeout)

    async def aclose(self) -> None:
        await self.client.aclose()


class _SDKBody:
    __slots__ = ("_chunks", "_content", "headers", "status")

    def __init__(self, status: int, headers: Mapping[str, str], chunks: Any, content: bytes = b"") -> None:
        self.status = status
        self.headers = headers
        self._chunks = chunks
        self._content = content

    async def receive(self) -> bytes:
        if self._chunks is None:
            content, self._content = self._content, b""
            return content
        try:
            data: bytes = await self._chunks.__anext__()
        except StopAsyncIteration:
            return b""
        except httpx2.TimeoutException:
            raise TimeoutError("no data within the timeout") from None
        except (httpx2.TransportError, httpx2.StreamError) as error:
            raise ConnectionFailed(f"{type(error).__name__}: {error}", kind=_kind(error)) from None
        return data

    async def read(self) -> bytes:
        parts = []
        while data := await self.receive():
            parts.append(data)
        return b"".join(parts)


def _headers(response: httpx2.Response) -> dict[str, str]:
    return {name.lower(): value for name, value in response.headers.items()}


class SDKTransport:
    """The ``openai`` SDK's client (its retries off: the model's own retry). The SDK's
    status errors become answers and its connection errors ``ConnectionFailed``, so the
    model judges both transports' outcomes by one rule."""

    __slots__ = ("client",)

    def __init__(self, client: openai.AsyncOpenAI) -> None:
        self.client = client

    async def post(self, path: str, body: bytes, timeout: float) -> Answer:
        import openai

        try:
            response = await self.client.post(
                path,
                cast_to=httpx2.Response,
                content=body,
                options={"timeout": timeout, "headers": {"Content-Type": "application/json"}},
            )
        except openai.APITimeoutError:
            raise TimeoutError(f"no answer within {timeout:g}s") from None
        except openai.APIStatusError as error:
            return Answer(error.status_code, _headers(error.response), error.response.content)
        except openai.APIConnectionError as error:
            raise _failed(error) from None
        return Answer(response.status_code, _headers(response), response.content)

    @asynccontextmanager
    async def stream(self, path: str, body: bytes, timeout: float) -> AsyncIterator[Body]:
        import openai

        try:
            response = await self.client.post(
                path,
                cast_to=httpx2.Response,
                content=body,
                options={
                    "timeout": timeout,
                    "headers": {"Content-Type": "application/json", "Accept": "text/event-stream"},
                },
                stream=True,
            )
        except openai.APITimeoutError:
            raise TimeoutError(f"no answer within {timeout:g}s") from None
        except openai.APIStatusError as error:
            yield _SDKBody(error.status_code, _headers(error.response), None, error.response.content)
            return
        except openai.APIConnectionError as error:
            raise _failed(error) from None
        chunks = response.aiter_raw()
        try:
            yield _SDKBody(response.status_code, _headers(response), chunks)
        finally:
            with anyio.CancelScope(shield=True):
                await chunks.aclose()
                await response.aclose()

    async def aclose(self) -> None:
        await self.client.close()


def _kind(error: BaseException) -> str:
    """What a failure of the SDK's ``httpx`` says happened, in ``ConnectionFailed``'s words."""
    for leaf in (error, error.__cause__, error.__context__):
        if isinstance(leaf, httpx2.RemoteProtocolError | httpx2.LocalProtocolError):
            said = str(leaf).lower()
            if "incomplete" in said or "closed connection without" in said:
                return "closed mid-answer"
            return "bad HTTP"
    kind = os_error_kind(error)
    if kind == "connection failed":
        return "timeout" if "timed out" in str(error).lower() else "connection reset"
    return kind


def _failed(error: BaseException) -> ConnectionFailed:
    """The SDK's ``APIConnectionError`` as ours: what its transport met is in its causes."""
    kind = os_error_kind(error)
    if kind == "connection failed":
        kind = _kind(error)
        kind = "connection failed" if kind == "connection reset" else kind
    return ConnectionFailed(str(error), kind=kind, reached=kind not in UNREACHED, detail=os_error_text(error))
