"""``OriginClient``: greenroom's own HTTP/1.1 client for one origin — the model calls' path.

Keep-alive connections to one origin (TCP, or TLS for ``https``); a request takes the most
recently used idle connection or opens a new one, and gives it back once the answer was
read whole. Answers are parsed by ``httptools`` (llhttp, in C: it only parses bytes, so it
runs under any event loop) — the head, a ``Content-Length`` body, a chunked body with its
extensions and trailers, a body that ends with the connection. Why not the SDK's
``httpx``: per request it builds a request model, runs hooks, auth and a pool whose
bookkeeping grows with its size — most of the CPU a model call costs greenroom on a fast
server. This does one thing: ``POST`` a JSON body, read the answer — whole
(:meth:`OriginClient.post`) or as it arrives (:meth:`OriginClient.stream`, for
Server-Sent Events).

The parsing and the failures both ways share are ``_exchange``'s. Two ways to the network,
with the same behaviour and the same tests: anyio's byte streams
(``_http_streams``: trio, and asyncio when told), and — **a backend fast path**, asyncio
only — an ``asyncio.Protocol`` that parses each read as the loop delivers it, without
pausing the transport per read (``_http_asyncio``). Each network read is parsed whole and
everything it brought is handed to the reader at once.

- An idle connection the server has closed (or written to) is dropped when taken; a
  reused connection that fails before any byte of the answer was read is replaced by a new
  one, once (the server closed it as the request went out).
- Any other failure to connect, send or read raises :class:`ConnectionFailed`; an answer
  that breaks HTTP/1.1 too. The connection is then closed, never reused.
- Cancellation (and so a caller's timeout) closes the connection in use: the server sees
  the client hang up and can stop working on the request. Nothing is retried.
- A streamed body's silence is watched lazily (:class:`_Silence`): no timer or clock read
  per read, a look every quarter of the bound.
- ``aclose()`` closes the idle connections; one in use is closed as its request ends.
"""

from __future__ import annotations

import os
import re
import ssl
import urllib.parse
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, Protocol, final

import anyio
import sniffio

from .._errors import InvalidInput
from . import _http_asyncio, _http_streams  # imported with the client: a first request pays no import
from ._exchange import (
    CUT,
    HIGH_WATER,
    Answer,
    ConnectionFailed,
    Exchange,
    Silence,
    Stale,
    bad_http,
    broke,
    os_error_kind,
    os_error_text,
)

__all__ = [  # what the model client's modules and tests take from here
    "ASYNCIO_FAST_PATH",
    "CUT",
    "HIGH_WATER",
    "Answer",
    "ConnectionFailed",
    "Exchange",
    "OriginClient",
    "Silence",
    "Stale",
    "StreamedAnswer",
    "bad_http",
    "broke",
    "check_headers",
    "os_error_kind",
    "os_error_text",
]

ASYNCIO_FAST_PATH = os.environ.get("GREENROOM_ASYNCIO_FAST_PATH", "1") != "0"
"""On asyncio, read through a protocol (``_http_asyncio``) rather than anyio's streams.
``GREENROOM_ASYNCIO_FAST_PATH=0`` turns it off (the streams path then serves asyncio too)."""

_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_TARGET = re.compile(r"/[\x21-\x7e]*")


class Connection(Protocol):
    """One keep-alive connection, whichever way it reaches the network."""

    exchange: Exchange

    async def open(self, request: bytes, reused: bool) -> tuple[int, dict[str, str]]:
        """Send ``request`` and read the answer's head: ``(status, headers)``. Raises
        :class:`Stale` (a reused connection the server had closed) or
        :class:`ConnectionFailed`."""
        ...

    async def receive(self) -> bytes:
        """What has arrived of the body since the last call (everything read), waiting
        only while nothing has; ``b""`` once it ended. ``TimeoutError`` once
        :meth:`watched`'s silence ran out; ``ConnectionFailed`` when the body breaks off."""
        ...

    def watched(self, silence: float | None) -> Any:
        """An async context: while in it, a wait in :meth:`receive` longer than
        ``silence`` seconds raises ``TimeoutError``."""
        ...

    def idle_usable(self) -> bool:
        """An idle connection the server has neither closed nor written to."""
        ...

    async def aclose(self) -> None:
        """Close at once (the server sees the client hang up)."""
        ...


@final
class StreamedAnswer:
    """An HTTP answer whose body is read as it arrives: ``status``, ``headers`` (names
    lower-cased), and :meth:`receive` for what arrived of the body."""

    __slots__ = ("exchange", "headers", "receive", "status")

    def __init__(self, status: int, headers: dict[str, str], connection: Connection) -> None:
        self.status = status
        self.headers = headers
        self.exchange = connection.exchange
        self.receive = connection.receive
        """What has arrived of the body since the last call (everything read, waiting only
        while nothing has); ``b""`` once it ended. Raises ``TimeoutError`` after the
        stream's silence bound, :class:`ConnectionFailed` when the body breaks off. (The
        connection's own method: no layer between the reader and the network.)"""

    @property
    def ended(self) -> bool:
        """The body arrived to its end."""
        return self.exchange.ended

    async def read(self) -> bytes:
        """The rest of the body, whole."""
        parts = []
        while data := await self.receive():
            parts.append(data)
        return b"".join(parts)


def check_headers(headers: Sequence[tuple[bytes, bytes]]) -> bytes:
    """The header lines of ``headers``, each checked: a name that is not a token or a
    value with a line break (an API key pasted with its newline) is refused."""
    lines = []
    for name, value in headers:
        if not _TOKEN.fullmatch(name):
            raise InvalidInput(
                f"an HTTP header name must be a token, got {name!r}", field="headers", value=name
            )
        if b"\r" in value or b"\n" in value or b"\0" in value:
            said = name.decode("latin-1")
            raise InvalidInput(
                f"the HTTP header {said} has a line break in its value", field="headers", value=said
            )
        lines.append(name + b": " + value + b"\r\n")
    return b"".join(lines)


@final
class OriginClient:
    """Keep-alive HTTP/1.1 connections to the origin of ``base_url`` (``http`` or
    ``https``; paths given to :meth:`post` are joined to its path). ``max_idle``: idle
    connections kept at most (more are closed as their request ends). ``ssl_context``:
    for ``https`` (default: the system's trust store, ``ssl.create_default_context()``).
    ``fast_path``: on asyncio, read through a protocol (default: :data:`ASYNCIO_FAST_PATH`);
    elsewhere, and when false, through anyio's streams.
    """

    def __init__(
        self,
        base_url: str,
        *,
        max_idle: int = 100,
        ssl_context: ssl.SSLContext | None = None,
        fast_path: bool | None = None,
    ) -> None:
        parts = urllib.parse.urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidInput(
                f"OriginClient base_url must be an http(s) URL with a host, got {base_url!r}",
                field="base_url",
                value=base_url,
            )
        self.tls = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.tls else 80)
        default_port = self.port == (443 if self.tls else 80)
        host = f"[{self.host}]" if ":" in self.host else self.host
        self._host_header = (host if default_port else f"{host}:{self.port}").encode("ascii")
        self._path = parts.path.rstrip("/")
        self._ssl_context = ssl_context if ssl_context is not None or not self.tls else None
        self.max_idle = max_idle
        self.fast_path = ASYNCIO_FAST_PATH if fast_path is None else fast_path
        self._idle: list[Connection] = []
        self._heads: dict[tuple[str, tuple[tuple[bytes, bytes], ...]], bytes] = {}
        self.closed = False

    async def post(self, path: str, body: bytes, headers: Sequence[tuple[bytes, bytes]]) -> Answer:
        """``POST`` ``body`` to ``path``; the whole answer, whatever its status.

        Raises :class:`ConnectionFailed` (see the module doc). Cancelled, it closes the
        connection in use at once and re-raises; nothing of the answer is kept.
        """
        if self.closed:
            raise RuntimeError("OriginClient.post() after aclose()")
        connection, status, head = await self._opened(self._request(path, body, headers))
        try:
            parts: list[bytes] = []
            receive = connection.receive
            while data := await receive():
                parts.append(data)
        except BaseException:
            await connection.aclose()
            raise
        await self._give_back(connection)
        return Answer(status, head, parts[0] if len(parts) == 1 else b"".join(parts))

    async def _opened(self, request: bytes) -> tuple[Connection, int, dict[str, str]]:
        """A connection that sent ``request`` and read its answer's head: an idle one (the
        server may have closed it as the request went out: then a new one, once), or a
        new one. Closed on any failure."""
        connection, reused = await self._take_idle(), True
        if connection is None:
            connection, reused = await self._connect(), False
        try:
            try:
                status, head = await connection.open(request, reused)
            except Stale:
                await connection.aclose()
                connection = await self._connect()
                status, head = await connection.open(request, False)
        except BaseException:
            await connection.aclose()
            raise
        return connection, status, head

    @asynccontextmanager
    async def stream(
        self,
        path: str,
        body: bytes,
        headers: Sequence[tuple[bytes, bytes]],
        *,
        timeout: float | None = None,
    ) -> AsyncIterator[StreamedAnswer]:
        """``POST`` ``body`` to ``path`` and give the answer as it arrives: its status and
        headers at once, its body through ``StreamedAnswer.receive``. ``timeout``
        (seconds, ``None``: no bound) bounds the wait for the head (``TimeoutError``) and
        each silence in the body (``receive`` raises ``TimeoutError``).

        Raises :class:`ConnectionFailed` when the head cannot be had (a reused connection
        the server had closed is replaced once, as in :meth:`post`). Leaving the block
        before the body ended — early, on an error, cancelled — closes the connection at
        once (the server sees the client hang up); an answer read whole gives its
        connection back for reuse.
        """
        if self.closed:
            raise RuntimeError("OriginClient.stream() after aclose()")
        request = self._request(path, body, headers)
        with anyio.fail_after(timeout):
            connection, status, head = await self._opened(request)
        answer = StreamedAnswer(status, head, connection)
        try:
            async with connection.watched(timeout):
                yield answer
        except BaseException:
            await connection.aclose()
            raise
        if answer.ended:
            await self._give_back(connection)
        else:
            await connection.aclose()

    def _request(self, path: str, body: bytes, headers: Sequence[tuple[bytes, bytes]]) -> bytes:
        key = (path, tuple(headers))
        head = self._heads.get(key)
        if head is None:
            target = self._path + path
            if not _TARGET.fullmatch(target):
                raise InvalidInput(f"an HTTP path must be printable ASCII, got {target!r}", field="path")
            head = (
                b"POST " + target.encode("ascii") + b" HTTP/1.1\r\nhost: " + self._host_header + b"\r\n"
            ) + check_headers(headers)
            if len(self._heads) < 64:
                self._heads[key] = head
        return b"%scontent-length: %d\r\n\r\n%s" % (head, len(body), body)

    async def _give_back(self, connection: Connection) -> None:
        if connection.exchange.reusable() and not self.closed and len(self._idle) < self.max_idle:
            self._idle.append(connection)
        else:
            await connection.aclose()

    async def _take_idle(self) -> Connection | None:
        """The most recently used idle connection the server has not closed, if any."""
        idle = self._idle
        while idle:
            connection = idle.pop()
            if connection.idle_usable():
                return connection
            await connection.aclose()
        return None

    async def _connect(self) -> Connection:
        context: ssl.SSLContext | None = None
        if self.tls:
            context = self._ssl_context or ssl.create_default_context()
            self._ssl_context = context
        try:
            if self.fast_path and sniffio.current_async_library() == "asyncio":
                return await _http_asyncio.connect(self.host, self.port, context)  # the fast path
            return await _http_streams.connect(self.host, self.port, context)
        except OSError as error:
            kind, said = os_error_kind(error), os_error_text(error)
            raise ConnectionFailed(
                f"cannot connect to {self.host}:{self.port}: {kind} ({said})",
                kind=kind,
                reached=False,
                detail=said,
            ) from None

    async def aclose(self) -> None:
        """Close the idle connections; a connection in use closes when its request ends.
        Idempotent."""
        self.closed = True
        idle, self._idle = self._idle, []
        for connection in idle:
            await connection.aclose()
