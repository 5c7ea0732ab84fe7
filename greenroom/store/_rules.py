"""The task rules every store obeys, whatever it keeps the graph in.

A submission is checked here first (:func:`check_submission`); the store then checks the
ids and dependencies against what it holds. The texts of the reasons a task carries
(a lease that expired, a dependency that failed, a process that died under it, a poison
task) and the payloads of the events a transition causes are made here, so that a task
and its events read the same on every backend.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec.structs import replace

from ..messages import (
    AGENT_RESULT,
    TASK_APPROVED,
    TASK_DENIED,
    AgentError,
    AgentResult,
    AgentTask,
    Complete,
    Decide,
    Fail,
    GraphEvent,
    ListTasks,
    Retry,
    TaskLimits,
    TaskStatus,
)
from ._errors import Fenced, InvalidSubmission, InvalidTransition

FINAL = frozenset(status for status in TaskStatus if status.final)
"""The statuses a task never leaves."""

_encode = msgspec.json.encode


def _payload_bytes(task: AgentTask) -> int:
    """``input``, ``context`` and ``metadata`` as JSON; empty ones cost nothing to check."""
    size = 0
    for part in (task.input, task.context, task.metadata):
        if part:
            size += len(_encode(part))
    return size


def check_submission(tasks: list[AgentTask], limits: TaskLimits) -> dict[str, AgentTask]:
    """What a batch must be on its own, whatever the store: sizes within ``limits``, ids
    unique, nothing but PENDING fields set, no dependency twice or on itself, no cycle
    (existing tasks cannot depend on new ones, so a cycle lies within the batch). Returns
    the batch by id; the store then checks ids (:class:`DuplicateTask`) and dependencies
    against what it holds."""
    batch: dict[str, AgentTask] = {}
    max_bytes = limits.max_task_bytes
    for task in tasks:
        size = _payload_bytes(task)
        if size > max_bytes:
            raise InvalidSubmission(
                task.id, "input", f"{size} bytes", f"is larger than max_task_bytes ({max_bytes})"
            )
        if task.id in batch:
            raise InvalidSubmission(task.id, "id", task.id, "appears twice in the batch")
        for field, value, expected in (
            ("status", task.status, TaskStatus.PENDING),
            ("owner", task.owner, None),
            ("attempt", task.attempt, 0),
            ("crashes", task.crashes, 0),
            ("result", task.result, None),
            ("waiting", task.waiting, None),
            ("decisions", task.decisions, {}),  # approvals come from people, through Decide
        ):
            if value != expected:
                raise InvalidSubmission(task.id, field, value, f"must be {expected!r} on submit")
        if len(set(task.depends_on)) != len(task.depends_on):
            raise InvalidSubmission(task.id, "depends_on", task.depends_on, "lists a task twice")
        if task.id in task.depends_on:
            raise InvalidSubmission(task.id, "depends_on", task.id, "names the task itself")
        batch[task.id] = task
    found = find_cycle(batch)
    if found is not None:
        raise InvalidSubmission(found[0], "depends_on", found[1], "closes a dependency cycle")
    return batch


def find_cycle(tasks: dict[str, AgentTask]) -> tuple[str, str] | None:
    """A dependency edge ``(task, dep)`` that closes a cycle among ``tasks``, or ``None``.
    Dependencies outside ``tasks`` are ignored. Iterative: any depth."""
    state: dict[str, int] = {}
    for root in tasks:
        if root in state:
            continue
        stack = [(root, iter(tasks[root].depends_on))]
        state[root] = 1
        while stack:
            node, deps = stack[-1]
            for dep in deps:
                if dep not in tasks:
                    continue
                if state.get(dep) == 1:
                    return node, dep
                if dep not in state:
                    state[dep] = 1
                    stack.append((dep, iter(tasks[dep].depends_on)))
                    break
            else:
                state[node] = 2
                stack.pop()
    return None


def in_dependency_order(batch: dict[str, AgentTask]) -> list[AgentTask]:
    """The batch's tasks, each after the batch's tasks it depends on (no cycle: checked)."""
    done: set[str] = set()
    ordered: list[AgentTask] = []
    for root in batch:
        stack = [(root, False)]
        while stack:
            node, expanded = stack.pop()
            if node in done:
                continue
            if expanded:
                done.add(node)
                ordered.append(batch[node])
                continue
            stack.append((node, True))
            stack.extend((dep, False) for dep in batch[node].depends_on if dep in batch and dep not in done)
    return ordered


# -- what a task says about how its attempt ended -----------------------------------------


def lease_expired(task: AgentTask) -> AgentError:
    """The failure of an attempt whose lease ran out (retried while attempts remain)."""
    return AgentError(reason=f"lease expired (owner {task.owner!r}, attempt {task.attempt})", retryable=True)


def dependency_failed(upstream: str, status: str) -> AgentError:
    """Why a task can never run: ``upstream`` (one of its dependencies) ended ``status``."""
    return AgentError(reason=f"dependency {upstream!r} is {status}")


def poison_reason(task: AgentTask, crashes: int) -> str:
    return (
        f"its process died while running it {crashes} times (max_crashes): a poison task? "
        f"(last owner {task.owner!r})"
    )


def death_counted(task: AgentTask, *, alone: bool, limits: TaskLimits) -> int:
    """``task``'s ``crashes`` once the death of the process running it is counted.

    Only a death while it ran alone says it was this task: that one always counts. A
    death shared with other tasks in progress (a deploy, the OOM killer, a node taken
    away look the same) counts only up to ``isolate_after_crashes``, where the task
    becomes a suspect and runs alone from then on — so it is never failed for deaths it
    shared, only for ``max_crashes`` reached alone."""
    if alone or task.crashes < limits.isolate_after_crashes:
        return task.crashes + 1
    return task.crashes


def requeued_after_death(task: AgentTask, now: float, crashes: int | None = None) -> AgentTask:
    """``task`` (in progress when its process died) PENDING again: the attempt refunded,
    the death counted in ``crashes`` (``death_counted``; default: one more)."""
    why = f"its owner's process stopped (owner {task.owner!r}); not charged an attempt"
    return replace(
        task,
        status=TaskStatus.PENDING,
        owner=None,
        attempt=task.attempt - 1,
        crashes=task.crashes + 1 if crashes is None else crashes,
        lease_expires_at=None,
        error=AgentError(reason=why, retryable=True),
        updated_at=now,
    )


def bound_report(message: Complete | Fail, limits: TaskLimits) -> Complete | Fail:
    """An agent's report within the limits: a long failure reason cut (as stored and
    logged, so ``AGENT_RESULT`` holds the same text), an oversized result turned into a
    failed attempt that says why (the task, not the daemon, pays for it)."""
    if isinstance(message, Fail):
        error = limits.clip(message.error)
        return message if error is message.error else Fail(message.task_id, message.agent_id, error)
    size = len(_encode(message.result))
    if size <= limits.max_result_bytes:
        return message
    reason = f"the result is {size} bytes, larger than max_result_bytes ({limits.max_result_bytes})"
    return Fail(message.task_id, message.agent_id, AgentError(reason=reason))


# -- the events a transition causes ---------------------------------------------------------


def result_payload(result: AgentResult | AgentError) -> dict[str, Any]:
    """The payload of the ``AGENT_RESULT`` event of a completion or a failed attempt."""
    if isinstance(result, AgentError):
        return {"outcome": "failed", "reason": result.reason, "retryable": result.retryable}
    return {
        "outcome": result.outcome,
        "artifacts": result.artifacts,
        "notes": result.notes,
        "next_actions": result.next_actions,
    }


def transition_payload(task: AgentTask, kind: str = "") -> dict[str, Any]:
    """The payload of a task-graph transition's event (``TASK_CLAIMED``, ``TASK_FAILED``...).
    ``TASK_WAITING`` carries the exact call; ``TASK_APPROVED`` / ``TASK_DENIED`` the
    decision (who, when, which step)."""
    payload: dict[str, Any] = {"status": task.status.value, "attempt": task.attempt}
    if task.error is not None and task.status is not TaskStatus.COMPLETED:
        payload["reason"] = task.error.reason
    if task.waiting is not None:  # TASK_WAITING: the exact call a person is asked about
        payload["call"] = task.waiting
    if kind in (TASK_APPROVED, TASK_DENIED) and task.decisions:
        step, decision = max(task.decisions.items(), key=lambda item: float(item[1].get("at", 0.0)))
        payload.update(decision, step=step)
    return payload


def result_event(task_id: str, agent_id: str, result: AgentResult | AgentError) -> GraphEvent:
    """The ``AGENT_RESULT`` event of an agent's report."""
    return GraphEvent(AGENT_RESULT, task_id, agent_id, result_payload(result))


# -- approvals ---------------------------------------------------------------------------

MAX_DECIDER = 200
MAX_REASON = 2000


def parked(task: AgentTask, call: dict[str, Any], limits: TaskLimits, now: float) -> AgentTask:
    """``task`` (IN_PROGRESS, checked by the store) parked for a person to decide ``call``:
    WAITING, no owner and no lease, the attempt not counted. The call must name its
    ``step`` and ``tool`` and fit in ``max_result_bytes`` (``InvalidSubmission`` naming
    the field otherwise, and nothing changes)."""
    for field in ("step", "tool"):
        if not isinstance(call.get(field), str) or not call[field]:
            raise InvalidSubmission(task.id, f"call.{field}", call.get(field), "must be a non-empty string")
    if not isinstance(call.get("arguments", {}), dict):
        raise InvalidSubmission(task.id, "call.arguments", call.get("arguments"), "must be an object")
    size = len(_encode(call))
    if size > limits.max_result_bytes:
        raise InvalidSubmission(
            task.id, "call", f"{size} bytes", f"is larger than max_result_bytes ({limits.max_result_bytes})"
        )
    waiting = {**call, "since": now}
    expires_in = call.get("expires_in")
    expires_at = None
    if expires_in is not None:
        if isinstance(expires_in, bool) or not isinstance(expires_in, (int, float)) or not expires_in > 0:
            raise InvalidSubmission(task.id, "call.expires_in", expires_in, "must be a number of seconds > 0")
        expires_at = waiting["expires_at"] = now + float(expires_in)
    # an expiry rides on the lease: the lease check denies a call nobody decided in time
    return replace(
        task, status=TaskStatus.WAITING, owner=None, attempt=task.attempt - 1, lease_expires_at=expires_at,
        waiting=waiting, updated_at=now,
    )  # fmt: skip


def decided(task: AgentTask, decision: Decide, now: float) -> AgentTask:
    """``task`` (WAITING, checked by the store) with a person's ``decision`` on the call it
    waits on: PENDING again, the decision kept under the call's step. ``decision.step``,
    if given, must be the waiting call's (``InvalidSubmission`` otherwise: a decision about
    a call that was shown never applies to another). ``as_done`` (the person says the call
    already happened) is an approval: the call's result is recorded, the tool not run."""
    approved, by, reason, step = decision.approved, decision.by, decision.reason, decision.step
    waiting = task.waiting or {}
    waiting_step = str(waiting.get("step", ""))
    if step is not None and step != waiting_step:
        raise InvalidSubmission(task.id, "step", step, f"is not the call waiting (step {waiting_step!r})")
    if not isinstance(by, str) or not by or len(by) > MAX_DECIDER:
        raise InvalidSubmission(task.id, "by", by, f"must be 1 to {MAX_DECIDER} characters")
    if not isinstance(reason, str) or len(reason) > MAX_REASON:
        raise InvalidSubmission(
            task.id, "reason", f"{reason!s:.40}", f"must be at most {MAX_REASON} characters"
        )
    if decision.as_done is not False and (decision.as_done is not True or not approved):
        wanted = "is only for an approval (true or false)"
        raise InvalidSubmission(task.id, "as_done", decision.as_done, wanted)
    kept: dict[str, Any] = {
        "approved": bool(approved),
        "by": by,
        "at": now,
        "reason": reason,
        "tool": waiting.get("tool"),
    }
    if decision.as_done:
        kept["as_done"] = True
    return replace(
        task, status=TaskStatus.PENDING, waiting=None, decisions={**task.decisions, waiting_step: kept},
        lease_expires_at=None, updated_at=now,
    )  # fmt: skip


# -- fencing -------------------------------------------------------------------------------


BEFORE_AN_EFFECT = frozenset({"tool_started", "tool_released"})
"""The steps recorded just before a tool that changes things runs: written only while the
attempt's lease is current by the store's clock (``fenced``'s ``now``), so an owner that
paused past its lease does not start the effect even where nobody took the task yet."""


def fenced(
    task: AgentTask | None,
    task_id: str,
    agent_id: str | None,
    token: int,
    action: str,
    now: float | None = None,
) -> Fenced | None:
    """The refusal of ``action`` by ``agent_id`` (``None``: whoever holds the token) under
    the attempt token ``token`` — the one rule both stores apply — or ``None`` when that
    attempt is the task's live one (``task``: the task as stored, ``None`` when it is not
    in the live graph). ``now``: the store's clock, given for a write that must also find
    the attempt's lease unexpired (:data:`BEFORE_AN_EFFECT`)."""
    what = f"task {task_id!r} ({action}{'' if agent_id is None else f' by {agent_id!r}'})"
    if task is None:
        return Fenced(what, token, None, "the task is not in the live graph: finished and archived", task_id)
    if token != task.token:
        return Fenced(what, token, task.token, "a later attempt was granted", task_id)
    if task.status is not TaskStatus.IN_PROGRESS:
        return Fenced(what, token, task.token, f"its attempt ended: the task is {task.status.value}", task_id)
    if agent_id is not None and task.owner != agent_id:
        return Fenced(what, token, task.token, f"its owner is {task.owner!r}", task_id)
    if now is not None and task.lease_expires_at is not None and task.lease_expires_at < now:
        late = now - task.lease_expires_at
        return Fenced(
            what, token, task.token, f"its lease lapsed {late:.1f} s ago by the store's clock", task_id
        )
    return None


# -- what a person may do to a task now -----------------------------------------------------

ACTIONS = ("retry", "cancel", "approve", "deny")
"""What a person may do to one task (``POST /v1/tasks/{id}/<action>``)."""


def refusal(task: AgentTask, action: str) -> InvalidTransition | None:
    """Whether ``task``'s status refuses ``action`` — the one rule the stores raise and
    the API shows (``None``: allowed by its status): cancel a task not final, approve or
    deny a WAITING one, retry a FAILED or DEPENDENCY_FAILED one (the latter also needs its
    causes upstream retriable: the store's dry-run ``Retry`` says)."""
    status = task.status
    if action == "cancel":
        allowed = not status.final
    elif action in ("approve", "deny"):
        allowed = status is TaskStatus.WAITING
    elif action == "retry":
        allowed = status in (TaskStatus.FAILED, TaskStatus.DEPENDENCY_FAILED)
    else:
        raise ValueError(f"no task action {action!r}; there are {', '.join(ACTIONS)}")
    return None if allowed else InvalidTransition(task.id, status.value, action)


# -- retries -------------------------------------------------------------------------------

RETRIES_KEPT = 20
"""The retries a task remembers (the newest)."""


def retried(task: AgentTask, retry: Retry, now: float) -> AgentTask:
    """``task`` (FAILED, checked by the store) run again by a person: PENDING with a fresh
    attempt budget (``attempt`` and ``crashes`` 0), no owner, lease or error; the retry kept
    in ``retries`` (``by``, ``at``, ``reason``, and the status, attempt and error it had).
    ``InvalidSubmission`` naming the field for a bad ``by`` or ``reason`` (nothing changes)."""
    by, reason = retry.by, retry.reason
    if not isinstance(by, str) or not by or len(by) > MAX_DECIDER:
        raise InvalidSubmission(task.id, "by", by, f"must be 1 to {MAX_DECIDER} characters")
    if not isinstance(reason, str) or len(reason) > MAX_REASON:
        raise InvalidSubmission(
            task.id, "reason", f"{reason!s:.40}", f"must be at most {MAX_REASON} characters"
        )
    kept = {
        "by": by,
        "at": now,
        "reason": reason,
        "status": task.status.value,
        "attempt": task.attempt,
        "error": None if task.error is None else task.error.reason,
    }
    return replace(
        task, status=TaskStatus.PENDING, owner=None, attempt=0, crashes=0, lease_expires_at=None,
        last_heartbeat_at=None, error=None, result=None, waiting=None, updated_at=now,
        retries=[*task.retries, kept][-RETRIES_KEPT:],
    )  # fmt: skip


def revived(task: AgentTask, now: float) -> AgentTask:
    """A DEPENDENCY_FAILED ``task`` none of whose dependencies is failed any more (one was
    retried): PENDING again, waiting for them; its attempts untouched (it never ran)."""
    return replace(
        task, status=TaskStatus.PENDING, owner=None, lease_expires_at=None, error=None, updated_at=now
    )


FAILED_STATES = frozenset({TaskStatus.FAILED, TaskStatus.CANCELLED, TaskStatus.DEPENDENCY_FAILED})
"""The final states that fail a task's dependents."""


EXPIRY = "expiry"
"""Who denies a call nobody decided before its ``expires_at``."""


def expired_decision(task: AgentTask, now: float) -> AgentTask:
    """A WAITING task whose call was not decided in time: denied (the model is told)."""
    waited = now - float((task.waiting or {}).get("since", now))
    reason = f"no one decided within {waited:.0f}s"
    return decided(task, Decide(task.id, False, EXPIRY, reason), now)


def lease_report(task: AgentTask) -> str:
    """The supervisor's log line (``%r`` the id, ``%s`` the status) for a task the lease
    check changed: an attempt whose lease ran out, or a call nobody decided in time."""
    if task.status is TaskStatus.PENDING and any(d.get("by") == EXPIRY for d in task.decisions.values()):
        return "supervisor: task %r: nobody decided the call it waited on in time; denied, now %s"
    return "supervisor: task %r lost its lease; now %s"


def _has_text(value: Any, needle: str) -> bool:
    """Whether ``needle`` (lower case) is in a string anywhere in ``value`` (not its keys)."""
    if isinstance(value, str):
        return needle in value.lower()
    if isinstance(value, dict):
        return any(_has_text(item, needle) for item in value.values())
    if isinstance(value, list):
        return any(_has_text(item, needle) for item in value)
    return False


def listed(task: AgentTask, listing: ListTasks) -> bool:
    """Whether ``task`` matches every filter of ``listing`` (its page bounds aside): the
    one meaning of each filter, which a backend that filters in its queries matches
    exactly (``text``: case ignored, in the id or in a string of the input)."""
    if listing.status is not None and task.status is not listing.status:
        return False
    if listing.type is not None and task.type != listing.type:
        return False
    if listing.owner is not None and task.owner != listing.owner:
        return False
    if listing.updated_since is not None and task.updated_at < listing.updated_since:
        return False
    if listing.text:
        needle = listing.text.lower()
        return needle in task.id.lower() or _has_text(task.input, needle)
    return True
