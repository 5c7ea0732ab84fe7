"""A model client's connection over anyio's byte streams: the path on trio (and on asyncio
with the fast path off). Each ``receive`` is parsed whole (``Exchange.feed``); the body's
silence is watched by one task per stream (``watched``), so a read needs no cancel scope.
"""

from __future__ import annotations

import select
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc

from ._exchange import ConnectionFailed, Exchange, Silence, Stale, broke

_READ = 1 << 16


class StreamConnection:
    """One keep-alive connection over an anyio ``ByteStream`` (see ``_http.Connection``)."""

    __slots__ = ("exchange", "silence", "silent", "socket", "stream")

    def __init__(self, stream: anyio.abc.ByteStream) -> None:
        self.stream = stream
        self.socket: Any = stream.extra(anyio.abc.SocketAttribute.raw_socket, None)
        self.exchange = Exchange()
        self.silence: Silence | None = None
        self.silent = False

    def idle_usable(self) -> bool:
        if self.socket is None:
            return True
        try:
            readable, _, _ = select.select([self.socket], [], [], 0)
        except (OSError, ValueError):  # closed under us
            return False
        return not readable  # readable while idle: closed by the server, or written to

    async def open(self, request: bytes, reused: bool) -> tuple[int, dict[str, str]]:
        self.exchange = exchange = Exchange()
        try:
            await self.stream.send(request)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as error:
            if reused:
                raise Stale from None
            raise ConnectionFailed(
                f"the connection broke while sending: {error!r}", kind=broke(error)
            ) from None
        while not exchange.head:
            if exchange.failure is not None:
                raise exchange.failure
            data = await self._read(reused)
            if data:
                exchange.feed(data)
            else:
                exchange.at_eof(reused)
        return exchange.status, exchange.headers

    async def receive(self) -> bytes:
        exchange = self.exchange
        while True:
            if exchange.parts:
                return exchange.take()
            if exchange.ended:
                return b""
            if exchange.failure is not None:
                raise exchange.failure
            data = await self._read(False)
            if data:
                exchange.feed(data)
            else:
                exchange.at_eof(False)

    async def _read(self, stale: bool) -> bytes:
        """The connection's next bytes (``b""``: the server closed it)."""
        silence = self.silence
        if silence is not None:
            silence.waiting = True
        try:
            return await self.stream.receive(_READ)
        except anyio.EndOfStream:
            return b""
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as error:
            if self.silent:
                assert silence is not None
                raise TimeoutError(f"no data for {silence.bound:g}s") from None
            if stale and not self.exchange.received:
                raise Stale from None
            raise ConnectionFailed(
                f"the connection broke while reading: {error!r}", kind=broke(error)
            ) from None
        finally:
            if silence is not None:
                silence.waiting = False
                silence.reads += 1

    @asynccontextmanager
    async def watched(self, silence: float | None) -> AsyncIterator[None]:
        """A task looks every quarter of ``silence`` whether a read has waited that long,
        and closes the stream if so (the read then raises ``TimeoutError``). Its task
        group is this block's; an error of the block leaves it as it was raised."""
        if silence is None:
            yield
            return
        watch = self.silence = Silence(silence)
        failure: BaseException | None = None
        async with anyio.create_task_group() as group:
            group.start_soon(self._watch, watch)
            try:
                yield
            except BaseException as error:  # raised again below, outside the group, unwrapped
                failure = error
            finally:
                self.silence = None
                group.cancel_scope.cancel()
        if failure is not None:
            raise failure

    async def _watch(self, watch: Silence) -> None:
        while True:
            await anyio.sleep(watch.every)
            if watch.look():
                self.silent = True
                await anyio.aclose_forcefully(self.stream)
                return

    async def aclose(self) -> None:
        await anyio.aclose_forcefully(self.stream)


async def connect(host: str, port: int, context: ssl.SSLContext | None) -> StreamConnection:
    """A connection to ``host:port`` (TLS with ``context``). Raises ``OSError``."""
    if context is not None:
        stream: anyio.abc.ByteStream = await anyio.connect_tcp(
            host, port, ssl_context=context, tls_hostname=host, tls_standard_compatible=False
        )
    else:
        stream = await anyio.connect_tcp(host, port)
    return StreamConnection(stream)
