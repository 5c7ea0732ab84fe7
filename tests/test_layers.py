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


PRIVATE_IMPORTS: dict[tuple[str, str], str] = {
    # (the private module, the package importing it): why its package's __init__ does not
    # export the name. Everything else crosses packages through public names.
    ("harness._journal", "agents"): "TaskJournal: the agent base wires an attempt's journal into its harness",
    (
        "harness._journal",
        "daemon",
    ): "ReadSteps: the daemon's API reads a task's steps through the journal actor",
    ("harness._ledger", "daemon"): "the budget ledger actor and its message: the daemon hosts them",
    ("harness._timings", "daemon"): "merged: the status merges the call timings of a type's setups",
    ("log._policy", "agents"): "apply_policy: the log's visibility rule, applied to what an agent narrates",
    ("log._policy", "pipeline"): "surfacing_flag: the same rule, for a pipeline's stages",
    ("llm._price", "harness"): "price_of: what an adapter's call cost, charged to budgets",
    ("llm._price", "chat"): "price_of: the same, for the chat engine's budget",
    ("llm._stream", "harness"): "streams: whether a model streams (the adapters' own test)",
    ("llm._tokens", "chat"): "TokenGauge: the token estimate the chat engine fits histories with",
    ("llm._sse", "load"): "parse_arguments: a tool call's arguments as the adapters read them, sent again",
    ("llm._openai", "daemon"): "NO_KEY: the placeholder key a daemon gives a local server",
    ("messages._codec", "embedded"): "the one codec the files are decoded with (decode_json, prepare_types)",
    ("messages._codec", "store"): "prepare_types: the codec's types prepared once, for the stores' records",
    ("service._app", "daemon"): "ServiceParts: the daemon assembles the service from its parts",
    ("service._client", "daemon"): "the files a daemon writes for its clients to find it",
    ("service._client", "cli"): "DAEMON_LOCK_FILE: the command waits on a starting daemon's lock",
    ("service._serve", "daemon"): "bind and serve: the daemon serves the app on its own socket",
    ("service._tokens", "daemon"): "new_token: the daemon makes its admin token",
    ("service._history", "daemon"): "History: the daemon samples its status for the page",
    (
        "daemon._backend",
        "cli",
    ): "choose_store: the commands open the store a daemon would (the daemon's rule)",
    ("daemon._config", "cli"): "StoreConfig: `greenroom run` reads the store from the config",
    ("daemon._service", "cli"): "DaemonService: `greenroom run` is the daemon's front end",
    (
        "daemon._workers",
        "cli",
    ): "run_workers, worker_slot: `greenroom run --workers` is the workers' front end",
    ("service._status", "daemon"): "machine_status: the workers add their snapshots up into the machine's",
    ("chat._types", "cli"): "check_id: the chat API's id rule, applied to a flag",
    ("load._replay", "cli"): "imported on first use: the command loads the module it needs, not all of load",
    ("load._html", "cli"): "imported on first use (matplotlib): only a command that draws pays for it",
    ("load._fleet", "cli"): "AGENT_TYPE: the fleet's task type, which `--on-daemons` waits on",
}


def private_imports() -> dict[tuple[str, str], list[str]]:
    """Every import of another package's private module: (module, importing package) ->
    where."""
    found: dict[tuple[str, str], list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).parts
        if len(parts) < 2:
            continue
        own = parts[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom) or node.level != len(parts) or not node.module:
                continue
            names = node.module.split(".")
            if len(names) >= 2 and names[0] != own and names[1].startswith("_"):
                found.setdefault((".".join(names[:2]), own), []).append(
                    f"{path.relative_to(ROOT)}:{node.lineno}"
                )
    return found


def test_a_private_module_is_imported_across_packages_only_where_the_reason_is_written() -> None:
    """Issue 50: another package's private module is imported only where its package
    could not export the name, each pair listed with why; a pair no longer used is
    dropped from the list."""
    found = private_imports()
    unexplained = {pair: where for pair, where in found.items() if pair not in PRIVATE_IMPORTS}
    assert unexplained == {}, "import the public name, or say here why not"
    assert sorted(set(PRIVATE_IMPORTS) - set(found)) == []


def test_the_entities_modules_use_only_the_hosts_methods_without_an_underscore() -> None:
    """Entities in one place: ``EntityHost`` holds their state, and the refs, placement
    and the entity base class use only its interface — no ``host._...`` from outside
    ``_host.py`` (issue 50)."""
    reaching = re.compile(r"\bhost\._[a-z]")
    found = [
        f"{path.name}:{number}: {line.strip()}"
        for path in sorted((PACKAGE / "entities").glob("*.py"))
        if path.name != "_host.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if reaching.search(line)
    ]
    assert found == []
