"""greenroom's own benchmarks (``python -m benchmarks SUITE``, ``python dev.py bench``): each
suite runs small and reports its JSON; flags are checked by name; they live beside the
package, never in it."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from benchmarks.__main__ import main

ROOT = Path(__file__).resolve().parent.parent
WHOLE = "must be a whole number from 1 to 1000000,"


def run_benchmarks(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "benchmarks", *argv], capture_output=True, text=True, timeout=120, cwd=ROOT
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["actors", "--runs", "0"], f"argument --runs: {WHOLE} got '0'"),
        (["actors", "--runs", "many"], f"argument --runs: {WHOLE} got 'many'"),
        (["actors", "--backend", "curio"], "argument --backend: invalid choice: 'curio'"),
        (["actors", "--workload", "chess"], "argument --workload: invalid choice: 'chess'"),
        (["log", "--backend", "curio"], "argument --backend: invalid choice: 'curio'"),
        (["log", "--repeat", "0"], f"argument --repeat: {WHOLE} got '0'"),
        (["graph", "--agents", "-3"], f"argument --agents: {WHOLE} got '-3'"),
    ],
)
def test_bad_flags_are_named_with_their_value(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_no_suite_prints_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "usage: python -m benchmarks" in capsys.readouterr().err


def test_the_package_carries_no_benchmark_and_greenroom_has_no_bench_command(tmp_path: Path) -> None:
    """The installed greenroom holds what users run: the wheel has no benchmark module,
    nothing in it imports ``benchmarks``, and ``greenroom bench`` is not a command."""
    done = subprocess.run(
        [sys.executable, "-m", "hatchling", "build", "-t", "wheel", "-d", str(tmp_path)],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (wheel,) = tmp_path.glob("greenroom-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "greenroom/actors/_cell.py" in names
    assert [name for name in names if "bench" in name] == []
    for path in (ROOT / "greenroom").rglob("*.py"):
        assert "import benchmarks" not in path.read_text() and "from benchmarks" not in path.read_text(), path
    refused = subprocess.run(
        [sys.executable, "-m", "greenroom", "bench", "graph"], capture_output=True, text=True, timeout=60
    )
    assert refused.returncode == 2 and "invalid choice: 'bench'" in refused.stderr


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["graph", "--peers"],
            "--peers needs --store postgresql (the peers are PostgreSQL job queues)",
        ),
        (["graph", "--store", "mysql://x"], "--store must be 'postgresql' or a postgresql:// URL"),
        (
            ["graph", "--store", "postgresql", "--processes", "0,2"],
            "--processes must be whole numbers",
        ),
        (["graph", "--kills", "5"], "--kills needs --store postgresql"),
        (
            ["graph", "--store", "postgresql", "--kills", "2", "--kill-interval", "0"],
            "--kill-interval must be seconds in (0, 60] (got 0.0)",
        ),
        (["graph", "--store", "postgresql", "--kills", "0"], "--kills"),
    ],
)
def test_bench_graph_refuses_bad_store_options_before_starting_anything(
    argv: list[str], message: str
) -> None:
    done = run_benchmarks(*argv)
    assert done.returncode != 0 and message in done.stderr, done.stderr


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_bench_actors_json_reports_ratio_to_the_backends_baseline(
    backend: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["actors", "--backend", backend, "--runs", "1", "--workload", "spawn", "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    row = figures["spawn"]
    baseline = "asyncio-queue" if backend == "asyncio" else "trio-channel"
    assert set(row) == {"greenroom", baseline, "anyio-stream", "ratio", "bytes_per_idle_actor"}
    assert row["ratio"] == pytest.approx(row["greenroom"] / row[baseline])
    assert all(row[key] > 0 for key in row)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_bench_log_json_reports_the_median_of_its_rounds(
    backend: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["log", "--backend", backend, "--agents", "3", "--events", "4", "--naive-events", "2"]
    assert main([*argv, "--repeat", "3", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)[backend]
    assert (row["backend"], row["agents"], row["rounds"]) == (backend, 3, 3)
    assert row["ratio_min"] <= row["ratio"] <= row["ratio_max"]
    assert row["naive"] > 0 and row["greenroom"] > 0
    # the batched run: 4 events per agent in AppendMany messages of (by default) up to 10
    assert row["per_message"] == 10 and row["batched"] > 0 and row["batched_limit"] > 0
    assert row["batched_batch_size"] <= 3 * 4


def test_bench_chat_runs_small_and_reports_json(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["chat", "--backend", "trio", "--concurrency", "1", "--concurrency", "3",
            "--latency-ms", "0", "--sequential", "2", "--json"]  # fmt: skip
    assert main(argv) == 0
    figures = json.loads(capsys.readouterr().out)["trio"]
    assert [(r["concurrency"], r["latency_ms"]) for r in figures["rows"]] == [(1, 0), (3, 0)]
    for row in figures["rows"]:
        for client in ("plain", "greenroom"):
            assert row[client]["per_second"] > 0 and row[client]["p99"] >= row[client]["p50"] > 0
    assert figures["pools"] == 8 and len(figures["checks"]) == 1


def test_bench_chat_refuses_bad_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["chat", "--pools", "0"])
    assert "argument --pools: must be a whole number from 1 to 1000000, got '0'" in capsys.readouterr().err


def test_bench_pipeline_runs_small_and_reports_json(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["pipeline", "--backend", "asyncio", "--envelopes", "20", "--latency-envelopes", "5",
            "--latency-ms", "5", "--in-flight", "5", "--rounds", "1", "--json"]  # fmt: skip
    assert main(argv) == 0
    figures = json.loads(capsys.readouterr().out)["asyncio"]
    assert figures["plain_per_second"] > 0 and figures["actors_per_second"] > 0
    assert figures["ideal"] == pytest.approx((5 + 2) * 0.005) and figures["wall"] >= figures["ideal"]


def test_bench_harness_measures_the_durable_mode_beside_the_plain_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The durable run records a reply and a tool result per iteration (the suite checks
    it) and reports its CPU per iteration beside the non-durable one."""
    argv = ["harness", "--backend", "trio", "--actors", "5", "--iterations", "3",
            "--latency-ms", "1", "--rounds", "1", "--json"]  # fmt: skip
    assert main(argv) == 0
    figures = json.loads(capsys.readouterr().out)["trio"]
    assert figures["durable_overhead_per_iteration"] >= 0 and figures["overhead_per_iteration"] >= 0
    assert figures["wall"] >= figures["ideal"] == pytest.approx(0.003)
    # one of three iterations recorded before the "crash": the resumed run asks the other two
    assert figures["recovery_requests_ratio"] == pytest.approx(2 / 3)
    assert figures["recovery"]["rerun_requests"] == 5 * 3


def test_every_suite_is_described_and_dev_py_runs_them_all() -> None:
    """``python -m benchmarks SUITE`` describes each suite, and ``dev.py bench`` says it
    runs every one."""
    import importlib.util

    from benchmarks import SUITES

    root = Path(__file__).resolve().parent.parent
    suites = {"actors", *SUITES}
    described = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--help"], capture_output=True, text=True, timeout=60, cwd=root
    )
    assert described.returncode == 0 and all(suite in described.stdout for suite in suites)
    spec = importlib.util.spec_from_file_location("dev_script", root / "dev.py")
    assert spec is not None and spec.loader is not None
    dev = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(dev)
    assert set(dev.SUITES) == suites


def test_bench_entities_runs_small_and_reports_each_figure_beside_its_baseline(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["entities", "--backend", "asyncio", "--keys", "1000", "--active", "100", "--messages", "300",
            "--actors", "50", "--per-actor", "5", "--rate", "200", "--json"]  # fmt: skip
    assert main(argv) == 0
    figures = json.loads(capsys.readouterr().out)["asyncio"]
    memory, churn, throughput = figures["memory"], figures["churn"], figures["throughput"]
    assert memory["entity_bytes_beyond_state"] > 0 and memory["plain_actor_bytes_beyond_state"] > 0
    assert churn["activations"] >= 100 and churn["passivations"] > 0  # the cap of 100 made room
    assert 0 < churn["paced_activation_p50_ms"] <= churn["paced_activation_p99_ms"]
    assert throughput["tells_ratio_vs_actors"] > 0 and throughput["asks_ratio_vs_actors"] > 0
    assert memory["bytes_ratio_vs_actor"] > 0 and churn["paced_p99_ratio_vs_target"] > 0


def test_bench_entities_kills_need_postgresql(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["entities", "--kills", "2"]) == 1
    assert "--kills needs --store postgresql" in capsys.readouterr().err
