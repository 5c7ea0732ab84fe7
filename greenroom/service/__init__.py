"""The service layer: the daemon's HTTP API (Starlette, served by Hypercorn on asyncio or
trio), its bearer tokens, and the Python client the CLI uses.

``create_app`` and ``ApiError`` (which need Starlette) are imported on first use, so the
client and the tokens cost a command nothing more.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy
from ._client import DaemonInfo, ServiceClient, ServiceError, ServiceUnavailable, find_daemon
from ._tokens import SCOPES, Principal, Scope, TokenFileError, TokenRecord, TokenStore

if TYPE_CHECKING:
    from ._app import ApiError, create_app
    from ._serve import parse_address

__getattr__ = lazy(globals(), {"ApiError": "._app", "create_app": "._app", "parse_address": "._serve"})

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
