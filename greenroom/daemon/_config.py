"""The daemon's config file (TOML): which agents run, how many, and the lease settings.

    lease_seconds = 30          # a claim without a heartbeat for this long is retried
    heartbeat_interval = 5      # agents renew their leases this often (< lease_seconds)
    shutdown_grace = 10         # on SIGINT/SIGTERM, running tasks get this long to finish

    [agents.research]           # the key is the agent type
    agent = "greenroom.agents.examples:ResearchAgent"
    concurrency = 4             # agent actors of this type
    model = "gpt-4o"            # optional: this type's LLM phases on this [llm] model

    [llm]                       # optional: an OpenAI-compatible server for LLM phases
    base_url = "http://127.0.0.1:8000/v1"
    model = "gpt-4o-mini"       # for every agent with LLM phases, unless its pool names one
    api_key_env = "OPENAI_API_KEY"   # the key is read from this variable, never from the file
    timeout = 60
    max_tokens = 1024           # optional: the longest reply a call may generate
    temperature = 0.2           # optional: the server's default otherwise

    [llm.prices]                # optional: per million tokens, in your currency
    "gpt-4o-mini" = { input = 0.15, output = 0.60 }   # costs in events, summaries, status

    [limits]                    # sizes the task graph accepts (greenroom.messages.TaskLimits)
    max_task_bytes = 1048576

    [api]                       # the HTTP API (greenroom.service)
    listen = "127.0.0.1:0"      # port 0: a free one, written to <data dir>/daemon.json

    [chat]                      # the assistant behind POST /v1/chat
    model = "scripted"          # offline; or a model on the [llm] server
    max_tokens = 1024           # temperature = 0 (spec 002); context_window = N if known
    budget_tokens = 2000000     # optional: every chat model call, at most (kept across restarts)
    budget_cost = 5.0           # optional: the same in money (needs the model's [llm.prices])

    [tracing]                   # OpenTelemetry: pip install 'greenroom[otel]'
    enabled = false

Without a file, the built-in example agents run (``greenroom.agents.examples``) on the
offline scripted model. Without ``[llm]``, every agent keeps its own (scripted) model;
with it, agents with LLM phases call the server, except pools with ``model = "scripted"``.
"""

from __future__ import annotations

import importlib
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from .._errors import InvalidInput
from ..agents import BaseAgent
from ..agents.examples import AGENTS
from ..harness import MCPServerConfig
from ..llm import Price
from ..messages import RecordError, TaskLimits, convert
from ..store import Retention

Seconds = Annotated[float, msgspec.Meta(gt=0, le=86400)]


Tokens = Annotated[int, msgspec.Meta(ge=1, le=1_000_000)]
Temperature = Annotated[float, msgspec.Meta(ge=0, le=2)]
ModelName = Annotated[str, msgspec.Meta(min_length=1, max_length=200, pattern=r"^\S+$")]
ServerName = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_.-]{1,100}$")]
SCRIPTED = "scripted"
"""A pool's ``model`` value that keeps the agent's own (offline, scripted) model."""


class AgentPoolConfig(msgspec.Struct, forbid_unknown_fields=True):
    agent: Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")]
    """``"package.module:ClassName"``, a :class:`BaseAgent` subclass."""
    concurrency: Annotated[int, msgspec.Meta(ge=1, le=10_000)] = 1
    model: ModelName | None = None
    """The model of this type's LLM phases on the ``[llm]`` server (default: ``llm.model``);
    ``"scripted"`` keeps the agent's own model."""
    mcp: list[ServerName] = []
    """``[mcp.<name>]`` servers whose tools this type's LLM phases are given — and allowed,
    beside the agent's own allowlist: the operator chose them (a phase that names its tools
    offers only those)."""


class PriceConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A model's price per million tokens (``greenroom.llm.Price``)."""

    input: Annotated[float, msgspec.Meta(ge=0, le=1_000_000)]
    output: Annotated[float, msgspec.Meta(ge=0, le=1_000_000)]


class LLMConfig(msgspec.Struct, forbid_unknown_fields=True):
    """An OpenAI-compatible server for the agents' LLM phases."""

    base_url: Annotated[str, msgspec.Meta(pattern=r"^https?://\S+$", max_length=2000)]
    model: ModelName
    api_key_env: Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")] | None = "OPENAI_API_KEY"
    """The environment variable holding the key (``None``: send none). Never the key itself."""
    timeout: Seconds = 60.0
    """Seconds per HTTP request."""
    max_retries: Annotated[int, msgspec.Meta(ge=0, le=20)] = 3
    max_in_flight: Annotated[int, msgspec.Meta(ge=1, le=100_000)] | None = None
    """Requests in flight to the server at once, across all agents (default: unbounded)."""
    client: Literal["greenroom", "openai"] = "greenroom"
    """The HTTP client of the calls: greenroom's own (the default) or the openai SDK's."""
    stream: bool = True
    """Stream the model's replies (time to first token measured, chat answers shown as
    they are made); ``false`` for a server known to stream badly (one that refuses or
    interrupts streams is also found out and used whole, said once in the log)."""
    max_tokens: Tokens | None = None
    """The longest reply one call may generate (default: the server's own limit)."""
    temperature: Temperature | None = None
    """Sampling temperature of the agents' calls (default: the server's)."""
    prices: dict[ModelName, PriceConfig] = msgspec.field(default_factory=dict)
    """What each model's tokens cost: its calls' cost is then counted (run summaries,
    events, ``greenroom status``) and budgets in money can bound it."""


class ApiConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The HTTP API the daemon serves (``greenroom.service``)."""

    enabled: bool = True
    listen: Annotated[str, msgspec.Meta(pattern=r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):[0-9]{1,5}$")] = (
        "127.0.0.1:0"
    )
    """``HOST:PORT``; port 0 picks a free one (the CLI finds it through the data dir)."""
    max_body_bytes: Annotated[int, msgspec.Meta(ge=1024, le=1 << 30)] = 4 << 20
    history_every: Seconds = 5.0
    """Seconds between the samples the status page charts (the last 720 are kept)."""


class ChatConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The task assistant the API's chat endpoints run (spec 001/002)."""

    enabled: bool = True
    model: ModelName = SCRIPTED
    """``"scripted"``: the offline rule-based model; else a model on the ``[llm]`` server."""
    timeout: Seconds = 30.0
    """Seconds per chat request, waiting for the conversation's turn included."""
    temperature: Temperature = 0.0
    """Spec 002's engine setting: task management wants the same answer every time."""
    max_tokens: Tokens | None = 1024
    """The longest reply one model call may generate."""
    context_window: Annotated[int, msgspec.Meta(ge=16, le=100_000_000)] | None = None
    """The model's context window in tokens, if known (the history is fitted into it;
    without it, the window is learned from the server's first context-overflow error)."""
    budget_tokens: Annotated[int, msgspec.Meta(ge=1, le=10**15)] | None = None
    """Tokens every chat model call may spend together (a request past it is told the
    allowance is used up); ``None``: unlimited, still counted. The spend is the budget
    ``chat`` in the store: it lasts across restarts and is shared by the daemons of one
    database; ``greenroom budgets reset chat`` starts a new period."""
    budget_cost: Annotated[float, msgspec.Meta(gt=0, le=10**12)] | None = None
    """The same in money, by the chat model's ``[llm.prices]`` entry (required then)."""


class TracingConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """OpenTelemetry spans (needs ``pip install 'greenroom[otel]'``)."""

    enabled: bool = False
    exporter: Literal["otlp", "console"] = "otlp"
    """``otlp``: OTLP over HTTP to ``$OTEL_EXPORTER_OTLP_ENDPOINT``; ``console``: stdout."""
    service_name: Annotated[str, msgspec.Meta(min_length=1, max_length=100)] = "greenroom"


class StoreConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Where the task graph and the event log live: the data dir's files (no ``url``),
    or a PostgreSQL database several daemons share (``postgresql://user@host/db``; the
    password from ``$PGPASSWORD`` or ``~/.pgpass``, as libpq reads them, rather than in
    this file; it is never logged)."""

    url: Annotated[str, msgspec.Meta(pattern=r"^postgres(ql)?://", max_length=2000)] | None = None
    pool_size: Annotated[int, msgspec.Meta(ge=2, le=1000)] = 16
    """Connections this daemon keeps to PostgreSQL (its transactions run on them at once)."""
    notify: Literal["commit", "batched", "none"] = "commit"
    """How tasks made ready are announced to the other daemons (``greenroom.postgres``'s
    ``Notify``): in the transaction (the default), coalesced after it, or not (they find
    them at their lease checks)."""


class DaemonConfig(msgspec.Struct, forbid_unknown_fields=True):
    agents: dict[Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_.:-]{1,100}$")], AgentPoolConfig]
    lease_seconds: Seconds = 30.0
    heartbeat_interval: Seconds | None = None
    """Default: a third of ``lease_seconds``."""
    shutdown_grace: Annotated[float, msgspec.Meta(ge=0, le=3600)] = 10.0
    llm: LLMConfig | None = None
    limits: TaskLimits = TaskLimits()
    api: ApiConfig = ApiConfig()
    chat: ChatConfig = ChatConfig()
    tracing: TracingConfig = TracingConfig()
    store: StoreConfig = StoreConfig()
    retention: Retention = Retention()
    """When finished tasks leave the live graph for the archive, and how long it keeps them."""
    mcp: dict[ServerName, MCPServerConfig] = {}
    """MCP servers the agents' LLM phases may call (``[agents.<type>] mcp = [names]``):
    each is connected once as the daemon starts, its clients shared by every agent using
    it, closed when the daemon stops."""


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
        llm = raw.get("llm") if isinstance(raw, dict) else None
        if isinstance(llm, dict) and isinstance(llm.get("prices"), dict):
            for model, price in llm["prices"].items():  # the same: name the model
                convert(price, PriceConfig, "config", prefix=f"llm.prices.{model}")
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
    check_service(config, where)
    for name, server in config.mcp.items():
        try:
            server.check(f"mcp.{name}")
        except ValueError as error:
            raise ConfigError(f"config {where!r}: field {error}") from None
    used_servers: set[str] = set()
    for agent_type, pool in config.agents.items():
        for name in pool.mcp:
            if name not in config.mcp:
                raise ConfigError(
                    f"config {where!r}: field 'agents.{agent_type}.mcp' names {name!r}, but there is no "
                    f"[mcp.{name}] section saying how to reach it"
                )
        used_servers.update(pool.mcp)
    for name in config.mcp:
        if name not in used_servers:
            raise ConfigError(
                f"config {where!r}: field 'mcp.{name}' is a server no agent type uses "
                "(name it in an [agents.<type>] mcp list)"
            )
    for agent_type, pool in config.agents.items():
        agent_class(pool.agent, f"agents.{agent_type}.agent", agent_type, where)
        if pool.model is not None and pool.model != SCRIPTED and config.llm is None:
            raise ConfigError(
                f"config {where!r}: field 'agents.{agent_type}.model' names {pool.model!r}, but there is "
                "no [llm] section saying which server serves it"
            )


def check_service(config: DaemonConfig, where: str) -> None:
    chat = config.chat
    if chat.enabled and chat.model != SCRIPTED and config.llm is None:
        raise ConfigError(
            f"config {where!r}: field 'chat.model' names {chat.model!r}, but there is no [llm] "
            "section saying which server serves it"
        )
    if chat.enabled and chat.budget_cost is not None and price_for(config, chat.model) is None:
        raise ConfigError(
            f"config {where!r}: field 'chat.budget_cost' is {chat.budget_cost:g}, but chat's model "
            f"{chat.model!r} has no price to count it by: add it to [llm.prices]"
        )
    if config.llm is not None:
        used = {config.llm.model, *(p.model for p in config.agents.values() if p.model), chat.model}
        for model in config.llm.prices:
            if model not in used:
                raise ConfigError(
                    f"config {where!r}: field 'llm.prices' prices {model!r}, a model nothing here "
                    f"uses (models used: {', '.join(sorted(used - {SCRIPTED}))})"
                )
    port = int(config.api.listen.rpartition(":")[2])
    if port > 65535:
        raise ConfigError(f"config {where!r}: field 'api.listen' has port {port}, above 65535")


def price_for(config: DaemonConfig, model: str) -> Price | None:
    """The ``[llm.prices]`` price of ``model`` on the ``[llm]`` server, if it has one."""
    if config.llm is None or model == SCRIPTED:
        return None
    price = config.llm.prices.get(model)
    return None if price is None else Price(price.input, price.output)


def model_for(config: DaemonConfig, agent_type: str) -> str | None:
    """The ``[llm]`` model an agent type's LLM phases use, or ``None`` (its own model)."""
    pool = config.agents[agent_type]
    if pool.model == SCRIPTED or config.llm is None:
        return None
    return pool.model or config.llm.model


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
