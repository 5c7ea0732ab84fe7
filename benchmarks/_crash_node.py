"""One process of the harness benchmark's crash run (``python -m benchmarks harness --kills``).

``python -m benchmarks._crash_node MODE DATA_DIR RUN TASKS STEPS LATENCY BACKEND [STORE]``

``run`` starts ``TASKS`` durable tasks at once, each one phase of ``STEPS`` model calls
that each ask for one call of ``write`` — a tool that writes and takes no
idempotency key (the case that can come back as "it may have run") — then an answer;
it prints ``ready`` once they are under way and runs until killed or done. ``recover``
runs the same tasks again from their step journals; a task parked on a question is
answered as an operator would (the effect is in ``effects`` → "it ran, record it as
done"; it is not → "run it") and resumed. It prints a JSON line: the questions asked
(tasks and calls) and the tasks completed. The model answers after ``LATENCY`` seconds
± 50 % (uniform), so the tasks drift apart as real ones do, instead of moving in step.

Files in ``DATA_DIR``: ``effects`` (a line per run of the tool: ``task turn``),
``requests`` (a line per model request as it is sent: ``task turn``), one ``write`` each
(``O_APPEND``), so a SIGKILL leaves whole lines. Tools are instant.
"""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path
from typing import Any

import anyio

from greenroom.harness import ApprovalNeeded, Harness, RiskLevel, StepJournalActor, Tool
from greenroom.harness._journal import TaskJournal
from greenroom.llm import ClosingModel
from greenroom.messages import ChatReply, ChatRequest, ModelToolCall, Usage


def _append(path: Path, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode() + b"\n")
    finally:
        os.close(fd)


class _Model(ClosingModel):
    """Asks for ``write`` ``steps`` times, then answers; each request is logged as sent."""

    def __init__(self, requests: Path, steps: int, latency: float) -> None:
        self.requests = requests
        self.steps = steps
        self.latency = latency

    async def chat(self, request: ChatRequest, *, timeout: float | None = None) -> ChatReply:
        task = request.messages[0].content
        turn = sum(1 for message in request.messages if message.role == "tool")
        _append(self.requests, f"{task} {turn}")
        await anyio.sleep(self.latency * random.uniform(0.5, 1.5))  # tasks drift apart, as real ones do
        if turn >= self.steps:
            return ChatReply(text=f"{task} done", usage=Usage(50, 5))
        call = ModelToolCall(f"c{turn}", "write", {"line": f"{task} {turn}"})
        return ChatReply(tool_calls=(call,), usage=Usage(50, 10))

    async def aclose(self) -> None:
        pass


async def main(argv: list[str]) -> None:
    mode, data, run, tasks, steps, latency = argv[:6]
    store_url = argv[7] if len(argv) > 7 else None  # argv[6]: the event loop, for anyio.run
    data_dir = Path(data)
    effects, requests = data_dir / "effects", data_dir / "requests"
    count, turns = int(tasks), int(steps)

    def write(line: str) -> str:
        _append(effects, line)
        return "written"

    tool = Tool("write", write, risk=RiskLevel.WRITES, inline=True)  # instant: no thread hop
    model = _Model(requests, turns, float(latency))
    if store_url:
        from greenroom.postgres import PostgresStore

        opened: Any = PostgresStore(store_url)
    else:
        from greenroom.embedded import EmbeddedStore

        opened = EmbeddedStore(data_dir / "store")
    questions: list[str] = []
    completed = 0
    from greenroom.actors import ActorSystem

    async with opened as store, ActorSystem() as system:
        writer = await system.spawn(lambda: StepJournalActor(store.step_store()))

        async def one(i: int) -> None:
            nonlocal completed
            task_id = f"r{run}-t{i}"
            decisions: dict[str, dict[str, Any]] = {}
            attempt = 1 if mode == "run" else 2
            while True:
                journal = await TaskJournal.load(task_id, attempt, writer, decisions)
                harness = await Harness.spawn(system, model, tools=[tool], journal=journal)
                try:
                    await harness.run_bounded(task_id, max_iterations=turns + 1)
                except ApprovalNeeded as parked:
                    call = parked.call
                    questions.append(f"{task_id} {call['step']}")
                    ran = call["arguments"]["line"] in set(effects.read_text().splitlines())
                    decisions[call["step"]] = {"approved": True, "as_done": ran, "by": "bench"}
                    attempt += 1
                    continue
                finally:
                    await harness.aclose()
                completed += 1
                return

        async with anyio.create_task_group() as tg:
            for i in range(count):
                tg.start_soon(one, i)
            if mode == "run":
                print("ready", flush=True)
        await writer.stop()
    if mode == "recover":
        print(json.dumps({"questions": questions, "completed": completed}), flush=True)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1:], backend=sys.argv[7])
