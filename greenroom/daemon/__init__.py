"""The daemon: an actor system hosting the supervisor, the log actor and agent pools."""

from ._config import AgentPoolConfig, ConfigError, DaemonConfig, default_config, load_config
from ._host import AgentHost

__all__ = ["AgentHost", "AgentPoolConfig", "ConfigError", "DaemonConfig", "default_config", "load_config"]
