"""The task graph in PostgreSQL: each operation is one transaction (blocking; called on
a worker thread through :class:`Database`).

The single-writer rule of the file store becomes a transaction rule. A claim is one
``UPDATE`` of the best ready row picked ``FOR UPDATE SKIP LOCKED``, so concurrent claims
from any number of daemons never take the same task and never wait on each other. A
completion or failure checks, in its ``UPDATE``'s ``WHERE``, that the caller still owns
the task in progress, so an owner whose lease was reclaimed is refused. Dependencies are
rows of ``gr_deps`` and each task counts its ``unmet`` ones; completing a task
decrements its dependents in the same transaction. A reclaim of expired leases locks the
rows it reclaims (``SKIP LOCKED``): each is won by exactly one node. Every transition
writes its events into ``gr_events`` in the same transaction (numbered by a sequence; see
:class:`EventCursor` for how a reader follows them in order). Tasks that became ready are
announced with ``NOTIFY greenroom_runnable, '<type>'`` at commit. Claims and usual
completions also come in batches (:meth:`PostgresGraph.claim_many`,
:meth:`PostgresGraph.complete_many`): one statement, one commit, each request in it as
atomic as alone.

Scalars live in columns (what claims and leases touch); ``input``, ``context``,
``metadata``, ``depends_on``, ``result`` and ``error`` in ``doc``.
"""

from __future__ import annotations

import collections
import re
import threading
import time
from collections.abc import Iterable
from typing import Any, Literal

import msgspec

from ..messages import (
    AGENT_RESULT,
    TASK_APPROVED,
    TASK_CANCELLED,
    TASK_COMPLETED,
    TASK_DENIED,
    TASK_FAILED,
    TASK_RETRIED,
    TASK_SUBMITTED,
    TASK_WAITING,
    AgentError,
    AgentResult,
    AgentTask,
    Decide,
    GraphStats,
    ListTasks,
    Retry,
    TaskLimits,
    TaskStatus,
)
from ..store import (
    FAILED_STATES,
    DuplicateTask,
    InvalidSubmission,
    InvalidTransition,
    NotOwner,
    UnknownTask,
    check_submission,
    death_counted,
    decided,
    dependency_failed,
    expired_decision,
    fenced,
    in_dependency_order,
    lease_expired,
    parked,
    poison_reason,
    refusal,
    requeued_after_death,
    result_payload,
    retried,
    revived,
    transition_payload,
)
from ._events import EventItem, encode_payload, insert_events
from ._steps import drop_steps

FAILED_NAMES = frozenset(status.value for status in FAILED_STATES)

CHANNEL = "greenroom_runnable"

Notify = Literal["commit", "batched", "none"]
"""How tasks that became ready are announced to the other daemons: ``commit`` — a
``NOTIFY`` in the transaction that made them ready (the default); ``batched`` — after it
commits, all that gathered in one transaction of its own, at most one per 20 ms; ``none``
— not at all (other daemons find them at their next lease check). This daemon's own
supervisor learns of them at once in every mode. ``NOTIFY`` takes a database-wide lock at
commit; ``benchmarks/notify.py`` measured 4 daemons on one database (2 cores): batched
0.85-0.91x of commit's tasks/s, none 0.98-1.04x — the daemons' CPU, not that lock, was
the limit there, and batching costs a transaction of its own."""
ARCHIVE_LOCK = 0x6772_6172  # "grar": taken by archiving (exclusive) and submitting (shared)
DAY = 86400.0
FINAL = tuple(status.value for status in TaskStatus if status.final)

_COLUMNS = (
    "id, type, status, owner, priority, ord, attempt, max_attempts, crashes, created_at, updated_at, "
    "lease_expires_at, last_heartbeat_at, token, doc"
)
_DOC_FIELDS = (
    "input",
    "context",
    "metadata",
    "depends_on",
    "result",
    "error",
    "waiting",
    "decisions",
    "retries",
)
_encode = msgspec.json.encode
EventRow = tuple[str, str | None, str | None, dict[str, Any]]
"""An event to write: ``(type, task_id, agent_id, payload)``."""


_decode_task = msgspec.json.Decoder(AgentTask)


def _archived_task(text: str) -> AgentTask:
    return _decode_task.decode(text)


def _task(row: tuple[Any, ...]) -> AgentTask:
    (id_, type_, status, owner, priority, order, attempt, max_attempts, crashes, created, updated,
     lease, heartbeat, token, doc) = row  # fmt: skip
    raw = dict(doc)
    raw.update(
        id=id_,
        type=type_,
        status=status,
        owner=owner,
        priority=priority,
        order=order,
        attempt=attempt,
        max_attempts=max_attempts,
        crashes=crashes,
        created_at=created,
        updated_at=updated,
        lease_expires_at=lease,
        last_heartbeat_at=heartbeat,
        token=token,
    )
    return msgspec.convert(raw, AgentTask)


def _doc(task: AgentTask) -> str:
    return _encode({name: getattr(task, name) for name in _DOC_FIELDS}).decode()


class PostgresGraph:
    """The operations of the task graph on PostgreSQL; each method takes a connection in
    an open transaction (``Database.run``) and returns what the file supervisor would."""

    def __init__(
        self, *, limits: TaskLimits | None = None, clock: Any = time.time, notify: Notify = "commit"
    ) -> None:
        self.limits = limits or TaskLimits()
        self.clock = clock
        self.notify = notify
        self._ready_types: set[str] = set()
        self._ready_lock = threading.Lock()  # noted by the transactions' worker threads

    def take_ready(self) -> frozenset[str]:
        """With ``notify`` other than ``"commit"``: the types that became ready since the
        last call (the store announces them after the commit, or not at all)."""
        with self._ready_lock:
            types, self._ready_types = frozenset(self._ready_types), set()
        return types

    def _note_ready(self, types: Iterable[str]) -> None:
        with self._ready_lock:
            self._ready_types.update(types)

    # -- events ---------------------------------------------------------------------

    def _emit(self, connection: Any, events: list[EventRow]) -> None:
        if events:
            now = self.clock()
            rows: list[EventItem] = [
                (now, kind, task_id, agent_id, "internal", payload, encode_payload(payload))
                for kind, task_id, agent_id, payload in events
            ]
            insert_events(connection, rows)

    @staticmethod
    def _transition_event(kind: str, task: AgentTask) -> EventRow:
        return (kind, task.id, task.owner, transition_payload(task, kind))

    def _notify(self, connection: Any, types: set[str]) -> None:
        if self.notify != "commit":
            self._note_ready(types)
            return
        for agent_type in sorted(types):
            connection.execute("SELECT pg_notify(%s, %s)", (CHANNEL, agent_type))

    # -- reading --------------------------------------------------------------------

    def get(self, connection: Any, task_id: str) -> AgentTask:
        """The task, live or archived (``UnknownTask``: neither)."""
        row = connection.execute(f"SELECT {_COLUMNS} FROM gr_tasks WHERE id = %s", (task_id,)).fetchone()
        if row is not None:
            return _task(row)
        archived = connection.execute(
            "SELECT task::text FROM gr_archive WHERE id = %s", (task_id,)
        ).fetchone()
        if archived is None:
            raise UnknownTask(task_id)
        return _archived_task(archived[0])

    def dependents(self, connection: Any, task_id: str) -> list[str]:
        """The live tasks that depend on ``task_id`` directly, in submission order
        (``UnknownTask`` if it is not live)."""
        if connection.execute("SELECT 1 FROM gr_tasks WHERE id = %s", (task_id,)).fetchone() is None:
            raise UnknownTask(task_id)
        rows = connection.execute(
            "SELECT t.id FROM gr_deps d JOIN gr_tasks t ON t.id = d.task_id "
            "WHERE d.dep_id = %s ORDER BY t.ord",
            (task_id,),
        ).fetchall()
        return [dependent for (dependent,) in rows]

    @staticmethod
    def archived_statuses(connection: Any, ids: list[str]) -> dict[str, str]:
        """The archived ones among ``ids``, with their final status."""
        if not ids:
            return {}
        rows = connection.execute("SELECT id, status FROM gr_archive WHERE id = ANY(%s)", (ids,))
        return {task_id: status for task_id, status in rows}

    def list_tasks(self, connection: Any, listing: ListTasks | None = None) -> list[AgentTask]:
        """The tasks ``listing`` keeps (the archived ones with ``archived``): every filter
        in the query, with the meaning ``store.listed`` gives it (``None``: every live task)."""
        listing = listing if listing is not None else ListTasks()
        where, values = _listing_where(listing, archived=listing.archived)
        if listing.archived:
            found = connection.execute(f"SELECT task::text FROM gr_archive WHERE {where}", values).fetchall()
            return [_archived_task(text) for (text,) in found]
        rows = connection.execute(f"SELECT {_COLUMNS} FROM gr_tasks WHERE {where}", values).fetchall()
        return [_task(row) for row in rows]

    def stats(self, connection: Any) -> GraphStats:
        """The counts and the runnable types in one statement: one snapshot (two statements
        could see a task claimed between them — neither PENDING-and-ready in the second nor
        IN_PROGRESS in the first: "idle" with a task running)."""
        counts = dict.fromkeys((s.value for s in TaskStatus), 0)
        by_type: dict[str, dict[str, int]] = {}
        runnable: set[str] = set()
        for agent_type, status, count, ready in connection.execute(
            "SELECT type, status, count(*), count(*) FILTER (WHERE status = 'PENDING' AND unmet = 0) "
            "FROM gr_tasks GROUP BY type, status ORDER BY type, status"
        ):
            counts[status] += int(count)
            by_type.setdefault(agent_type, {})[status] = int(count)
            if ready:
                runnable.add(agent_type)
        types = sorted(runnable)
        return GraphStats(by_status=counts, runnable_types=types, total=sum(counts.values()), by_type=by_type)

    # -- submitting -----------------------------------------------------------------

    def submit(self, connection: Any, tasks: list[AgentTask]) -> list[AgentTask]:
        """All or none; the same refusals as the file graph's ``submit``."""
        batch = check_submission(tasks, self.limits)
        for task in tasks:
            _storable(task)
        # shared: submissions never wait for each other, only for an archiving pass moving
        # tasks between the tables (a task on its way must not look free to take)
        connection.execute("SELECT pg_advisory_xact_lock_shared(%s)", (ARCHIVE_LOCK,))
        taken = connection.execute("SELECT id FROM gr_tasks WHERE id = ANY(%s)", (list(batch),)).fetchone()
        if taken is not None:
            raise DuplicateTask(taken[0])
        archived_ids = self.archived_statuses(connection, list(batch))
        if archived_ids:  # an archived id stays taken
            raise DuplicateTask(min(archived_ids))
        outside = sorted({dep for task in tasks for dep in task.depends_on if dep not in batch})
        known: dict[str, str] = {}
        if outside:
            # FOR SHARE: a dependency cannot complete between this read and our commit, so
            # its completion (which decrements `unmet`) sees the rows inserted here
            known = dict(
                connection.execute(
                    "SELECT id, status FROM gr_tasks WHERE id = ANY(%s) FOR SHARE", (outside,)
                ).fetchall()
            )
        archived = self.archived_statuses(connection, [dep for dep in outside if dep not in known])
        known.update(archived)  # final: their dependents are decided now, no edge is needed
        for task in tasks:
            for dep in task.depends_on:
                if dep not in batch and dep not in known:
                    raise InvalidSubmission(task.id, "depends_on", dep, "is not a known task")
        now = self.clock()
        orders = [row[0] for row in connection.execute(
            "SELECT nextval('gr_task_order') FROM generate_series(1, %s)", (len(tasks),)
        )]  # fmt: skip
        failed: dict[str, str] = {}  # task id -> the dependency that can never complete
        for task in in_dependency_order(batch):
            for dep in task.depends_on:
                status = known.get(dep)
                if (status is not None and status in FINAL and status != "COMPLETED") or dep in failed:
                    failed[task.id] = dep
                    break
        stored: list[AgentTask] = []
        events: list[EventRow] = []
        runnable: set[str] = set()
        rows = []
        for task, order in zip(tasks, orders, strict=True):
            unmet = sum(1 for dep in task.depends_on if dep in batch or known.get(dep) != "COMPLETED")
            if task.id in failed:
                dep = failed[task.id]
                task = msgspec.structs.replace(
                    task,
                    status=TaskStatus.DEPENDENCY_FAILED,
                    error=dependency_failed(dep, known.get(dep, "DEPENDENCY_FAILED")),
                )
            task = msgspec.structs.replace(task, created_at=now, updated_at=now, order=order)
            stored.append(task)
            rows.append((task.id, task.type, task.status.value, task.priority, order, task.max_attempts,
                         unmet, now, now, _doc(task)))  # fmt: skip
            events.append(self._transition_event(TASK_SUBMITTED, task))
            if task.status is TaskStatus.DEPENDENCY_FAILED:
                events.append(self._transition_event(TASK_FAILED, task))
            elif unmet == 0:
                runnable.add(task.type)
        with connection.cursor() as cursor:
            # another submission of the same id may commit between the check above and this
            # insert (two daemons, two API requests): the row written first wins, this
            # batch is refused whole (raising rolls the transaction back)
            cursor.executemany(
                "INSERT INTO gr_tasks (id, type, status, priority, ord, attempt, max_attempts, unmet, "
                "created_at, updated_at, doc) VALUES (%s, %s, %s, %s, %s, 0, %s, %s, %s, %s, %s::jsonb) "
                "ON CONFLICT (id) DO NOTHING RETURNING id",
                rows,
                returning=True,
            )
            inserted = {row[0] for _ in cursor.results() for row in cursor.fetchall()}
            if len(inserted) < len(rows):
                raise DuplicateTask(next(row[0] for row in rows if row[0] not in inserted))
            deps = [(dep, task.id) for task in tasks for dep in task.depends_on if dep not in archived]
            if deps:
                cursor.executemany("INSERT INTO gr_deps (dep_id, task_id) VALUES (%s, %s)", deps)
        self._emit(connection, events)
        self._notify(connection, runnable)
        return stored

    # -- claiming and leases ----------------------------------------------------------

    def claim(self, connection: Any, agent_id: str, agent_type: str, lease: float) -> AgentTask | None:
        """One agent's claim: :meth:`claim_many` for one."""
        return self.claim_many(connection, [agent_id], agent_type, lease)[0]

    def claim_many(
        self, connection: Any, agent_ids: list[str], agent_type: str, lease: float
    ) -> list[AgentTask | None]:
        """The claims of several agents waiting for ``agent_type`` work, in one statement
        (one round trip, one commit: run it with ``Database.run(..., single=True)``): the
        best ready rows picked ``FOR UPDATE SKIP LOCKED``, handed out in the agents'
        order (the first agent gets the best task), each logged as ``TASK_CLAIMED``.
        Returns each agent's task, ``None`` for the agents left without one.

        Fresh work first; a suspect (running at ``isolate_after_crashes`` deaths of its
        process) runs alone on its node: only when no fresh one is ready and nothing of the
        claiming process (``agent@<node>:<pid>``) is in progress, at most one per
        statement, in a random order; and while it runs, that process is granted nothing
        else — so a death while it runs says it was that task. (Two claims of one process
        for different types racing could still grant beside a suspect: that death is then
        shared, and a shared death never fails a task: ``death_counted``.)"""
        if not agent_ids:
            return []
        now = self.clock()
        _, at, instance = agent_ids[0].rpartition("@")
        mine = f"%@{_like(instance)}" if at else "%"
        rows = connection.execute(
            f"""WITH wanting AS (
                    SELECT agent, k FROM unnest(%(agents)s::text[]) WITH ORDINALITY AS w(agent, k)),
                fresh AS (
                    SELECT id, priority, ord FROM gr_tasks
                    WHERE status = 'PENDING' AND unmet = 0 AND type = %(type)s AND crashes < %(isolate)s
                        AND NOT EXISTS (SELECT 1 FROM gr_tasks WHERE status = 'IN_PROGRESS'
                                        AND crashes >= %(isolate)s AND owner LIKE %(mine)s)
                    ORDER BY priority DESC, ord LIMIT %(n)s FOR UPDATE SKIP LOCKED),
                suspect AS (
                    SELECT id, priority, ord FROM gr_tasks
                    WHERE status = 'PENDING' AND unmet = 0 AND type = %(type)s AND crashes >= %(isolate)s
                        AND NOT EXISTS (SELECT 1 FROM fresh)
                        AND NOT EXISTS (SELECT 1 FROM gr_tasks  -- an attempt has a lease: its index
                                        WHERE lease_expires_at IS NOT NULL AND status = 'IN_PROGRESS'
                                            AND owner LIKE %(mine)s)
                    ORDER BY random() LIMIT 1 FOR UPDATE SKIP LOCKED),
                picked AS (
                    SELECT id, row_number() OVER (ORDER BY suspect, priority DESC, ord) AS k
                    FROM (SELECT id, priority, ord, false AS suspect FROM fresh
                          UNION ALL SELECT id, priority, ord, true FROM suspect) p),
                claimed AS (
                    UPDATE gr_tasks t SET status = 'IN_PROGRESS', owner = wanting.agent,
                        attempt = t.attempt + 1, token = t.token + 1, lease_expires_at = %(expires)s,
                        last_heartbeat_at = %(now)s, updated_at = %(now)s
                    FROM picked JOIN wanting USING (k) WHERE t.id = picked.id
                    RETURNING wanting.k, {_prefixed("t")}),
                logged AS (
                    INSERT INTO gr_events (ts, type, task_id, agent_id, visibility, payload)
                    SELECT %(now)s, 'TASK_CLAIMED', id, owner, 'internal',
                        jsonb_build_object('status', status, 'attempt', attempt)
                    FROM claimed ORDER BY k)
                SELECT k, {_COLUMNS} FROM claimed""",
            {
                "agents": agent_ids,
                "n": len(agent_ids),
                "type": agent_type,
                "expires": now + lease,
                "now": now,
                "mine": mine,
                "isolate": self.limits.isolate_after_crashes,
            },
        ).fetchall()
        tasks: list[AgentTask | None] = [None] * len(agent_ids)
        for row in rows:
            tasks[row[0] - 1] = _task(row[1:])
        return tasks

    @classmethod
    def _locked(cls, connection: Any, task_id: str, action: str = "change") -> AgentTask:
        """The task's row, locked until the transaction ends; ``InvalidTransition`` if it
        is archived (finished), ``UnknownTask`` if there is none."""
        row = connection.execute(
            f"SELECT {_COLUMNS} FROM gr_tasks WHERE id = %s FOR UPDATE", (task_id,)
        ).fetchone()
        if row is None:
            archived = cls.archived_statuses(connection, [task_id])
            if archived:
                raise InvalidTransition(task_id, f"{archived[task_id]} (archived)", action)
            raise UnknownTask(task_id)
        return _task(row)

    # -- the archive ----------------------------------------------------------------

    def archive(self, connection: Any, before: float, keep: int | None, most: int) -> int:
        """Move finished tasks into ``gr_archive`` (their day's partition, made when
        missing): those that finished before ``before``, and the oldest beyond the newest
        ``keep``; at most ``most``. How many moved. Small statements, never a mass
        ``DELETE``: the live table only ever holds the recent past."""
        connection.execute("SELECT pg_advisory_xact_lock(%s)", (ARCHIVE_LOCK,))
        excess = 0
        if keep is not None:
            finished = connection.execute(
                "SELECT count(*) FROM gr_tasks WHERE status = ANY(%s)", (list(FINAL),)
            ).fetchone()[0]
            excess = max(0, int(finished) - keep)
        rows = connection.execute(
            f"SELECT {_COLUMNS} FROM gr_tasks WHERE status = ANY(%s) ORDER BY updated_at LIMIT %s "
            "FOR UPDATE SKIP LOCKED",
            (list(FINAL), most),
        ).fetchall()
        leaving: list[AgentTask] = []
        for row in rows:
            task = _task(row)
            if task.updated_at >= before and len(leaving) >= excess:
                break
            leaving.append(task)
        if not leaving:
            return 0
        for day in sorted({int(task.updated_at // DAY) for task in leaving}):
            connection.execute(
                f"CREATE TABLE IF NOT EXISTS gr_archive_d{day} PARTITION OF gr_archive "
                f"FOR VALUES FROM ({day * DAY!r}) TO ({(day + 1) * DAY!r})"
            )
        ids = [task.id for task in leaving]
        with connection.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO gr_archive (id, ord, status, type, finished_at, task) "
                "VALUES (%s, %s, %s, %s, %s, %s::jsonb)",
                [(t.id, t.order, t.status.value, t.type, t.updated_at, _encode(t).decode()) for t in leaving],
            )
        connection.execute("DELETE FROM gr_deps WHERE task_id = ANY(%s) OR dep_id = ANY(%s)", (ids, ids))
        drop_steps(connection, ids)  # through the step journal's own statement: nothing replays them
        connection.execute("DELETE FROM gr_tasks WHERE id = ANY(%s)", (ids,))
        return len(ids)

    @staticmethod
    def drop_archive(connection: Any, before: float) -> int:
        """Drop the archive's days that ended before ``before``, whole; how many tasks went."""
        days = connection.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = 'gr_archive'::regclass"
        ).fetchall()
        gone = 0
        for (name,) in days:
            match = re.fullmatch(r"gr_archive_d(\d+)", name)
            if match is None or (int(match.group(1)) + 1) * DAY > before:
                continue
            gone += int(connection.execute(f"SELECT count(*) FROM {name}").fetchone()[0])
            connection.execute(f"DROP TABLE {name}")
        return gone

    @staticmethod
    def archive_sizes(connection: Any) -> tuple[int, int]:
        """Archived tasks, and the days (partitions) they are in."""
        tasks = int(connection.execute("SELECT count(*) FROM gr_archive").fetchone()[0])
        days = int(
            connection.execute(
                "SELECT count(*) FROM pg_inherits WHERE inhparent = 'gr_archive'::regclass"
            ).fetchone()[0]
        )
        return tasks, days

    def _owned(
        self, connection: Any, task_id: str, agent_id: str, action: str, token: int | None = None
    ) -> AgentTask:
        if token is not None:  # the attempt's own token: refused (Fenced) unless it is the live one
            try:
                locked: AgentTask | None = self._locked(connection, task_id)
            except InvalidTransition:  # archived: finished
                locked = None
            refused = fenced(locked, task_id, agent_id, token, action)
            if refused is not None:
                raise refused
            assert locked is not None
            return locked
        task = self._locked(connection, task_id)
        if task.status is not TaskStatus.IN_PROGRESS:
            raise InvalidTransition(task_id, task.status.value, action)
        if task.owner != agent_id:
            raise NotOwner(task_id, agent_id, task.owner)
        return task

    def heartbeat(
        self, connection: Any, task_id: str, agent_id: str, lease: float, token: int | None = None
    ) -> AgentTask:
        now = self.clock()
        row = connection.execute(
            f"UPDATE gr_tasks SET lease_expires_at = %s, last_heartbeat_at = %s WHERE id = %s "
            f"AND status = 'IN_PROGRESS' AND owner = %s AND (%s::bigint IS NULL OR token = %s) "
            f"RETURNING {_COLUMNS}",
            (now + lease, now, task_id, agent_id, token, token),
        ).fetchone()
        if row is None:
            self._owned(connection, task_id, agent_id, "heartbeat", token)  # raises the right refusal
        return _task(row)

    def _write(self, connection: Any, task: AgentTask) -> None:
        connection.execute(
            "UPDATE gr_tasks SET status = %s, owner = %s, attempt = %s, crashes = %s, lease_expires_at = %s, "
            "last_heartbeat_at = %s, updated_at = %s, doc = %s::jsonb WHERE id = %s",
            (
                task.status.value,
                task.owner,
                task.attempt,
                task.crashes,
                task.lease_expires_at,
                task.last_heartbeat_at,
                task.updated_at,
                _doc(task),
                task.id,
            ),
        )

    def complete(
        self,
        connection: Any,
        task_id: str,
        agent_id: str,
        result: AgentResult,
        *,
        at_once: bool = True,
        token: int | None = None,
    ) -> AgentTask:
        """Complete the owner's task in this transaction (``at_once=False``: the caller
        already tried :meth:`complete_at_once`, so go straight to the checks)."""
        if result.task_id != task_id:
            raise InvalidSubmission(task_id, "result.task_id", result.task_id, "does not match the task")
        encoded = _encode(result)
        done = self.complete_at_once(connection, task_id, agent_id, result, token) if at_once else None
        if done is not None:
            return done
        task = self._owned(connection, task_id, agent_id, "complete", token)  # raises the right refusal
        if len(encoded) > self.limits.max_result_bytes:
            reason = (
                f"the result is {len(encoded)} bytes, larger than max_result_bytes "
                f"({self.limits.max_result_bytes})"
            )
            return self._end_attempt(connection, task, AgentError(reason=reason), agent_id)
        if _NUL.search(encoded):
            reason = "the result contains a NUL character (\\u0000), which PostgreSQL cannot store"
            return self._end_attempt(connection, task, AgentError(reason=reason), agent_id)
        task = msgspec.structs.replace(
            task, status=TaskStatus.COMPLETED, result=result, lease_expires_at=None, updated_at=self.clock()
        )
        self._write(connection, task)
        ready = connection.execute(
            "UPDATE gr_tasks SET unmet = unmet - 1 "
            "WHERE id IN (SELECT task_id FROM gr_deps WHERE dep_id = %s) AND status = 'PENDING' "
            "RETURNING type, unmet",
            (task_id,),
        ).fetchall()
        self._emit(connection, [self._transition_event(TASK_COMPLETED, task),
                                (AGENT_RESULT, task_id, agent_id, result_payload(result))])  # fmt: skip
        self._notify(connection, {agent_type for agent_type, unmet in ready if unmet == 0})
        return task

    def complete_at_once(
        self, connection: Any, task_id: str, agent_id: str, result: AgentResult, token: int | None = None
    ) -> AgentTask | None:
        """One usual completion: :meth:`complete_many` for one."""
        return self.complete_many(connection, [(task_id, agent_id, result, token)])[0]

    def complete_many(
        self, connection: Any, completions: list[tuple[str, str, AgentResult, int | None]]
    ) -> list[AgentTask | None]:
        """Usual completions ``(task_id, agent_id, result, token)`` in one statement (one round
        trip, one commit: run it with ``Database.run(..., single=True)``): each owner's task
        COMPLETED, the dependents' counts decremented (by as many of their dependencies as
        completed here), the events logged, the types that became ready announced.

        ``None`` for a completion that changed nothing — the caller does not own the task
        in progress, the result is too large, or it names another task: :meth:`complete`
        then says why, in a transaction of its own. The others are done either way."""
        out: list[AgentTask | None] = [None] * len(completions)
        given: list[dict[str, Any]] = []
        positions: list[int] = []
        for index, (task_id, agent_id, result, token) in enumerate(completions):
            encoded = _encode(result)
            if (
                result.task_id != task_id
                or len(encoded) > self.limits.max_result_bytes
                or _NUL.search(encoded)
            ):
                continue
            positions.append(index)
            given.append({"k": len(given) + 1, "id": task_id, "agent": agent_id, "token": token,
                          "result": msgspec.Raw(encoded), "payload": result_payload(result)})  # fmt: skip
        if not given:
            return out
        now = self.clock()
        rows = connection.execute(
            f"""WITH given AS (
                    SELECT * FROM jsonb_to_recordset(%(given)s::jsonb)
                        AS g(k integer, id text, agent text, token bigint, result jsonb, payload jsonb)),
                done AS (
                    UPDATE gr_tasks t SET status = 'COMPLETED', lease_expires_at = NULL, updated_at = %(now)s,
                        doc = jsonb_set(t.doc, '{{result}}', given.result)
                    FROM given
                    WHERE t.id = ANY(%(ids)s::text[]) AND t.id = given.id AND t.status = 'IN_PROGRESS'
                        AND t.owner = given.agent AND (given.token IS NULL OR t.token = given.token)
                    RETURNING given.k, given.payload, {_prefixed("t")}),
                met AS (
                    SELECT d.task_id, count(*) AS n FROM gr_deps d JOIN done ON d.dep_id = done.id
                    GROUP BY d.task_id),
                ready AS (
                    UPDATE gr_tasks t SET unmet = t.unmet - met.n
                    FROM met WHERE t.id = met.task_id AND t.status = 'PENDING'
                    RETURNING t.type, t.unmet),
                logged AS (
                    INSERT INTO gr_events (ts, type, task_id, agent_id, visibility, payload)
                    SELECT %(now)s, kind, id, agent, 'internal', payload FROM (
                        SELECT k, 0 AS i, 'TASK_COMPLETED' AS kind, id, owner AS agent,
                            jsonb_build_object('status', 'COMPLETED', 'attempt', attempt) AS payload
                        FROM done
                        UNION ALL SELECT k, 1, 'AGENT_RESULT', id, owner, payload FROM done) e
                    ORDER BY k, i),
                announced AS (
                    SELECT type, CASE WHEN %(at_commit)s THEN pg_notify(%(channel)s, type) END
                    FROM (SELECT DISTINCT type FROM ready WHERE unmet = 0) r)
                SELECT k, {_COLUMNS}, (SELECT array_agg(type) FROM announced) FROM done""",
            {
                "now": now,
                "ids": [item["id"] for item in given],  # the primary key's lookups, whatever the statistics
                "given": _encode(given).decode(),
                "channel": CHANNEL,
                "at_commit": self.notify == "commit",
            },
        ).fetchall()
        if rows and rows[0][-1] and self.notify != "commit":
            self._note_ready(rows[0][-1])
        for row in rows:
            out[positions[row[0] - 1]] = _task(row[1:-1])
        return out

    def fail(
        self, connection: Any, task_id: str, agent_id: str, error: AgentError, token: int | None = None
    ) -> AgentTask:
        task = self._owned(connection, task_id, agent_id, "fail", token)
        return self._end_attempt(connection, task, _printable(self.limits.clip(error)), agent_id)

    def _end_attempt(
        self, connection: Any, task: AgentTask, error: AgentError, agent_id: str | None
    ) -> AgentTask:
        now = self.clock()
        events: list[EventRow] = []
        if agent_id is not None:
            events.append((AGENT_RESULT, task.id, agent_id, result_payload(error)))
        if error.retryable and task.attempt < task.max_attempts:
            task = msgspec.structs.replace(task, status=TaskStatus.PENDING, owner=None, lease_expires_at=None,
                                           error=error, updated_at=now)  # fmt: skip
            self._write(connection, task)
            events.insert(0, self._transition_event(TASK_RETRIED, task))
            self._emit(connection, events)
            unmet = connection.execute("SELECT unmet FROM gr_tasks WHERE id = %s", (task.id,)).fetchone()[0]
            if unmet == 0:
                self._notify(connection, {task.type})
            return task
        task = msgspec.structs.replace(task, status=TaskStatus.FAILED, lease_expires_at=None, error=error,
                                       updated_at=now)  # fmt: skip
        self._write(connection, task)
        events.insert(0, self._transition_event(TASK_FAILED, task))
        events.extend(self._cascade(connection, task.id, "FAILED"))
        self._emit(connection, events)
        return task

    def _cascade(self, connection: Any, task_id: str, status: str) -> list[EventRow]:
        """Every task depending, directly or not, on ``task_id`` and not final yet becomes
        DEPENDENCY_FAILED (naming its direct failed dependency)."""
        now = self.clock()
        rows = connection.execute(
            """WITH RECURSIVE down(id, cause) AS (
                    SELECT task_id, dep_id FROM gr_deps WHERE dep_id = %s
                    UNION SELECT d.task_id, d.dep_id FROM gr_deps d JOIN down ON d.dep_id = down.id)
               SELECT t.id, min(down.cause) FROM gr_tasks t JOIN down ON t.id = down.id
               WHERE NOT t.status = ANY(%s)
               GROUP BY t.id""",
            (task_id, list(FINAL)),
        ).fetchall()
        events: list[EventRow] = []
        for dependent_id, cause in rows:
            dependent = self._locked(connection, dependent_id)
            dependent = msgspec.structs.replace(
                dependent,
                status=TaskStatus.DEPENDENCY_FAILED,
                owner=None,
                lease_expires_at=None,
                error=dependency_failed(cause, status if cause == task_id else "DEPENDENCY_FAILED"),
                updated_at=now,
            )
            self._write(connection, dependent)
            events.append(self._transition_event(TASK_FAILED, dependent))
        return events

    def release(
        self,
        connection: Any,
        task_id: str,
        agent_id: str,
        attempt: int | None = None,
        token: int | None = None,
    ) -> AgentTask:
        """The owner hands the task back unfinished: PENDING again, the attempt refunded.
        ``attempt``: only that attempt (a grant handed back must not end a later one)."""
        task = self._owned(connection, task_id, agent_id, "release", token)
        if attempt is not None and task.attempt != attempt:
            raise InvalidTransition(task_id, f"{task.status.value} in attempt {task.attempt}", "release")
        task = msgspec.structs.replace(task, status=TaskStatus.PENDING, owner=None, attempt=task.attempt - 1,
                                       lease_expires_at=None, updated_at=self.clock())  # fmt: skip
        self._write(connection, task)
        self._emit(connection, [self._transition_event(TASK_RETRIED, task)])
        self._notify(connection, {task.type})
        return task

    def park(
        self, connection: Any, task_id: str, agent_id: str, call: dict[str, Any], token: int | None = None
    ) -> AgentTask:
        """The owner parks its task for a person to decide ``call`` (``greenroom.store.parked``)."""
        task = self._owned(connection, task_id, agent_id, "park", token)
        task = parked(task, call, self.limits, self.clock())
        self._write(connection, task)
        self._emit(connection, [self._transition_event(TASK_WAITING, task)])
        return task

    def decide(self, connection: Any, decision: Decide) -> AgentTask:
        """A person's decision on the call a WAITING task waits on: PENDING again (the row
        locked first: of two decisions at once, on any daemons, the second is refused)."""
        task_id, approved = decision.task_id, decision.approved
        task = self._locked(connection, task_id, "approve" if approved else "deny")
        if (refused := refusal(task, "approve" if approved else "deny")) is not None:
            raise refused
        task = decided(task, decision, self.clock())
        self._write(connection, task)
        self._emit(connection, [self._transition_event(TASK_APPROVED if approved else TASK_DENIED, task)])
        self._notify(connection, {task.type})
        return task

    def retry(self, connection: Any, retry: Retry) -> AgentTask:
        """A person runs a FAILED task again (``retried``), or a DEPENDENCY_FAILED one
        through the FAILED tasks upstream it failed because of; then every dependent none of
        whose dependencies is failed any more is PENDING again (``revived``), its ``unmet``
        counted anew — in one transaction, the rows locked first (of two retries at once, on
        any daemons, the second finds the task PENDING and is refused)."""
        task = self._locked(connection, retry.task_id, "retry")
        if (refused := refusal(task, "retry")) is not None:
            raise refused
        if task.status is TaskStatus.FAILED:
            roots = [task]
        else:
            roots = [self._locked(connection, root, "retry") for root in self._failed_roots(connection, task)]
            if any(root.status is not TaskStatus.FAILED for root in roots):  # changed before the lock
                raise InvalidTransition(task.id, task.status.value, "retry")
        now = self.clock()
        again = [retried(root, retry, now) for root in roots]  # every check before any change
        if retry.dry_run:
            return task
        events: list[EventRow] = []
        ready: set[str] = set()
        for root in again:
            self._write(connection, root)
            connection.execute("UPDATE gr_tasks SET unmet = 0 WHERE id = %s", (root.id,))  # it ran before
            events.append(self._transition_event(TASK_RETRIED, root))
            ready.add(root.type)
        frontier = [root.id for root in again]
        while frontier:
            candidates = connection.execute(
                "SELECT DISTINCT d.task_id FROM gr_deps d JOIN gr_tasks t ON t.id = d.task_id "
                "WHERE d.dep_id = ANY(%s) AND t.status = 'DEPENDENCY_FAILED' ORDER BY d.task_id",
                (frontier,),
            ).fetchall()
            frontier = []
            for (dependent_id,) in candidates:
                statuses = self._dependency_statuses(connection, dependent_id)
                if any(status is None or status in FAILED_NAMES for status in statuses):
                    continue  # another cause remains: it stays failed
                dependent = revived(self._locked(connection, dependent_id), now)
                self._write(connection, dependent)
                unmet = sum(1 for status in statuses if status != "COMPLETED")
                connection.execute("UPDATE gr_tasks SET unmet = %s WHERE id = %s", (unmet, dependent_id))
                events.append(self._transition_event(TASK_RETRIED, dependent))
                if not unmet:
                    ready.add(dependent.type)
                frontier.append(dependent_id)
        self._emit(connection, events)
        self._notify(connection, ready)
        return self.get(connection, retry.task_id)

    def _failed_roots(self, connection: Any, task: AgentTask) -> list[str]:
        """The FAILED tasks upstream that ``task`` (DEPENDENCY_FAILED) failed because of,
        through the DEPENDENCY_FAILED ones between; ``InvalidTransition`` when a cause is
        CANCELLED or archived (a retry cannot revive it)."""
        roots: list[str] = []
        seen: set[str] = set()
        frontier = [task.id]
        while frontier:
            rows = connection.execute(
                "SELECT d.dep_id, t.status, a.status FROM gr_deps d LEFT JOIN gr_tasks t ON t.id = d.dep_id "
                "LEFT JOIN gr_archive a ON a.id = d.dep_id WHERE d.task_id = ANY(%s) ORDER BY d.dep_id",
                (frontier,),
            ).fetchall()
            frontier = []
            for dep, live, archived in rows:
                if dep in seen:
                    continue
                seen.add(dep)
                if live is None:
                    if archived == "COMPLETED":
                        continue
                    raise InvalidTransition(
                        task.id, f"DEPENDENCY_FAILED (its dependency {dep!r} is archived)", "retry"
                    )
                if live == "FAILED":
                    roots.append(dep)
                elif live == "DEPENDENCY_FAILED":
                    frontier.append(dep)
                elif live == "CANCELLED":
                    raise InvalidTransition(
                        task.id, f"DEPENDENCY_FAILED (its dependency {dep!r} is CANCELLED)", "retry"
                    )
        return roots

    @staticmethod
    def _dependency_statuses(connection: Any, task_id: str) -> list[str | None]:
        """The status of each of ``task_id``'s dependencies, live or archived (``None``:
        neither)."""
        rows = connection.execute(
            "SELECT coalesce(t.status, a.status) FROM gr_deps d LEFT JOIN gr_tasks t ON t.id = d.dep_id "
            "LEFT JOIN gr_archive a ON a.id = d.dep_id WHERE d.task_id = %s",
            (task_id,),
        ).fetchall()
        return [status for (status,) in rows]

    def cancel(self, connection: Any, task_id: str, reason: str) -> AgentTask:
        task = self._locked(connection, task_id, "cancel")
        if (refused := refusal(task, "cancel")) is not None:
            raise refused
        error = _printable(self.limits.clip(AgentError(reason=reason)))
        task = msgspec.structs.replace(
            task, status=TaskStatus.CANCELLED, lease_expires_at=None, error=error, updated_at=self.clock()
        )
        self._write(connection, task)
        self._emit(connection, [self._transition_event(TASK_CANCELLED, task),
                                *self._cascade(connection, task_id, "CANCELLED")])  # fmt: skip
        return task

    def recover_orphans(self, connection: Any, node: str, instance: str) -> list[AgentTask]:
        """At a daemon's start: the tasks its node's previous process was running when it
        died (owners ``...@<node>:<pid>`` of another pid; one daemon per data dir, so that
        process is gone). As with the files, the death is not charged to them — the
        attempt is refunded and ``crashes`` counted (``death_counted``: a death shared
        with the process's other tasks counts only up to isolation) — and at
        ``max_crashes`` a task is failed as a poison task, with the reason. Other nodes'
        tasks are left to their leases."""
        rows = connection.execute(
            f"SELECT {_COLUMNS} FROM gr_tasks WHERE status = 'IN_PROGRESS' AND owner LIKE %s "
            "AND owner NOT LIKE %s FOR UPDATE SKIP LOCKED",
            (f"%@{_like(node)}:%", f"%@{_like(instance)}"),
        ).fetchall()
        now = self.clock()
        recovered = []
        tasks = [_task(row) for row in rows]
        running = collections.Counter(str(task.owner).rpartition("@")[2] for task in tasks)
        for task in tasks:
            alone = running[str(task.owner).rpartition("@")[2]] == 1
            crashes = death_counted(task, alone=alone, limits=self.limits)
            if crashes >= self.limits.max_crashes:
                task = msgspec.structs.replace(task, crashes=crashes)
                why = poison_reason(task, crashes)
                recovered.append(self._end_attempt(connection, task, AgentError(reason=why), None))
                continue
            task = requeued_after_death(task, now, crashes)
            self._write(connection, task)
            self._emit(connection, [self._transition_event(TASK_RETRIED, task)])
            self._notify(connection, {task.type})
            recovered.append(task)
        return recovered

    def expire_leases(self, connection: Any) -> list[AgentTask]:
        """End the attempts whose lease ran out, on whichever node gets there first: each
        expired row is locked by one reclaimer and skipped by the others."""
        now = self.clock()
        rows = connection.execute(
            f"SELECT {_COLUMNS} FROM gr_tasks WHERE status IN ('IN_PROGRESS', 'WAITING') "
            "AND lease_expires_at < %s ORDER BY lease_expires_at LIMIT 1000 FOR UPDATE SKIP LOCKED",
            (now,),
        ).fetchall()
        ended = []
        for row in rows:
            task = _task(row)
            if task.status is TaskStatus.WAITING:  # a call nobody decided in time: denied
                task = expired_decision(task, now)
                self._write(connection, task)
                self._emit(connection, [self._transition_event(TASK_DENIED, task)])
                self._notify(connection, {task.type})
                ended.append(task)
                continue
            ended.append(self._end_attempt(connection, task, lease_expired(task), None))
        return ended


_NUL = re.compile(rb"(?<!\\)(?:\\\\)*\\u0000")
"""A NUL character in msgspec's JSON (``\\u0000`` after an even run of backslashes):
PostgreSQL's ``jsonb`` and ``text`` cannot hold one."""


def _storable(task: AgentTask) -> None:
    """Refuse a task PostgreSQL could not store (a NUL character), naming the field."""
    if not _NUL.search(_encode(task)):
        return
    for field in ("id", "type", "depends_on", *_DOC_FIELDS):
        if _NUL.search(_encode(getattr(task, field))):
            raise InvalidSubmission(
                task.id.replace("\x00", "\\x00"), field, "...",
                "contains a NUL character (\\u0000), which PostgreSQL cannot store",
            )  # fmt: skip


def _printable(error: AgentError) -> AgentError:
    """A failure reason with any NUL character written out (a reason is text to read)."""
    if "\x00" not in error.reason:
        return error
    return AgentError(reason=error.reason.replace("\x00", "\\x00"), retryable=error.retryable)


def _like(text: str) -> str:
    """``text`` matched literally in a ``LIKE`` pattern."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _prefixed(alias: str) -> str:
    return ", ".join(f"{alias}.{name.strip()}" for name in _COLUMNS.split(","))


def _listing_where(listing: ListTasks, *, archived: bool) -> tuple[str, dict[str, Any]]:
    """The ``WHERE`` (with its order and limit) of ``listing``'s page, and its values; the
    archive keeps owner, time and input in its ``task`` document only."""
    owner, updated, doc = (
        ("task->>'owner'", "(task->>'updated_at')::float8", "task")
        if archived
        else ("owner", "updated_at", "doc")
    )
    text = listing.text.lower() if listing.text else None
    # the text in a jsonpath string literal (JSON's escapes), matched as is ("q"), case ignored ("i")
    path = None if text is None else f'$.** ? (@ like_regex {msgspec.json.encode(text).decode()} flag "iq")'
    if listing.newest_first:
        bound, values_bound = (
            "(%(before)s::bigint IS NULL OR ord < %(before)s) ORDER BY ord DESC",
            listing.before,
        )
    else:
        bound, values_bound = "ord > %(after)s ORDER BY ord", listing.after
    where = (
        "(%(s)s::text IS NULL OR status = %(s)s) AND (%(t)s::text IS NULL OR type = %(t)s) "
        f"AND (%(o)s::text IS NULL OR {owner} = %(o)s) AND (%(u)s::float8 IS NULL OR {updated} >= %(u)s) "
        f"AND (%(q)s::text IS NULL OR strpos(lower(id), %(q)s) > 0 "
        f"OR jsonb_path_exists({doc}->'input', %(p)s::jsonpath)) AND {bound} LIMIT %(limit)s"
    )
    values = {
        "s": listing.status.value if listing.status else None,
        "t": listing.type,
        "o": listing.owner,
        "u": listing.updated_since,
        "q": text,
        "p": path,
        "limit": listing.limit,
        "after": values_bound,
        "before": values_bound,
    }
    return where, values
