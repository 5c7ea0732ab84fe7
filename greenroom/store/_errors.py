"""Refusals from the task graph, whatever its store. Each is a ``ValueError`` naming the
task and the reason; a refused request changes nothing."""

from __future__ import annotations

from .._errors import InvalidInput


class TaskGraphError(InvalidInput):
    """A request the task graph refused; nothing was changed."""


class UnknownTask(TaskGraphError):
    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        super().__init__(f"no task with id {task_id!r}", field="task_id", value=task_id)


class NotOwner(TaskGraphError):
    def __init__(self, task_id: str, agent_id: str, owner: str | None) -> None:
        self.task_id = task_id
        self.agent_id = agent_id
        self.owner = owner
        super().__init__(
            f"agent {agent_id!r} does not own task {task_id!r} (owner: {owner!r})",
            field="agent_id",
            value=agent_id,
        )


class Fenced(TaskGraphError):
    """A write made under an ownership whose fencing token is no longer the live one (its
    lease lapsed and another owner holds a newer token, or its attempt ended): refused,
    nothing changed. The stale owner gives its work up; nothing is wrong with the store.
    ``token``: the writer's; ``current``: the newest one (``None``: not known here — the
    task is finished and archived)."""

    def __init__(
        self, what: str, token: int, current: int | None, why: str = "", task_id: str | None = None
    ) -> None:
        self.what = what
        self.token = token
        self.current = current
        self.task_id = task_id
        """The task whose attempt it was (``None``: not a task's)."""
        said = f" ({why})" if why else ""
        newest = "not known" if current is None else str(current)
        super().__init__(
            f"{what}: a write under fencing token {token} was refused; the newest token is {newest}{said}",
            field="token",
            value=token,
        )


class InvalidTransition(TaskGraphError):
    def __init__(self, task_id: str, status: str, action: str) -> None:
        self.task_id = task_id
        self.status = status
        super().__init__(f"cannot {action} task {task_id!r}: it is {status}", field="status", value=status)


class InvalidSubmission(TaskGraphError):
    """A submitted batch was refused as a whole: duplicate id, unknown dependency, cycle."""

    def __init__(self, task_id: str, field: str, value: object, problem: str) -> None:
        self.task_id = task_id
        super().__init__(
            f"task {task_id!r}: field {field!r} {problem} (got {value!r})", field=field, value=value
        )


class DuplicateTask(InvalidSubmission):
    """A submitted id is taken by a task the graph already holds (or one submitted at the
    same moment by another caller): a conflict, not a malformed batch. Nothing was added."""

    def __init__(self, task_id: str) -> None:
        super().__init__(task_id, "id", task_id, "is already taken")


class EventsGone(InvalidInput):
    """A reader asked for events after ``after``, but retention dropped the log through
    ``oldest - 1``: resume from ``oldest`` (HTTP 410). Nothing is skipped silently."""

    def __init__(self, after: int, oldest: int) -> None:
        self.after = after
        self.oldest = oldest
        super().__init__(
            f"events after {after} are gone: retention dropped the log through {oldest - 1}; "
            f"the oldest kept is {oldest}",
            field="after",
            value=after,
        )
