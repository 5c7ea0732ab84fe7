"""``StopSignal``: ask one harness (or a team sharing the signal) to stop."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..actors import ActorRef


class StopSignal:
    """A stop request in two strengths, shared by every harness given this object.

    ``request()`` (after the current turn): each harness finishes the model call and
    tool calls it is running, keeps that turn, and ends its phase with
    ``stop_requested`` before the next model call. ``request(immediate=True)`` also
    interrupts each harness's running phase (``ActorRef.interrupt``): the model call
    and the tool call in flight are cancelled, the unfinished turn is discarded, so no
    history is left half-written, and the phase answers ``stop_requested`` at once.
    Either way every later phase ends at entry with ``stop_requested``. A stop cannot
    be taken back: make a new signal.

    The signal holds the refs of the harness actors using it (each adds itself on
    start and leaves on stop), not their cancel scopes: interrupting is the kernel's job.
    """

    __slots__ = ("_harnesses", "immediate", "requested")

    def __init__(self) -> None:
        self.requested = False
        self.immediate = False
        self._harnesses: set[ActorRef] = set()

    def request(self, *, immediate: bool = False) -> None:
        """Returns at once; the interrupted phases answer their askers shortly after."""
        self.requested = True
        if immediate and not self.immediate:
            self.immediate = True
            for ref in list(self._harnesses):
                ref.interrupt()

    def _attach(self, ref: ActorRef) -> None:
        self._harnesses.add(ref)

    def _detach(self, ref: ActorRef) -> None:
        self._harnesses.discard(ref)
