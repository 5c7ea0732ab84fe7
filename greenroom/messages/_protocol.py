"""Messages to and from the supervisor actor and the log actor.

The supervisor answers each ask once the change is durable; the reply types are
named after what happened (``Granted``, ``NoWork``, the task itself).
"""

from __future__ import annotations

from typing import Any

import msgspec

from .._request import Request
from ._events import Event, Visibility
from ._tasks import AgentError, AgentResult, AgentTask, TaskStatus

# -- to the supervisor ----------------------------------------------------------------


class Submit(msgspec.Struct, Request[list[AgentTask]], frozen=True):
    """Add tasks (all or none). Replies with the stored tasks."""

    tasks: list[AgentTask]


class Claim(msgspec.Struct, Request["Granted | NoWork"], frozen=True):
    """Ask for the next runnable task of ``agent_type``. Replies ``Granted`` or ``NoWork``;
    with ``wait=True`` the reply waits until work of that type exists (or the
    supervisor stops granting)."""

    agent_id: str
    agent_type: str
    wait: bool = False


class Heartbeat(msgspec.Struct, Request[AgentTask], frozen=True):
    """Extend the owner's lease. Replies with the task. ``token`` (on this message and on
    every report of an attempt below): the attempt's fencing token (``AgentTask.token``);
    the store refuses the request with ``Fenced`` once the attempt it names is not the
    task's live one. ``None``: checked by ``agent_id`` alone."""

    task_id: str
    agent_id: str
    token: int | None = None


class Complete(msgspec.Struct, Request[AgentTask], frozen=True):
    """Mark the owner's task COMPLETED with ``result``. Replies with the task."""

    task_id: str
    agent_id: str
    result: AgentResult
    token: int | None = None


class Fail(msgspec.Struct, Request[AgentTask], frozen=True):
    """Report a failed attempt. Retryable and attempts left: back to PENDING; otherwise
    FAILED (and its dependents DEPENDENCY_FAILED). Replies with the task."""

    task_id: str
    agent_id: str
    error: AgentError
    token: int | None = None


class Release(msgspec.Struct, Request[AgentTask], frozen=True):
    """Hand an unfinished task back (shutdown): PENDING again, the attempt not counted.
    ``attempt``: only if the task is still in that attempt (a grant handed back must not
    end a later one)."""

    task_id: str
    agent_id: str
    attempt: int | None = None
    token: int | None = None


class Cancel(msgspec.Struct, Request[AgentTask], frozen=True):
    """Cancel a task that is not final yet. Replies with the task."""

    task_id: str
    reason: str = "cancelled"


class Park(msgspec.Struct, Request[AgentTask], frozen=True):
    """The owner parks its task until a person decides ``call`` (``step``, ``tool``,
    ``arguments``, ``risk``; ``expires_in`` seconds, optional): WAITING, no owner, no
    lease, the attempt not counted. Replies with the task."""

    task_id: str
    agent_id: str
    call: dict[str, Any]
    token: int | None = None


class Decide(msgspec.Struct, Request[AgentTask], frozen=True):
    """A person approves (``approved``) or denies the call a WAITING task waits on:
    PENDING again, the decision kept on the task. ``step``: only if that is the call
    waiting (a decision about a call that was shown must not apply to another). A task
    not waiting is refused (``InvalidTransition``): a second approval changes nothing.
    ``as_done``: an approval saying the call already happened (done by hand, or by an
    attempt that died before recording it): its result is recorded, the tool not run."""

    task_id: str
    approved: bool
    by: str
    reason: str = ""
    step: str | None = None
    as_done: bool = False


class Retry(msgspec.Struct, Request[AgentTask], frozen=True):
    """A person runs a FAILED task again: PENDING with a fresh attempt budget, the retry
    kept on the task (``by``, when, ``reason``), and its dependents that failed because of
    it PENDING again (waiting for it). A DEPENDENCY_FAILED task is retried through the
    FAILED tasks upstream that it failed because of (refused, changing nothing, when one of
    them was CANCELLED or is archived). Any other status is refused
    (``InvalidTransition``). Replies with the task. ``dry_run``: only the checks — the
    refusal a retry would meet, or the task as it is; nothing changes."""

    task_id: str
    by: str
    reason: str = ""
    dry_run: bool = False


class Dependents(msgspec.Struct, Request[list[str]], frozen=True):
    """The ids of the live tasks that depend on ``task_id`` directly, in submission order
    (``UnknownTask`` if it is not in the live graph)."""

    task_id: str


class GetTask(msgspec.Struct, Request[AgentTask], frozen=True):
    task_id: str


class ListTasks(msgspec.Struct, Request[list[AgentTask]], frozen=True):
    """The tasks that match every filter given, in submission order (``newest_first``:
    the other way), at most ``limit`` (``None``: all): a page, found by the store without
    copying or sorting the graph. A page starts after the task whose ``order`` is
    ``after`` (oldest first) or before the one whose ``order`` is ``before`` (newest
    first); the other bound is ignored."""

    status: TaskStatus | None = None
    type: str | None = None
    after: int = 0
    limit: int | None = None
    archived: bool = False
    """The archived tasks instead (finished ones that left the live graph)."""
    owner: str | None = None
    """Only the tasks this agent holds or last held."""
    text: str | None = None
    """Only the tasks with this text (case ignored) in their id or in a string anywhere in
    their input (a value, not a key)."""
    updated_since: float | None = None
    """Only the tasks that changed at or after this time (seconds since the epoch)."""
    newest_first: bool = False
    before: int | None = None
    """With ``newest_first``: the page starts before this ``order`` (``None``: the newest)."""


class Stats(msgspec.Struct, Request["GraphStats"], frozen=True):
    """Replies with ``GraphStats``."""


class AwaitChange(msgspec.Struct, Request[int], frozen=True):
    """Replies with the supervisor's count of changes once it is past ``after`` (at once
    when it is already). A change is what may move the graph towards idle or away from it:
    a report (complete, fail, release, park), a submission, a person's action, a lease
    check, a claim that found no work, tasks another daemon made ready. With
    ``GraphStats.changes`` (the count when the ``Stats`` was asked): wait for the graph to
    move instead of asking again and again. Fails with ``ActorStopped`` when the
    supervisor stops first."""

    after: int


class StopGranting(msgspec.Struct, Request[None], frozen=True):
    """From now on every claim gets ``NoWork(closing=True)``, parked ones included."""


# -- from the supervisor --------------------------------------------------------------


class Granted(msgspec.Struct, frozen=True):
    task: AgentTask


class NoWork(msgspec.Struct, frozen=True):
    closing: bool = False
    """``True`` once the supervisor stopped granting (shutdown): do not ask again."""


class Durations(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """How long something took, counted into fixed buckets (a histogram): ``counts[i]``
    took at most ``bounds[i]`` seconds and more than the bound before it; the last count
    took longer than every bound. ``sum``: all the seconds together."""

    bounds: list[float]
    counts: list[int]
    sum: float = 0.0

    @property
    def count(self) -> int:
        return sum(self.counts)


class GraphStats(msgspec.Struct, frozen=True):
    by_status: dict[str, int]
    runnable_types: list[str]
    """Agent types with a task ready to claim now."""
    total: int
    completed_here: int = 0
    """Tasks the answering supervisor completed since it started: what this run did (the
    counts above are the graph's, which archiving and other daemons change too)."""
    granted_here: int = 0
    """Claims it granted since it started (attempts begun here)."""
    failures_here: int = 0
    """Failed attempts agents reported to it since it started (retried or final)."""
    by_type: dict[str, dict[str, int]] = {}
    """Per agent type, its tasks in each state (a state with none is left out): the
    queue of each type, and ``by_status`` split by type."""
    writes: Durations | None = None
    """The answering store's trips to its durable storage since it opened: a group
    commit's write and fsync on the files, a statement's transaction on PostgreSQL."""
    archived_here: int = 0
    """Finished tasks the answering store moved to the archive since it opened."""
    archive_dropped_here: int = 0
    """Archived tasks it dropped since it opened (past ``archive_for`` or the disk budget)."""
    changes: int = 0
    """The answering supervisor's count of changes when the ``Stats`` was asked: what
    these figures include (``AwaitChange(after=changes)`` wakes at the next one)."""


# -- to the log actor ------------------------------------------------------------------


class Append(msgspec.Struct, Request[Event], frozen=True):
    """Append one event. Replies with the stored ``Event`` once it is durable.

    ``capability`` is the narrator's token; only with it may ``visibility`` be
    ``"user"``. Agent events (``AGENT_UPDATE``/``AGENT_RESULT``) are always stored
    as internal, and a payload that tries to reach the user is refused.
    """

    type: str
    payload: dict[str, Any] = {}
    task_id: str | None = None
    agent_id: str | None = None
    visibility: Visibility = "internal"
    capability: Any = None


class AppendMany(msgspec.Struct, Request[list[Event]], frozen=True):
    """Append several events from one source together (an agent's lifecycle events, a
    stage's record): one message, one reply — the stored ``Event`` of each, in order,
    once all are durable. Batching at the source is what makes the log cheap per event.

    All or nothing: each is checked as an ``Append`` is (shape, visibility policy, a
    payload the store can hold) before any is stored; one refused refuses them all,
    naming its index (``appends[i]``), and nothing is appended. They are written in one
    batch of the log (one ``fsync`` on the files, one transaction on PostgreSQL), in
    order. At most the log's ``max_batch`` (4,096 by default) per message.

    ``origin``: the events come from a durable journal — batch ``origin[0]``, the first
    at position ``origin[1]`` — and each is stored with its own origin (``(origin[0],
    origin[1] + i)``), so a store can keep each once however often it is sent. Such events
    are facts already (refusing them cannot undo them): each is checked on its own and
    stored internal (one of a bad shape is logged and left out; no visibility refusal,
    as PostgreSQL stores the graph's events), any number per message, over as many
    batches of the log as they fill, as soon as the mailbox is drained (never held for
    the log's linger: a reader right after the transition's answer sees them).
    """

    appends: list[Append]
    origin: tuple[int, int] | None = None


class Flush(msgspec.Struct, Request[None], frozen=True):
    """Reply once every append the log took before this message is durable (a barrier:
    what a reader of the store sees next includes them)."""


class LogStats(msgspec.Struct, Request["LogFigures"], frozen=True):
    """Replies with ``LogFigures``: what the log actor wrote since it started."""


class LogFigures(msgspec.Struct, frozen=True):
    appended: int
    """Events this log actor made durable since it started (every kind)."""
    writes: Durations
    """Its writes (a batch of events each) and how long each took."""


class Subscribe(msgspec.Struct, frozen=True):
    """Tell ``ref`` every event appended from now on (after it is durable)."""

    ref: Any


class Unsubscribe(msgspec.Struct, frozen=True):
    ref: Any
