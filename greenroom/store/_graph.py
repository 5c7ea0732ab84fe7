"""``TaskGraph``: a task graph in memory, its indexes, and every transition.

Pure and synchronous: no I/O, no clock of its own (``now`` is passed in). A backend that
keeps the graph in its own process uses it (the files' task store, the in-memory store of
``greenroom.testing``) and makes its changes durable its own way; each method either
applies a whole change and records the changed tasks (``take_changes``) and lifecycle
events (``take_events``), or raises a
:class:`TaskGraphError` and changes nothing. The rules it applies are the ones every
store obeys (``greenroom.store``).

Indexes, so that a claim costs O(log n) whatever the graph's size: a heap of
runnable tasks per agent type (priority, then submission order), the count of
unfinished dependencies per pending task, the dependents of each task, and the
leases in force.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import logging
import math
import random
from collections import defaultdict, deque
from collections.abc import Iterable, Mapping
from typing import Any

from msgspec.structs import replace

from ..messages import (
    TASK_APPROVED,
    TASK_CANCELLED,
    TASK_CLAIMED,
    TASK_COMPLETED,
    TASK_DENIED,
    TASK_FAILED,
    TASK_RETRIED,
    TASK_SUBMITTED,
    TASK_WAITING,
    AgentError,
    AgentResult,
    AgentTask,
    Cancel,
    Claim,
    Complete,
    Decide,
    Dependents,
    Durations,
    Fail,
    GetTask,
    GraphEvent,
    GraphStats,
    Heartbeat,
    ListTasks,
    Park,
    Release,
    Retry,
    Stats,
    Submit,
    TaskLimits,
    TaskStatus,
)
from ._errors import (
    DuplicateTask,
    InvalidSubmission,
    InvalidTransition,
    NotOwner,
    TaskGraphError,
    UnknownTask,
)
from ._retention import Retention
from ._rules import (
    FAILED_STATES,
    check_submission,
    death_counted,
    decided,
    dependency_failed,
    expired_decision,
    fenced,
    in_dependency_order,
    lease_expired,
    lease_report,
    listed,
    parked,
    poison_reason,
    refusal,
    requeued_after_death,
    result_event,
    retried,
    revived,
    transition_payload,
)
from ._tasks import ExpireLeases

logger = logging.getLogger("greenroom.supervisor")

PENDING = TaskStatus.PENDING
IN_PROGRESS = TaskStatus.IN_PROGRESS
COMPLETED = TaskStatus.COMPLETED
FAILED = TaskStatus.FAILED
CANCELLED = TaskStatus.CANCELLED
DEPENDENCY_FAILED = TaskStatus.DEPENDENCY_FAILED


class TaskGraph:
    def __init__(
        self,
        tasks: Iterable[AgentTask] = (),
        *,
        now: float = 0.0,
        lease: float = 30.0,
        limits: TaskLimits | None = None,
        archived: Mapping[str, TaskStatus] | None = None,
    ) -> None:
        self.limits = limits or TaskLimits()
        self.tasks: dict[str, AgentTask] = {}
        self.archived: dict[str, TaskStatus] = dict(archived or {})
        """The final status of archived tasks that the graph's tasks, or a submission being
        taken, name as dependencies (looked up in the archive by the store; not all of it)."""
        self._finished: deque[str] = deque()
        """Finished tasks, in the order they finished: the archive takes them from the left."""
        self._forgotten = 0
        self._ready: defaultdict[str, list[tuple[int, int, str]]] = defaultdict(list)
        self._suspects: defaultdict[str, list[tuple[int, int, str]]] = defaultdict(list)
        """Runnable tasks that were running when their process died (``isolate_after_crashes``
        times), by type: each runs alone (``_suspect_running``: nothing else is granted
        meanwhile), once nothing else is in progress and no other task of its type is
        ready, so a death while it runs says it was that task."""
        self._suspect_running: str | None = None
        self._unmet: dict[str, int] = {}
        self._dependents: defaultdict[str, list[str]] = defaultdict(list)
        self._leases: dict[str, float] = {}
        self._changes: dict[str, AgentTask] = {}
        self._events: list[tuple[str, AgentTask]] = []
        self.became_runnable: set[str] = set()
        self.counts: dict[TaskStatus, int] = dict.fromkeys(TaskStatus, 0)
        self._type_counts: defaultdict[str, defaultdict[TaskStatus, int]] = defaultdict(
            lambda: defaultdict(int)
        )
        """``counts`` per agent type (``GraphStats.by_type``)."""
        self.next_order = 1
        for task in tasks:
            self.tasks[task.id] = task
            self.counts[task.status] += 1
            self._type_counts[task.type][task.status] += 1
            self.next_order = max(self.next_order, task.order + 1)
        for task in self.tasks.values():
            for dep in task.depends_on:
                if dep in self.tasks:  # an archived one is final: nothing will wake its dependents
                    self._dependents[dep].append(task.id)
        for task in sorted((t for t in self.tasks.values() if t.status.final), key=lambda t: t.updated_at):
            self._finished.append(task.id)
        in_order = sorted(self.tasks.values(), key=lambda t: t.order)
        self._orders = [task.order for task in in_order]
        self._ordered_ids = [task.id for task in in_order]
        """Every task's ``order`` and id, ascending: a page of ``ListTasks`` starts by
        bisection instead of sorting the graph."""
        for task in in_order:
            if task.status is PENDING:
                self._index_pending(task, now)
            elif task.status is TaskStatus.WAITING and task.lease_expires_at is not None:
                self._leases[task.id] = task.lease_expires_at
            elif task.status is IN_PROGRESS:
                expires = task.lease_expires_at if task.lease_expires_at is not None else now + lease
                self._leases[task.id] = expires
                if task.crashes >= self.limits.isolate_after_crashes:
                    self._suspect_running = task.id
        self._changes.clear()
        self._events.clear()
        self.became_runnable.clear()

    # -- reading ----------------------------------------------------------------------

    def get(self, task_id: str) -> AgentTask:
        task = self.tasks.get(task_id)
        if task is None:
            raise UnknownTask(task_id)
        return task

    def dependents(self, task_id: str) -> list[str]:
        """The live tasks that depend on ``task_id`` directly, in submission order."""
        self.get(task_id)
        live = [self.tasks[d] for d in self._dependents.get(task_id, ()) if d in self.tasks]
        return [task.id for task in sorted(live, key=lambda task: task.order)]

    def page(self, listing: ListTasks) -> list[AgentTask]:
        """The tasks ``listing`` keeps, from its bound on, in submission order (or the
        other way), at most its ``limit``: the start found by bisection, filtered as they
        come (nothing copied or sorted)."""
        found: list[AgentTask] = []
        tasks, ids, limit = self.tasks, self._ordered_ids, listing.limit
        if listing.newest_first:
            end = len(ids) if listing.before is None else bisect.bisect_left(self._orders, listing.before)
            walk: Iterable[str] = (ids[i] for i in range(end - 1, -1, -1))
        else:
            walk = itertools.islice(ids, bisect.bisect_right(self._orders, listing.after), None)
        plain = listing.owner is None and listing.text is None and listing.updated_since is None
        status, agent_type = listing.status, listing.type
        for task_id in walk:
            task = tasks.get(task_id)
            if task is None:
                continue  # archived
            if plain:  # the usual listing, without a call per task
                if (status is not None and task.status is not status) or (
                    agent_type is not None and task.type != agent_type
                ):
                    continue
            elif not listed(task, listing):
                continue
            found.append(task)
            if limit is not None and len(found) >= limit:
                break
        return found

    # -- leaving for the archive --------------------------------------------------------

    def finished_before(self, before: float, keep: int, most: int) -> list[AgentTask]:
        """The finished tasks to archive, oldest first, at most ``most``: those that
        finished before ``before``, and the oldest beyond the newest ``keep``."""
        found: list[AgentTask] = []
        finished, tasks = self._finished, self.tasks
        excess = len(finished) - keep
        for task_id in finished:
            if len(found) >= most:
                break
            task = tasks.get(task_id)
            if task is None:
                continue
            if task.updated_at >= before and len(found) >= excess:
                break
            found.append(task)
        return found

    def forget(self, task_ids: Iterable[str]) -> int:
        """Take finished tasks out of the graph (they are in the archive now); how many."""
        gone = 0
        tasks = self.tasks
        for task_id in task_ids:
            task = tasks.get(task_id)
            if task is None or not task.status.final:
                continue
            del tasks[task_id]
            self.counts[task.status] -= 1
            self._type_counts[task.type][task.status] -= 1
            self._changes.pop(task_id, None)
            self._dependents.pop(task_id, None)
            for dep in task.depends_on:
                dependents = self._dependents.get(dep)
                if dependents is not None and task_id in dependents:
                    dependents.remove(task_id)
                    if not dependents:
                        del self._dependents[dep]
            gone += 1
        finished = self._finished
        while finished and finished[0] not in tasks:
            finished.popleft()
        self._forgotten += gone
        if self._forgotten > len(tasks):  # the order index is mostly archived tasks: rebuild it
            pairs = zip(self._orders, self._ordered_ids, strict=True)
            kept = [(order, task_id) for order, task_id in pairs if task_id in tasks]
            self._orders = [order for order, _ in kept]
            self._ordered_ids = [task_id for _, task_id in kept]
            self._forgotten = 0
        return gone

    def has_runnable(self, agent_type: str) -> bool:
        if self._suspect_running is not None:
            return False  # a suspect runs alone
        if _top(self._ready.get(agent_type), self.tasks):
            return True
        return self.counts[IN_PROGRESS] == 0 and _top(self._suspects.get(agent_type), self.tasks)

    def runnable_types(self) -> list[str]:
        """The agent types that have a task ready to claim now."""
        types = set(self._ready).union(self._suspects)
        return sorted(agent_type for agent_type in types if self.has_runnable(agent_type))

    def take_changes(self) -> list[AgentTask]:
        changes = list(self._changes.values())
        self._changes.clear()
        return changes

    def take_events(self) -> list[tuple[str, AgentTask]]:
        events = self._events
        if not events:  # most messages (reads, heartbeats) make none: no new list for them
            return events
        self._events = []
        return events

    # -- transitions ------------------------------------------------------------------

    def _put(self, task: AgentTask, event: str | None) -> AgentTask:
        old = self.tasks.get(task.id)
        by_type = self._type_counts[task.type]
        if old is not None:
            self.counts[old.status] -= 1
            by_type[old.status] -= 1
        if task.status.final and (old is None or not old.status.final):
            self._finished.append(task.id)
        self.counts[task.status] += 1
        by_type[task.status] += 1
        self.tasks[task.id] = task
        self._changes[task.id] = task
        if event is not None:
            self._events.append((event, task))
        return task

    def _index_pending(self, task: AgentTask, now: float) -> None:
        unmet = 0
        for dep in task.depends_on:
            status = self._status_of(dep)
            if status is COMPLETED:
                continue
            if status.final:
                self._dependency_failed(task, dep, now)
                self._cascade(task.id, now)
                return
            unmet += 1
        if unmet:
            self._unmet[task.id] = unmet
        else:
            self._make_runnable(task)

    def _status_of(self, task_id: str) -> TaskStatus:
        task = self.tasks.get(task_id)
        return task.status if task is not None else self.archived[task_id]

    def _known_status(self, task_id: str) -> TaskStatus:
        """As :meth:`_status_of`; an archived task the graph was not told of is FAILED
        (unknown: nothing is made runnable on it)."""
        task = self.tasks.get(task_id)
        return task.status if task is not None else self.archived.get(task_id, FAILED)

    def _make_runnable(self, task: AgentTask) -> None:
        self._unmet.pop(task.id, None)
        if task.crashes >= self.limits.isolate_after_crashes:  # in a random order: not always the same first
            heapq.heappush(self._suspects[task.type], (-task.priority, _random_rank(), task.id))
        else:
            heapq.heappush(self._ready[task.type], (-task.priority, task.order, task.id))
        self.became_runnable.add(task.type)

    def _stopped_running(self, task_id: str) -> None:
        """``task_id`` is leaving IN_PROGRESS: if it was the suspect in progress, the rest
        may run again; if it is the last in progress, a suspect may run."""
        self._leases.pop(task_id, None)
        if task_id == self._suspect_running:
            self._suspect_running = None
            self.became_runnable.update(t for t, heap in self._ready.items() if heap)
        if self.counts[IN_PROGRESS] <= 1:
            self.became_runnable.update(t for t, heap in self._suspects.items() if heap)

    def submit(self, tasks: list[AgentTask], now: float) -> list[AgentTask]:
        """Add ``tasks`` as PENDING, all or none. Dependencies may point at existing
        tasks or at others in the same batch; duplicate ids, unknown dependencies and
        cycles are refused."""
        batch = check_submission(tasks, self.limits)
        for task in tasks:
            if task.id in self.tasks or task.id in self.archived:  # an archived id stays taken
                raise DuplicateTask(task.id)
            for dep in task.depends_on:
                if dep not in self.tasks and dep not in batch and dep not in self.archived:
                    raise InvalidSubmission(task.id, "depends_on", dep, "is not a known task")
        # Stamp and index in dependency order, so a dependency inside the batch is indexed first.
        base = self.next_order
        position = {task.id: i for i, task in enumerate(tasks)}
        self.next_order += len(tasks)
        for task in in_dependency_order(batch):
            task = replace(task, created_at=now, updated_at=now, order=base + position[task.id])
            self._put(task, TASK_SUBMITTED)
            for dep in task.depends_on:
                if dep in self.tasks:
                    self._dependents[dep].append(task.id)
            self._index_pending(task, now)
        for order, task_id in sorted((self.tasks[task.id].order, task.id) for task in tasks):
            self._orders.append(order)  # every order of a batch is above the ones before it
            self._ordered_ids.append(task_id)
        return [self.tasks[task.id] for task in tasks]

    def claim(self, agent_id: str, agent_type: str, now: float, lease: float) -> AgentTask | None:
        """Grant the best runnable task of ``agent_type`` to ``agent_id``, or ``None``.
        A suspect (a task running at ``isolate_after_crashes`` deaths of its process) runs
        alone: once no other task of its type is ready and none is in progress, and
        nothing else is granted until it ends — so its death, if it comes, is its own."""
        if self._suspect_running is not None:
            return None
        tasks = self.tasks
        task = _pop(self._ready.get(agent_type), tasks)
        if task is None and self.counts[IN_PROGRESS] == 0:
            task = _pop(self._suspects.get(agent_type), tasks)
            if task is not None:
                self._suspect_running = task.id
        return None if task is None else self._grant(task, agent_id, now, lease)

    def _grant(self, task: AgentTask, agent_id: str, now: float, lease: float) -> AgentTask:
        self._leases[task.id] = now + lease
        return self._put(
            replace(
                task,
                status=IN_PROGRESS,
                owner=agent_id,
                attempt=task.attempt + 1,
                token=task.token + 1,
                lease_expires_at=now + lease,
                last_heartbeat_at=now,
                updated_at=now,
            ),
            TASK_CLAIMED,
        )

    def _owned(self, task_id: str, agent_id: str, action: str, token: int | None = None) -> AgentTask:
        if token is not None:  # the attempt's own token: refused (Fenced) unless it is the live one
            task = self.tasks.get(task_id)
            if task is None and task_id not in self.archived:
                raise UnknownTask(task_id)
            refused = fenced(task, task_id, agent_id, token, action)
            if refused is not None:
                raise refused
            assert task is not None
            return task
        task = self.get(task_id)
        if task.status is not IN_PROGRESS:
            raise InvalidTransition(task_id, task.status.value, action)
        if task.owner != agent_id:
            raise NotOwner(task_id, agent_id, task.owner)
        return task

    def heartbeat(
        self, task_id: str, agent_id: str, now: float, lease: float, token: int | None = None
    ) -> AgentTask:
        task = self._owned(task_id, agent_id, "heartbeat", token)
        self._leases[task_id] = now + lease
        return self._put(replace(task, lease_expires_at=now + lease, last_heartbeat_at=now), None)

    def complete(
        self, task_id: str, agent_id: str, result: AgentResult, now: float, token: int | None = None
    ) -> AgentTask:
        if result.task_id != task_id:
            raise InvalidSubmission(task_id, "result.task_id", result.task_id, "does not match the task")
        task = self._owned(task_id, agent_id, "complete", token)
        self._stopped_running(task_id)
        task = self._put(
            replace(task, status=COMPLETED, result=result, lease_expires_at=None, updated_at=now),
            TASK_COMPLETED,
        )
        for dependent_id in self._dependents.get(task_id, ()):
            left = self._unmet.get(dependent_id)
            if left is None:
                continue
            if left == 1:
                dependent = self.tasks[dependent_id]
                if dependent.status is PENDING:
                    self._make_runnable(dependent)
                else:
                    del self._unmet[dependent_id]
            else:
                self._unmet[dependent_id] = left - 1
        return task

    def fail(
        self, task_id: str, agent_id: str, error: AgentError, now: float, token: int | None = None
    ) -> AgentTask:
        task = self._owned(task_id, agent_id, "fail", token)
        return self._end_attempt(task, error, now)

    def _end_attempt(self, task: AgentTask, error: AgentError, now: float) -> AgentTask:
        self._stopped_running(task.id)
        error = self.limits.clip(error)
        if error.retryable and task.attempt < task.max_attempts:
            task = self._put(
                replace(task, status=PENDING, owner=None, lease_expires_at=None, error=error, updated_at=now),
                TASK_RETRIED,
            )
            self._make_runnable(task)
            return task
        task = self._put(
            replace(task, status=FAILED, lease_expires_at=None, error=error, updated_at=now), TASK_FAILED
        )
        self._cascade(task.id, now)
        return task

    def release(
        self, task_id: str, agent_id: str, now: float, attempt: int | None = None, token: int | None = None
    ) -> AgentTask:
        """The owner hands the task back unfinished: PENDING again, the attempt refunded.
        ``attempt``: only that attempt (a grant handed back must not end a later one)."""
        task = self._owned(task_id, agent_id, "release", token)
        if attempt is not None and task.attempt != attempt:
            raise InvalidTransition(task_id, f"{task.status.value} in attempt {task.attempt}", "release")
        self._stopped_running(task_id)
        task = self._put(
            replace(
                task,
                status=PENDING,
                owner=None,
                attempt=task.attempt - 1,
                lease_expires_at=None,
                updated_at=now,
            ),
            TASK_RETRIED,
        )
        self._make_runnable(task)
        return task

    def park(
        self, task_id: str, agent_id: str, call: dict[str, Any], now: float, token: int | None = None
    ) -> AgentTask:
        """The owner parks its task for a person to decide ``call`` (see ``greenroom.store.parked``)."""
        task = parked(self._owned(task_id, agent_id, "park", token), call, self.limits, now)
        self._stopped_running(task_id)
        if task.lease_expires_at is not None:  # an expiry: the lease check denies it then
            self._leases[task_id] = task.lease_expires_at
        return self._put(task, TASK_WAITING)

    def decide(self, decision: Decide, now: float) -> AgentTask:
        """A person's decision on the call a WAITING task waits on: PENDING again, runnable."""
        task_id, approved = decision.task_id, decision.approved
        task = self.get(task_id)
        if (refused := refusal(task, "approve" if approved else "deny")) is not None:
            raise refused
        task = decided(task, decision, now)
        self._leases.pop(task_id, None)
        task = self._put(task, TASK_APPROVED if approved else TASK_DENIED)
        self._make_runnable(task)
        return task

    def retry(self, retry: Retry, now: float) -> AgentTask:
        """A person runs a FAILED task again (``retried``), or a DEPENDENCY_FAILED one
        through the FAILED tasks upstream it failed because of; then every dependent none of
        whose dependencies is failed any more is PENDING again (``revived``). Refused,
        changing nothing, for any other status, or when a cause upstream was CANCELLED or is
        archived."""
        task = self.get(retry.task_id)
        if (refused := refusal(task, "retry")) is not None:
            raise refused
        roots = [task] if task.status is FAILED else self._failed_roots(task)
        again = [retried(root, retry, now) for root in roots]  # every check before any change
        if retry.dry_run:
            return task
        for root in again:
            if root.id in self._finished:
                self._finished.remove(root.id)
            self._put(root, TASK_RETRIED)
            self._make_runnable(root)  # it ran before: its dependencies were all COMPLETED
        for root in again:
            self._revive(root.id, now)
        return self.tasks[retry.task_id]

    def _failed_roots(self, task: AgentTask) -> list[AgentTask]:
        """The FAILED tasks upstream that ``task`` (DEPENDENCY_FAILED) failed because of,
        through the DEPENDENCY_FAILED ones between; ``InvalidTransition`` when a cause is
        CANCELLED or archived (a retry cannot revive it)."""
        roots: dict[str, AgentTask] = {}
        seen: set[str] = set()
        stack = [task]
        while stack:
            for dep in stack.pop().depends_on:
                if dep in seen:
                    continue
                seen.add(dep)
                upstream = self.tasks.get(dep)
                if upstream is None:
                    if self.archived.get(dep) is COMPLETED:
                        continue
                    raise InvalidTransition(
                        task.id, f"DEPENDENCY_FAILED (its dependency {dep!r} is archived)", "retry"
                    )
                if upstream.status is FAILED:
                    roots[dep] = upstream
                elif upstream.status is DEPENDENCY_FAILED:
                    stack.append(upstream)
                elif upstream.status is CANCELLED:
                    raise InvalidTransition(
                        task.id, f"DEPENDENCY_FAILED (its dependency {dep!r} is CANCELLED)", "retry"
                    )
        return list(roots.values())

    def _revive(self, task_id: str, now: float) -> None:
        """Every DEPENDENCY_FAILED task downstream of ``task_id`` none of whose dependencies
        is failed any more: PENDING again, waiting for them (or runnable)."""
        queue = deque([task_id])
        while queue:
            for dependent_id in self._dependents.get(queue.popleft(), ()):
                dependent = self.tasks.get(dependent_id)
                if dependent is None or dependent.status is not DEPENDENCY_FAILED:
                    continue
                if any(self._known_status(dep) in FAILED_STATES for dep in dependent.depends_on):
                    continue  # another cause remains (or one archived, unknown): it stays failed
                if dependent_id in self._finished:
                    self._finished.remove(dependent_id)
                dependent = self._put(revived(dependent, now), TASK_RETRIED)
                self._index_pending(dependent, now)
                queue.append(dependent_id)

    def cancel(self, task_id: str, reason: str, now: float) -> AgentTask:
        task = self.get(task_id)
        if (refused := refusal(task, "cancel")) is not None:
            raise refused
        self._stopped_running(task_id)
        self._unmet.pop(task_id, None)
        task = self._put(
            replace(
                task,
                status=CANCELLED,
                lease_expires_at=None,
                error=self.limits.clip(AgentError(reason=reason)),
                updated_at=now,
            ),
            TASK_CANCELLED,
        )
        self._cascade(task_id, now)
        return task

    def _cascade(self, task_id: str, now: float) -> None:
        """Mark every not-yet-final task downstream of ``task_id`` DEPENDENCY_FAILED."""
        stack = [task_id]
        while stack:
            upstream = stack.pop()
            for dependent_id in self._dependents.get(upstream, ()):
                dependent = self.tasks.get(dependent_id)
                if dependent is None or dependent.status.final:
                    continue
                self._unmet.pop(dependent_id, None)
                self._leases.pop(dependent_id, None)
                self._dependency_failed(dependent, upstream, now)
                stack.append(dependent_id)

    def _dependency_failed(self, task: AgentTask, upstream: str, now: float) -> None:
        status = self._status_of(upstream).value
        self._put(
            replace(
                task,
                status=DEPENDENCY_FAILED,
                lease_expires_at=None,
                error=dependency_failed(upstream, status),
                updated_at=now,
            ),
            TASK_FAILED,
        )

    def expire_leases(self, now: float, *, orphaned: bool = False) -> list[AgentTask]:
        """End every attempt whose lease ran out: PENDING again while attempts remain.

        With ``orphaned`` (at a restart: the owner's process is gone), every attempt in
        progress: the process's death is not held against the task (its attempt is
        refunded) but counted in ``crashes`` (see ``death_counted``: a death shared with
        other tasks counts only up to isolation); a task that reaches ``max_crashes`` is
        FAILED as a poison task, with the reason."""
        expired = [task_id for task_id, expires in self._leases.items() if orphaned or expires <= now]
        running = sum(1 for task_id in expired if self.tasks[task_id].status is IN_PROGRESS)
        ended = []
        for task_id in expired:
            task = self.tasks[task_id]
            if task.status is TaskStatus.WAITING:  # a call nobody decided in time: denied
                if self._leases[task_id] <= now:  # at a restart too: expired while no daemon ran
                    self._leases.pop(task_id, None)
                    ended.append(self._put(expired_decision(task, now), TASK_DENIED))
                    self._make_runnable(ended[-1])
                continue
            if not orphaned:
                ended.append(self._end_attempt(task, lease_expired(task), now))
                continue
            crashes = death_counted(task, alone=running == 1, limits=self.limits)
            if crashes >= self.limits.max_crashes:
                why = poison_reason(task, crashes)
                task = replace(task, crashes=crashes)
                ended.append(self._end_attempt(task, AgentError(reason=why), now))
                continue
            self._stopped_running(task_id)
            task = self._put(requeued_after_death(task, now, crashes), TASK_RETRIED)
            self._make_runnable(task)
            ended.append(task)
        return ended

    def stats(self) -> dict[str, int]:
        return {status.value: count for status, count in self.counts.items()}

    def stats_by_type(self) -> dict[str, dict[str, int]]:
        """Per agent type, its tasks in each state (none: left out)."""
        found = {}
        for agent_type, counts in sorted(self._type_counts.items()):
            kept = {status.value: count for status, count in counts.items() if count}
            if kept:
                found[agent_type] = kept
        return found


def _random_rank() -> int:
    return random.getrandbits(48)


def _pop(heap: list[tuple[int, int, str]] | None, tasks: dict[str, AgentTask]) -> AgentTask | None:
    """The best PENDING task of ``heap``, removed (stale entries — a task no longer
    pending, or archived — dropped on the way)."""
    while heap:
        task = tasks.get(heapq.heappop(heap)[2])
        if task is not None and task.status is PENDING:
            return task
    return None


def _top(heap: list[tuple[int, int, str]] | None, tasks: dict[str, AgentTask]) -> bool:
    """Whether ``heap`` holds a PENDING task (stale entries dropped on the way)."""
    while heap:
        task = tasks.get(heap[0][2])
        if task is not None and task.status is PENDING:
            return True
        heapq.heappop(heap)
    return False


NOTHING_READY: Any = object()
"""What :func:`apply_request` answers a claim that found nothing (no change to make durable)."""

BY_ID: dict[type, str] = {GetTask: "get", Cancel: "cancel", Decide: "decide", Retry: "retry"}
"""Requests about one task (and what they do), answered from an archive when it is there."""


def apply_request(
    graph: TaskGraph,
    message: Any,
    now: float,
    lease: float,
    *,
    writes: Durations | None = None,
    archived: int = 0,
    archive_dropped: int = 0,
) -> Any:
    """Apply one of the supervisor's requests to ``graph`` — ``Stats`` answered with the
    store's own figures (``writes``, ``archived``, ``archive_dropped``), ``ExpireLeases``
    logged task by task: its answer, or :data:`NOTHING_READY` for a claim that found
    nothing. ``TaskGraphError`` for a refusal (nothing changed), or for a message no store
    handles."""
    kind = type(message)
    if kind is Claim:
        task = graph.claim(message.agent_id, message.agent_type, now, lease)
        return NOTHING_READY if task is None else task
    if kind is Heartbeat:
        return graph.heartbeat(message.task_id, message.agent_id, now, lease, message.token)
    if kind is Complete:
        return graph.complete(message.task_id, message.agent_id, message.result, now, message.token)
    if kind is Fail:
        return graph.fail(message.task_id, message.agent_id, message.error, now, message.token)
    if kind is Submit:
        return graph.submit(message.tasks, now)
    if kind is GetTask:
        return graph.get(message.task_id)
    if kind is Dependents:
        return graph.dependents(message.task_id)
    if kind is ListTasks:
        return graph.page(message)
    if kind is Release:
        return graph.release(message.task_id, message.agent_id, now, message.attempt, message.token)
    if kind is Cancel:
        return graph.cancel(message.task_id, message.reason, now)
    if kind is Park:
        return graph.park(message.task_id, message.agent_id, message.call, now, message.token)
    if kind is Decide:
        return graph.decide(message, now)
    if kind is Retry:
        return graph.retry(message, now)
    if kind is Stats:
        return GraphStats(
            by_status=graph.stats(),
            runnable_types=graph.runnable_types(),
            total=len(graph.tasks),
            by_type=graph.stats_by_type(),
            writes=writes,
            archived_here=archived,
            archive_dropped_here=archive_dropped,
        )
    if kind is ExpireLeases:
        for task in graph.expire_leases(now):
            logger.warning(lease_report(task), task.id, task.status.value)
        return None
    raise TaskGraphError(f"the supervisor does not handle {kind.__name__} messages")


def graph_events(graph: TaskGraph, message: Any) -> list[GraphEvent]:
    """The events of what was just applied, in order: the graph's transitions, then an
    agent's result (``Complete`` / ``Fail``)."""
    events = [
        GraphEvent(kind, task.id, task.owner, transition_payload(task, kind))
        for kind, task in graph.take_events()
    ]
    if isinstance(message, Complete):
        events.append(result_event(message.task_id, message.agent_id, message.result))
    elif isinstance(message, Fail):
        events.append(result_event(message.task_id, message.agent_id, message.error))
    return events


def leaving(graph: TaskGraph, retention: Retention, now: float) -> list[AgentTask]:
    """The finished tasks ``retention`` lets leave for the archive now (at most a batch)."""
    if not retention.archives:
        return []
    before = now - retention.archive_after if retention.archive_after is not None else -math.inf
    keep = retention.keep_finished if retention.keep_finished is not None else 2**62
    return graph.finished_before(before, keep, retention.batch)
