"""The service layer: the daemon's HTTP API (Starlette, served by Hypercorn on asyncio or
trio), its bearer tokens, and the Python client the CLI uses.

Every name is imported on first use: ``create_app`` and ``ApiError`` need Starlette, the
client anyio's streams, the tokens hashing — and a command that only reads the files, or
only finds the daemon serving a data dir, pays for none of them.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy

if TYPE_CHECKING:
    from ._app import ApiError, create_app
    from ._client import DaemonInfo, ServiceClient, ServiceError, ServiceUnavailable, find_daemon
    from ._serve import parse_address
    from ._status import (
        AgentPool,
        BudgetStatus,
        ChatStatus,
        DaemonStatus,
        Histogram,
        LogStatus,
        ModelTiming,
        Quantiles,
        TaskFigures,
    )
    from ._tokens import SCOPES, Principal, Scope, TokenFileError, TokenRecord, TokenStore

__getattr__ = lazy(
    globals(),
    {
        "ApiError": "._app",
        "create_app": "._app",
        "parse_address": "._serve",
        "AgentPool": "._status",
        "BudgetStatus": "._status",
        "ChatStatus": "._status",
        "DaemonStatus": "._status",
        "Histogram": "._status",
        "LogStatus": "._status",
        "ModelTiming": "._status",
        "Quantiles": "._status",
        "TaskFigures": "._status",
        "DaemonInfo": "._client",
        "ServiceClient": "._client",
        "ServiceError": "._client",
        "ServiceUnavailable": "._client",
        "find_daemon": "._client",
        "SCOPES": "._tokens",
        "Principal": "._tokens",
        "Scope": "._tokens",
        "TokenFileError": "._tokens",
        "TokenRecord": "._tokens",
        "TokenStore": "._tokens",
    },
)

__all__ = [
    "SCOPES",
    "AgentPool",
    "ApiError",
    "BudgetStatus",
    "ChatStatus",
    "DaemonInfo",
    "DaemonStatus",
    "Histogram",
    "LogStatus",
    "ModelTiming",
    "Principal",
    "Quantiles",
    "Scope",
    "ServiceClient",
    "ServiceError",
    "ServiceUnavailable",
    "TaskFigures",
    "TokenFileError",
    "TokenRecord",
    "TokenStore",
    "create_app",
    "find_daemon",
    "parse_address",
]
