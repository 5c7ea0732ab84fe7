"""The service layer: the daemon's HTTP API (Starlette, served by Hypercorn on asyncio or
trio), its bearer tokens, and the Python client the CLI uses."""

from ._app import ApiError, create_app
from ._client import DaemonInfo, ServiceClient, ServiceError, ServiceUnavailable, find_daemon
from ._serve import parse_address
from ._tokens import SCOPES, Principal, Scope, TokenFileError, TokenRecord, TokenStore

__all__ = [
    "SCOPES",
    "ApiError",
    "DaemonInfo",
    "Principal",
    "Scope",
    "ServiceClient",
    "ServiceError",
    "ServiceUnavailable",
    "TokenFileError",
    "TokenRecord",
    "TokenStore",
    "create_app",
    "find_daemon",
    "parse_address",
]
