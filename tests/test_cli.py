"""The ``greenroom`` command: version, flag validation, the actor benchmark's JSON."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from greenroom import __version__
from greenroom.cli import main


def test_version() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "greenroom", "--version"], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == f"greenroom {__version__}"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["bench", "actors", "--runs", "0"], "argument --runs: must be a whole number >= 1, got '0'"),
        (["bench", "actors", "--runs", "many"], "argument --runs: must be a whole number >= 1, got 'many'"),
        (["bench", "actors", "--backend", "curio"], "argument --backend: invalid choice: 'curio'"),
        (["bench", "actors", "--workload", "chess"], "argument --workload: invalid choice: 'chess'"),
        (["bench", "log", "--backend", "curio"], "argument --backend: invalid choice: 'curio'"),
        (["bench", "log", "--repeat", "0"], "argument --repeat: must be a whole number >= 1, got '0'"),
        (["bench", "graph", "--agents", "-3"], "argument --agents: must be a whole number >= 1, got '-3'"),
    ],
)
def test_bad_flags_are_named_with_their_value(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_no_command_prints_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "usage: greenroom" in capsys.readouterr().err


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_bench_actors_json_reports_ratio_to_the_backends_baseline(
    backend: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main(["bench", "actors", "--backend", backend, "--runs", "1", "--workload", "spawn", "--json"]) == 0
    )
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
    argv = ["bench", "log", "--backend", backend, "--agents", "3", "--events", "4", "--naive-events", "2"]
    assert main([*argv, "--repeat", "3", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)[backend]
    assert (row["backend"], row["agents"], row["rounds"]) == (backend, 3, 3)
    assert row["ratio_min"] <= row["ratio"] <= row["ratio_max"]
    assert row["naive"] > 0 and row["greenroom"] > 0
