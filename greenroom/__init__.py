"""greenroom: an actor-model runtime for LLM agents, on anyio (asyncio and trio).

The public surface is the actor kernel's, re-exported from :mod:`greenroom.actors`.
"""

from . import actors
from .actors import *  # noqa: F403 -- the kernel's __all__ is the package's surface

__version__ = "0.1.0"

__all__ = [*actors.__all__, "__version__"]
