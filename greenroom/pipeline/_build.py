"""Build the agents of a :class:`PipelineConfig` from what it names (code by
``module:attribute``, the model from its ``[model]`` table), and run inputs through it."""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from .._errors import InvalidInput
from ..actors import ActorRef, ActorSystem
from ..llm import ChatModel, ModelError
from ..messages import ChatReply, ChatRequest
from ._agent import Agent
from ._config import PipelineConfig
from ._pipeline import Pipeline


def resolve(path: str, field: str) -> Any:
    """``module:attribute`` → the object; ``InvalidInput`` naming the field if it fails."""
    module_name, _, attribute = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise InvalidInput(
            f"{field}: cannot import {module_name!r} ({error})", field=field, value=path
        ) from None
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise InvalidInput(
            f"{field}: {module_name!r} has no {attribute!r}", field=field, value=path
        ) from None


def build_agents(
    config: PipelineConfig, *, model: ChatModel | None = None, events: ActorRef | None = None
) -> dict[str, Agent]:
    """One :class:`Agent` per stage, with its mock handler, post hook and tools."""
    tools = None
    if config.tools is not None:
        tools = resolve(config.tools, "tools")
        if isinstance(tools, type) or (callable(tools) and not hasattr(tools, "execute")):
            tools = tools()
    agents = {}
    for stage in config.stages:
        mock = config.mock_handlers.get(stage.name)
        if stage.has_llm and model is None and mock is None:
            raise InvalidInput(
                f"stage {stage.name!r} has_llm: give the pipeline a [model] or a mock handler",
                field=f"stages.{stage.name}",
                value=stage.name,
            )
        llm = (model if model is not None else _NoModel()) if stage.has_llm else None
        agent = Agent(stage, llm=llm, tools=tools, events=events)
        if mock is not None:
            agent.use_mock = True
            agent.mock_handler = resolve(mock, f"mock_handlers.{stage.name}")
        hook = config.post_hooks.get(stage.name)
        if hook is not None:
            agent.post_process = resolve(hook, f"post_hooks.{stage.name}")
        agents[stage.name] = agent
    return agents


class _NoModel:
    """The model of an LLM stage that runs on its mock handler alone (offline)."""

    async def chat(self, request: ChatRequest, *, timeout: float | None = None) -> ChatReply:
        raise ModelError("this pipeline has no [model]; the stage's mock handler should have answered")

    async def aclose(self) -> None:
        pass


@asynccontextmanager
async def open_pipeline(
    system: ActorSystem,
    config: PipelineConfig,
    *,
    model: ChatModel | None = None,
    events: ActorRef | None = None,
) -> AsyncIterator[Pipeline]:
    pipeline = await Pipeline.spawn(system, config, build_agents(config, model=model, events=events))
    try:
        yield pipeline
    finally:
        await pipeline.aclose()
