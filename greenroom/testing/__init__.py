"""greenroom's test kit: what the project's own tests use, public.

- :class:`Probe`: an actor that records what it receives, with ``expect``,
  ``expect_no_message`` and death watch (``watch`` / ``expect_terminated``).
- :func:`virtual_time`: an anyio backend (asyncio or trio) whose clock jumps ahead when
  every task waits, so leases, backoffs, expiries and timers are tested in milliseconds
  of real time with no sleep as synchronisation.
- :class:`ModelServer`: an OpenAI-compatible chat-completions server on 127.0.0.1 in a
  thread, answering from scripted :class:`Respond` s (:func:`completion` builds a body),
  recording each request.
- :class:`MemoryStore`: a whole backend in memory — the task graph, the event log, the
  step journal, entities and the records — a peer of the files and PostgreSQL proved by
  the same contract suites, for tests and embedding apps with no files and no server;
  :class:`MemoryRecordStore`: its records primitive alone, for a durable feature's logic.

Example (pytest with anyio's plugin, on both loops)::

    import pytest
    from greenroom import ActorSystem
    from greenroom.testing import Probe, virtual_time

    @pytest.fixture(params=["asyncio", "trio"])
    def anyio_backend(request):
        return virtual_time(request.param)

    async def test_a_timer_ticks_once_a_minute():
        async with ActorSystem() as system:
            probe = await Probe.spawn(system)
            ...  # something that tells probe.ref "tick" every 60 s
            await probe.expect(str, within=61)       # 61 virtual seconds
            await probe.expect_no_message(within=59)
"""

from ._memory import MemoryRecordStore
from ._model_server import ModelServer, Respond, Seen, completion, error_body
from ._probe import Probe, ProbeStopped, ProbeTimeout
from ._store import MemoryStore
from ._virtual_time import VirtualTimeLoop, virtual_time

__all__ = [
    "MemoryRecordStore",
    "MemoryStore",
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
]
