"""Each package's public surface, pinned: a name in ``__all__`` is a promise to users, so
adding or removing one is a decision made here (and in ``docs/architecture.md``'s list and
the CHANGELOG), never a side effect. Names not listed are private, even where importable:
greenroom's own packages import them from the private modules that define them."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

PUBLIC: dict[str, list[str]] = {
    "greenroom": [
        "Actor",
        "ActorContext",
        "ActorError",
        "ActorRef",
        "ActorStatistics",
        "ActorStopped",
        "ActorSystem",
        "AskTimeout",
        "Backoff",
        "ChildFailed",
        "DEFAULT_ASK_TIMEOUT",
        "DEFAULT_MAILBOX_SIZE",
        "DataDirBusy",
        "DataError",
        "DeadLetter",
        "DeadLetterReason",
        "DeadLetters",
        "Directive",
        "GreenroomError",
        "InternalError",
        "Interrupted",
        "InvalidInput",
        "MailboxFull",
        "PendingReply",
        "Request",
        "StorageError",
        "StoreUnavailable",
        "SupervisorStrategy",
        "SystemStatistics",
        "Terminated",
        "Timer",
        "__version__",
    ],
    "actors": [
        "Actor",
        "ActorContext",
        "ActorError",
        "ActorRef",
        "ActorStatistics",
        "ActorStopped",
        "ActorSystem",
        "AskTimeout",
        "Backoff",
        "ChildFailed",
        "DEFAULT_ASK_TIMEOUT",
        "DEFAULT_MAILBOX_SIZE",
        "DeadLetter",
        "DeadLetterReason",
        "DeadLetters",
        "Directive",
        "Interrupted",
        "MailboxFull",
        "PendingReply",
        "Request",
        "SupervisorStrategy",
        "SystemStatistics",
        "Terminated",
        "Timer",
    ],
    "messages": [
        "AGENT_EVENTS",
        "AGENT_RESULT",
        "AGENT_UPDATE",
        "AgentError",
        "AgentResult",
        "AgentTask",
        "Append",
        "AppendMany",
        "AwaitChange",
        "CallTiming",
        "Cancel",
        "ChatDelta",
        "ChatMessage",
        "ChatReply",
        "ChatRequest",
        "Claim",
        "Complete",
        "Decide",
        "Dependents",
        "Durations",
        "EntityActivated",
        "EntityPassivated",
        "Event",
        "Fail",
        "Flush",
        "GetHistory",
        "GetTask",
        "Granted",
        "GraphEvent",
        "GraphStats",
        "HARNESS_PHASE",
        "Heartbeat",
        "ListTasks",
        "LogFigures",
        "LogStats",
        "MISSING",
        "ModelToolCall",
        "NARRATION",
        "NARRATION_DELTA",
        "NoWork",
        "Park",
        "PassivatedBecause",
        "RecordError",
        "Release",
        "Retry",
        "Role",
        "RunBounded",
        "Stats",
        "StopGranting",
        "Submit",
        "Subscribe",
        "TASK_APPROVED",
        "TASK_CANCELLED",
        "TASK_CLAIMED",
        "TASK_COMPLETED",
        "TASK_DENIED",
        "TASK_FAILED",
        "TASK_RETRIED",
        "TASK_SUBMITTED",
        "TASK_WAITING",
        "TaskLimits",
        "TaskStatus",
        "ToolSpec",
        "Unsubscribe",
        "Usage",
        "Visibility",
        "convert",
    ],
    "store": [
        "ACTIONS",
        "Answer",
        "BudgetStore",
        "ChatStore",
        "Claimed",
        "ConversationNotFound",
        "DuplicateTask",
        "EntityStore",
        "EventStore",
        "EventsGone",
        "ExpireLeases",
        "FAILED_STATES",
        "FIXED_PART",
        "Fenced",
        "GraphOwner",
        "HistoryPart",
        "InvalidSubmission",
        "InvalidTransition",
        "LoadEntry",
        "LoadRecordStore",
        "Mail",
        "NotOwner",
        "Origin",
        "Posted",
        "Refused",
        "Reply",
        "Retention",
        "Spent",
        "Step",
        "StepStore",
        "Store",
        "StoreSizes",
        "StoredMessage",
        "StoredPending",
        "StoredState",
        "TaskGraphError",
        "TaskRow",
        "TaskStore",
        "TasksRunnable",
        "UnknownTask",
        "bound_report",
        "check_budget_name",
        "check_entries",
        "check_key",
        "check_kind",
        "check_prefix",
        "check_run",
        "check_step",
        "check_submission",
        "death_counted",
        "decided",
        "dependency_failed",
        "encoded_body",
        "expired_decision",
        "fenced",
        "find_cycle",
        "in_dependency_order",
        "lease_expired",
        "lease_report",
        "listed",
        "messages_from_rows",
        "over_budget",
        "parked",
        "pending_from_row",
        "poison_reason",
        "refusal",
        "requeued_after_death",
        "result_event",
        "result_payload",
        "retried",
        "revived",
        "save_rows",
        "spend_rows",
        "step_from_row",
        "transition_payload",
    ],
    "supervisor": [
        "BulkDecision",
        "DuplicateTask",
        "Fenced",
        "InvalidSubmission",
        "InvalidTransition",
        "MAX_BULK",
        "NotOwner",
        "SupervisorActor",
        "TaskGraphError",
        "UnknownTask",
        "WaitingFilter",
        "decide_waiting",
    ],
    "entities": [
        "ActivationFailed",
        "Entities",
        "EntitiesClosed",
        "Entity",
        "EntityAskTimeout",
        "EntityMailboxFull",
        "EntityRef",
        "RemoteEntityError",
    ],
    "log": [
        "LogActor",
        "NarratorCapability",
        "PolicyError",
        "narrate",
    ],
    "embedded": [
        "EVENTS_FILE",
        "EmbeddedStore",
        "EventLogError",
        "FileEventStore",
        "FileTaskStore",
        "GraphFileError",
        "GraphFiles",
        "SQLiteChatStore",
        "read_events",
    ],
    "postgres": [
        "ConflictError",
        "DataRefused",
        "Database",
        "DatabaseError",
        "PostgresChatStore",
        "PostgresEventStore",
        "PostgresStore",
        "PostgresTaskStore",
        "SchemaError",
        "VERSION",
        "check",
        "check_url",
        "current_version",
        "redact",
        "upgrade",
    ],
    "llm": [
        "API_KEY_ENV",
        "BASE_URL_ENV",
        "BadRequest",
        "ChatModel",
        "ChatStream",
        "ClosingModel",
        "ContextTooLong",
        "MODEL_ENV",
        "ModelError",
        "OpenAIChatModel",
        "Price",
        "RateLimited",
        "RuleBasedModel",
        "ScriptExhausted",
        "ScriptedModel",
        "StreamBroken",
        "StreamingChatModel",
        "TimedOut",
        "UNREACHED",
        "Unavailable",
        "estimate_usage",
        "open_stream",
    ],
    "harness": [
        "Admission",
        "ApprovalNeeded",
        "BoundedLoop",
        "CallTimings",
        "Harness",
        "HarnessActor",
        "HarnessSetup",
        "PhaseResult",
        "ReplayDiverged",
        "RiskLevel",
        "STOP_REASONS",
        "Sandbox",
        "Spend",
        "StepJournalActor",
        "StopReason",
        "StopSignal",
        "TokenBudget",
        "Tool",
        "ToolRefused",
        "ToolTimedOut",
    ],
    "agents": [
        "AgentActor",
        "AgentRuntime",
        "BaseAgent",
        "DEFAULT_REQUEST_TIMEOUT",
        "HarnessSetup",
        "PhaseResult",
        "TaskFailed",
        "artifact_filename",
    ],
    "chat": [
        "AgentContext",
        "AgentDecision",
        "AgentEngineConfig",
        "AgentResult",
        "AgentRunner",
        "Assistant",
        "CHAT_DECISION",
        "CHAT_TOOL",
        "CONSTITUTION",
        "ChatEvent",
        "ChatEvents",
        "ConversationNotFound",
        "DecisionContext",
        "DecisionType",
        "LLMAgentEngine",
        "MCPToolExecutor",
        "MessageHistory",
        "PendingAction",
        "ReplyDelta",
        "TASK_TOOLS",
        "ToolCall",
        "ToolCallRecord",
        "ToolExecutor",
        "ToolFinished",
        "ToolResult",
        "ToolStarted",
        "open_assistant",
        "task_server",
    ],
    "pipeline": [
        "AGENT_COMPLETED",
        "AGENT_STARTED",
        "Agent",
        "AgentConfig",
        "AgentOutcome",
        "Envelope",
        "HarnessToolExecutor",
        "IdempotencyClass",
        "Pipeline",
        "PipelineConfig",
        "PipelineError",
        "PipelineResult",
        "PromptRegistry",
        "RoutingRule",
        "StageFailed",
        "StageRecord",
        "StageToolExecutor",
        "StandardToolResult",
        "ToolErrorDetails",
        "ToolResultData",
        "ToolStatus",
        "ValidationSeverity",
        "load_pipeline",
        "normalize_tool_result",
        "open_pipeline",
    ],
    "service": [
        "ApiError",
        "DaemonInfo",
        "Principal",
        "SCOPES",
        "Scope",
        "ServiceClient",
        "ServiceError",
        "ServiceUnavailable",
        "TokenFileError",
        "TokenRecord",
        "TokenStore",
        "create_app",
        "find_daemon",
        "parse_address",
    ],
    "testing": [
        "ModelServer",
        "Probe",
        "ProbeStopped",
        "ProbeTimeout",
        "Respond",
        "Seen",
        "VirtualTimeLoop",
        "completion",
        "error_body",
        "virtual_time",
    ],
    "load": [
        "Dist",
        "LoadAgent",
        "LoadPlan",
        "LoadTarget",
        "PRESETS",
        "RequestRecord",
        "SessionRecord",
        "Slo",
        "SyntheticTool",
        "Workload",
        "fleet_report",
        "fleet_tasks",
        "load_workload",
        "quantiles",
        "run_load",
        "sweep_rate",
        "workload_from",
    ],
    "daemon": [
        "AgentHost",
        "AgentPoolConfig",
        "ConfigError",
        "DaemonConfig",
        "default_config",
        "load_config",
    ],
}


@pytest.mark.parametrize("package", sorted(PUBLIC))
def test_each_package_exports_exactly_its_pinned_surface(package: str) -> None:
    module = importlib.import_module("greenroom" if package == "greenroom" else f"greenroom.{package}")
    exported = sorted(module.__all__)
    assert exported == PUBLIC[package], (
        f"greenroom.{package}: added {sorted(set(exported) - set(PUBLIC[package]))}, "
        f"removed {sorted(set(PUBLIC[package]) - set(exported))}"
    )
    for name in exported:
        assert hasattr(module, name), f"greenroom.{package}.__all__ names {name!r}, which it does not define"


def test_the_actor_kernel_is_the_top_level_surface() -> None:
    import greenroom
    import greenroom.actors

    assert set(PUBLIC["actors"]) <= set(PUBLIC["greenroom"])
    own = {"DataDirBusy", "DataError", "GreenroomError", "InternalError", "InvalidInput", "StorageError",
           "StoreUnavailable", "__version__"}  # fmt: skip
    assert set(greenroom.__all__) - own == set(greenroom.actors.__all__)  # the lazy re-export's names
    assert all(
        getattr(greenroom, name) is getattr(greenroom.actors, name) for name in greenroom.actors.__all__
    )


def test_the_log_helpers_and_factory_actors_are_private_and_no_outbox_is_left_in_log_or_messages() -> None:
    """What the issue named: the log's admission helpers and the actors spawned through
    factories are not public. (The store's rule helpers were once on this list; they are
    public now: a backend needs them, and ``greenroom.store`` is where a third backend
    finds everything it needs.) The files' outbox is the embedded backend's own (issue 39):
    the log and the messages name none of it."""
    for package in ("log", "messages"):
        for path in (Path(__file__).resolve().parents[1] / "greenroom" / package).glob("*.py"):
            assert "outbox" not in path.read_text().lower(), path
    private = {
        "log": {"admitted", "check_append"},
        "chat": {"ChatRequestActor", "ChatRunnerActor"},
        "pipeline": {"StageActor"},
    }
    for package, names in private.items():
        assert not names & set(PUBLIC[package]), package


def test_handles_over_actors_outside_the_kernel_have_no_public_constructor() -> None:
    """``Harness`` and ``AgentRunner`` wrap an actor they spawn: calling the class is a
    ``TypeError`` that says how to get one (as the kernel's own handles)."""
    from greenroom.chat import AgentRunner
    from greenroom.harness import Harness

    for cls, how in ((Harness, "Harness.spawn("), (AgentRunner, "AgentRunner.spawn(")):
        with pytest.raises(TypeError, match="has no public constructor") as refused:
            cls(None, None)  # type: ignore[call-arg]
        assert how in str(refused.value)


def test_a_bad_setting_is_invalid_input_naming_its_field_across_the_layers() -> None:
    """One convention (docs/architecture.md, Errors): a value that cannot be used is an
    ``InvalidInput`` (a ``ValueError``) naming the field and the value — the kernel's
    settings, the harness's, the model's and the files' alike (issue 39 converted the bare
    ``ValueError``s that remained)."""
    from greenroom._errors import InvalidInput
    from greenroom.actors import Backoff, SupervisorStrategy
    from greenroom.embedded._sqlite import SQLiteFile
    from greenroom.harness import HarnessSetup, PhaseResult, TokenBudget
    from greenroom.llm import Price, ScriptedModel

    cases = [
        (lambda: Backoff(initial=1.0, maximum=0.5), "Backoff.maximum", 0.5),
        (lambda: SupervisorStrategy(max_restarts=-1), "SupervisorStrategy.max_restarts", -1),
        (lambda: TokenBudget(cost_limit=-2), "cost_limit", -2),
        (lambda: PhaseResult("", [], "bored"), "stop_reason", "bored"),  # type: ignore[arg-type]
        (lambda: Price(input=-1, output=0), "input", -1),
        (lambda: SQLiteFile(":memory:", "", synchronous="OFF"), "synchronous", "OFF"),
        (
            lambda: HarnessSetup(ScriptedModel([]), budget=TokenBudget(10), tokens_per_run=5),
            "budget",
            None,
        ),
    ]
    for make, field, value in cases:
        with pytest.raises(InvalidInput) as refused:
            make()
        assert refused.value.field == field, (field, refused.value)
        if value is not None:
            assert refused.value.value == value
