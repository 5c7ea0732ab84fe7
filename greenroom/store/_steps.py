"""``StepStore``: the step journal of durable agent work, and its record, ``Step``.

Every model reply and every tool result of a task's attempt is written here before the
agent acts on it; a task claimed again (after a crash, a lease expiry, a restart) is
replayed from it: each step already recorded is answered from the journal instead of
being asked again. Steps are keyed by their place in the task's work (``key``: phase,
context label, iteration, tool call), never by attempt, so a later attempt finds what an
earlier one recorded.

The embedded store keeps the journal in SQLite under the data dir (``steps.sqlite3``),
the PostgreSQL store in a table every daemon of a fleet shares. Both are peers behind
this interface, tested by one contract suite.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, Protocol, runtime_checkable

import msgspec

from .._errors import DataError, InvalidInput
from ..messages._codec import prepare_types
from ._errors import Fenced

StepKind = Literal["model", "tool_started", "tool_released", "tool_running", "tool"]
"""``model``: a model's reply; ``tool_started``: a tool call is about to begin (durable
before a tool that is not read-only may run, so a crash mid-call is known);
``tool_released``: it was let run (the store has it before the tool starts, so a begun
call without one never ran); ``tool_running``: noted (``StepStore.note``) the instant
before the tool is invoked, where the release was a database write — a released call
without one, whose process is gone and whose notes this process folded, never ran;
``tool``: its result."""
STEP_KINDS = ("model", "tool_started", "tool_released", "tool_running", "tool")

Refused = dict[tuple[str, int], Fenced]
"""The steps a write refused, by ``(task_id, token)``: the attempt's ``Fenced``."""

MAX_KEY = 512
MAX_BODY = 16 << 20


class Step(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One recorded step of a task's work. (Not tracked by the garbage collector: a step
    never takes part in a reference cycle, and a journal holds many.)"""

    task_id: str
    key: str
    """Its place in the task's work, the same in every attempt (``p0/main/m1``: phase 0,
    context ``main``, model call 1; ``p0/main/m1/t0``: that reply's first tool call)."""
    kind: StepKind
    fingerprint: str
    """What was asked (a digest of the request, or of the tool and its arguments): a
    replay that asks something else at this place has diverged."""
    body: dict[str, Any] = {}
    """What was answered (the reply, the tool's record); ``{}`` for ``tool_started``."""
    encoded: bytes = b""
    """``body`` already encoded as a JSON object, which a writer may give instead of
    ``body`` (the harness encodes a reply straight from its struct); a store keeps these
    bytes, and a step read back has ``body`` decoded from them (``encoded`` empty)."""
    attempt: int = 0
    """The attempt that recorded it (for the reader; replay ignores it)."""
    at: float = 0.0
    token: int = 0
    """The fencing token of the attempt that recorded it (``AgentTask.token``): the store
    refuses the step once that attempt is not the task's live one. ``0``: not fenced (a
    step written outside an attempt, as a test or a tool might)."""


def check_step(step: Step) -> None:
    """Refuse a step the journal cannot keep, naming the field (nothing is written)."""
    if not isinstance(step.task_id, str) or not step.task_id:
        raise InvalidInput(f"step task_id must be a non-empty string, got {step.task_id!r}", field="task_id")
    if not isinstance(step.key, str) or not step.key or len(step.key) > MAX_KEY or "\x00" in step.key:
        raise InvalidInput(
            f"step key must be 1 to {MAX_KEY} characters without NUL, got {step.key!r:.80}",
            field="key",
            value=step.key,
        )
    if step.kind not in STEP_KINDS:
        kinds = ", ".join(STEP_KINDS)
        raise InvalidInput(f"step kind must be one of {kinds}, got {step.kind!r}", field="kind")
    if step.encoded and (not isinstance(step.encoded, bytes) or not step.encoded.startswith(b"{")):
        raise InvalidInput(f"step encoded must be a JSON object, got {step.encoded!r:.80}", field="encoded")


def encoded_body(step: Step) -> bytes:
    """The step's body as JSON (what a store keeps)."""
    return step.encoded or _encoder.encode(step.body)


_body = msgspec.json.Decoder(dict[str, Any])
_encoder = msgspec.json.Encoder()


def step_from_row(task_id: str, row: tuple[Any, ...], where: str) -> Step:
    """A stored row ``(key, kind, fingerprint, body JSON, attempt, at)`` as a ``Step``
    (``DataError`` naming the step if its body is damaged)."""
    key, kind, fingerprint, body, attempt, at = row
    try:
        decoded = _body.decode(body)
    except msgspec.DecodeError as error:
        raise DataError(f"{where}: the step {key!r} of task {task_id!r} is damaged ({error})") from None
    return Step(
        task_id=task_id, key=key, kind=kind, fingerprint=fingerprint, body=decoded, attempt=attempt, at=at
    )


@runtime_checkable
class StepStore(Protocol):
    """The step journal's storage. Every call is one transaction; ``write`` returns once
    its steps are durable (a reply means on disk, as everywhere in greenroom)."""

    async def write(self, steps: Sequence[Step], *, durable: bool = True) -> Refused:
        """Record ``steps`` (in order) in one transaction. A step whose ``(task_id, key,
        kind)`` is already recorded keeps what was recorded first (a replay never rewrites
        history): the write is idempotent. ``InvalidInput`` (naming the field) for a step
        that cannot be kept, before anything is written.

        Fencing: a step with a ``token`` is written only while that token's attempt is the
        task's live one, checked where the write is serialised (PostgreSQL: the task's row
        locked in the same transaction, so a grant waits for it or it sees the grant; the
        files: against the process's own task graph, which owns the attempts). The others
        of the batch are written; the refused ones come back: ``{(task_id, token):
        Fenced}`` (empty: all written).

        ``durable=True``: returns once the steps are durable (a power loss keeps them).
        ``durable=False``: returns once they are the store's — this process dying (SIGKILL)
        loses none of them — without waiting for the disk: a power loss may still lose them
        until a later :meth:`sync` or durable write, which makes every write before it
        durable too (a store keeps the order of its writes)."""
        ...

    async def note(self, step: Step) -> None:
        """Keep ``step`` so that this process dying cannot lose it, at once and from the
        caller's own task — not behind the batches of other tasks' steps: the harness notes
        a writing call's result the moment the tool returns, so a crash asks only about
        calls it cut short. The files: one ``O_APPEND`` write the next process folds in;
        PostgreSQL: a transaction of its own. Fenced as :meth:`write` (``Fenced`` raised).
        The step is also written the usual way; :meth:`sync` makes it durable."""
        ...

    async def sync(self) -> None:
        """Make every write that returned before this call durable (see :meth:`write`).
        Runs beside writes: a write never waits for a sync in flight."""
        ...

    async def incarnation(self) -> str | None:
        """What changes whenever a write made with ``durable=False`` may have been lost: as
        long as it is the same, every write that returned is still there (the files: the
        machine's boot — only a reboot loses what the kernel had). ``None``: the store
        cannot tell, so nothing may be concluded from a step's absence that a durable write
        did not make sure of. Cheap enough to ask once per process."""
        ...

    async def read(self, task_id: str) -> list[Step]:
        """The task's steps, in the order they were recorded (``[]``: none)."""
        ...

    async def read_many(self, task_ids: Sequence[str]) -> dict[str, list[Step]]:
        """:meth:`read` for many tasks in one transaction (a restart resuming a thousand
        tasks at once reads their journals together); every id asked is a key."""
        ...

    async def drop(self, task_ids: Sequence[str]) -> int:
        """Forget the steps of ``task_ids`` (their tasks are final); how many went."""
        ...

    async def aclose(self) -> None:
        """Release what the store holds (a pool it was given stays open)."""
        ...


prepare_types(Step)  # decoded in the stores' worker threads
