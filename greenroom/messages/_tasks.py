"""The task contract (spec 000, S34): ``AgentTask``, ``AgentResult``, ``AgentError``."""

from __future__ import annotations

import enum
from typing import Annotated, Any

import msgspec

TaskId = Annotated[str, msgspec.Meta(min_length=1, max_length=200, pattern=r"^[^\s/\\]+$")]
AgentType = Annotated[str, msgspec.Meta(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.:-]+$")]


class TaskStatus(enum.StrEnum):
    """Where a task is in its life. Final: COMPLETED, FAILED, CANCELLED, DEPENDENCY_FAILED."""

    PENDING = "PENDING"
    """Waiting to be claimed (its dependencies may not be complete yet)."""
    IN_PROGRESS = "IN_PROGRESS"
    """Claimed by ``owner`` under a lease."""
    WAITING = "WAITING"
    """Parked until a person approves or denies a tool call (``waiting`` says which);
    holds no agent, no lease and no connection. Approved or denied, it is PENDING again."""
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    """Failed for good: a non-retryable error, or ``max_attempts`` spent."""
    CANCELLED = "CANCELLED"
    DEPENDENCY_FAILED = "DEPENDENCY_FAILED"
    """Can never run: a task it depends on (directly or not) failed or was cancelled."""

    @property
    def final(self) -> bool:
        return self not in (TaskStatus.PENDING, TaskStatus.IN_PROGRESS, TaskStatus.WAITING)


class AgentResult(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What an agent reports for a finished task."""

    task_id: TaskId
    outcome: str = "completed"
    artifacts: dict[str, Any] = {}
    notes: str = ""
    next_actions: list[str] = []


class AgentError(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Why a task attempt failed; ``retryable`` sends it back to PENDING while attempts remain."""

    reason: str
    retryable: bool = False


class AgentTask(msgspec.Struct, frozen=True, forbid_unknown_fields=True, gc=False):
    """One node of the task graph (spec 000's ``{id, type, owner, status, priority,
    input, context, metadata}`` plus attempts, dependencies and lease bookkeeping).

    Higher ``priority`` is claimed first; equal priorities in submission order.
    Timestamps are wall-clock seconds (``time.time()``), so leases survive restarts.

    Not tracked by Python's cycle collector (``gc=False``): a supervisor holding a
    million tasks would otherwise have every full collection walk all of them (measured:
    a 0.2 s pause landing in a claim). A task never takes part in a reference cycle
    unless its ``input``/``context``/``metadata`` were made to hold the task itself, which
    nothing here does (they come from JSON).
    """

    id: TaskId
    type: AgentType
    owner: str | None = None
    status: TaskStatus = TaskStatus.PENDING
    priority: Annotated[int, msgspec.Meta(ge=-1_000_000, le=1_000_000)] = 0
    input: dict[str, Any] = {}
    context: dict[str, Any] = {}
    metadata: dict[str, Any] = {}
    attempt: Annotated[int, msgspec.Meta(ge=0)] = 0
    max_attempts: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 3
    depends_on: list[TaskId] = []
    created_at: float = 0.0
    updated_at: float = 0.0
    lease_expires_at: float | None = None
    last_heartbeat_at: float | None = None
    result: AgentResult | None = None
    error: AgentError | None = None
    order: int = 0
    """Submission order, stamped by the supervisor (FIFO within a priority)."""
    crashes: Annotated[int, msgspec.Meta(ge=0)] = 0
    """Times this task was running when its process died (found orphaned at a restart).
    Such an attempt is not charged; at ``max_crashes`` the task is failed as a poison task."""
    waiting: dict[str, Any] | None = None
    """While WAITING: the exact call that waits for a person (``step``, ``tool``,
    ``arguments``, ``risk``, ``since``, ``expires_at``)."""
    decisions: dict[str, dict[str, Any]] = {}
    """The approvals and denials given, by step (``approved``, ``by``, ``at``, ``reason``):
    a resumed attempt runs exactly the approved call, once, and shows a denial to the model."""
    retries: list[dict[str, Any]] = []
    """The retries people asked for, oldest first, the last 20 (``by``, ``at``,
    ``reason``, and what it was: ``status``, ``attempt``, ``error``)."""
    token: Annotated[int, msgspec.Meta(ge=0)] = 0
    """The fencing token of its latest attempt: every grant gives the next one, and it never
    goes back (``attempt`` does: a release or a crash refunds it). A write made under an
    attempt names its token; the store refuses it once a newer one exists (``Fenced``)."""


class TaskLimits(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Sizes the task graph accepts, so one oversized input cannot bloat the journal and
    the event log (a 30 MB input quoted in every retry's error would be 30 MB per event).
    The ``[limits]`` section of the daemon's config."""

    max_task_bytes: Annotated[int, msgspec.Meta(ge=1024, le=1 << 30)] = 1 << 20
    """A submitted task's ``input``, ``context`` and ``metadata`` together, as JSON.
    Larger: the submission is refused (all of it), naming the task and the size."""
    max_result_bytes: Annotated[int, msgspec.Meta(ge=1024, le=1 << 30)] = 1 << 20
    """An agent's result, as JSON. Larger: the attempt fails (not retried), saying so."""
    max_crashes: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 4
    """A task whose process died while running it this many times is failed as a poison
    task; until then it is re-queued without being charged an attempt. Only deaths while
    it ran alone count past ``isolate_after_crashes`` (with the defaults: two deaths
    shared with other tasks, then two alone), so kills from outside — a deploy, the OOM
    killer taking another process, a node taken away — never fail an innocent task."""
    isolate_after_crashes: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 2
    """A task whose process died while running it this many times is a suspect: it runs
    alone — once nothing else of its node is in progress and no other task of its type is
    ready, with nothing else granted until it ends — so its next death says it was that
    task. A death shared with other tasks says nothing about which of them caused it:
    they run again at full concurrency; a poison task dies again, and is isolated then."""
    max_error_chars: Annotated[int, msgspec.Meta(ge=80, le=1 << 20)] = 2000
    """A failure's reason is cut to this many characters (marked as cut) before it is
    stored or logged."""

    def clip(self, error: AgentError) -> AgentError:
        reason = error.reason
        limit = self.max_error_chars
        if len(reason) <= limit:
            return error
        keep = limit - 64  # room for the note, so the whole stays within the limit
        note = f" ... [{len(reason) - keep} more characters cut: max_error_chars]"
        return AgentError(reason=reason[:keep] + note, retryable=error.retryable)
