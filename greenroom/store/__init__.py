"""The storage seam: what every backend implements, and the rules every one obeys.

- :class:`Store`: one backend (``greenroom.embedded.EmbeddedStore``, files and SQLite under
  a data dir; ``greenroom.postgres.PostgresStore``, one database several daemons share),
  chosen once, asked for its parts.
- Its parts, one interface per capability, each owned by the layer that uses it:
  :class:`TaskStore` (the supervisor actor's), :class:`EventStore` (the log actor's),
  :class:`ChatStore` (the chat runner's), :class:`StepStore` (the step journal of durable
  agent work: :class:`Step`), :class:`BudgetStore` (what each named budget spent:
  :class:`Spent`), :class:`LoadRecordStore` (what a load run measured, every daemon's
  records together: :class:`LoadEntry`).
- The task rules (:func:`check_submission`, the reasons a task carries, the payloads of
  its events) and refusals (:class:`TaskGraphError` and its kinds), the same on every
  backend.

A third backend implements :class:`Store` and its parts, obeys the rules, and passes
the contract suite (``tests/test_store_contract.py``); nothing else changes.
"""

from ._budgets import BudgetStore, Spent
from ._chat import ChatStore, ConversationNotFound, StoredMessage, StoredPending, TaskRow
from ._errors import (
    DuplicateTask,
    EventsGone,
    InvalidSubmission,
    InvalidTransition,
    NotOwner,
    TaskGraphError,
    UnknownTask,
)
from ._events import EventStore
from ._load import LoadEntry, LoadRecordStore, check_run
from ._steps import Step, StepStore
from ._store import Store
from ._tasks import TaskStore

__all__ = [
    "BudgetStore",
    "ChatStore",
    "ConversationNotFound",
    "DuplicateTask",
    "EventStore",
    "EventsGone",
    "InvalidSubmission",
    "InvalidTransition",
    "LoadEntry",
    "LoadRecordStore",
    "NotOwner",
    "Spent",
    "Step",
    "StepStore",
    "Store",
    "StoredMessage",
    "StoredPending",
    "TaskGraphError",
    "TaskRow",
    "TaskStore",
    "UnknownTask",
    "check_run",
]
