#!/usr/bin/env python3
"""Set-up and the everyday commands, needing nothing but Python 3.11+.

    python3 dev.py run     create .venv, install greenroom, run the main job: the daemon
                           on a freshly seeded example graph, until it is done
    python3 dev.py test    create .venv, install greenroom[dev] (and, on Debian as root, the
                           chromium packages the browser tests use), run the tests
    python3 dev.py lint    ruff and mypy, as CI runs them
    python3 dev.py docs    build the documentation site into site/ (strict: a broken link or
                           reference fails it; the test suite builds it too)
    python3 dev.py bench   every benchmark on both backends (actors, graph, log, harness, chat, stream,
                           pipeline, soak); name suites to run only those (dev.py bench log chat)

Extra arguments after the command go to the tool (for example
``python3 dev.py test -k mailbox``).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PYTHON = BIN / ("python.exe" if os.name == "nt" else "python")


def ensure_venv(extra: str) -> None:
    """Create .venv and (re)install when pyproject.toml changed since the last install."""
    if sys.version_info < (3, 11):  # noqa: UP036 -- a clear message on an old interpreter
        sys.exit(f"greenroom needs Python >= 3.11, this is {sys.version.split()[0]}")
    if not PYTHON.exists():
        print(f"creating {VENV.relative_to(ROOT)}", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    spec = f".[{extra}]" if extra else "."
    stamp = VENV / ".greenroom-installed"
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + spec.encode()).hexdigest()
    if stamp.exists() and stamp.read_text() == digest:
        return
    print(f"installing greenroom{spec[1:]} into .venv", flush=True)
    subprocess.run(
        [str(PYTHON), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-e", spec],
        cwd=ROOT,
        check=True,
    )
    stamp.write_text(digest)


def ensure_chromium() -> None:
    """The status page's browser tests use Debian's chromium and chromium-driver: install
    them when missing and this is a Debian machine we may install on (root, apt-get);
    elsewhere those tests are skipped, saying why."""
    import shutil

    if shutil.which("chromium") and shutil.which("chromedriver"):
        return
    if not shutil.which("apt-get") or not hasattr(os, "geteuid") or os.geteuid() != 0:
        print("chromium / chromium-driver missing: the browser tests will be skipped", flush=True)
        return
    print("installing chromium and chromium-driver (Debian packages) for the browser tests", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    packages = ["chromium", "chromium-driver"]
    for step in (["update", "-qq"], ["install", "-y", "-qq", "--no-install-recommends", *packages]):
        if subprocess.run(["apt-get", *step], stdout=subprocess.DEVNULL, env=env).returncode:
            print(f"apt-get {step[0]} failed: the browser tests will be skipped", flush=True)
            return


def run(*args: str) -> int:
    return subprocess.run([str(PYTHON), *args], cwd=ROOT).returncode


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in {"run", "test", "lint", "docs", "bench"}:
        print(__doc__, file=sys.stderr)
        return 2
    command, rest = argv[0], argv[1:]
    if command == "run":
        ensure_venv("")
        data_dir = str(ROOT / ".greenroom-data")
        return run("-m", "greenroom", "run", "--data-dir", data_dir, "--seed-example", "--until-idle", *rest)
    ensure_venv("dev")
    if command == "test":
        ensure_chromium()
        return run("-m", "pytest", *rest)
    if command == "docs":
        return run("-m", "mkdocs", "build", "--strict", *rest)
    if command == "lint":
        paths = ["greenroom", "tests", "benchmarks", "docs", "dev.py"]
        return (
            run("-m", "ruff", "check", *paths)
            or run("-m", "ruff", "format", "--check", *paths)
            or run("-m", "mypy", *rest)
        )
    chosen = [word for word in rest if word in SUITES]
    rest = [word for word in rest if word not in SUITES]
    for suite in chosen or SUITES:
        code = run("-m", "benchmarks", suite, "--backend", "both", *rest)
        if code:
            return code
    return 0


SUITES = ("actors", "graph", "log", "harness", "chat", "pipeline", "soak", "stream", "entities", "pauses")
"""Every suite ``python -m benchmarks`` has (a test keeps the two lists equal); soak loads a
real daemon for 10 minutes per event loop; pauses runs two daemons on a PostgreSQL server it
starts (about 10 minutes for both loops and both kinds of pause)."""


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
