"""Every async test runs twice: on asyncio and on trio. The PostgreSQL fixtures
(``pg_server``, ``pg_url``) come from ``_postgres``."""

from __future__ import annotations

import pytest

pytest_plugins = ["_postgres"]


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)
