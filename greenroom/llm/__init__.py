"""Chat model adapters behind one interface, :class:`ChatModel`.

:class:`OpenAIChatModel` talks to any OpenAI-compatible server through the ``openai``
SDK; :class:`ScriptedModel` answers from a script, for offline runs and tests;
:class:`RuleBasedModel` drives the task assistant offline with tool calls, the way an LLM
does. They raise only the errors in this package for provider trouble.

Each of them streams too (:class:`StreamingChatModel`): ``async with model.stream(request)
as stream`` yields the reply's pieces as they are made (:class:`ChatStream`);
:func:`open_stream` opens a stream on any ``ChatModel``.
"""

from ._errors import UNREACHED, BadRequest, ContextTooLong, ModelError, RateLimited, TimedOut, Unavailable
from ._openai import API_KEY_ENV, BASE_URL_ENV, MODEL_ENV, OpenAIChatModel
from ._price import Price
from ._protocol import ChatModel, ClosingModel
from ._rules import RuleBasedModel
from ._scripted import ScriptedModel, ScriptExhausted, estimate_usage
from ._stream import ChatStream, StreamBroken, StreamingChatModel, open_stream

__all__ = [
    "API_KEY_ENV",
    "BASE_URL_ENV",
    "MODEL_ENV",
    "UNREACHED",
    "BadRequest",
    "ChatModel",
    "ChatStream",
    "ClosingModel",
    "ContextTooLong",
    "ModelError",
    "OpenAIChatModel",
    "Price",
    "RateLimited",
    "RuleBasedModel",
    "ScriptExhausted",
    "ScriptedModel",
    "StreamBroken",
    "StreamingChatModel",
    "TimedOut",
    "Unavailable",
    "estimate_usage",
    "open_stream",
]
