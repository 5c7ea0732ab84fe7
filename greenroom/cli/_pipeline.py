"""``greenroom pipeline run``: envelopes through a configured pipeline, each stage shown."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, TextIO

import msgspec

from .._errors import InvalidInput
from ..actors import ActorSystem
from ..daemon._backend import choose_store
from ..log import LogActor
from ..pipeline import PipelineResult, load_pipeline, open_pipeline
from ..pipeline.examples import EXAMPLE


def _inputs(inputs: list[str] | None, inputs_file: str | None) -> list[str]:
    texts = list(inputs or [])
    if inputs_file is not None:
        try:
            data = Path(inputs_file).read_bytes()
        except OSError as error:
            raise InvalidInput(
                f"cannot read --inputs {inputs_file!r}: {error.strerror or error}",
                field="--inputs",
                value=inputs_file,
            ) from None
        for number, raw in enumerate(data.splitlines(), 1):
            try:
                line = raw.decode("utf-8").strip()
            except UnicodeDecodeError as error:
                raise InvalidInput(
                    f"--inputs {inputs_file!r}, line {number}: not valid UTF-8 (byte {error.start + 1})",
                    field="--inputs",
                    value=inputs_file,
                ) from None
            if line:
                texts.append(line)
    if not texts:
        raise InvalidInput("give --input TEXT (repeatable) or --inputs FILE", field="--input", value=None)
    return texts


def describe(index: int, result: PipelineResult) -> str:
    env = result.envelope
    head = f"[{index}] {env.raw_input!r} -> {result.outcome.value} at {result.stage}"
    lines = [f"{head} after {env.hop_count} hop(s)"]
    for record in env.history:
        note = record.error or record.summary
        lines.append(f"    {record.stage:<12} {record.outcome:<10} {record.duration_ms:>5} ms  {note}")
    if result.question:
        lines.append(f"    asks: {result.question}")
    if result.error and result.outcome.value == "terminate":
        lines.append(f"    {result.error}")
    return "\n".join(lines)


async def run_pipeline(
    *,
    path: str | None,
    example: bool,
    inputs: list[str] | None,
    inputs_file: str | None,
    data_dir: str | None,
    as_json: bool,
    store: str | None = None,
    out: TextIO = sys.stdout,
) -> int:
    if (path is None) == (not example):
        raise InvalidInput("give a pipeline file or --example (one of them)", field="PIPELINE", value=path)
    config = load_pipeline(EXAMPLE if example else Path(path or ""))
    texts = _inputs(inputs, inputs_file)
    model: Any = None
    if config.model is not None:
        from ..llm import OpenAIChatModel

        model = OpenAIChatModel(
            config.model.model, base_url=config.model.base_url, timeout=config.model.timeout
        )
    results: list[PipelineResult] = []
    try:
        async with choose_store(store, data_dir) as backend, ActorSystem() as system:
            log = await system.spawn(lambda: LogActor(backend.event_store()), name="log")
            async with open_pipeline(system, config, model=model, events=log) as pipeline:
                # all in flight at once; one input's failure is its own ERROR result
                results = await pipeline.run_many(texts)
            await log.stop()
    finally:
        if model is not None:
            await model.aclose()
    failed = 0
    for index, result in enumerate(results, 1):
        failed += result.outcome.value in ("error", "terminate")
        if as_json:
            env = result.envelope
            record = {
                "input": env.raw_input,
                "outcome": result.outcome.value,
                "stage": result.stage,
                "hops": env.hop_count,
                "trail": result.trail,
                "question": result.question,
                "error": result.error,
                "outputs": env.outputs,
            }
            print(msgspec.json.encode(record).decode(), file=out)
        else:
            print(describe(index, result), file=out)
    return 1 if failed else 0
