"""Every async test runs twice: on asyncio and on trio. The PostgreSQL fixtures
(``pg_server``, ``pg_url``) come from ``_postgres``; the ``backend`` fixture (every store,
for the contract suite) from ``_stores``."""

from __future__ import annotations

import pytest

pytest_plugins = ["_postgres", "_stores"]


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)
