"""One daemon of the entities benchmark's kill run (``python -m benchmarks entities --kills``).

``python -m benchmarks._entity_node URL NODE LEASE BACKEND``

Hosts ``Ledger`` (and ``Tape``) entities on the PostgreSQL database at ``URL`` as node ``NODE`` (leases of
``LEASE`` seconds), prints ``ready``, and runs until killed (SIGTERM: it closes, passivating
its entities, and prints ``given up N``: the entities another node took from it). A ``Ledger`` records each
message id it is told or asked once (a repeat — mail is delivered at least once — is
answered and not recorded again), saves before it answers, and answers the id.
"""

from __future__ import annotations

import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
import msgspec

from greenroom.actors import ActorSystem
from greenroom.entities import Entities, Entity


class LedgerState(msgspec.Struct):
    ids: list[int] = []


class Ledger(Entity[LedgerState]):
    state_type = LedgerState
    message_type = int
    idle_after = 5.0

    async def receive(self, message: Any) -> Any:
        if message not in self.state.ids:
            self.state.ids.append(message)
            await self.save()  # durable before the answer: an answered id is never lost
        return message


class Tape(Entity[LedgerState]):
    """Records every message id it is sent, repeats too, and never saves on its own: what
    a message through the store did is durable with its answer (exactly once), or not."""

    state_type = LedgerState
    message_type = int
    idle_after = 60.0

    async def receive(self, message: Any) -> Any:
        if message == 0:  # "what do you have"
            return list(self.state.ids)
        self.state.ids.append(message)
        return message


async def serve(url: str, node: str, lease: float) -> None:
    from greenroom.postgres import PostgresStore

    with tempfile.TemporaryDirectory() as tmp:
        async with PostgresStore(url, data_dir=Path(tmp), pool_size=8) as store, ActorSystem() as system:
            states = store.entity_store()
            entities = Entities(system, states, [Ledger, Tape], node=node, lease=lease)
            try:
                async with entities:
                    with anyio.open_signal_receiver(signal.SIGTERM) as signals:
                        print("ready", flush=True)
                        async for _ in signals:  # a graceful stop: its entities passivated
                            break
            finally:  # what it gave up to other nodes
                print(f"given up {entities.given_up}", flush=True)


if __name__ == "__main__":
    anyio.run(serve, sys.argv[1], sys.argv[2], float(sys.argv[3]), backend=sys.argv[4])
