"""Every async test runs twice: on asyncio and on trio. The PostgreSQL fixtures
(``pg_server``, ``pg_url``) come from ``_postgres``; the ``backend`` fixture (every store,
for the contract suite) from ``_stores``. A test marked ``virtual_time`` runs in virtual
time on both loops."""

from __future__ import annotations

from typing import Any

import pytest

from greenroom.testing import virtual_time

pytest_plugins = ["_postgres", "_stores"]


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str | tuple[str, dict[str, Any]]:
    """The loop; with ``@pytest.mark.virtual_time`` its clock jumps ahead whenever every
    task waits (``greenroom.testing.virtual_time``)."""
    if request.node.get_closest_marker("virtual_time") is not None:
        return virtual_time(str(request.param))
    return str(request.param)
