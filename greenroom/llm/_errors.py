"""The few errors a chat model call ends with, whatever the provider said.

Messages name the model and the HTTP status, never the API key or the request
headers; the provider's own exception is not chained (it carries the request).
"""

from __future__ import annotations

from typing import ClassVar

from .._errors import GreenroomError

UNREACHED = frozenset({"connection refused", "name not resolved", "unreachable", "connection failed"})
"""The kinds of :class:`ModelError` of a request that never reached its server."""


class ModelError(GreenroomError):
    """A chat model call failed. ``status`` is the HTTP status when there was one;
    ``kind`` says what happened, in a few words a report can count by: ``"HTTP 503"``
    (any status), ``"connection refused"``, ``"connection reset"``, ``"name not
    resolved"``, ``"unreachable"``, ``"closed before answering"``, ``"bad HTTP"``,
    ``"timeout"``, ``"stream cut"``, ``"empty stream"``, ``"stream error"`` (the server
    sent an error event), ``"bad JSON"`` (an answer that is not what the protocol says)."""

    default_kind: ClassVar[str] = "model error"

    def __init__(self, message: str, *, status: int | None = None, kind: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind or (f"HTTP {status}" if status is not None else self.default_kind)


class RateLimited(ModelError):
    """The provider kept answering 429 after the allowed retries (or asked for a wait
    longer than allowed). ``retry_after``: the wait it last asked for, in seconds."""

    def __init__(self, message: str, *, retry_after: float | None = None, status: int | None = 429) -> None:
        super().__init__(message, status=status)
        self.retry_after = retry_after


class TimedOut(ModelError):
    """The call did not finish within its per-call timeout."""

    default_kind = "timeout"


class Unavailable(ModelError):
    """The server could not be reached, or kept failing (5xx) after the allowed retries."""

    default_kind = "unavailable"


class BadRequest(ModelError):
    """The provider refused the request itself (4xx other than 429: bad parameters,
    unknown model, refused credentials). Retrying the same request will not help."""

    default_kind = "bad request"


class ContextTooLong(BadRequest):
    """The request (history, tools and the reply's room) does not fit the model's
    context window. ``limit``: the window in tokens and ``requested``: what the request
    needed, when the server said (``None`` otherwise). Retrying the same request will
    not help; a shorter one may."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = 400,
        limit: int | None = None,
        requested: int | None = None,
    ) -> None:
        super().__init__(message, status=status)
        self.limit = limit
        self.requested = requested
