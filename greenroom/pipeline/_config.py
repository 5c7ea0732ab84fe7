"""``AgentConfig`` (spec 004): one stage of a pipeline, declared, validated, loadable from TOML.

A stage is named, ordered (``stage_order``), and says what it does: an LLM call
(``has_llm``: ``model_role``, ``prompt_key``, ``temperature``, ``max_tokens``), tool calls
(``has_tools``: the ``plan`` found in the envelope, restricted to ``allowed_tools``), or
neither (a service stage: hooks only). Its output lands in ``outputs[output_key]`` and
must hold ``required_output_fields``. Routing: the first ``RoutingRule`` whose
``condition`` (an output field) equals its ``value`` names the next stage (``target``),
else ``default_next`` (``None``: the pipeline ends there).
"""

from __future__ import annotations

import contextvars
import tomllib
from pathlib import Path
from typing import Annotated, Any

import msgspec

from .._errors import InvalidInput
from ..messages import RecordError, convert

Name = Annotated[str, msgspec.Meta(pattern=r"^[a-z][a-z0-9_-]{0,63}$")]
"""A stage, field or tool name: lowercase letters, digits, '_' or '-', 1-64 characters."""


_CHECKING: contextvars.ContextVar[bool] = contextvars.ContextVar("checking", default=False)


def _check_fields(record: msgspec.Struct, what: str) -> None:
    """Hold a config built in Python to the same constraints as one read from a file
    (msgspec checks ``Meta`` constraints only when it decodes or converts): round-trip it
    through ``convert``, so a bad field is a ``RecordError`` naming it and its value. The
    records it contains are checked by that same conversion."""
    if _CHECKING.get():
        return
    token = _CHECKING.set(True)
    try:
        convert(msgspec.to_builtins(record), type(record), what)
    finally:
        _CHECKING.reset(token)


class RoutingRule(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    condition: Name
    value: Any
    target: Name

    def __post_init__(self) -> None:
        _check_fields(self, "routing rule")


class AgentConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    name: Name
    stage_order: Annotated[int, msgspec.Meta(ge=0, le=10_000)] = 0
    has_llm: bool = False
    has_tools: bool = False
    has_policies: bool = False
    model_role: str | None = None
    prompt_key: str | None = None
    output_key: Name | None = None
    required_output_fields: tuple[Name, ...] = ()
    default_next: Name | None = None
    routing_rules: tuple[RoutingRule, ...] = ()
    allowed_tools: tuple[Name, ...] = ()
    non_idempotent_tools: tuple[Name, ...] = ()
    """Tools that run at most once per envelope (never again after a pause and resume)."""
    temperature: Annotated[float, msgspec.Meta(ge=0, le=2)] | None = None
    max_tokens: Annotated[int, msgspec.Meta(ge=1, le=1_000_000)] | None = None

    def __post_init__(self) -> None:
        _check_fields(self, "stage config")
        # has_llm and has_tools together are allowed: the LLM comes first (spec 004's
        # priority table), the tools are for a stage whose model is mocked or absent
        if self.has_tools and not self.allowed_tools:
            raise InvalidInput(
                f"stage {self.name!r}: has_tools needs allowed_tools", field="allowed_tools", value=[]
            )
        stray = sorted(set(self.non_idempotent_tools) - set(self.allowed_tools))
        if stray:
            raise InvalidInput(
                f"stage {self.name!r}: non_idempotent_tools names tools it may not use: {stray}",
                field="non_idempotent_tools",
                value=stray,
            )

    @property
    def key(self) -> str:
        """Where the output goes in the envelope (``output_key``, else the stage name)."""
        return self.output_key or self.name


ImportPath = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")]
"""``module:attribute``, the way a config names Python code."""


class ModelConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """The model the LLM stages use: an OpenAI-compatible server (the key comes from
    ``OPENAI_API_KEY``, never from the file). Without it, LLM stages need a mock."""

    base_url: str | None = None
    model: str
    timeout: Annotated[float, msgspec.Meta(gt=0, le=3600)] = 60.0


class PipelineConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """A pipeline: its stages (run from the lowest ``stage_order``), its hop limit, and
    where its code is: ``mock_handlers`` (stage → ``module:function``, used instead of
    the stage's processing), ``hooks`` (stage → ``module:function`` post-process hooks),
    ``tools`` (``module:attribute``, a tool executor or a zero-argument factory of one)
    and ``model``."""

    name: Name = "pipeline"
    max_hops: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 10
    stages: tuple[AgentConfig, ...]
    mock_handlers: dict[Name, ImportPath] = {}
    post_hooks: dict[Name, ImportPath] = {}
    tools: ImportPath | None = None
    model: ModelConfig | None = None

    def __post_init__(self) -> None:
        _check_fields(self, "pipeline config")
        if not self.stages:
            raise InvalidInput("a pipeline needs at least one stage", field="stages", value=[])
        names = [stage.name for stage in self.stages]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise InvalidInput(f"stage names must be unique; repeated: {dupes}", field="stages", value=dupes)
        known = set(names)
        for index, stage in enumerate(self.stages):
            targets = [("default_next", stage.default_next)] + [
                (f"routing_rules[{i}].target", rule.target) for i, rule in enumerate(stage.routing_rules)
            ]
            for field, target in targets:
                if target is not None and target not in known:
                    raise InvalidInput(
                        f"stages[{index}] ({stage.name}): {field} names no stage: {target!r}",
                        field=f"stages[{index}].{field}",
                        value=target,
                    )

        for table in ("mock_handlers", "post_hooks"):
            stray = sorted(set(getattr(self, table)) - known)
            if stray:
                raise InvalidInput(f"{table} names no stage: {stray}", field=table, value=stray)

    @property
    def first(self) -> AgentConfig:
        return min(self.stages, key=lambda stage: stage.stage_order)


def load_pipeline(path: str | Path) -> PipelineConfig:
    """Read a pipeline from TOML; ``InvalidInput`` names the file, the field and the value."""
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise InvalidInput(
            f"cannot read {path}: {error.strerror or error}", field="path", value=str(path)
        ) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise InvalidInput(f"{path} is not valid TOML: {error}", field="path", value=str(path)) from None
    try:
        return convert(raw, PipelineConfig, f"pipeline {path.name}")
    except RecordError:
        raise
    except InvalidInput as error:
        raise InvalidInput(f"{path}: {error}", field=error.field, value=error.value) from None
