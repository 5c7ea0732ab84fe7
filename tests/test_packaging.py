"""The sdist holds what a user or a packager needs, and nothing else."""

from __future__ import annotations

import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_sdist_holds_the_package_tests_and_docs_only(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "hatchling", "build", "-t", "sdist", "-d", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert done.returncode == 0, done.stderr
    (archive,) = tmp_path.glob("greenroom-*.tar.gz")
    with tarfile.open(archive) as sdist:
        names = [name.split("/", 1)[1] for name in sdist.getnames() if "/" in name]
    tops = {name.split("/", 1)[0] for name in names}
    assert tops <= {"greenroom", "tests", "benchmarks", "docs", "README.md", "CHANGELOG.md", "pyproject.toml",
                    "mkdocs.yml", "PKG-INFO", ".gitignore"}  # fmt: skip
    assert "greenroom/actors/_cell.py" in names and "docs/architecture.md" in names
    assert "benchmarks/graph.py" in names  # the tests run some suites small
    assert sdist_size_ok(archive)


def sdist_size_ok(archive: Path) -> bool:
    """A scratch file once shipped 10.8 MB in it; the real sources are far smaller."""
    return archive.stat().st_size < 2_000_000
