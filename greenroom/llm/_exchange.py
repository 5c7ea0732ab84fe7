"""What both ways to the network share (``_http_asyncio``, ``_http_streams``) and
``OriginClient`` hands over: an answer as ``httptools`` parses it (:class:`Exchange`), the
lazy silence watchdog (:class:`Silence`), a whole :class:`Answer`, and what a failed
connection says (:class:`ConnectionFailed`, :func:`os_error_kind`)."""

from __future__ import annotations

import errno
import socket
import ssl
from collections import deque
from collections.abc import Iterator
from typing import final

import httptools

CUT = "the server closed the connection before the answer was whole"
HIGH_WATER = 1 << 20
"""Bytes of body a connection holds unread before it stops reading from the network."""


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


def broke(error: BaseException) -> str:
    """A connection that broke under a send or a read: reset, unless it says otherwise."""
    kind = os_error_kind(error)
    return "connection reset" if kind == "connection failed" else kind


def bad_http(said: object) -> ConnectionFailed:
    return ConnectionFailed(f"the answer is not valid HTTP/1.1: {said}", kind="bad HTTP")


class Stale(Exception):
    """A reused connection ended before any byte of the answer: open another, once."""


@final
class Answer:
    """A whole HTTP answer: ``status``, ``headers`` (names lower-cased) and ``body``."""

    __slots__ = ("body", "headers", "status")

    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body


class Exchange:
    """One answer as ``httptools`` parses it: each network read is fed whole
    (:meth:`feed`), the parser's callbacks collect the head (informational answers
    skipped), the body's pieces (``parts``, taken by the reader all at once) and its end.
    ``after``: bytes came past the answer's end (the connection cannot carry another)."""

    __slots__ = (
        "after",
        "buffered",
        "ended",
        "failure",
        "head",
        "headers",
        "keep",
        "on_body",
        "parser",
        "parts",
        "raw",
        "received",
        "status",
    )

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.on_body = self.parts.append
        """The parser's body callback: each piece straight onto ``parts`` (a C call, not a
        Python frame per chunk of a chunked body)."""
        self.parser = httptools.HttpResponseParser(self)
        self.raw: list[tuple[bytes, bytes]] = []
        self.head = False
        self.status = 0
        self.headers: dict[str, str] = {}
        self.buffered = 0
        self.ended = False
        self.keep = False
        self.after = False
        self.received = False
        """Some byte of the answer arrived (a reused connection that ends before is stale)."""
        self.failure: ConnectionFailed | None = None

    # the parser's callbacks -------------------------------------------------------------
    def on_message_begin(self) -> None:
        if self.ended:
            self.after = True

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self.head:  # trailers after a chunked body are not the head's
            self.raw.append((name, value))
        # (the body: ``on_body``, set in ``__init__``)

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if status < 200:  # 100 Continue and the like: the answer is still to come
            self.raw = []
            return
        self.status = status
        self.headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in self.raw}
        self.head = True

    def on_message_complete(self) -> None:
        if self.head and not self.ended:
            self.ended = True
            self.keep = self.parser.should_keep_alive()

    # ------------------------------------------------------------------------------------
    def feed(self, data: bytes) -> None:
        """Parse one network read; a malformed answer sets :attr:`failure`."""
        self.received = True
        self.buffered += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as error:
            if self.ended:  # something past the answer's end: the answer stands, the connection not
                self.after = True
            elif self.failure is None:
                self.failure = bad_http(error)

    def take(self) -> bytes:
        """The body's pieces parsed so far, as one ``bytes``; they are the caller's now."""
        parts = self.parts
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        parts.clear()
        self.buffered = 0
        return data

    def at_eof(self, stale: bool) -> None:
        """The server closed the connection: an answer whose length is the connection's
        ends here; anything else was cut (``Stale`` when nothing of it arrived on a reused
        connection)."""
        if self.ended:
            return
        if not self.head:
            if stale and not self.received:
                raise Stale
            raise ConnectionFailed(
                "the server closed the connection before answering", kind="closed before answering"
            )
        headers = self.headers
        if "content-length" not in headers and "transfer-encoding" not in headers:
            self.ended = True  # a body delimited by the connection's end (RFC 9112, 6.3)
            self.keep = False
            return
        raise ConnectionFailed(CUT, kind="closed mid-answer")

    def reusable(self) -> bool:
        return self.ended and self.keep and not self.after and self.failure is None


class Silence:
    """The lazy silence watchdog both paths share: readers count their reads (``reads``)
    and say when they wait (``waiting``); :meth:`look`, called every quarter of
    ``bound``, says whether a wait has gone a whole ``bound`` without a read. No clock
    read, timer or cancel scope per read: a silence is noticed within a quarter of the
    bound after it ran out."""

    __slots__ = ("bound", "idle_looks", "reads", "seen", "waiting")

    def __init__(self, bound: float) -> None:
        self.bound = bound
        self.reads = 0
        self.waiting = False
        self.seen = -1
        self.idle_looks = 0

    @property
    def every(self) -> float:
        return self.bound / 4

    def look(self) -> bool:
        """True: the reader has waited ``bound`` seconds with nothing read."""
        if not self.waiting or self.reads != self.seen:
            self.seen = self.reads
            self.idle_looks = 0
            return False
        self.idle_looks += 1
        return self.idle_looks >= 4
