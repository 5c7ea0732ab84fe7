"""A TCP proxy that can stop forwarding: a network that hangs (the pause benchmark, and
the tests of a daemon whose PostgreSQL connection stalls)."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable
from typing import Any


class StallingProxy:
    """A TCP proxy on 127.0.0.1 to ``upstream`` (a callable that opens the server's socket)
    that can stop forwarding — a network that hangs, both ways, with every connection
    left open — and start again: ``stall()``, ``resume()``. Its threads are daemons,
    ended by ``close()``."""

    def __init__(self, upstream: Callable[[], socket.socket]) -> None:
        self.upstream = upstream
        self.flowing = threading.Event()
        self.flowing.set()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._sockets: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, name="stalling-proxy", daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:  # closed
                return
            server = self.upstream()
            self._sockets += [client, server]
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                self.flowing.wait()  # stalled: the bytes wait here, the connection stays open
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)

    def stall(self) -> None:
        self.flowing.clear()

    def resume(self) -> None:
        self.flowing.set()

    def close(self) -> None:
        self._closed = True
        self.flowing.set()
        self._listener.close()
        for end in self._sockets:
            with contextlib.suppress(OSError):
                end.close()


def server_socket(info: dict[str, Any]) -> socket.socket:
    """A connection to the PostgreSQL server ``info`` (a parsed conninfo) names: its Unix
    socket, or its TCP port."""
    host, port = str(info.get("host") or "127.0.0.1"), int(info.get("port") or 5432)
    if host.startswith("/"):
        unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        unix.connect(f"{host}/.s.PGSQL.{port}")
        return unix
    return socket.create_connection((host, port))
