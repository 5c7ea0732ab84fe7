"""``OriginClient``: greenroom's own HTTP/1.1 client for one origin — the model calls' path.

Keep-alive connections over anyio streams (TCP, or TLS for ``https``), the protocol
spoken by ``h11``; a request takes the most recently used idle connection or opens a new
one, and gives it back once the answer was read whole. Why not the SDK's ``httpx``: per
request it builds a request model, runs hooks, auth and a pool whose bookkeeping grows
with its size — most of the CPU a model call costs greenroom on a fast server. This does
one thing: ``POST`` a JSON body, read the answer — whole (:meth:`OriginClient.post`) or as it
arrives (:meth:`OriginClient.stream`, for Server-Sent Events).

- An idle connection the server has closed (its socket is readable) is dropped when
  taken; a reused connection that fails before any byte of the answer was read is
  replaced by a new one, once (the server closed it as the request went out).
- Any other failure to connect, send or read raises :class:`ConnectionFailed`; an answer
  that breaks HTTP/1.1 too. The connection is then closed, never reused.
- Cancellation (and so a caller's timeout) closes the connection in use: the server sees
  the client hang up and can stop working on the request. Nothing is retried.
- ``aclose()`` closes the idle connections; one in use is closed as its request ends.
"""

from __future__ import annotations

import errno
import re
import select
import socket
import ssl
import urllib.parse
from collections import deque
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, final

import anyio
import anyio.abc
import h11

from .._errors import InvalidInput

_READ = 1 << 16
_CUT = "the server closed the connection before the answer was whole"
_HEX = re.compile(rb"[0-9A-Fa-f]{1,16}")


class ConnectionFailed(Exception):
    """The request could not be sent or its answer not read (no connection, a broken one,
    or an answer that is not HTTP/1.1). Whether the server acted on it is not known.
    ``kind``: what happened, in a few words (``"connection refused"``, ``"connection
    reset"``, ``"closed before answering"``, ``"bad HTTP"``... see :func:`os_error_kind`);
    ``reached``: whether the server was connected to at all."""

    def __init__(
        self, message: str, *, kind: str = "connection broke", reached: bool = True, detail: str = ""
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.reached = reached
        self.detail = detail or message
        """What the operating system said (or the message): an error's own words."""


def _causes(error: BaseException) -> Iterator[BaseException]:
    """``error``, then what it chains to (causes, contexts, the members of groups),
    breadth first, each once — where an ``OSError`` of a connection hides."""
    pending: deque[BaseException] = deque([error])
    seen: set[int] = set()
    while pending:
        leaf = pending.popleft()
        if id(leaf) in seen:
            continue
        seen.add(id(leaf))
        if isinstance(leaf, BaseExceptionGroup):
            pending.extend(leaf.exceptions)
        else:
            yield leaf
        pending.extend(linked for linked in (leaf.__cause__, leaf.__context__) if linked is not None)


def os_error_kind(error: BaseException) -> str:
    """What an ``OSError`` of a connection (or the cause anyio's ``connect_tcp`` chains
    to its "All connection attempts failed") says happened: ``"connection refused"``,
    ``"connection reset"``, ``"name not resolved"``, ``"unreachable"``, ``"timeout"``,
    ``"TLS"``, else ``"connection failed"``."""
    for leaf in _causes(error):
        if isinstance(leaf, ConnectionRefusedError):
            return "connection refused"
        if isinstance(leaf, ConnectionResetError | BrokenPipeError | ConnectionAbortedError):
            return "connection reset"
        if isinstance(leaf, socket.gaierror):
            return "name not resolved"
        if isinstance(leaf, ssl.SSLError):
            return "TLS"
        if isinstance(leaf, TimeoutError):
            return "timeout"
        if isinstance(leaf, OSError) and leaf.errno in _UNREACHABLE:
            return "unreachable"
    return "connection failed"


def os_error_text(error: BaseException) -> str:
    """The words of the first ``OSError`` under ``error`` that has some (its causes and
    groups followed), else ``error``'s own."""
    for leaf in _causes(error):
        if isinstance(leaf, OSError) and leaf.strerror:
            return str(leaf)
    return str(error)


_UNREACHABLE = frozenset({errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EHOSTDOWN, errno.ENETDOWN})


@final
class Answer:
    """A whole HTTP answer: ``status``, ``headers`` (names lower-cased) and ``body``."""

    __slots__ = ("body", "headers", "status")

    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body


@final
class StreamedAnswer:
    """An HTTP answer whose body is read as it arrives: ``status``, ``headers`` (names
    lower-cased), and :meth:`receive` for each piece of the body."""

    __slots__ = ("_connection", "ended", "headers", "status")

    def __init__(self, status: int, headers: dict[str, str], connection: _Connection) -> None:
        self.status = status
        self.headers = headers
        self._connection = connection
        self.ended = False
        """The body was read to its end."""

    async def receive(self, timeout: float | None = None) -> bytes:
        """What has arrived of the body since the last call (everything read, waiting
        only while nothing has; ``timeout`` bounds that wait, then ``TimeoutError``);
        ``b""`` once it ended. Raises :class:`ConnectionFailed` when it breaks off before
        its end."""
        while not self.ended:
            data, self.ended = await self._connection.next_data(timeout)
            if data:
                return data
        return b""

    async def read(self) -> bytes:
        """The rest of the body, whole."""
        parts = []
        while data := await self.receive():
            parts.append(data)
        return b"".join(parts)


class _Chunked:
    """A chunked body decoded as it arrives (RFC 9112, 7.1) — the stream's hot path, a piece
    of it per network read, where ``h11`` spends its per-event machinery. ``feed`` bytes,
    ``take`` the data of every chunk complete so far; ``ended`` after the last chunk and
    its trailers. Raises ``ConnectionFailed`` for what is not chunked encoding."""

    __slots__ = ("buffer", "crlf", "ended", "left", "trailers")

    def __init__(self, data: bytes) -> None:
        self.buffer = bytearray(data)
        self.left = 0  # data bytes of the current chunk still to come
        self.crlf = 0  # bytes of the CRLF after a chunk's data still to come
        self.trailers = False  # past the last chunk: trailer lines until an empty one
        self.ended = False

    def take(self) -> bytes:
        buffer = self.buffer
        size_of = len(buffer)
        at = 0
        out: list[bytes] = []
        while at < size_of and not self.ended:
            if self.left:
                n = min(self.left, size_of - at)
                out.append(bytes(buffer[at : at + n]))
                at += n
                self.left -= n
                if not self.left:
                    self.crlf = 2
            elif self.crlf:
                n = min(self.crlf, size_of - at)
                if buffer[at : at + n] != b"\r\n"[2 - self.crlf : 2 - self.crlf + n]:
                    raise ConnectionFailed(
                        "the answer is not valid HTTP/1.1: a chunk does not end in CRLF", kind="bad HTTP"
                    )
                at += n
                self.crlf -= n
            else:
                end = buffer.find(b"\r\n", at)
                if end < 0:
                    if size_of - at > 4096:
                        raise ConnectionFailed(
                            "the answer is not valid HTTP/1.1: a chunk size line over 4 KiB", kind="bad HTTP"
                        )
                    break
                line = bytes(buffer[at:end])
                at = end + 2
                if self.trailers:
                    self.ended = not line
                    continue
                digits = line.split(b";", 1)[0].strip()
                if not _HEX.fullmatch(digits):
                    raise ConnectionFailed(
                        f"the answer is not valid HTTP/1.1: a chunk size line {line[:40]!r}", kind="bad HTTP"
                    )
                size = int(digits, 16)
                if size:
                    self.left = size
                else:
                    self.trailers = True
        del buffer[:at]
        return out[0] if len(out) == 1 else b"".join(out)


def _broke(error: BaseException) -> str:
    """A connection that broke under a send or a read: reset, unless it says otherwise."""
    kind = os_error_kind(error)
    return "connection reset" if kind == "connection failed" else kind


class _Stale(Exception):
    """A reused connection ended before any byte of the answer: open another, once."""


class _Connection:
    __slots__ = ("chunked", "keep", "protocol", "socket", "stream")

    def __init__(self, stream: anyio.abc.ByteStream) -> None:
        self.stream = stream
        self.protocol = h11.Connection(h11.CLIENT)
        self.socket: Any = stream.extra(anyio.abc.SocketAttribute.raw_socket, None)
        self.chunked: _Chunked | None = None
        """The answer's chunked body, decoded here once ``h11`` read its head."""
        self.keep = False
        """The answer was read whole by :attr:`chunked` and the connection may carry another."""

    def closed_by_server(self) -> bool:
        """An idle connection whose socket is readable was closed (or written to) by the
        server: it cannot carry a request."""
        if self.socket is None:
            return False
        try:
            readable, _, _ = select.select([self.socket], [], [], 0)
        except (OSError, ValueError):  # closed under us
            return True
        return bool(readable)

    async def exchange(self, request: h11.Request, body: bytes, reused: bool) -> Answer:
        """Send the request and read its answer whole."""
        status, headers = await self.open(request, body, reused)
        parts: list[bytes] = []
        while True:
            data, ended = await self.next_data()
            if data:
                parts.append(data)
            if ended:
                return Answer(status, headers, parts[0] if len(parts) == 1 else b"".join(parts))

    async def open(self, request: h11.Request, body: bytes, reused: bool) -> tuple[int, dict[str, str]]:
        """Send the request and read the answer's head: ``(status, headers)``. The body
        follows through :meth:`next_data`."""
        protocol = self.protocol
        data = protocol.send(request)
        data += protocol.send(h11.Data(data=body))
        data += protocol.send(h11.EndOfMessage())
        try:
            await self.stream.send(data)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as error:
            if reused:
                raise _Stale from None
            raise ConnectionFailed(
                f"the connection broke while sending: {error!r}", kind=_broke(error)
            ) from None
        while True:
            event = await self._next_event(stale=reused)
            if type(event) is h11.Response:
                headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in event.headers}
                if headers.get("transfer-encoding", "").lower() == "chunked" and event.http_version == b"1.1":
                    data, closed = protocol.trailing_data
                    if not closed:
                        self.chunked = _Chunked(data)
                        self.keep = "close" not in headers.get("connection", "").lower()
                return event.status_code, headers
            if type(event) is h11.ConnectionClosed:
                if reused:
                    raise _Stale
                raise ConnectionFailed(
                    "the server closed the connection before answering", kind="closed before answering"
                )
            # InformationalResponse (100 Continue): read on

    async def next_data(self, timeout: float | None = None) -> tuple[bytes, bool]:
        """What has arrived of the answer's body, waiting (``timeout`` seconds at most,
        then ``TimeoutError``) only while nothing has: ``(bytes, ended)`` — every piece
        already read from the connection at once, not one chunk of a chunked body per
        call. Raises :class:`ConnectionFailed` when the body breaks off before its end."""
        chunked = self.chunked
        if chunked is not None:
            return await self._next_chunks(chunked, timeout)
        protocol = self.protocol
        parts: list[bytes] = []
        while True:
            try:
                event = protocol.next_event()
            except h11.RemoteProtocolError as error:
                raise ConnectionFailed(
                    f"the answer is not valid HTTP/1.1: {error}", kind="bad HTTP"
                ) from None
            kind = type(event)
            if kind is h11.Data:
                parts.append(event.data)  # type: ignore[union-attr]
            elif event is h11.NEED_DATA:
                if parts:
                    return b"".join(parts), False
                protocol.receive_data(await self._read(timeout))
            elif kind is h11.EndOfMessage:
                return b"".join(parts), True
            elif kind is h11.ConnectionClosed:
                raise ConnectionFailed(_CUT, kind="closed mid-answer")

    async def _next_chunks(self, chunked: _Chunked, timeout: float | None) -> tuple[bytes, bool]:
        while True:
            data = chunked.take()
            if chunked.ended:
                if chunked.buffer:  # bytes past the answer's end: nothing may follow it
                    self.keep = False
                return data, True
            if data:
                return data, False
            received = await self._read(timeout)
            if not received:
                raise ConnectionFailed(_CUT, kind="closed mid-answer")
            chunked.buffer += received

    async def _read(self, timeout: float | None) -> bytes:
        """What the connection has next (``b""``: the server closed it), waiting at most
        ``timeout`` seconds (then ``TimeoutError``); ``ConnectionFailed`` if it broke."""
        try:
            if timeout is None:
                return await self.stream.receive(_READ)
            with anyio.fail_after(timeout):
                return await self.stream.receive(_READ)
        except anyio.EndOfStream:
            return b""
        except TimeoutError:  # the silence outlasted ``timeout`` (an OSError too: not a break)
            raise
        except (anyio.BrokenResourceError, OSError) as error:
            raise ConnectionFailed(
                f"the connection broke while reading: {error!r}", kind=_broke(error)
            ) from None

    async def _next_event(self, stale: bool) -> Any:
        protocol = self.protocol
        while True:
            try:
                event = protocol.next_event()
            except h11.RemoteProtocolError as error:
                raise ConnectionFailed(
                    f"the answer is not valid HTTP/1.1: {error}", kind="bad HTTP"
                ) from None
            if event is not h11.NEED_DATA:
                return event
            try:
                received = await self.stream.receive(_READ)
            except anyio.EndOfStream:
                received = b""
            except (anyio.BrokenResourceError, OSError) as error:
                if stale:
                    raise _Stale from None
                raise ConnectionFailed(
                    f"the connection broke while reading: {error!r}", kind=_broke(error)
                ) from None
            if not received and stale:
                raise _Stale
            protocol.receive_data(received)

    def reusable(self) -> bool:
        chunked = self.chunked
        if chunked is not None:  # the body was ours: a new h11 state for the next request
            self.chunked = None
            if not (chunked.ended and self.keep):
                return False
            self.protocol = h11.Connection(h11.CLIENT)
            return True
        protocol = self.protocol
        if protocol.our_state is h11.DONE and protocol.their_state is h11.DONE:
            protocol.start_next_cycle()
            return True
        return False


@final
class OriginClient:
    """Keep-alive HTTP/1.1 connections to the origin of ``base_url`` (``http`` or
    ``https``; paths given to :meth:`post` are joined to its path). ``max_idle``: idle
    connections kept at most (more are closed as their request ends). ``ssl_context``:
    for ``https`` (default: the system's trust store, ``ssl.create_default_context()``).
    """

    def __init__(
        self, base_url: str, *, max_idle: int = 100, ssl_context: ssl.SSLContext | None = None
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
        self._idle: list[_Connection] = []
        self.closed = False

    async def post(self, path: str, body: bytes, headers: Sequence[tuple[bytes, bytes]]) -> Answer:
        """``POST`` ``body`` to ``path``; the whole answer, whatever its status.

        Raises :class:`ConnectionFailed` (see the module doc). Cancelled, it closes the
        connection in use at once and re-raises; nothing of the answer is kept.
        """
        if self.closed:
            raise RuntimeError("OriginClient.post() after aclose()")
        request = self._request(path, body, headers)
        connection, reused = await self._take_idle(), True
        if connection is None:
            connection, reused = await self._connect(), False
        try:
            try:
                answer = await connection.exchange(request, body, reused)
            except _Stale:
                await anyio.aclose_forcefully(connection.stream)
                connection = await self._connect()
                answer = await connection.exchange(request, body, False)
        except BaseException:
            await anyio.aclose_forcefully(connection.stream)
            raise
        if connection.reusable() and not self.closed and len(self._idle) < self.max_idle:
            self._idle.append(connection)
        else:
            await anyio.aclose_forcefully(connection.stream)
        return answer

    @asynccontextmanager
    async def stream(
        self, path: str, body: bytes, headers: Sequence[tuple[bytes, bytes]]
    ) -> AsyncIterator[StreamedAnswer]:
        """``POST`` ``body`` to ``path`` and give the answer as it arrives: its status and
        headers at once, its body through ``StreamedAnswer.receive``.

        Raises :class:`ConnectionFailed` when the head cannot be had (a reused connection
        the server had closed is replaced once, as in :meth:`post`). Leaving the block
        before the body ended — early, on an error, cancelled — closes the connection at
        once (the server sees the client hang up); an answer read whole gives its
        connection back for reuse.
        """
        if self.closed:
            raise RuntimeError("OriginClient.stream() after aclose()")
        request = self._request(path, body, headers)
        connection, reused = await self._take_idle(), True
        if connection is None:
            connection, reused = await self._connect(), False
        answer: StreamedAnswer | None = None
        try:
            try:
                status, head = await connection.open(request, body, reused)
            except _Stale:
                await anyio.aclose_forcefully(connection.stream)
                connection = await self._connect()
                status, head = await connection.open(request, body, False)
            answer = StreamedAnswer(status, head, connection)
            yield answer
        except BaseException:
            await anyio.aclose_forcefully(connection.stream)
            raise
        if answer.ended and connection.reusable() and not self.closed and len(self._idle) < self.max_idle:
            self._idle.append(connection)
        else:
            await anyio.aclose_forcefully(connection.stream)

    def _request(self, path: str, body: bytes, headers: Sequence[tuple[bytes, bytes]]) -> h11.Request:
        return h11.Request(
            method=b"POST",
            target=(self._path + path).encode("ascii"),
            headers=[
                (b"host", self._host_header),
                (b"content-length", str(len(body)).encode("ascii")),
                *headers,
            ],
        )

    async def _take_idle(self) -> _Connection | None:
        """The most recently used idle connection the server has not closed, if any."""
        idle = self._idle
        while idle:
            connection = idle.pop()
            if not connection.closed_by_server():
                return connection
            await anyio.aclose_forcefully(connection.stream)
        return None

    async def _connect(self) -> _Connection:
        try:
            if self.tls:
                context = self._ssl_context or ssl.create_default_context()
                self._ssl_context = context
                stream: anyio.abc.ByteStream = await anyio.connect_tcp(
                    self.host,
                    self.port,
                    ssl_context=context,
                    tls_hostname=self.host,
                    tls_standard_compatible=False,
                )
            else:
                stream = await anyio.connect_tcp(self.host, self.port)
        except OSError as error:
            kind, said = os_error_kind(error), os_error_text(error)
            raise ConnectionFailed(
                f"cannot connect to {self.host}:{self.port}: {kind} ({said})",
                kind=kind,
                reached=False,
                detail=said,
            ) from None
        return _Connection(stream)

    async def aclose(self) -> None:
        """Close the idle connections; a connection in use closes when its request ends.
        Idempotent."""
        self.closed = True
        idle, self._idle = self._idle, []
        for connection in idle:
            await anyio.aclose_forcefully(connection.stream)
