"""The daemon's config file (TOML): which agents run, how many, and the lease settings.

    lease_seconds = 30          # a claim without a heartbeat for this long is retried
    heartbeat_interval = 5      # agents renew their leases this often (< lease_seconds)
    shutdown_grace = 10         # on SIGINT/SIGTERM, running tasks get this long to finish

    [agents.research]           # the key is the agent type
    agent = "greenroom.agents.examples:ResearchAgent"
    concurrency = 4             # agent actors of this type

Without a file, the built-in example agents run (``greenroom.agents.examples``).
"""

from __future__ import annotations

import importlib
import tomllib
from pathlib import Path
from typing import Annotated, Any

import msgspec

from .._errors import InvalidInput
from ..agents import BaseAgent
from ..agents.examples import AGENTS
from ..messages import RecordError, convert

Seconds = Annotated[float, msgspec.Meta(gt=0, le=86400)]


class AgentPoolConfig(msgspec.Struct, forbid_unknown_fields=True):
    agent: Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")]
    """``"package.module:ClassName"``, a :class:`BaseAgent` subclass."""
    concurrency: Annotated[int, msgspec.Meta(ge=1, le=10_000)] = 1


class DaemonConfig(msgspec.Struct, forbid_unknown_fields=True):
    agents: dict[Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_.:-]{1,100}$")], AgentPoolConfig]
    lease_seconds: Seconds = 30.0
    heartbeat_interval: Seconds | None = None
    """Default: a third of ``lease_seconds``."""
    shutdown_grace: Annotated[float, msgspec.Meta(ge=0, le=3600)] = 10.0


class ConfigError(InvalidInput):
    """The config file is unreadable or invalid; the message names the file, field and value."""


def default_config() -> DaemonConfig:
    return DaemonConfig(
        agents={
            agent_type: AgentPoolConfig(agent=f"{cls.__module__}:{cls.__qualname__}", concurrency=4)
            for agent_type, cls in AGENTS.items()
        }
    )


def load_config(path: str | Path) -> DaemonConfig:
    path = Path(path)
    try:
        raw: Any = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ConfigError(f"cannot read config {str(path)!r}: {error.strerror or error}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise ConfigError(f"config {str(path)!r} is not valid TOML: {error}") from None
    try:
        if isinstance(raw, dict) and isinstance(raw.get("agents"), dict):
            # one pool at a time, so an error can name the pool (msgspec's paths omit dict keys)
            for agent_type, pool in raw["agents"].items():
                convert(pool, AgentPoolConfig, "config", prefix=f"agents.{agent_type}")
        config = convert(raw, DaemonConfig, "config")
    except RecordError as error:
        raise ConfigError(f"config {str(path)!r}: {error}") from None
    check_config(config, str(path))
    return config


def check_config(config: DaemonConfig, where: str) -> None:
    if not config.agents:
        raise ConfigError(f"config {where!r}: field 'agents' names no agent types; nothing would run")
    hb = config.heartbeat_interval
    if hb is not None and hb >= config.lease_seconds:
        raise ConfigError(
            f"config {where!r}: field 'heartbeat_interval' must be shorter than lease_seconds "
            f"({config.lease_seconds}), got {hb}"
        )
    for agent_type, pool in config.agents.items():
        agent_class(pool.agent, f"agents.{agent_type}.agent", agent_type, where)


def agent_class(spec: str, field: str, agent_type: str, where: str) -> type[BaseAgent]:
    """Import ``"module:Class"`` and check it is an agent for ``agent_type``."""
    module_name, _, name = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as error:  # any import-time failure is a bad config value; nothing async here
        raise ConfigError(
            f"config {where!r}: field {field!r} cannot import {module_name!r} "
            f"({type(error).__name__}: {error}) (got {spec!r})"
        ) from None
    cls = getattr(module, name, None)
    if not (isinstance(cls, type) and issubclass(cls, BaseAgent)):
        raise ConfigError(f"config {where!r}: field {field!r} is not a BaseAgent subclass (got {spec!r})")
    if cls.agent_type and cls.agent_type != agent_type:
        raise ConfigError(
            f"config {where!r}: field {field!r} names an agent of type {cls.agent_type!r}, "
            f"not {agent_type!r} (got {spec!r})"
        )
    return cls
