"""The storage seam: what every backend implements, and the rules every one obeys.

- :class:`Store`: one backend (``greenroom.embedded.EmbeddedStore``, files and SQLite under
  a data dir; ``greenroom.postgres.PostgresStore``, one database several daemons share),
  chosen once, asked for its parts (:class:`StoreSizes`: what it holds on disk).
- Its parts, one interface per capability, each owned by the layer that uses it:
  :class:`TaskStore` (the supervisor actor's: it answers through a :class:`Reply`, tells
  its :class:`GraphOwner` of :class:`ExpireLeases` and :class:`TasksRunnable`),
  :class:`EventStore` (the log actor's; an :class:`Origin` names a log's incarnation),
  :class:`StepStore` (the step journal of durable
  agent work: :class:`Step`), :class:`EntityStore` (entities' saved states:
  :class:`StoredState`), and :class:`RecordStore` — keyed records with versions
  (:class:`Versioned`, written by :class:`Put` or added once; :class:`Conflict`), the
  primitive a durable feature is built on in its own package (budgets' totals, load runs'
  records, the API's tokens, the chat assistant's data) with no backend code.
- The task rules, the same on every backend: what a submission must be
  (:func:`check_submission`, :func:`find_cycle`, :func:`in_dependency_order`), the task a
  transition makes (:func:`parked`, :func:`decided`, :func:`expired_decision`, :func:`retried`,
  :func:`revived`,
  :func:`requeued_after_death`, :func:`death_counted`), the reasons a task carries
  (:func:`lease_expired`, :func:`dependency_failed`, :func:`poison_reason`,
  :func:`lease_report`, :func:`bound_report`) and the payloads of its events
  (:func:`transition_payload`, :func:`result_payload`, :func:`result_event`), what a listing
  keeps (:func:`listed`); refusals
  (:class:`TaskGraphError` and its kinds).
- What every backend checks and decodes alike: step journals (:func:`check_step`,
  :func:`encoded_body`, :func:`step_from_row`), records (:func:`change_rows`,
  :func:`add_rows`, :func:`check_collection`, :func:`check_record_key`, :func:`check_key_prefix`,
  :func:`check_limit`, :func:`check_seq`, :func:`check_fence`, :func:`prefix_end`),
  entities (:func:`check_kind`, :func:`check_key`, :func:`save_rows`), retention
  (:class:`Retention`, :class:`HistoryPart`, :data:`FIXED_PART`, :func:`over_budget`).

A third backend implements :class:`Store` and its parts from what this module exports,
obeys the rules, and passes the contract suite (``tests/test_store_contract.py``);
nothing else changes.
"""

from ._entities import (
    Answer,
    Claimed,
    EntityStore,
    Mail,
    MailAnswer,
    Posted,
    Record,
    StoredState,
    Written,
    check_key,
    check_kind,
    entity_fenced,
    save_rows,
    write_rows,
)
from ._errors import (
    DuplicateTask,
    EventsGone,
    Fenced,
    InvalidSubmission,
    InvalidTransition,
    NotOwner,
    TaskGraphError,
    UnknownTask,
)
from ._events import EventStore, Origin
from ._graph import BY_ID, NOTHING_READY, TaskGraph, apply_request, graph_events, leaving
from ._records import (
    Change,
    Conflict,
    Put,
    RecordStore,
    Versioned,
    add_rows,
    change_rows,
    check_bump,
    check_collection,
    check_fence,
    check_key_prefix,
    check_limit,
    check_record_key,
    check_seq,
    counted,
    prefix_end,
    prefix_range,
    put_by_write,
)
from ._retention import FIXED_PART, HistoryPart, Retention, over_budget
from ._rules import (
    ACTIONS,
    BEFORE_AN_EFFECT,
    FAILED_STATES,
    bound_report,
    check_submission,
    death_counted,
    decided,
    dependency_failed,
    expired_decision,
    fenced,
    find_cycle,
    in_dependency_order,
    lease_expired,
    lease_report,
    listed,
    parked,
    poison_reason,
    refusal,
    requeued_after_death,
    result_event,
    result_payload,
    retried,
    revived,
    transition_payload,
)
from ._steps import Refused, Step, StepStore, check_step, encoded_body, step_from_row
from ._store import Store, StoreSizes
from ._tasks import ExpireLeases, GraphOwner, Reply, TasksRunnable, TaskStore

__all__ = [
    "ACTIONS",
    "BEFORE_AN_EFFECT",
    "BY_ID",
    "FAILED_STATES",
    "FIXED_PART",
    "NOTHING_READY",
    "Answer",
    "Change",
    "Claimed",
    "Conflict",
    "DuplicateTask",
    "EntityStore",
    "EventStore",
    "EventsGone",
    "ExpireLeases",
    "Fenced",
    "GraphOwner",
    "HistoryPart",
    "InvalidSubmission",
    "InvalidTransition",
    "Mail",
    "MailAnswer",
    "NotOwner",
    "Origin",
    "Posted",
    "Put",
    "Record",
    "RecordStore",
    "Refused",
    "Reply",
    "Retention",
    "Step",
    "StepStore",
    "Store",
    "StoreSizes",
    "StoredState",
    "TaskGraph",
    "TaskGraphError",
    "TaskStore",
    "TasksRunnable",
    "UnknownTask",
    "Versioned",
    "Written",
    "add_rows",
    "apply_request",
    "bound_report",
    "change_rows",
    "check_bump",
    "check_collection",
    "check_fence",
    "check_key",
    "check_key_prefix",
    "check_kind",
    "check_limit",
    "check_record_key",
    "check_seq",
    "check_step",
    "check_submission",
    "counted",
    "death_counted",
    "decided",
    "dependency_failed",
    "encoded_body",
    "entity_fenced",
    "expired_decision",
    "fenced",
    "find_cycle",
    "graph_events",
    "in_dependency_order",
    "lease_expired",
    "lease_report",
    "leaving",
    "listed",
    "over_budget",
    "parked",
    "poison_reason",
    "prefix_end",
    "prefix_range",
    "put_by_write",
    "refusal",
    "requeued_after_death",
    "result_event",
    "result_payload",
    "retried",
    "revived",
    "save_rows",
    "step_from_row",
    "transition_payload",
    "write_rows",
]
