"""Names a package exports but imports only when first used (PEP 562).

The service's app (Starlette) and the daemon's host (every agent layer) are heavy; the
CLI's read commands import their packages for light neighbours (the API client, the
backend choice) and must not pay for them. A package lists such names in ``__all__`` and
in its ``TYPE_CHECKING`` block, and sets ``__getattr__ = lazy(globals(), {...})``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy(namespace: dict[str, Any], where: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that imports ``name`` from the submodule ``where[name]``
    (relative to the package) on first use and keeps it; ``where[name] == "." + name``
    names the submodule itself."""
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        imported = importlib.import_module(module, package)
        value = imported if module == "." + name else getattr(imported, name)
        namespace[name] = value
        return value

    return __getattr__
