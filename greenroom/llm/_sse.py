"""A streamed chat completion, read: Server-Sent Events cut from the bytes as they arrive
(:class:`EventDecoder`), and the chunks they carry put together into pieces of a reply
(:class:`ReplyAssembler`) — text as it comes, a tool call once all its fragments came.

The assembler reads chunks by attribute (``choices[i].delta.content``,
``delta.tool_calls[j].function.arguments``, ``usage``), so it takes the structs msgspec
decodes here and the ``openai`` SDK's ``ChatCompletionChunk`` alike.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ..messages import ChatDelta, ChatReply, ModelToolCall, Usage


def parse_arguments(call_id: str, name: str, raw: str | None) -> ModelToolCall:
    """A tool call from its wire form: ``arguments`` (JSON text) decoded to a dict, or
    ``arguments_error`` saying why it could not be."""
    try:
        arguments = msgspec.json.decode(raw or "{}")
    except msgspec.DecodeError as error:
        return ModelToolCall(call_id, name, {}, f"arguments are not valid JSON ({error}): {raw!r:.200}")
    if not isinstance(arguments, dict):
        return ModelToolCall(call_id, name, {}, f"arguments must be a JSON object, got {raw!r:.200}")
    return ModelToolCall(call_id, name, arguments)


class EventDecoder:
    """Server-Sent Events from bytes fed as they arrive (``\\n``, ``\\r\\n`` or ``\\r``
    line ends). :meth:`feed` returns the ``data`` of each event completed by the bytes
    fed (several ``data:`` lines of one event joined by ``\\n``); comments and other
    fields are skipped."""

    __slots__ = ("_data", "_rest")

    def __init__(self) -> None:
        self._rest = b""
        self._data: list[bytes] = []

    def chunks(self, chunk: bytes) -> tuple[list[Chunk], bool] | None:
        """The common case at the cost of a few scans: the events ``chunk`` completes are
        each one ``data: `` line of a chat completion chunk (as OpenAI-compatible servers
        send them), and what was pending from before is only bytes. Then ``(those chunks,
        whether the last event was [DONE])``, decoded as one JSON array in one call, and
        the bytes after the last whole event kept for the next call; else ``None`` with
        nothing consumed — :meth:`feed` takes the same bytes. (A JSON text holds no raw
        line break, so every ``\n`` of the whole events must be their framing.)"""
        if self._data:
            return None
        if self._rest:
            chunk = self._rest + chunk
        end = chunk.rfind(b"\n\n")
        if end < 0 or not chunk.startswith(b"data: ") or b"\r" in chunk:
            return None
        whole = chunk[: end + 2]
        events = whole.count(b"\n\ndata: ") + 1
        if whole.count(b"\n") != 2 * events:
            return None
        done = whole.endswith(b"data: [DONE]\n\n")
        if done:
            whole = whole[: -len(b"data: [DONE]\n\n")]
        try:
            decoded = decode_chunks(b"[" + whole[6:-2].replace(b"\n\ndata: ", b",") + b"]") if whole else []
        except msgspec.DecodeError:  # one of them is not a chunk: feed() says which
            return None
        self._rest = chunk[end + 2 :]
        return decoded, done

    def feed(self, chunk: bytes) -> list[bytes]:
        data = self._rest + chunk if self._rest else chunk
        tail = b""
        if b"\r" in data:
            if data.endswith(b"\r"):  # maybe the first half of "\r\n": kept for the next bytes
                data, tail = data[:-1], b"\r"
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = data.split(b"\n")
        self._rest = lines.pop() + tail
        events: list[bytes] = []
        pending = self._data
        for line in lines:
            if not line:
                if pending:
                    events.append(pending[0] if len(pending) == 1 else b"\n".join(pending))
                    pending = self._data = []
            elif line.startswith(b"data:"):
                value = line[5:]
                pending.append(value[1:] if value.startswith(b" ") else value)
            # "event:", "id:", "retry:" and ":" comments carry nothing a chat completion needs
        return events


class _DeltaFunction(msgspec.Struct):
    name: str | None = None
    arguments: str | None = None


class _DeltaCall(msgspec.Struct):
    index: int = 0
    id: str | None = None
    function: _DeltaFunction | None = None


class _Delta(msgspec.Struct):
    content: str | None = None
    tool_calls: list[_DeltaCall] | None = None


class _ChunkChoice(msgspec.Struct):
    index: int = 0
    delta: _Delta | None = None
    finish_reason: str | None = None


class _ChunkUsage(msgspec.Struct):
    prompt_tokens: int | None = 0
    completion_tokens: int | None = 0


class Chunk(msgspec.Struct):
    """The fields of a ``chat.completion.chunk`` read here (others ignored); ``error``:
    what a server that fails mid-stream sends instead."""

    choices: list[_ChunkChoice] = []
    usage: _ChunkUsage | None = None
    error: Any = None


decode_chunk = msgspec.json.Decoder(Chunk).decode
decode_chunks = msgspec.json.Decoder(list[Chunk]).decode
"""The events of :meth:`EventDecoder.chunks`, at once."""


class ReplyAssembler:
    """Chunks in, pieces of the reply out (:meth:`take`), then the last piece
    (:meth:`finish`). ``partial()``: what arrived so far, for an error that says so."""

    __slots__ = ("_building", "_calls", "_text", "finish_reason", "usage")

    def __init__(self) -> None:
        self._text: list[str] = []
        self._calls: list[ModelToolCall] = []
        self._building: dict[int, list[Any]] = {}  # index -> [id, name, [argument fragments]]
        self.usage: Usage | None = None
        self.finish_reason: str | None = None

    def take(self, chunk: Any) -> list[ChatDelta]:
        """The pieces one chunk completes (none while a tool call is still arriving)."""
        out: list[ChatDelta] = []
        usage = chunk.usage
        if usage is not None and (usage.prompt_tokens or usage.completion_tokens):
            self.usage = Usage(usage.prompt_tokens or 0, usage.completion_tokens or 0)
        for choice in chunk.choices:
            if choice.index:  # only the first choice is asked for (n=1)
                continue
            delta = choice.delta
            if delta is not None:
                if delta.content:
                    self._text.append(delta.content)
                    out.append(ChatDelta(text=delta.content))
                for fragment in delta.tool_calls or ():
                    self._fragment(fragment, out)
            if choice.finish_reason:
                self.finish_reason = choice.finish_reason
                self._flush(out)
        return out

    def take_all(self, chunks: list[Chunk], out: list[ChatDelta]) -> Any:
        """:meth:`take` for each of ``chunks`` in turn, its pieces onto ``out``, the common
        chunk (one choice, a piece of text) without a call. Stops at a chunk that carries an
        ``error`` and returns that error (else ``None``)."""
        text = self._text
        for chunk in chunks:
            choices = chunk.choices
            if chunk.usage is None and chunk.error is None and len(choices) == 1:
                choice = choices[0]
                delta = choice.delta
                if (
                    delta is not None
                    and delta.tool_calls is None
                    and not choice.finish_reason
                    and not choice.index
                ):
                    content = delta.content
                    if content:
                        text.append(content)
                        out.append(ChatDelta(text=content))
                    continue
            if chunk.error is not None:
                return chunk.error
            out += self.take(chunk)
        return None

    def _fragment(self, fragment: Any, out: list[ChatDelta]) -> None:
        index = fragment.index or 0
        building = self._building.get(index)
        if building is None:
            if any(other < index for other in self._building):  # calls arrive one after another
                self._flush(out, before=index)
            building = self._building[index] = ["", "", []]
        if fragment.id:
            building[0] = fragment.id
        function = fragment.function
        if function is not None:
            if function.name:
                building[1] = function.name
            if function.arguments:
                building[2].append(function.arguments)

    def _flush(self, out: list[ChatDelta], before: int | None = None) -> None:
        for index in sorted(self._building):
            if before is not None and index >= before:
                break
            call_id, name, arguments = self._building.pop(index)
            call = parse_arguments(call_id, name, "".join(arguments) if arguments else None)
            self._calls.append(call)
            out.append(ChatDelta(tool_call=call))

    def finish(self) -> list[ChatDelta]:
        """The rest: tool calls still open, then the last piece (usage, finish reason)."""
        out: list[ChatDelta] = []
        self._flush(out)
        out.append(ChatDelta(usage=self.usage, finish_reason=self.finish_reason or "stop"))
        return out

    def partial(self) -> ChatReply:
        return ChatReply(
            "".join(self._text), tuple(self._calls), finish_reason=self.finish_reason or "incomplete"
        )

    def described(self) -> str:
        """What arrived, in a few words, for an error message."""
        text = "".join(self._text)
        said = f"{len(text)} characters of text" + (f" ({text[:60]!r}…)" if text else "")
        if self._calls:
            said += f" and {len(self._calls)} tool call{'s' if len(self._calls) > 1 else ''}"
        return said
