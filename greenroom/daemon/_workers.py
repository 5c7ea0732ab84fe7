"""``greenroom run --workers N``: N daemon processes on one machine, one listening socket,
one ``daemon.json`` — every core of the machine serving the shared graph.

Only on PostgreSQL: there every worker is a full node of the shared graph (its own claims,
leases and fencing tokens, as several daemons on several machines are). On files a data dir
has one owner process, so ``--workers`` is refused there, saying what to use instead.

The parent (:func:`run_workers`) holds the data dir's lock, binds the API's socket, makes
the local admin token and writes ``daemon.json`` and ``admin.token`` once; each worker
(``greenroom run`` with ``GREENROOM_WORKER`` set: a :class:`WorkerSlot`) inherits the
socket — the kernel hands each new connection to one of the workers accepting on it — and
the token. Each slot is a node of the graph of its own (``node.<slot>.id`` in the data dir,
kept across restarts). The parent watches them: a worker that dies is started again in its
slot (after
a pause that grows while it keeps dying at once), and its last status snapshot is kept
aside (``workers/retired-*.json``) so the machine's counters never go down; SIGINT or
SIGTERM stops them all (each gets SIGTERM and its graceful stop), then the files go.

Whichever worker a ``/v1/status`` or ``/metrics`` request reaches answers for the whole
machine (``machine_status``): it writes its own snapshot to ``workers/<slot>.json`` first,
then adds the other workers' latest snapshots (written at each of their answers and at
each sample of their status page's history) and the retired ones.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

import anyio
import anyio.abc
import msgspec

from .. import __version__
from .._errors import InvalidInput
from .._files import replace_durably
from ..service._status import DaemonStatus, WorkerStatus, machine_status

WORKER_ENV = "GREENROOM_WORKER"
RUNTIME_DIR = "workers"
WORKERS_FILE = "workers.json"


class WorkerSlot(msgspec.Struct, frozen=True):
    """What a worker is told by its parent (as JSON in ``$GREENROOM_WORKER``): its slot, the
    inherited listening socket's descriptor (``-1``: no API), the admin token, the runtime
    directory of the snapshots."""

    slot: int
    fd: int
    token: str
    runtime: str


def worker_slot() -> WorkerSlot | None:
    """This process's slot when it is a worker of ``--workers``, else ``None``."""
    said = os.environ.get(WORKER_ENV)
    return None if not said else msgspec.json.decode(said, type=WorkerSlot)


def worker_node_file() -> str | None:
    """A worker's own node file (``node.<slot>.id``): each slot is a node of the graph of its
    own, kept across its restarts — a worker started again recovers what its previous
    process was running at once, and never what a live sibling runs. ``None`` outside
    ``--workers`` (the data dir's ``node.id``)."""
    slot = worker_slot()
    return None if slot is None else f"node.{slot.slot}.id"


def refuse_on_files(workers: int, store_url: str | None) -> None:
    """``--workers`` above 1 needs PostgreSQL; ``InvalidInput`` saying why and what to use."""
    if workers > 1 and store_url is None:
        raise InvalidInput(
            f"--workers {workers} needs a PostgreSQL store (--store postgresql://... or [store] url): "
            "a data dir on files has one owner process, so one daemon serves it; for every core, "
            "put the graph on PostgreSQL (greenroom db upgrade --store ...) and run --workers there",
            field="--workers",
            value=workers,
        )


# -- the snapshots --------------------------------------------------------------------------


def _write(path: Path, data: bytes) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    temporary.write_bytes(data)
    os.replace(temporary, path)


def _read_all(runtime: Path, skip: str) -> tuple[list[DaemonStatus], list[DaemonStatus], list[WorkerStatus]]:
    """The other live workers' snapshots, the retired ones, and the workers' list — read
    again from the start if a file vanished under the read (a worker retired meanwhile)."""
    while True:
        live: list[DaemonStatus] = []
        retired: list[DaemonStatus] = []
        try:
            names = sorted(os.listdir(runtime))
            for name in names:
                if not name.endswith(".json") or name in (skip, WORKERS_FILE):
                    continue
                status = msgspec.json.decode((runtime / name).read_bytes(), type=DaemonStatus)
                (retired if name.startswith("retired-") else live).append(status)
            workers = msgspec.json.decode((runtime / WORKERS_FILE).read_bytes(), type=list[WorkerStatus])
        except FileNotFoundError:
            continue
        except (OSError, msgspec.DecodeError):
            return live, retired, []  # a torn file is skipped: the next answer reads it again
        return live, retired, workers


def answer_for_machine(slot: WorkerSlot, own: DaemonStatus) -> DaemonStatus:
    """``own`` written to its slot's snapshot, then the machine's status. Blocking."""
    runtime = Path(slot.runtime)
    mine = f"{slot.slot}.json"
    _write(runtime / mine, msgspec.json.encode(own))
    live, retired, workers = _read_all(runtime, mine)
    return machine_status(own, live, retired, workers)


# -- the parent ---------------------------------------------------------------------------


class _Slots:
    def __init__(self, runtime: Path, count: int) -> None:
        self.runtime = runtime
        self.workers = [WorkerStatus(slot=n, pid=0) for n in range(count)]
        self.retired = 0

    def started(self, slot: int, pid: int) -> None:
        before = self.workers[slot]
        restarts = before.restarts + (1 if before.pid else 0)
        self.workers[slot] = WorkerStatus(slot=slot, pid=pid, started_at=time.time(), restarts=restarts)
        _write(self.runtime / WORKERS_FILE, msgspec.json.encode(self.workers))

    def retire(self, slot: int) -> None:
        """The dead worker's last snapshot, kept aside under a name of its own."""
        with contextlib.suppress(FileNotFoundError):
            self.retired += 1
            os.replace(self.runtime / f"{slot}.json", self.runtime / f"retired-{self.retired}-{slot}.json")


def _ended(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


async def run_workers(
    count: int,
    worker_args: Sequence[str],
    *,
    data_dir: Path,
    listen: str | None,
    store_where: str,
    until_idle: bool = False,
    first_args: Sequence[str] = (),
    err: TextIO = sys.stderr,
) -> int:
    """Run ``count`` workers (``greenroom run *worker_args``; the first one's first start
    adds ``first_args``) until SIGINT/SIGTERM (or, ``until_idle``, until every worker exited
    by itself), restarting any that dies. Returns the exit code."""
    from .._files import DaemonLock
    from ..service import DaemonInfo, parse_address
    from ..service._client import ADMIN_TOKEN_FILE, DAEMON_FILE, DAEMON_LOCK_FILE
    from ..service._serve import bind
    from ..service._tokens import new_token

    lock = DaemonLock(data_dir / DAEMON_LOCK_FILE, "the data dir")
    await anyio.to_thread.run_sync(lock.acquire)
    lock.set_state("starting")
    runtime = data_dir / RUNTIME_DIR
    sock = None
    try:
        runtime.mkdir(parents=True, exist_ok=True)
        for old in runtime.iterdir():
            old.unlink()
        token, _ = new_token()
        fd = -1
        url = ""
        if listen is not None:
            sock = bind(*parse_address(listen, "api.listen"))
            sock.set_inheritable(True)
            fd = sock.fileno()
            host, port = sock.getsockname()[:2]
            url = f"http://{f'[{host}]' if ':' in host else host}:{port}"
            info = DaemonInfo(url, os.getpid(), time.time(), __version__, store=store_where, shared=True)
            replace_durably(data_dir / ADMIN_TOKEN_FILE, token.encode() + b"\n", mode=0o600)
            replace_durably(data_dir / DAEMON_FILE, msgspec.json.encode(info) + b"\n", mode=0o600)
        slots = _Slots(runtime, count)
        stopping = anyio.Event()
        print(
            f"greenroom: {count} workers serving {data_dir} · store {store_where}"
            + (f" · API {url}" if url else ""),
            file=err,
            flush=True,
        )
        lock.set_state("serving" if url else "no-api")

        async def supervise(number: int) -> None:
            pause = 0.5
            extra = list(first_args) if number == 0 else []
            while not stopping.is_set():
                slot = WorkerSlot(number, fd, token, str(runtime))
                env = {**os.environ, WORKER_ENV: msgspec.json.encode(slot).decode()}
                command = [sys.executable, "-m", "greenroom", "run", *worker_args, *extra]
                extra = []
                began = time.monotonic()
                process = await anyio.open_process(
                    command, stdin=None, stdout=None, stderr=None, env=env, pass_fds=(fd,) if fd >= 0 else ()
                )
                slots.started(number, process.pid)
                try:
                    code = await process.wait()
                except BaseException:
                    with anyio.CancelScope(shield=True):
                        process.kill()
                        await process.wait()
                    raise
                if stopping.is_set() or (until_idle and code == 0):
                    return
                slots.retire(number)
                said = f"greenroom: worker {number} (pid {process.pid}) ended ({_ended(code)})"
                print(f"{said}; starting it again", file=err, flush=True)
                pause = 0.5 if time.monotonic() - began > 10 else min(pause * 2, 10.0)
                with anyio.move_on_after(pause):
                    await stopping.wait()

        async def watch_signals(group: anyio.abc.TaskGroup) -> None:
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for signum in signals:
                    print(
                        f"greenroom: {signal.Signals(signum).name}: stopping the workers",
                        file=err,
                        flush=True,
                    )
                    stopping.set()
                    for worker in slots.workers:
                        if worker.pid:
                            with contextlib.suppress(ProcessLookupError):
                                os.kill(worker.pid, signal.SIGTERM)
                    return

        async with anyio.create_task_group() as watching:
            watching.start_soon(watch_signals, watching)
            async with anyio.create_task_group() as group:
                for number in range(count):
                    group.start_soon(supervise, number)
            watching.cancel_scope.cancel()
        return 0
    finally:
        if sock is not None:
            sock.close()
        for name in (DAEMON_FILE, ADMIN_TOKEN_FILE):
            with contextlib.suppress(FileNotFoundError):
                (data_dir / name).unlink()
        lock.release()
