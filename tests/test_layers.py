"""The layers import only downwards, and no modules import each other in a cycle.

Every module under the seven top-level folders is parsed (never imported) and
each of its imports, at any depth (a lazy import inside a function counts: it
is how a cycle hides), is mapped to the module it loads:

    resp, engine    import nothing of the project
    persistence     imports engine
    commands        imports resp, engine, persistence
    server          imports everything above (resp, engine, persistence, commands)
    client          imports nothing of the project (it is the public client side)
    pipeline        imports client; and, for its offline reads of snapshot files,
                    persistence's record decoder and engine's node decoder

An import that goes up a layer or sideways (outside this table) fails, and so
does any cycle between modules, within a package too.  The folders install as
``tstream.<folder>``, so a top-level ``import server`` / ``from engine import``
would load some other package (or fail once installed): it fails here as well.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NAMESPACE = "tstream"

ALLOWED = {
    "resp": set(),
    "engine": set(),
    "persistence": {"engine"},
    "commands": {"resp", "engine", "persistence"},
    "server": {"resp", "engine", "persistence", "commands"},
    "client": set(),
    # offline reads of snapshot files (pipeline/snapshot_reader.py, pipeline/offline.py)
    "pipeline": {"client", "persistence", "engine"},
}
PACKAGES = tuple(ALLOWED)


# --- the checker ---------------------------------------------------------------------


def modules_on_disk(root: Path = ROOT) -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, is a package's __init__), for every module of the packages."""
    found = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts.pop()
            found[".".join([NAMESPACE, *parts])] = (path, is_package)
    return found


def imports_of(source: str, module: str, is_package: bool, known: set[str]) -> list[tuple[int, str]]:
    """(line, target) for each import of the project in ``source``: the target is
    the dotted module it loads (``name`` of ``from pkg import name`` when that is
    a module of the project, else ``pkg``), or ``"bare:<name>"`` for an import
    of a project folder that skips the namespace."""
    package = module if is_package else module.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                out += _resolve(node.lineno, alias.name, [], known)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            out += _resolve(node.lineno, target, [alias.name for alias in node.names], known)
    return out


def _resolve(line: int, target: str, names: list[str], known: set[str]) -> list[tuple[int, str]]:
    top = target.split(".")[0]
    if top in PACKAGES:
        return [(line, "bare:" + target)]
    if top != NAMESPACE:
        return []  # the standard library or a dependency
    if target == NAMESPACE:
        return [(line, f"{NAMESPACE}.{name}") for name in names]
    submodules = [f"{target}.{name}" for name in names if f"{target}.{name}" in known]
    rest = [name for name in names if f"{target}.{name}" not in known]
    return [(line, sub) for sub in submodules] + ([(line, target)] if rest or not names else [])


def layer_of(module: str) -> str:
    return module.split(".")[1]


def import_graph(root: Path = ROOT) -> dict[str, list[tuple[int, str]]]:
    on_disk = modules_on_disk(root)
    known = set(on_disk)
    return {module: imports_of(path.read_text(encoding="utf-8"), module, is_package, known)
            for module, (path, is_package) in on_disk.items()}


def layer_violations(graph: dict[str, list[tuple[int, str]]]) -> list[str]:
    problems = []
    for module, imports in graph.items():
        layer = layer_of(module)
        for line, target in imports:
            if target.startswith("bare:"):
                problems.append(f"{module}:{line} imports {target[5:]!r} without the {NAMESPACE}. namespace")
                continue
            other = layer_of(target) if target.count(".") else target
            if other != layer and other not in ALLOWED[layer]:
                allowed = ", ".join(sorted(ALLOWED[layer]))
                problems.append(f"{module}:{line} imports {target} ({layer} may import "
                                + (f"only {allowed})" if allowed else "nothing of the project)"))
    return sorted(problems)


def module_cycles(graph: dict[str, list[tuple[int, str]]]) -> list[list[str]]:
    """The strongly connected components of more than one module (or a module
    importing itself): every import cycle, found with Tarjan's algorithm."""
    edges = {module: sorted({t for _, t in imports if t in graph}) for module, imports in graph.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in edges[module]:
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == module:
                    break
            if len(component) > 1 or module in edges[module]:
                cycles.append(sorted(component))

    for module in sorted(edges):
        if module not in index:
            visit(module)
    return cycles


# --- the project ---------------------------------------------------------------------


def test_every_layer_is_walked():
    graph = import_graph()
    assert {layer_of(module) for module in graph} == set(PACKAGES)
    # the walk sees real imports, absolute and relative, at module level and in functions
    assert (0, "") not in [i for imports in graph.values() for i in imports]
    assert "tstream.commands.dispatch" in {t for _, t in graph["tstream.server.connection"]}
    assert "tstream.commands.errors" in {t for _, t in graph["tstream.commands.args"]}
    assert "tstream.persistence.framing" in {t for _, t in graph["tstream.pipeline.snapshot_reader"]}


def test_the_allowed_imports_form_layers():
    # a package never allowed to import one that may import it back
    for layer, below in ALLOWED.items():
        for other in below:
            assert layer not in ALLOWED[other], (layer, other)


def test_layers_import_only_downwards():
    assert layer_violations(import_graph()) == []


def test_no_module_import_cycles():
    assert module_cycles(import_graph()) == []


# --- the checker itself, on made-up modules ------------------------------------------


def made_up(tmp_path: Path, files: dict[str, str]) -> dict[str, list[tuple[int, str]]]:
    for package in PACKAGES:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    for name, source in files.items():
        (tmp_path / name).write_text(source)
    return import_graph(tmp_path)


def test_checker_finds_an_upward_import(tmp_path):
    graph = made_up(tmp_path, {
        "commands/dispatch.py": "def f():\n    from tstream.server.observability import CommandStats\n",
        "engine/stream.py": "from tstream import resp\n",
        "server/app.py": "from tstream.commands import dispatch\nfrom tstream.engine.stream import X\n",
    })
    assert layer_violations(graph) == [
        "tstream.commands.dispatch:2 imports tstream.server.observability (commands may import only "
        "engine, persistence, resp)",
        "tstream.engine.stream:1 imports tstream.resp (engine may import nothing of the project)",
    ]


def test_checker_finds_a_bare_import_of_a_folder(tmp_path):
    graph = made_up(tmp_path, {"client/api.py": "import json\nimport server\nfrom engine.glob import g\n"})
    assert layer_violations(graph) == [
        "tstream.client.api:2 imports 'server' without the tstream. namespace",
        "tstream.client.api:3 imports 'engine.glob' without the tstream. namespace",
    ]


def test_checker_finds_cycles_through_relative_and_lazy_imports(tmp_path):
    graph = made_up(tmp_path, {
        "commands/table.py": "from . import admin\n",
        "commands/admin.py": "def command():\n    from .table import COMMANDS\n",
        "commands/keys.py": "from .args import to_int\n",
        "commands/args.py": "",
        "server/app.py": "from .blocking import B\n",
        "server/blocking.py": "import tstream.server.app\n",
    })
    assert module_cycles(graph) == [["tstream.commands.admin", "tstream.commands.table"],
                                    ["tstream.server.app", "tstream.server.blocking"]]
    assert layer_violations(graph) == []


# --- no module-level mutable state -----------------------------------------------------

MUTABLE_CALLS = {"dict", "list", "set", "deque", "OrderedDict", "defaultdict", "bytearray"}


def module_state(source: str) -> list[tuple[int, str]]:
    """(line, name) of each module-level variable bound to a mutable container
    (a constant table is spelled in UPPER_CASE and never changed) and of each
    ``global`` statement."""
    tree = ast.parse(source)
    found = [(node.lineno, "global " + ", ".join(node.names))
             for node in ast.walk(tree) if isinstance(node, ast.Global)]
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        mutable = isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)) or (
            isinstance(value, ast.Call) and getattr(value.func, "id", getattr(value.func, "attr", None)) in MUTABLE_CALLS)
        for target in targets:
            if mutable and isinstance(target, ast.Name) and not _constant_name(target.id):
                found.append((node.lineno, target.id))
    return found


def _constant_name(name: str) -> bool:
    return name.strip("_").isupper() or (name.startswith("__") and name.endswith("__"))  # __all__


def test_no_module_level_mutable_state():
    # two servers embedded in one process share nothing: caches are per-server objects
    found = {module: state for module, (path, _) in modules_on_disk().items()
             if (state := module_state(path.read_text(encoding="utf-8")))}
    assert found == {}


def test_module_state_finds_caches_and_globals():
    source = ("TABLE = {}\n_LIMITS = [1]\n_cache: dict = {}\nseen = set()\nx = 1\n"
              "def f():\n    global x\n    memo = {}\n")
    assert module_state(source) == [(7, "global x"), (3, "_cache"), (4, "seen")]
