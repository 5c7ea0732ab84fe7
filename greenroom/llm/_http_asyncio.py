"""**Backend fast path — asyncio only.** A model client's connection as an
``asyncio.Protocol``: the loop hands each network read to :meth:`data_received`, which
parses it at once (``Exchange.feed``) and wakes the reader only if one waits. anyio's
stream on asyncio pauses and resumes the transport around every ``receive`` (an epoll
register and unregister each time); this never pauses it, except when a reader leaves
more than ``HIGH_WATER`` bytes of body unread. The silence watchdog is one timer a
stream (``loop.call_later``, a look every quarter of the bound), not one per read.

Chosen by ``OriginClient`` on asyncio unless told not to (``fast_path=False``,
``GREENROOM_ASYNCIO_FAST_PATH=0``); the same tests run through it and through the streams
path (``_http_streams``), which is the one on trio.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from ._exchange import HIGH_WATER, ConnectionFailed, Exchange, Silence, Stale, broke


class ProtocolConnection(asyncio.Protocol):
    """One keep-alive connection (see ``_http.Connection``)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.exchange = Exchange()
        self.active = False  # a request went out on it
        self.spoiled = False  # the server wrote while no answer was due
        self.closed = False  # the server closed it, or it broke
        self.lost: BaseException | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.drained: asyncio.Future[None] | None = None
        self.reading_paused = False
        self.writing_paused = False
        self.silence: Silence | None = None
        self.silent = False
        self.timer: asyncio.TimerHandle | None = None

    # the loop's calls ---------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        silence = self.silence
        if silence is not None:
            silence.reads += 1
        exchange = self.exchange
        if not self.active or exchange.ended:
            self.spoiled = True
            return
        exchange.feed(data)
        if exchange.buffered > HIGH_WATER and not self.reading_paused and self.transport is not None:
            self.reading_paused = True
            self.transport.pause_reading()
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def eof_received(self) -> bool:
        self.closed = True
        self._wake()
        return False  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.lost = exc
        self._wake()
        drained = self.drained
        if drained is not None and not drained.done():
            drained.set_result(None)

    def pause_writing(self) -> None:
        self.writing_paused = True

    def resume_writing(self) -> None:
        self.writing_paused = False
        drained = self.drained
        if drained is not None and not drained.done():
            drained.set_result(None)

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # the client's calls -------------------------------------------------------------------
    def idle_usable(self) -> bool:
        transport = self.transport
        return not (self.closed or self.spoiled or transport is None or transport.is_closing())

    async def open(self, request: bytes, reused: bool) -> tuple[int, dict[str, str]]:
        self.exchange = exchange = Exchange()
        self.active = True
        transport = self.transport
        if self.closed or transport is None:
            if reused:
                raise Stale
            raise ConnectionFailed(
                "the connection closed before the request went out", kind="connection reset"
            )
        transport.write(request)
        while self.writing_paused and not self.closed:
            self.drained = self.loop.create_future()
            try:
                await self.drained
            finally:
                self.drained = None
        while not exchange.head:
            if exchange.failure is not None:
                raise exchange.failure
            if self.closed:
                self._ended(reused)
            await self._wait()
        return exchange.status, exchange.headers

    async def receive(self) -> bytes:
        exchange = self.exchange
        while True:
            if exchange.parts:
                data = exchange.take()
                if self.reading_paused and self.transport is not None:
                    self.reading_paused = False
                    self.transport.resume_reading()
                return data
            if exchange.ended:
                return b""
            if exchange.failure is not None:
                raise exchange.failure
            if self.closed:
                self._ended(False)
                continue
            if self.silent:
                assert self.silence is not None
                raise TimeoutError(f"no data for {self.silence.bound:g}s")
            await self._wait()

    def _ended(self, stale: bool) -> None:
        """The connection closed under an exchange: an answer delimited by it ends;
        anything else raises (``Stale``: a reused connection, nothing of the answer read)."""
        lost = self.lost
        if lost is not None and not (stale and not self.exchange.received):
            raise ConnectionFailed(f"the connection broke while reading: {lost!r}", kind=broke(lost))
        self.exchange.at_eof(stale)

    async def _wait(self) -> None:
        waiter = self.waiter = self.loop.create_future()
        silence = self.silence
        if silence is not None:
            silence.waiting = True
        try:
            await waiter
        finally:
            self.waiter = None
            if silence is not None:
                silence.waiting = False

    @asynccontextmanager
    async def watched(self, silence: float | None) -> AsyncIterator[None]:
        """A timer looks every quarter of ``silence`` whether a read has waited that long;
        if so the read raises ``TimeoutError``."""
        if silence is None:
            yield
            return
        watch = self.silence = Silence(silence)
        self.timer = self.loop.call_later(watch.every, self._look)
        try:
            yield
        finally:
            self.silence = None
            if self.timer is not None:
                self.timer.cancel()
                self.timer = None

    def _look(self) -> None:
        watch = self.silence
        if watch is None:
            return
        if watch.look():
            self.silent = True
            self.timer = None
            self._wake()
        else:
            self.timer = self.loop.call_later(watch.every, self._look)

    async def aclose(self) -> None:
        transport = self.transport
        if transport is not None:
            transport.abort()  # at once: the server sees the client hang up


async def connect(host: str, port: int, context: ssl.SSLContext | None) -> ProtocolConnection:
    """A connection to ``host:port`` (TLS with ``context``). Raises ``OSError``."""
    loop = asyncio.get_running_loop()
    _, protocol = await loop.create_connection(
        lambda: ProtocolConnection(loop),
        host,
        port,
        ssl=context,
        server_hostname=host if context is not None else None,
        happy_eyeballs_delay=0.25,
    )
    return protocol
