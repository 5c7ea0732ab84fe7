"""The layers: each module imports only its own layer and the ones above it, in the order
``docs/architecture.md`` gives. Checked on the source, so the order cannot slip."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "greenroom"

LAYERS = [
    "_errors",
    "_checks",
    "_tracing",
    "_request",
    "_guard",
    "_lazy",
    "_malloc",
    "_process",
    "messages",
    "actors",
    "_files",
    "_threads",
    "_commit",
    "_durations",
    "_loopwatch",
    "store",
    "_notes",
    "supervisor",
    "log",
    "entities",
    "embedded",
    "postgres",
    "llm",
    "harness",
    "agents",
    "chat",
    "pipeline",
    "load",
    "service",
    "daemon",
    "testing",
    "cli",
]
"""Top to bottom. ``__init__``/``__main__`` of the package sit outside the order."""


def layer_of(path: Path) -> str | None:
    parts = path.relative_to(PACKAGE).parts
    name = parts[0].removesuffix(".py")
    return None if name in ("__init__", "__main__") else name


def imported_layers(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    depth = len(path.relative_to(PACKAGE).parts) - 1  # 0 for greenroom/x.py
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level == 0:
                module = node.module or ""
                if module.startswith("greenroom."):
                    found.add(module.split(".")[1])
                continue
            up = node.level - 1  # from . = this package, from .. = one up
            if up < depth:
                continue  # inside its own layer's package
            if node.module:
                found.add(node.module.split(".")[0])
            else:
                found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("greenroom."):
                    found.add(alias.name.split(".")[1])
    return {name for name in found if name in LAYERS}


def test_each_module_imports_only_its_layer_and_the_ones_above() -> None:
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        own = layer_of(path)
        if own is None:
            continue
        assert own in LAYERS, f"{path} is in no layer; add it to LAYERS and docs/architecture.md"
        for target in imported_layers(path):
            if LAYERS.index(target) > LAYERS.index(own):
                wrong.append(f"{path.relative_to(ROOT)} ({own}) imports {target}, a layer below it")
    assert wrong == []


def test_the_architecture_doc_lists_the_layers_in_this_order() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    block = text.split("```", 2)[1]
    found = re.finditer(r"greenroom/(\S+)", block)
    listed = [m.group(1).removesuffix(".py").removesuffix("/") for m in found]
    assert [name for name in listed if name in LAYERS] == LAYERS


def test_every_public_error_is_under_the_root_greenroom_exports() -> None:
    """``except greenroom.GreenroomError`` catches every error any package exports, and the
    root's families are public names of ``greenroom`` itself (no private import needed)."""
    import importlib
    import inspect
    import pkgutil

    import greenroom

    for name in ("GreenroomError", "InvalidInput", "DataError", "StorageError", "StoreUnavailable",
                 "InternalError", "DataDirBusy"):  # fmt: skip
        assert name in greenroom.__all__ and issubclass(getattr(greenroom, name), greenroom.GreenroomError)
    outside = []
    exported = 0
    for module in pkgutil.walk_packages(greenroom.__path__, "greenroom."):
        parts = module.name.split(".")[1:]
        if any(part.startswith("_") for part in parts) or parts[0] == "testing":
            continue  # (the test kit's ProbeTimeout is an AssertionError: a failed test, on purpose)
        package = importlib.import_module(module.name)
        for name in getattr(package, "__all__", []):
            value = getattr(package, name)
            if inspect.isclass(value) and issubclass(value, BaseException):
                exported += 1
                if not issubclass(value, greenroom.GreenroomError):
                    outside.append(f"{module.name}.{name}")
    assert exported > 30 and outside == []
