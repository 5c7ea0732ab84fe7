"""The daemon: an actor system hosting the supervisor, the log actor and agent pools.

Its names are imported on first use: they need every agent layer, and the CLI's read
commands import this package only for the backend choice (``_backend``).
"""

from typing import TYPE_CHECKING

from .._lazy import lazy

if TYPE_CHECKING:
    from ._config import AgentPoolConfig, ConfigError, DaemonConfig, default_config, load_config
    from ._host import AgentHost

__getattr__ = lazy(
    globals(),
    {
        "AgentHost": "._host",
        "AgentPoolConfig": "._config",
        "ConfigError": "._config",
        "DaemonConfig": "._config",
        "default_config": "._config",
        "load_config": "._config",
    },
)

__all__ = ["AgentHost", "AgentPoolConfig", "ConfigError", "DaemonConfig", "default_config", "load_config"]
