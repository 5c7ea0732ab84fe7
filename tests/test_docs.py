"""The documentation site: it builds strict (a broken link, a missing page or an unresolved
reference fails the build), and every example marked ``<!-- example -->`` in the docs and
the README runs as it is written, on asyncio and on trio."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_EXAMPLE = re.compile(r"<!-- example(: pytest)? -->\n```python\n(.*?)\n```", re.S)


def examples(kind: str = "program") -> list[tuple[str, str]]:
    """``(where, code)`` of each example marked ``<!-- example -->`` (a program) or
    ``<!-- example: pytest -->`` (a test module): the page and its example's number."""
    found = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for number, match in enumerate(_EXAMPLE.finditer(page.read_text(encoding="utf-8")), 1):
            if (match.group(1) is not None) == (kind == "pytest"):
                found.append((f"{page.relative_to(ROOT)}#{number}", match.group(2)))
    return found


def test_the_docs_site_builds_strict_with_every_page_and_reference(tmp_path: Path) -> None:
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    site = tmp_path / "site"
    home = (site / "index.html").read_text(encoding="utf-8")
    assert "Two commands" in home  # the README is the front page
    assert "RecordStore" in (site / "reference" / "store.html").read_text(encoding="utf-8")
    assert "Unreleased" in (site / "changelog.html").read_text(encoding="utf-8")


def test_the_docs_have_examples_to_run() -> None:
    where = [page for page, _ in examples()]
    assert "README.md#1" in where and "docs/howto/durable-setting.md#1" in where
    assert [page for page, _ in examples("pytest")] == ["docs/guide/testing.md#1"]


@pytest.mark.parametrize("loop", ["asyncio", "trio"])
@pytest.mark.parametrize(("where", "code"), examples(), ids=[page for page, _ in examples()])
def test_an_example_in_the_docs_runs_as_written(where: str, code: str, loop: str, tmp_path: Path) -> None:
    """The example, with ``anyio.run`` on ``loop``, in a fresh process and an empty directory."""
    prelude = f"import functools, anyio\nanyio.run = functools.partial(anyio.run, backend={loop!r})\n"
    env = {**os.environ, "STREAMING_LLM_DATA_DIR": str(tmp_path / "data")}
    ran = subprocess.run(
        [sys.executable, "-c", prelude + code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=90,
        env=env,
    )
    assert ran.returncode == 0, f"{where} on {loop}:\n{ran.stderr[-3000:]}"


@pytest.mark.parametrize(("where", "code"), examples("pytest"), ids=[page for page, _ in examples("pytest")])
def test_a_test_module_in_the_docs_passes_as_written(where: str, code: str, tmp_path: Path) -> None:
    """The example as a test module of its own, run by pytest with anyio's plugin (it
    parametrises its loops itself)."""
    (tmp_path / "test_example.py").write_text(code, encoding="utf-8")
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_example.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, f"{where}:\n{ran.stdout[-3000:]}"
    assert " passed" in ran.stdout and "skipped" not in ran.stdout
