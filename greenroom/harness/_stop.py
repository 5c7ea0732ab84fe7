"""``StopSignal``: ask one harness (or a team sharing the signal) to stop."""

from __future__ import annotations

import anyio


class StopSignal:
    """A stop request in two strengths, shared by every harness given this object.

    ``request()`` (after the current turn): each harness finishes the model call and
    tool calls it is running, keeps that turn, and ends its phase with
    ``stop_requested`` before the next model call. ``request(immediate=True)`` also
    cancels the model call and the tool call in flight; the unfinished turn is
    discarded, so no history is left half-written. Either way every later phase ends
    at entry with ``stop_requested``. A stop cannot be taken back: make a new signal.
    """

    def __init__(self) -> None:
        self.requested = False
        self.immediate = False
        self._scopes: set[anyio.CancelScope] = set()

    def request(self, *, immediate: bool = False) -> None:
        self.requested = True
        if immediate and not self.immediate:
            self.immediate = True
            for scope in list(self._scopes):
                scope.cancel()

    def _enter(self, scope: anyio.CancelScope) -> None:
        """Register a running turn's scope (cancelled at once if already stopped hard)."""
        self._scopes.add(scope)
        if self.immediate:
            scope.cancel()

    def _leave(self, scope: anyio.CancelScope) -> None:
        self._scopes.discard(scope)
