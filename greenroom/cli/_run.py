"""What ``greenroom run`` does: the daemon in the foreground, with progress lines, until
a signal, ``greenroom stop``, or (``--until-idle``) nothing runnable is left.

Returns the process exit code; the parser has already checked the flags' shapes.
"""

from __future__ import annotations

import json
import signal
import sys
import time
import uuid
from contextlib import AsyncExitStack
from typing import Any, TextIO

import anyio
import msgspec
from anyio.abc import TaskStatus as StartStatus

from .._errors import StoreUnavailable
from .._files import DaemonLock
from .._malloc import freeze_startup_heap
from ..agents.examples import example_graph
from ..daemon import AgentHost, ConfigError, DaemonConfig, default_config, load_config
from ..daemon._config import StoreConfig
from ..daemon._service import DaemonService
from ..messages import AgentTask, GraphStats, ListTasks, Submit, TaskStatus

FINAL = tuple(status.value for status in TaskStatus if status.final)


# -- greenroom run ------------------------------------------------------------------------


def _line(stats: GraphStats) -> str:
    by = stats.by_status
    done = sum(by.get(status, 0) for status in FINAL)
    return (
        f"{done}/{stats.total} final · completed {by.get('COMPLETED', 0)} · "
        f"running {by.get('IN_PROGRESS', 0)} · pending {by.get('PENDING', 0)} · "
        f"failed {by.get('FAILED', 0) + by.get('DEPENDENCY_FAILED', 0)}"
        + (f" · waiting {by['WAITING']}" if by.get("WAITING") else "")
    )


class _Progress:
    """Samples the graph's counts: prints a line only when they changed, and adds up the
    busy time (from each sample that found a task running or ready to the next one), so
    the final rate leaves idle time out. Until the first sample the daemon counts as busy."""

    def __init__(self, host: AgentHost, out: TextIO | None, interval: float) -> None:
        self.host = host
        self.out = out
        self.interval = interval
        self.busy = 0.0
        self._last_line = ""
        self._since = time.monotonic()
        self._was_busy = True

    def _account(self, now: float, busy_now: bool) -> None:
        if self._was_busy:
            self.busy += now - self._since
        self._since, self._was_busy = now, busy_now

    def finish(self) -> float:
        """The busy seconds, the time since the last sample included."""
        self._account(time.monotonic(), False)
        return self.busy

    async def run(self, started: float) -> None:
        """Sample until cancelled. A sample the store cannot answer (``StoreUnavailable``:
        PostgreSQL restarting, say) is skipped — the supervisor has said so already, and the
        daemon keeps serving — and the time until the next answer counts as busy."""
        while True:
            await anyio.sleep(self.interval)
            try:
                stats = await self.host.stats()
            except StoreUnavailable:
                continue
            now = time.monotonic()
            self._account(now, not self.host.is_idle(stats))
            line = _line(stats)
            if self.out is not None and line != self._last_line:
                self._last_line = line
                print(f"[{now - started:6.1f}s] {line}", file=self.out, flush=True)


async def _watch_signals(
    stop: anyio.Event,
    out: TextIO,
    received: list[str],
    *,
    task_status: StartStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Installed before anything else starts, so a SIGINT/SIGTERM at any instant (even
    while the agents are being spawned) is a graceful stop, never death by the signal."""
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        task_status.started()
        async for signum in signals:
            name = signal.Signals(signum).name
            if received:
                print(f"greenroom: {name}: already stopping", file=out, flush=True)
                continue
            received.append(name)
            print(
                f"greenroom: {name}: stopping (no new claims; running tasks may finish)", file=out, flush=True
            )
            stop.set()


def explain_stuck(tasks: list[AgentTask], served: set[str]) -> list[str]:
    """Why PENDING tasks cannot run, one line per reason (for ``--until-idle``)."""
    by_id = {task.id: task for task in tasks}
    unserved: dict[str, int] = {}
    waiting: dict[str, list[str]] = {}
    for task in tasks:
        if task.status is not TaskStatus.PENDING:
            continue
        if task.type not in served:
            unserved[task.type] = unserved.get(task.type, 0) + 1
            continue
        blockers = [
            dep for dep in task.depends_on if dep in by_id and by_id[dep].status is not TaskStatus.COMPLETED
        ]
        if blockers:
            waiting.setdefault(blockers[0], []).append(task.id)
    lines = [
        f"{count} task(s) of type {agent_type!r}: no agent of that type runs here (see the config's [agents])"
        for agent_type, count in sorted(unserved.items())
    ]
    for dep, ids in sorted(waiting.items()):
        blocker = by_id[dep]
        why = "not served here" if blocker.type not in served else blocker.status.value
        shown = ", ".join(ids[:3]) + (f" and {len(ids) - 3} more" if len(ids) > 3 else "")
        lines.append(f"{shown}: wait(s) on {dep!r} (type {blocker.type!r}, {why})")
    return lines


async def run_daemon(
    *,
    data_dir: str | None,
    config_path: str | None,
    until_idle: bool,
    seed_example: int | None,
    progress_interval: float | None,
    listen: str | None = None,
    api: bool = True,
    store: str | None = None,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
) -> int:
    config: DaemonConfig = load_config(config_path) if config_path else default_config()
    if store is not None:  # --store (or $GREENROOM_STORE) over the config's [store] url
        from ..postgres import check_url

        config = msgspec.structs.replace(
            config, store=StoreConfig(check_url(store), config.store.pool_size, config.store.notify)
        )
    if listen is not None:
        check_listen(listen)
    started = time.monotonic()
    received: list[str] = []
    stop = anyio.Event()
    tracer_provider = start_tracing(config)
    try:
        return await _serve(config, data_dir, until_idle, seed_example, progress_interval, listen, api,
                            out, err, started, received, stop)  # fmt: skip
    finally:
        if tracer_provider is not None:
            await anyio.to_thread.run_sync(tracer_provider.shutdown)  # flushes the spans


def start_tracing(config: DaemonConfig) -> Any:
    if not config.tracing.enabled:
        return None
    from .. import _tracing

    try:
        return _tracing.setup_sdk(config.tracing.exporter, config.tracing.service_name)
    except ImportError as error:
        raise ConfigError(f"config: field 'tracing.enabled' is true, but {error}") from None


def _lock_data_dir(data_dir: str | None) -> DaemonLock:
    """The daemon's lock on its data dir (``daemon.lock``, state ``starting``): commands
    wait for its API instead of meeting a half-started daemon; a second daemon is refused."""
    from .._files import resolve_data_dir
    from ..service._client import DAEMON_LOCK_FILE

    lock = DaemonLock(resolve_data_dir(data_dir) / DAEMON_LOCK_FILE, "the data dir")
    lock.acquire()
    lock.set_state("starting")
    return lock


async def _serve(
    config: DaemonConfig,
    data_dir: str | None,
    until_idle: bool,
    seed_example: int | None,
    progress_interval: float | None,
    listen: str | None,
    api: bool,
    out: TextIO,
    err: TextIO,
    started: float,
    received: list[str],
    stop: anyio.Event,
) -> int:
    from ..daemon._workers import worker_slot

    worker = worker_slot()  # a worker of --workers: its parent holds the lock and the API's socket
    async with anyio.create_task_group() as watching:
        await watching.start(_watch_signals, stop, err, received)
        outer = AsyncExitStack()
        lock = None
        if worker is None:
            lock = await anyio.to_thread.run_sync(_lock_data_dir, data_dir)
            outer.callback(lock.release)
        async with outer, AgentHost(config, data_dir) as host, AsyncExitStack() as stack:
            service: DaemonService | None = None
            if api and config.api.enabled:
                service = await stack.enter_async_context(
                    DaemonService(host, stop, listen=listen, worker=worker)
                )
            if lock is not None:
                lock.set_state("serving" if service is not None else "no-api")  # what commands may ask
            before = host.initial_stats
            shown = "" if host.store.where == str(host.data_dir) else f" · store {host.store.where}"
            print(
                f"greenroom: serving {host.data_dir}{shown} · {before.total} task(s) · "
                "agents: "
                + ", ".join(f"{t} x{p.concurrency}" for t, p in config.agents.items())
                + (f" · API {service.url}" if service else ""),
                file=err,
                flush=True,
            )
            if seed_example and not stop.is_set():
                prefix = f"demo-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}"
                seeded = await host.supervisor.ask(Submit(example_graph(prefix, seed_example)))
                print(f"greenroom: seeded {len(seeded)} example task(s) ({prefix}-*)", file=err, flush=True)
            progress = _Progress(host, err if progress_interval else None, progress_interval or 0.5)
            freeze_startup_heap()  # serving: what was imported and built stays out of the collector's way
            async with anyio.create_task_group() as tg:
                if service is not None:
                    tg.start_soon(service.run)  # ends by itself once `stop` is set
                async with anyio.create_task_group() as watchers:
                    watchers.start_soon(progress.run, started)
                    if until_idle:
                        watchers.start_soon(_stop_when_idle, host, stop)
                    await stop.wait()
                    watchers.cancel_scope.cancel()
            progress.finish()
            stuck: list[str] = []
            if until_idle and not received:
                try:
                    pending = await host.supervisor.ask(ListTasks(status=TaskStatus.PENDING))
                    if pending:
                        everything = await host.supervisor.ask(ListTasks())
                        stuck = explain_stuck(everything, set(config.agents))
                    waiting = await host.supervisor.ask(ListTasks(status=TaskStatus.WAITING))
                    stuck.extend(_waiting_line(task) for task in waiting)
                except StoreUnavailable as error:  # the explanation is lost, the run is not
                    print(f"greenroom: could not list the pending tasks: {error}", file=err, flush=True)
            await host.shutdown()
            after = host.final_stats or before
        watching.cancel_scope.cancel()
    elapsed = time.monotonic() - started
    completed = after.completed_here  # what this run completed; the live graph's count archiving changes
    busy = min(max(progress.busy, 1e-3), elapsed)
    print(f"[{elapsed:6.1f}s] {_line(after)}", file=err, flush=True)
    why = f"stopped by {received[0]}" if received else ("idle" if until_idle else "stopped")
    if not received and service is not None and service.stopped_by_api:
        why = "stopped through the API"
    for line in stuck:
        print(f"greenroom: cannot run: {line}", file=err, flush=True)
    rate = f"{completed / busy:.0f}/s over {progress.busy:.1f}s busy" if completed else "0/s"
    counts = " · ".join(f"{status.lower()} {count}" for status, count in after.by_status.items() if count)
    print(
        f"greenroom: {why} after {elapsed:.1f}s · {completed} task(s) completed this run ({rate})"
        + (f" · {counts}" if counts else ""),
        file=out,
        flush=True,
    )
    return 0


def _waiting_line(task: AgentTask) -> str:
    call = task.waiting or {}
    arguments = json.dumps(call.get("arguments", {}), sort_keys=True)
    return (
        f"{task.id} waits for approval of {call.get('tool')!r} {arguments:.200} "
        f"(greenroom tasks approve {task.id} / deny {task.id} --reason ...)"
    )


def check_listen(text: str) -> None:
    from ..service import parse_address

    parse_address(text, "--listen")


async def _stop_when_idle(host: AgentHost, stop: anyio.Event) -> None:
    await host.wait_idle()
    stop.set()


# -- greenroom run --workers N ------------------------------------------------------------


def run_workers(args: Any) -> int:
    """``greenroom run --workers N``: the checks a daemon makes first, then N workers under
    this process (``greenroom.daemon._workers``)."""
    from .._files import resolve_data_dir
    from ..daemon._workers import refuse_on_files
    from ..daemon._workers import run_workers as supervise
    from ..postgres import check_url, redact

    config: DaemonConfig = load_config(args.config) if args.config else default_config()
    url = check_url(args.store) if args.store is not None else config.store.url
    refuse_on_files(args.workers, url)
    assert url is not None
    if args.listen is not None:
        check_listen(args.listen)
    api = not args.no_api and config.api.enabled
    data_dir = resolve_data_dir(args.data_dir)
    worker_args = ["--data-dir", str(data_dir), "--backend", args.backend, "--quiet", "--store", url]
    if args.config:
        worker_args += ["--config", args.config]
    if args.until_idle:
        worker_args.append("--until-idle")
    if not api:
        worker_args.append("--no-api")
    first = ["--seed-example", str(args.seed_example)] if args.seed_example else []
    return anyio.run(
        lambda: supervise(
            args.workers,
            worker_args,
            data_dir=data_dir,
            listen=(args.listen or config.api.listen) if api else None,
            store_where=redact(url),
            until_idle=args.until_idle,
            first_args=first,
        ),
        backend=args.backend,
    )
