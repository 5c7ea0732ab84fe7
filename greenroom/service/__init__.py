"""The service layer: the daemon's HTTP API (Starlette, served by Hypercorn on asyncio or
trio), its bearer tokens, and the Python client the CLI uses."""

from ._app import ApiError, ServiceParts, create_app
from ._client import (
    ADMIN_TOKEN_FILE,
    DAEMON_FILE,
    DaemonInfo,
    ServiceClient,
    ServiceError,
    ServiceUnavailable,
    find_daemon,
)
from ._serve import bind, parse_address, serve
from ._tokens import SCOPES, TOKENS_FILE, Principal, Scope, TokenFileError, TokenRecord, TokenStore

__all__ = [
    "ADMIN_TOKEN_FILE",
    "DAEMON_FILE",
    "SCOPES",
    "TOKENS_FILE",
    "ApiError",
    "DaemonInfo",
    "Principal",
    "Scope",
    "ServiceClient",
    "ServiceError",
    "ServiceParts",
    "ServiceUnavailable",
    "TokenFileError",
    "TokenRecord",
    "TokenStore",
    "bind",
    "create_app",
    "find_daemon",
    "parse_address",
    "serve",
]
