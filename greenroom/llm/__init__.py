"""Chat model adapters behind one interface, :class:`ChatModel`.

:class:`OpenAIChatModel` talks to any OpenAI-compatible server through the ``openai``
SDK; :class:`ScriptedModel` answers from a script, for offline runs and tests;
:class:`RuleBasedModel` drives the task assistant offline with tool calls, the way an LLM
does. They raise only the errors in this package for provider trouble.
"""

from ._errors import BadRequest, ContextTooLong, ModelError, RateLimited, TimedOut, Unavailable
from ._openai import API_KEY_ENV, BASE_URL_ENV, MODEL_ENV, OpenAIChatModel
from ._price import Price
from ._protocol import ChatModel, ClosingModel
from ._rules import RuleBasedModel
from ._scripted import ScriptedModel, ScriptExhausted, estimate_usage

__all__ = [
    "API_KEY_ENV",
    "BASE_URL_ENV",
    "MODEL_ENV",
    "BadRequest",
    "ChatModel",
    "ClosingModel",
    "ContextTooLong",
    "ModelError",
    "OpenAIChatModel",
    "Price",
    "RateLimited",
    "RuleBasedModel",
    "ScriptExhausted",
    "ScriptedModel",
    "TimedOut",
    "Unavailable",
    "estimate_usage",
]
