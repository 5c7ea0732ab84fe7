"""One "daemon" of the PostgreSQL graph benchmark, in its own process:
``python -m greenroom.bench._pg_node URL AGENTS CYCLES BACKEND BATCH``.

It opens a pool, starts a supervisor on a ``PostgresTaskStore`` (``batch_size=BATCH``) and ``AGENTS``
agent loops (claim, complete), prints ``ready``, waits for a line on stdin, runs until its agents have done
``CYCLES`` cycles between them (or the graph is empty), and prints
``{"started", "finished", "cycles", "cpu"}`` (wall-clock seconds; its CPU seconds) as JSON.
"""

from __future__ import annotations

import json
import sys
import time

import anyio

from ..actors import ActorSystem
from ..messages import AgentResult, Claim, Complete, Granted
from ..postgres import Database, PostgresTaskStore
from ..supervisor import SupervisorActor


async def main(url: str, agents: int, cycles: int, batch: int) -> dict[str, float]:
    async with Database(url, max_size=16) as db, ActorSystem() as system:
        supervisor = await system.spawn(
            lambda: SupervisorActor(PostgresTaskStore(db, workers=16, batch_size=batch)), name="supervisor"
        )
        print("ready", flush=True)
        await anyio.to_thread.run_sync(sys.stdin.readline)
        left = cycles
        done = 0

        async def agent(index: int) -> None:
            nonlocal left, done
            agent_id = f"a{index}"
            while left > 0:
                left -= 1
                reply = await supervisor.ask(Claim(agent_id, "work"), timeout=None)
                if not isinstance(reply, Granted):
                    return
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
    print(json.dumps(anyio.run(main, url, agents, cycles, batch, backend=backend)), flush=True)
