"""One "daemon" of the PostgreSQL graph benchmark, in its own process:
``python -m benchmarks._pg_node URL AGENTS CYCLES BACKEND BATCH [NODE RUNS]``.

It opens a pool, starts a supervisor on a ``PostgresTaskStore`` (``batch_size=BATCH``) and ``AGENTS``
agent loops (claim, complete), prints ``ready``, waits for a line on stdin, runs until its agents have done
``CYCLES`` cycles between them (or the graph is empty), and prints
``{"started", "finished", "cycles", "cpu"}`` (wall-clock seconds; its CPU seconds) as JSON.

With ``NODE`` and ``RUNS`` (the benchmark under kills): the store is ``NODE``'s, as a
daemon's is (its agents ``a<i>@NODE:<pid>``, so a restarted node takes back what its killed
predecessor held), and each task run is noted in the file ``RUNS`` (its id, one line,
appended before the completion is sent: a task that runs twice is there twice).
"""

from __future__ import annotations

import json
import os
import sys
import time

import anyio

from greenroom.actors import ActorSystem
from greenroom.messages import AgentResult, Claim, Complete, Granted
from greenroom.postgres import Database, PostgresTaskStore
from greenroom.supervisor import SupervisorActor


async def main(
    url: str, agents: int, cycles: int, batch: int, node: str | None = None, runs: str | None = None
) -> dict[str, float]:
    instance = None if node is None else f"{node}:{os.getpid()}"
    runs_fd = None if runs is None else os.open(runs, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    async with Database(url, max_size=16) as db, ActorSystem() as system:
        store = PostgresTaskStore(db, workers=16, batch_size=batch, node=node, instance=instance)
        supervisor = await system.spawn(lambda: SupervisorActor(store), name="supervisor")
        print("ready", flush=True)
        await anyio.to_thread.run_sync(sys.stdin.readline)
        left = cycles
        done = 0

        async def agent(index: int) -> None:
            nonlocal left, done
            agent_id = f"a{index}" if instance is None else f"a{index}@{instance}"
            while left > 0:
                left -= 1
                reply = await supervisor.ask(Claim(agent_id, "work"), timeout=None)
                if not isinstance(reply, Granted):
                    return
                if runs_fd is not None:
                    os.write(runs_fd, f"{reply.task.id}\n".encode())
                await supervisor.ask(
                    Complete(reply.task.id, agent_id, AgentResult(task_id=reply.task.id)), timeout=None
                )
                done += 1

        started, cpu = time.time(), time.process_time()
        async with anyio.create_task_group() as tg:
            for index in range(agents):
                tg.start_soon(agent, index)
        finished, cpu = time.time(), time.process_time() - cpu
        await supervisor.stop()
    return {"started": started, "finished": finished, "cycles": done, "cpu": cpu}


if __name__ == "__main__":
    url, agents, cycles, backend, batch = (
        sys.argv[1],
        int(sys.argv[2]),
        int(sys.argv[3]),
        sys.argv[4],
        int(sys.argv[5]),
    )
    node, runs = (sys.argv[6], sys.argv[7]) if len(sys.argv) > 7 else (None, None)
    print(json.dumps(anyio.run(main, url, agents, cycles, batch, node, runs, backend=backend)), flush=True)
