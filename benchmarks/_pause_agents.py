"""The agents of the pause benchmark (``python -m benchmarks pauses``), loaded by its daemons.

``PauseAgent`` (type ``pause``): four phases, each one model reply (0.1 s, scripted)
asking two writing calls at once — ``record``, a tool that honours its call's fencing
token and idempotency key as an outside system should, and ``touch``, one that knows
neither — then an answer. The effects go to files the benchmark reads
(``$GREENROOM_BENCH_EFFECTS``: one ``O_APPEND`` line per effect, with the wall-clock time
it landed; ``$GREENROOM_BENCH_LEDGER``: the honouring system's own SQLite database).
"""

from __future__ import annotations

import os
import sqlite3
import time

from greenroom.agents import AgentRuntime, BaseAgent
from greenroom.harness import HarnessSetup, RiskLevel, Sandbox, Tool, current_call
from greenroom.llm import ScriptedModel
from greenroom.messages import AgentResult, AgentTask, ChatReply, ChatRequest, ModelToolCall

PHASES = 4


def _effect(line: str) -> None:
    fd = os.open(os.environ["GREENROOM_BENCH_EFFECTS"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, f"{line} {os.getpid()} {time.time():.6f}\n".encode())
    finally:
        os.close(fd)


def record(line: str, idempotency_key: str = "") -> str:
    """An outside system that fences: in one SQLite transaction it keeps the greatest
    token seen per task and the keys applied; a call under a smaller token is refused, a
    key applied already is not applied again."""
    call = current_call()
    assert call is not None and call.task_id is not None and call.fencing_token is not None
    with sqlite3.connect(os.environ["GREENROOM_BENCH_LEDGER"], timeout=30, isolation_level=None) as db:
        db.execute("BEGIN IMMEDIATE")
        try:
            row = db.execute("SELECT token FROM tokens WHERE task = ?", (call.task_id,)).fetchone()
            if row is not None and call.fencing_token < row[0]:
                _effect(f"stale {idempotency_key} {call.fencing_token}")
                return f"refused: token {call.fencing_token} < {row[0]}"
            db.execute("INSERT OR REPLACE INTO tokens VALUES (?, ?)", (call.task_id, call.fencing_token))
            if db.execute("SELECT 1 FROM applied WHERE key = ?", (idempotency_key,)).fetchone():
                return "applied already"
            db.execute("INSERT INTO applied VALUES (?)", (idempotency_key,))
            _effect(f"applied {idempotency_key} {call.fencing_token}")
        finally:
            db.execute("COMMIT")
    return f"recorded {line}"


def touch(line: str) -> str:
    """A writing tool that ignores the token and the key: its effect lands every time it runs."""
    call = current_call()
    assert call is not None
    _effect(f"touched {call.idempotency_key} {call.fencing_token}")
    return f"touched {line}"


def make_ledger(path: str) -> None:
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("CREATE TABLE IF NOT EXISTS tokens (task TEXT PRIMARY KEY, token INTEGER NOT NULL)")
        db.execute("CREATE TABLE IF NOT EXISTS applied (key TEXT PRIMARY KEY)")


class PauseAgent(BaseAgent):
    agent_type = "pause"

    def __init__(self, name: str | None = None, **options: object) -> None:
        def respond(request: ChatRequest) -> ChatReply:
            last = request.messages[-1]
            if last.role == "tool":
                return ChatReply(text=f"done: {last.content}")
            line = last.content or ""
            return ChatReply(
                tool_calls=(
                    ModelToolCall("r1", "record", {"line": line}),
                    ModelToolCall("t1", "touch", {"line": line}),
                )
            )

        setup = HarnessSetup(
            ScriptedModel(respond, latency=0.1),
            tools=[
                Tool("record", record, risk=RiskLevel.WRITES),
                Tool("touch", touch, risk=RiskLevel.WRITES),
            ],
            sandbox=Sandbox(max_risk=RiskLevel.WRITES),
        )
        super().__init__(name, llm=setup, **options)  # type: ignore[arg-type]

    async def handle_task(self, task: AgentTask, runtime: AgentRuntime) -> AgentResult:
        for phase in range(PHASES):
            await self._run_phase(
                user_message=f"{task.id} {phase}", tool_names=["record", "touch"], context_label=f"p{phase}"
            )
        return AgentResult(task_id=task.id, outcome="done")
