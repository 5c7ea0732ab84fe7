"""``serve``: Hypercorn on the running backend, on a socket bound before it starts.

Binding first means the caller learns the real address (``port=0`` picks a free one)
through ``task_status`` before any request can arrive, and a busy port is an error
naming the address at once.
"""

from __future__ import annotations

import logging
import socket
from typing import Any

import anyio
import sniffio
from anyio.abc import TaskStatus

from .._errors import InvalidInput


def parse_address(text: str, what: str = "--http") -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) -> ``(host, port)``; port 0 picks a free one."""
    host, _, port = text.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise InvalidInput(f"{what} must be HOST:PORT (got {text!r:.80})", field=what, value=text)
    return host, int(port)


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket; a busy or unusable address is an ``InvalidInput`` naming it."""
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        return socket.create_server((host, port), family=family, backlog=1024)
    except OSError as error:
        raise InvalidInput(
            f"cannot listen on {host}:{port}: {error.strerror or error}",
            field="address",
            value=f"{host}:{port}",
        ) from None


async def serve(
    app: Any,
    sock: socket.socket,
    *,
    stop: anyio.Event,
    graceful_timeout: float = 3.0,
    task_status: TaskStatus[str] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` on ``sock`` (which it takes over) until ``stop`` is set, then stop
    gracefully: no new connections, requests in flight get ``graceful_timeout`` seconds.
    Reports ``http://HOST:PORT`` through ``task_status`` once listening. Cancelling the
    caller closes the server at once."""
    from hypercorn.config import Config

    host, port = sock.getsockname()[:2]
    url = f"http://{f'[{host}]' if ':' in host else host}:{port}"
    config = Config()
    config.bind = [f"fd://{sock.detach()}"]
    config.accesslog = None
    config.errorlog = logging.getLogger("greenroom.service.http")  # Hypercorn's own errors, in ours
    config.graceful_timeout = graceful_timeout
    config.keep_alive_timeout = 75
    config.backlog = 2048  # Hypercorn listens again with its own backlog (default 100): too few for bursts
    task_status.started(url)
    if sniffio.current_async_library() == "trio":  # Hypercorn has one module per backend
        from hypercorn.trio import serve as serve_trio

        await serve_trio(app, config, shutdown_trigger=stop.wait)
    else:
        from hypercorn.asyncio import serve as serve_asyncio

        await serve_asyncio(app, config, shutdown_trigger=stop.wait)
