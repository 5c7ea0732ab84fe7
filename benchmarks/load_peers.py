"""``greenroom load`` against AIPerf and GuideLLM on their own workload, in one run.

``python benchmarks/load_peers.py [--levels 10,100,500] [--json FILE] [--plot FILE]``

Every tool sends single-turn streamed chat requests in a closed loop of N at once to the
same fake server (``_fake_llm.py``: first piece after 100 ms, then one every 20 ms, 20
pieces; several processes, its own CPU measured), which keeps the truth of each reply:
when the request arrived and when its first piece left. For each tool and level:

- **client CPU** per request and per streamed token: the tool's whole process tree
  (``RUSAGE_CHILDREN`` around it: every process it started and waited for), start-up
  included, as a user pays it;
- **TTFT error**: the tool's own p50 / p90 / p99 TTFT minus the server's (first piece sent
  minus request received) — what the client adds by measuring itself;
- the baseline of the same run: a bare asyncio + aiohttp loop (``_bare_client.py``).

The peers run in their own venvs (``.bench-peers/``, made on first use with pinned
versions, or ``--aiperf-python`` / ``--guidellm-python``): they are never greenroom's
dependencies. Everything is offline: the tokenizer they need is built here (one token
per word of the fake server's replies).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
PEERS = {"aiperf": "aiperf==0.13.0", "guidellm": "guidellm==0.8.1"}
PIECES = 20
TOOLS = ("bare", "greenroom", "greenroom-1", "aiperf", "guidellm", "agent")
"""``greenroom``: ``greenroom load`` as a user runs it (its generator processes: the
machine's cores); ``greenroom-1``: the same with ``--processes 1``."""
"""``agent``: greenroom on agent sessions (``AGENT``: three turns, each a tool call — a
synthetic tool really run — and the answer; six requests a session) for the CPU per
request of sessions against single turns."""
AGENT = """name = "agent"
system_prompt_tokens = 200
turns = 3
prompt_tokens = 100
output_tokens = 100
max_tool_rounds = 1
[[tools]]
name = "lookup"
latency_s = 0.05
result_tokens = 200
"""
AGENT_REQUESTS = 6

_TOKENIZER = """
import sys
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
vocab = {"[UNK]": 0, "[PAD]": 1, **{f"w{i}": i + 2 for i in range(4000)}}
core = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
core.pre_tokenizer = pre_tokenizers.Whitespace()
fast = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]", pad_token="[PAD]")
fast.save_pretrained(sys.argv[1])
"""


def peer_python(name: str, given: str | None, home: Path) -> str:
    """The python of a peer's own venv: ``given``, else ``home/<name>`` (made if missing)."""
    if given:
        return given
    venv = home / name
    python = venv / "bin" / "python"
    if not python.exists():
        print(f"installing {PEERS[name]} into {venv} (its own venv, once)", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", PEERS[name]], check=True)
    return str(python)


class FakeServer:
    """``_fake_llm.py`` in its own processes; :meth:`stop` answers its records and CPU."""

    def __init__(self, workers: int) -> None:
        self.records = Path(tempfile.mkdtemp(prefix="fake-llm-"))
        self.process = subprocess.Popen(
            [sys.executable, str(HERE / "_fake_llm.py"), "--records", str(self.records),
             "--workers", str(workers), "--pieces", str(PIECES)],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.process.stdout is not None
        self.url = f"http://127.0.0.1:{int(self.process.stdout.readline())}"

    def stop(self) -> tuple[list[list[float]], float]:
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(60)
        assert self.process.stdout is not None
        self.process.stdout.close()
        requests: list[list[float]] = []
        cpu = 0.0
        for path in self.records.glob("worker-*.json"):
            found = json.loads(path.read_text())
            requests += found["requests"]
            cpu += found["cpu_s"]
        shutil.rmtree(self.records, ignore_errors=True)
        return requests, cpu


def percentiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p90": None, "p99": None}
    ordered = sorted(values)

    def rank(fraction: float) -> float:
        place = fraction * (len(ordered) - 1)
        low = int(place)
        high = min(low + 1, len(ordered) - 1)
        return ordered[low] + (ordered[high] - ordered[low]) * (place - low)

    return {"p50": rank(0.5), "p90": rank(0.9), "p99": rank(0.99)}


def command(tool: str, url: str, level: int, requests: int, work: Path, pythons: dict[str, str]) -> list[str]:
    if tool == "bare":
        return [pythons["aiperf"], str(HERE / "_bare_client.py"), url, str(level), str(requests)]
    if tool == "agent":
        (work / "agent.toml").write_text(AGENT)
        return [sys.executable, "-m", "greenroom", "load", "--base-url", url + "/v1", "--model", "bench",
                "--workload", str(work / "agent.toml"), "--concurrency", str(level),
                "--sessions", str(max(1, requests // AGENT_REQUESTS)), "--json", "--quiet",
                "--csv", str(work / "requests.csv")]  # fmt: skip
    if tool in ("greenroom", "greenroom-1"):
        return [sys.executable, "-m", "greenroom", "load", "--base-url", url + "/v1", "--model", "bench",
                "--preset", "single", "--concurrency", str(level), "--sessions", str(requests),
                "--json", "--quiet", "--csv", str(work / "requests.csv"),
                *(["--processes", "1"] if tool == "greenroom-1" else [])]  # fmt: skip
    tokenizer = str(work / "tokenizer")
    if tool == "aiperf":
        return [pythons["aiperf"], "-m", "aiperf", "profile", "--model", "bench", "--url", url,
                "--endpoint-type", "chat", "--streaming", "--tokenizer", tokenizer,
                "--concurrency", str(level), "--request-count", str(requests),
                "--synthetic-input-tokens-mean", "100", "--output-tokens-mean", "100",
                "--use-server-token-count", "--artifact-dir", str(work / "aiperf"),
                "--ui-type", "none"]  # fmt: skip
    return [pythons["guidellm"], "-m", "guidellm", "run",
            "--backend", f"kind=openai_http,target={url},model=bench",
            "--profile", f"kind=concurrent,streams={level}",
            "--constraint", f"kind=max_requests,count={requests}",
            "--data", "kind=synthetic_text,prompt_tokens=100,output_tokens=100",
            "--tokenizer", f"kind=hf_auto,model={tokenizer}",
            "--output", f"kind=json,path={work / 'guidellm.json'}", "--disable-console"]  # fmt: skip


def reported_ttft(tool: str, stdout: str, work: Path) -> dict[str, float | None]:
    """The tool's own TTFT percentiles (ms), from where it reports them."""
    if tool == "bare":
        return percentiles(json.loads(stdout)["ttft_ms"])
    if tool in ("greenroom", "greenroom-1", "agent"):
        found = json.loads(stdout)["ttft_ms"]
        return {key: found[key] for key in ("p50", "p90", "p99")}
    if tool == "aiperf":
        found = json.loads((work / "aiperf" / "profile_export_aiperf.json").read_text())[
            "time_to_first_token"
        ]
        return {key: found[key] for key in ("p50", "p90", "p99")}
    report = json.loads((work / "guidellm.json").read_text())
    found = report["benchmarks"][0]["metrics"]["time_to_first_token_ms"]["successful"]["percentiles"]
    return {key: found[key] for key in ("p50", "p90", "p99")}


def measure(
    tool: str, level: int, requests: int, work: Path, pythons: dict[str, str], workers: int
) -> dict[str, Any]:
    server = FakeServer(workers)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    done = subprocess.run(
        command(tool, server.url, level, requests, work, pythons),
        capture_output=True, text=True, timeout=1800, cwd=work,
        env={**os.environ, "OPENAI_API_KEY": "none"},
    )  # fmt: skip
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # before the server is reaped: its CPU is apart
    served, server_cpu = server.stop()
    if done.returncode != 0:
        raise SystemExit(
            f"{tool} at {level} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    truth = percentiles([(first - received) * 1000 for received, first, _ in served])
    said = reported_ttft(tool, done.stdout, work)
    from_sent: dict[str, float | None] = {}
    if tool in ("greenroom", "greenroom-1", "agent"):  # like the peers' timers: from the send, not the due
        with open(work / "requests.csv") as rows:
            sent = [
                float(r["ttft_ms"]) - float(r["send_lag_ms"]) for r in csv.DictReader(rows) if r["ttft_ms"]
            ]
        from_sent = percentiles(sent)
    return {
        "tool": tool,
        "concurrency": level,
        "requests": len(served),
        "wall_s": round(wall, 3),
        "client_cpu_s": round(cpu, 3),
        "cpu_per_request_ms": round(cpu / max(1, len(served)) * 1000, 3),
        "cpu_per_token_us": round(cpu / max(1, len(served) * PIECES) * 1e6, 1),
        "ttft_ms": {k: None if v is None else round(v, 3) for k, v in said.items()},
        "true_ttft_ms": {k: None if v is None else round(v, 3) for k, v in truth.items()},
        "ttft_error_ms": {
            key: None if said[key] is None or truth[key] is None else round(said[key] - truth[key], 3)  # type: ignore[operator]
            for key in ("p50", "p90", "p99")
        },
        "ttft_error_from_send_ms": {
            key: round(from_sent[key] - truth[key], 3)  # type: ignore[operator]
            for key in ("p50", "p90", "p99")
            if from_sent.get(key) is not None and truth[key] is not None
        },
        "server_cpu_s": round(server_cpu, 3),
        "server_cpu_share": round(server_cpu / max(wall, 1e-9) / workers, 3),
    }


def line(row: dict[str, Any], workers: int) -> str:
    """One result as a line of the run's output."""
    error = row["ttft_error_ms"]
    return (
        f"{row['tool']:>9} @ {row['concurrency']:>4}: {row['requests']:>5} requests, "
        f"CPU {row['cpu_per_request_ms']:7.2f} ms/request "
        f"(steady {row['steady_cpu_per_request_ms']:6.2f} ms, "
        f"{row['steady_cpu_per_token_us']:6.1f} µs/token; start-up {row['startup_cpu_s']:.2f} s); "
        f"TTFT error p50 {error['p50']:+7.2f} p90 {error['p90']:+7.2f} p99 {error['p99']:+7.2f} ms; "
        f"server CPU {row['server_cpu_share'] * 100:3.0f} % of its {workers} processes"
        + (f"; from the send p99 {row['ttft_error_from_send_ms']['p99']:+7.2f} ms"
           if row.get("ttft_error_from_send_ms") else "")
    )  # fmt: skip


def plot(results: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levels = sorted({r["concurrency"] for r in results})
    tools = [t for t in TOOLS if any(r["tool"] == t for r in results)]
    figure, (cpu_axes, error_axes) = plt.subplots(1, 2, figsize=(11, 4.2))
    width = 0.8 / len(tools)
    for number, tool in enumerate(tools):
        rows = {r["concurrency"]: r for r in results if r["tool"] == tool}
        places = [i + (number - (len(tools) - 1) / 2) * width for i in range(len(levels))]
        steady = [rows[n]["steady_cpu_per_request_ms"] if n in rows else 0 for n in levels]
        cpu_axes.bar(places, [max(v, 0.01) for v in steady], width, label=tool)
        errors = [abs(rows[n]["ttft_error_ms"]["p99"] or 0) if n in rows else 0 for n in levels]
        error_axes.bar(places, [max(e, 0.01) for e in errors], width, label=tool)
    for axes, title in (
        (cpu_axes, "client CPU per request, steady (ms)"),
        (error_axes, "|TTFT p99 error| (ms)"),
    ):
        axes.set_xticks(range(len(levels)), [f"{n} concurrent" for n in levels])
        axes.set_yscale("log")
        axes.set_title(title)
        axes.grid(axis="y", alpha=0.3)
    cpu_axes.legend()
    figure.suptitle(
        "closed loop, one fake server: single-turn streamed requests; agent = greenroom on 3-turn "
        "sessions with tools (lower is better)",
        fontsize=10,
    )
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", default="10,100,500", help="concurrent requests, comma-separated")
    parser.add_argument(
        "--requests", type=int, default=0, help="requests per level (default: max(200, 10 x level))"
    )
    parser.add_argument("--tools", default=",".join(TOOLS), help=f"some of {', '.join(TOOLS)}")
    parser.add_argument("--workers", type=int, default=2, help="the fake server's processes")
    parser.add_argument("--aiperf-python", help="the python of a venv with aiperf 0.13 (default: made)")
    parser.add_argument("--guidellm-python", help="the python of a venv with guidellm 0.8 (default: made)")
    parser.add_argument("--peers-dir", type=Path, default=ROOT / ".bench-peers")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--plot", type=Path, help="draw them here (PNG; matplotlib)")
    parser.add_argument("--replot", type=Path, metavar="JSON", help="no run: draw --plot from a --json file")
    args = parser.parse_args()
    if args.replot is not None:
        if args.plot is None:
            parser.error("--replot needs --plot FILE")
        plot(json.loads(args.replot.read_text())["results"], args.plot)
        return
    tools = [t.strip() for t in args.tools.split(",") if t.strip()]
    wrong = [t for t in tools if t not in TOOLS]
    if wrong:
        parser.error(f"--tools: unknown {wrong}; choose from {', '.join(TOOLS)}")
    levels = [int(n) for n in args.levels.split(",")]
    pythons = {
        "aiperf": peer_python("aiperf", args.aiperf_python, args.peers_dir),
        "guidellm": peer_python("guidellm", args.guidellm_python, args.peers_dir)
        if "guidellm" in tools
        else "",
    }
    results = []
    with tempfile.TemporaryDirectory(prefix="load-peers-") as scratch:
        work = Path(scratch)
        if {"aiperf", "guidellm"} & set(tools):  # the peers' tokenizer (the others need none)
            subprocess.run([pythons["aiperf"], "-c", _TOKENIZER, str(work / "tokenizer")], check=True)
        for level in levels:
            requests = args.requests or max(200, 10 * level)
            for tool in tools:
                # twice, N then 2N requests: the difference is the steady cost of N requests,
                # the tool's start-up (the same in both) taken out; the 2N run is the row
                short = measure(tool, level, requests, work, pythons, args.workers)
                row = measure(tool, level, 2 * requests, work, pythons, args.workers)
                extra = max(1, row["requests"] - short["requests"])
                steady = max(0.0, row["client_cpu_s"] - short["client_cpu_s"])
                row["steady_cpu_per_request_ms"] = round(steady / extra * 1000, 3)
                row["steady_cpu_per_token_us"] = round(steady / (extra * PIECES) * 1e6, 1)
                row["startup_cpu_s"] = round(
                    max(0.0, short["client_cpu_s"] - steady * short["requests"] / extra), 3
                )
                results.append(row)
                print(line(row, args.workers), flush=True)
    if args.json:
        args.json.write_text(
            json.dumps({"pieces": PIECES, "first_ms": 100, "each_ms": 20, "results": results}, indent=1)
        )
    if args.plot:
        plot(results, args.plot)


if __name__ == "__main__":
    main()
