"""Deciding many waiting calls at once: what an operator does after a crash left many
"it may have run" questions, or a batch of calls waiting for the same approval.

:func:`decide_waiting` finds the WAITING tasks a :class:`WaitingFilter` selects and, unless
it is a dry run, sends each its own ``Decide`` (naming the exact step shown, so a call that
changed meanwhile is refused, not decided blind): every decision is recorded as a single
one is — on the task, in its ``TASK_APPROVED`` / ``TASK_DENIED`` event, with who and when.
The CLI (``greenroom tasks decide``), the API (``POST /v1/tasks/decide``) and the status
page all go through it.
"""

from __future__ import annotations

from typing import Any

import msgspec

from .._errors import InvalidInput
from ..actors import ActorRef
from ..messages import AgentTask, Decide, ListTasks, TaskStatus
from ..store import TaskGraphError

MAX_BULK = 10_000
"""Calls decided by one request at most (a filter that selects more is refused)."""


class WaitingFilter(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Which waiting calls: of agent ``type``, of ``tool``, and ``may_have_run`` (the
    question a crash asks: a call that began and left no result) — ``None`` matches any."""

    type: str | None = None
    tool: str | None = None
    may_have_run: bool | None = None

    def matches(self, task: AgentTask) -> bool:
        call = task.waiting or {}
        if task.status is not TaskStatus.WAITING or not call:
            return False
        if self.type is not None and task.type != self.type:
            return False
        if self.tool is not None and call.get("tool") != self.tool:
            return False
        return self.may_have_run is None or ("question" in call) == self.may_have_run


class BulkDecision(msgspec.Struct, frozen=True):
    """What :func:`decide_waiting` found and did: ``matched`` (each call as shown: id,
    step, tool, arguments, question), ``decided`` (the ids), ``refused`` (id and why),
    ``dry_run`` (nothing was decided)."""

    matched: list[dict[str, Any]]
    decided: list[str]
    refused: list[dict[str, str]]
    dry_run: bool
    approved: bool
    as_done: bool


async def decide_waiting(
    supervisor: ActorRef,
    where: WaitingFilter,
    *,
    approved: bool,
    by: str,
    reason: str = "",
    as_done: bool = False,
    dry_run: bool = True,
) -> BulkDecision:
    """Find the calls ``where`` selects; unless ``dry_run``, decide each (see the module
    doc). ``InvalidInput`` for ``as_done`` on a denial, a denial without a reason, or more
    than ``MAX_BULK`` calls. A task that stopped waiting meanwhile (another person, an
    expiry) is in ``refused``, the rest decided all the same.

    Cancelled, the decisions already answered stand, the rest are not sent."""
    if as_done and not approved:
        raise InvalidInput(
            "as_done approves a call as already done: it cannot go with a denial", field="as_done"
        )
    if not approved and not reason.strip():
        raise InvalidInput("a denial needs a reason (the agent is told it)", field="reason")
    waiting = await supervisor.ask(ListTasks(status=TaskStatus.WAITING, type=where.type), timeout=None)
    chosen = [task for task in waiting if where.matches(task)]
    if len(chosen) > MAX_BULK:
        raise InvalidInput(
            f"the filter selects {len(chosen)} waiting calls, more than {MAX_BULK} at once: narrow it",
            field="filter",
        )
    matched = [_shown(task) for task in chosen]
    decided: list[str] = []
    refused: list[dict[str, str]] = []
    if not dry_run:
        for task, call in zip(chosen, matched, strict=True):
            message = Decide(task.id, approved, by, reason, call["step"], as_done)
            try:
                await supervisor.ask(message, timeout=None)
            except TaskGraphError as error:
                refused.append({"id": task.id, "error": str(error)})
            else:
                decided.append(task.id)
    return BulkDecision(matched, decided, refused, dry_run, approved, as_done)


def _shown(task: AgentTask) -> dict[str, Any]:
    call = task.waiting or {}
    shown = {"id": task.id, "type": task.type, "step": call.get("step"), "tool": call.get("tool")}
    shown["arguments"] = call.get("arguments", {})
    if "question" in call:
        shown["question"] = call["question"]
    return shown
